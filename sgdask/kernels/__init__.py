"""Pure per-image numpy kernels: IoU, matching, normalization, selection, metrics.

Nothing in this package does I/O; everything takes and returns arrays.
"""

from sgdask.kernels.image import ImageResult, evaluate_image, missing_image_result
from sgdask.kernels.iou import box_iou_matrix, mask_iou_matrix, pairwise_mask_iou
from sgdask.kernels.matching import match_instances, match_many_to_one, match_one_to_one
from sgdask.kernels.normalize import dedup_triplets, merge_masks, normalize_prediction

__all__ = [
    "ImageResult",
    "box_iou_matrix",
    "dedup_triplets",
    "evaluate_image",
    "mask_iou_matrix",
    "match_instances",
    "match_many_to_one",
    "match_one_to_one",
    "merge_masks",
    "missing_image_result",
    "normalize_prediction",
    "pairwise_mask_iou",
]
