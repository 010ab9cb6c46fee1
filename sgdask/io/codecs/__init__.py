"""Codecs: bytes of a file format to the kernels' word rows and back, pure numpy + numba.

``inflate`` (zlib strips of a layered TIFF straight to word rows), ``words`` (the store's
mask words: row XOR, the sparse layout, format 1 crops). Like the kernels they do no I/O
and import no Dask, pyarrow or zarr (tested); the readers around them (``io/tiff.py``,
``store/store.py``, ``store/partition.py``) read the bytes and decide what a failure means.
"""
