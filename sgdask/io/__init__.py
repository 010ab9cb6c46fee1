"""Readers (psg.json, SGBench JSON/ZIP/TIFF) and the canonical Parquet + Zarr store.

Everything goes through fsspec, so every path may be local, ``s3://`` or ``memory://``.
Nothing here computes a metric.
"""
