"""Intersection over union between predicted and GT instances (masks or boxes)."""

from __future__ import annotations

import numpy as np

from sgdask.kernels.bits import cross_iou, self_iou
from sgdask.types import BitMasks, as_bit_masks


def mask_iou(pred: BitMasks, gt: BitMasks, allowed: np.ndarray | None = None,
             pred_area: np.ndarray | None = None, gt_area: np.ndarray | None = None
             ) -> np.ndarray:
    """IoU (n_pred, n_gt) of word masks, computed only where ``allowed`` (default: all);
    elsewhere 0. Areas are counted when not given."""
    if allowed is None:
        allowed = np.ones((len(pred), len(gt)), dtype=bool)
    return cross_iou(pred.boxes, pred.starts, pred.words,
                     pred.areas() if pred_area is None else pred_area,
                     gt.boxes, gt.starts, gt.words,
                     gt.areas() if gt_area is None else np.asarray(gt_area, dtype=np.int64),
                     allowed)


def mask_iou_matrix(pred_masks: np.ndarray | BitMasks, gt_label_image: np.ndarray,
                    n_gt: int, gt_area: np.ndarray | None = None) -> np.ndarray:
    """IoU (n_pred, n_gt) of predicted masks against a GT label image (index + 1, 0 = none)."""
    return mask_iou(as_bit_masks(pred_masks), BitMasks.from_labels(gt_label_image, n_gt),
                    gt_area=gt_area)


def pairwise_mask_iou(masks: np.ndarray | BitMasks) -> np.ndarray:
    """IoU (n, n) between the instances of one image."""
    bits = as_bit_masks(masks)
    return self_iou(bits.boxes, bits.starts, bits.words, bits.areas())


def box_iou_matrix(pred_boxes: np.ndarray, gt_boxes: np.ndarray) -> np.ndarray:
    """IoU (n_pred, n_gt) of [x1, y1, x2, y2] boxes, area (x2-x1)*(y2-y1), no +1.

    Same arithmetic as SGBench 1.0.0 so that results agree to the last bit.
    """
    pred = np.asarray(pred_boxes, dtype=np.float64).reshape(-1, 4)
    gt = np.asarray(gt_boxes, dtype=np.float64).reshape(-1, 4)
    area_p = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    area_g = (gt[:, 2] - gt[:, 0]) * (gt[:, 3] - gt[:, 1])
    lt = np.maximum(pred[:, None, :2], gt[:, :2])
    rb = np.minimum(pred[:, None, 2:], gt[:, 2:])
    wh = np.clip(rb - lt, a_min=0, a_max=None)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area_p[:, None] + area_g - inter
    out = np.zeros(inter.shape, dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out
