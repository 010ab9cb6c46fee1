"""Intersection over union between predicted and GT instances (masks or boxes)."""

from __future__ import annotations

import numpy as np


def _ratio(inter: np.ndarray, union: np.ndarray) -> np.ndarray:
    """inter / union as float64, 0 where the union is empty (as SGBench does)."""
    out = np.zeros(inter.shape, dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def mask_iou_matrix(pred_masks: np.ndarray, gt_label_image: np.ndarray, n_gt: int) -> np.ndarray:
    """IoU (n_pred, n_gt) of boolean layers against a GT label image (index + 1, 0 = none).

    One joint histogram of (layer, GT label) over the pixels each layer covers replaces the
    n_pred * n_gt full-image mask comparisons of the reference implementation.
    """
    n_pred = len(pred_masks)
    flat_gt = gt_label_image.reshape(-1).astype(np.int64)
    gt_area = np.bincount(flat_gt, minlength=n_gt + 1)[1 : n_gt + 1]
    layers = pred_masks.reshape(n_pred, flat_gt.size)
    layer_idx, pixel_idx = np.nonzero(layers)
    joint = np.bincount(
        layer_idx * (n_gt + 1) + flat_gt[pixel_idx], minlength=n_pred * (n_gt + 1)
    ).reshape(n_pred, n_gt + 1)
    pred_area = joint.sum(axis=1)
    inter = joint[:, 1:]
    union = pred_area[:, None] + gt_area[None, :] - inter
    return _ratio(inter, union)


def pairwise_mask_iou(masks: np.ndarray) -> np.ndarray:
    """IoU (n, n) between the layers of one boolean stack, via a product over covered pixels."""
    n = len(masks)
    flat = masks.reshape(n, int(np.prod(masks.shape[1:])))
    covered = flat.any(axis=0)
    # float32 counts are exact below 2**24 pixels; larger images fall back to float64
    dtype = np.float32 if covered.sum() < 2**24 else np.float64
    dense = flat[:, covered].astype(dtype)
    inter = np.rint(dense @ dense.T).astype(np.int64)
    area = np.diag(inter)
    union = area[:, None] + area[None, :] - inter
    return _ratio(inter, union)


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
    return _ratio(inter, union)
