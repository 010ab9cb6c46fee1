"""Pure per-image kernels (numpy and numba): IoU, matching, normalization, selection, hits.

Nothing in this package does I/O or imports Dask, pyarrow or zarr; everything takes and
returns arrays. ``image_hits`` runs the whole per-image pipeline under one protocol's rules
(``ImageRules``); the metric families (``sgdask.metrics``) turn its hits into terms.
"""

from sgdask.kernels.image import ImageRules, image_hits, missing_image_hits
from sgdask.kernels.iou import box_iou_matrix, mask_iou, mask_iou_matrix, pairwise_mask_iou
from sgdask.kernels.matching import match_instances, match_many_to_one, match_one_to_one
from sgdask.kernels.normalize import dedup_triplets, merge_masks, normalize_prediction

__all__ = [
    "ImageRules",
    "box_iou_matrix",
    "dedup_triplets",
    "image_hits",
    "mask_iou",
    "mask_iou_matrix",
    "match_instances",
    "match_many_to_one",
    "match_one_to_one",
    "merge_masks",
    "missing_image_hits",
    "normalize_prediction",
    "pairwise_mask_iou",
]
