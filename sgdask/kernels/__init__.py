"""Pure per-image kernels (numpy and numba): IoU, matching, normalization, selection, hits.

Nothing in this package does I/O or imports Dask, pyarrow or zarr; everything takes and
returns arrays. ``image_hits`` runs the whole per-image pipeline under one protocol's rules
(``ImageRules``); the metric families (``sgdask.metrics``) turn its hits into terms.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: the package's names and the modules that define them, imported on first use: numba
#: loads only when a kernel is asked for (``sgdask --help`` and the settings need none)
_LAZY = {"ImageRules": "image", "image_hits": "image", "missing_image_hits": "image",
         "box_iou_matrix": "iou", "mask_iou": "iou", "mask_iou_matrix": "iou",
         "pairwise_mask_iou": "iou", "match_instances": "matching",
         "match_many_to_one": "matching", "match_one_to_one": "matching",
         "dedup_triplets": "normalize", "merge_masks": "normalize",
         "normalize_prediction": "normalize"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f"sgdask.kernels.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'sgdask.kernels' has no attribute {name!r}")
