"""Intersection over union between predicted and GT instances (masks or boxes).

Convenience forms of the compiled kernels (``bits.cross_iou``, ``lists.box_iou``) for dense
masks, label images and plain box arrays, like sgbench's per-image functions.
"""

from __future__ import annotations

import numpy as np

from sgdask.kernels.bits import cross_iou, self_iou
from sgdask.kernels.lists import box_iou
from sgdask.types import BitMasks, as_bit_masks


def no_labels(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.int64)


def mask_iou(pred: BitMasks, gt: BitMasks, gt_area: np.ndarray | None = None) -> np.ndarray:
    """IoU (n_pred, n_gt) of word masks (the GT areas are counted when not given)."""
    return cross_iou(pred.boxes, pred.starts, pred.words, pred.areas(), no_labels(len(pred)),
                     gt.boxes, gt.starts, gt.words,
                     gt.areas() if gt_area is None else np.asarray(gt_area, dtype=np.int64),
                     no_labels(len(gt)), False)


def mask_iou_matrix(pred_masks: np.ndarray | BitMasks, gt_label_image: np.ndarray,
                    n_gt: int, gt_area: np.ndarray | None = None) -> np.ndarray:
    """IoU (n_pred, n_gt) of predicted masks against a GT label image (index + 1, 0 = none)."""
    return mask_iou(as_bit_masks(pred_masks), BitMasks.from_labels(gt_label_image, n_gt),
                    gt_area)


def pairwise_mask_iou(masks: np.ndarray | BitMasks) -> np.ndarray:
    """IoU (n, n) between the instances of one image."""
    bits = as_bit_masks(masks)
    return self_iou(bits.boxes, bits.starts, bits.words, bits.areas())


def box_iou_matrix(pred_boxes: np.ndarray, gt_boxes: np.ndarray) -> np.ndarray:
    """IoU (n_pred, n_gt) of [x1, y1, x2, y2] boxes, area (x2-x1)*(y2-y1), no +1, in the
    arithmetic of SGBench 1.0.0 so that results agree to the last bit."""
    pred = np.asarray(pred_boxes, dtype=np.float64).reshape(-1, 4)
    gt = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4)
    return box_iou(pred, no_labels(len(pred)), gt, no_labels(len(gt)), False, False)
