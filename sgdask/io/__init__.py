"""Readers' tools shared by several formats: files through fsspec (``fs``: every path may be
local, ``s3://`` or ``memory://``), bounded archives (``archive``), layered TIFFs (``tiff``,
with the ``codecs``), a restricted unpickler (``unpickle``), strict setting documents
(``documents``), triplet-list checks (``triplets``), submissions opened for an evaluation
(``sources``) and predicate-group files (``predicate_groups``). Formats live in
``sgdask.formats``, the store in ``sgdask.store``. Nothing here computes a metric.
"""
