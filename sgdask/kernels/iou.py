"""Intersection over union between predicted and GT instances (masks or boxes)."""

from __future__ import annotations

import numpy as np

from sgdask.kernels.masks import CropMasks, as_crops


def _ratio(inter: np.ndarray, union: np.ndarray) -> np.ndarray:
    """inter / union as float64, 0 where the union is empty (as SGBench does)."""
    out = np.zeros(inter.shape, dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def mask_iou_matrix(pred_masks: np.ndarray | CropMasks, gt_label_image: np.ndarray,
                    n_gt: int, gt_area: np.ndarray | None = None) -> np.ndarray:
    """IoU (n_pred, n_gt) of predicted masks against a GT label image (index + 1, 0 = none).

    Per predicted instance, one histogram of the GT labels under its pixels (inside its box)
    replaces the n_pred * n_gt full-image mask comparisons of the reference implementation.
    """
    crops = as_crops(pred_masks)
    if gt_area is None:
        gt_area = np.bincount(gt_label_image.reshape(-1), minlength=n_gt + 1)[1 : n_gt + 1]
    joint = np.zeros((len(crops), n_gt + 1), dtype=np.int64)
    for i, ((y0, x0, y1, x1), crop) in enumerate(zip(crops.boxes, crops.crops, strict=True)):
        labels = gt_label_image[y0:y1, x0:x1][crop]
        joint[i] = np.bincount(labels, minlength=n_gt + 1)[: n_gt + 1]
    pred_area = joint.sum(axis=1)
    inter = joint[:, 1:]
    union = pred_area[:, None] + gt_area[None, :] - inter
    return _ratio(inter, union)


def overlapping_pairs(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i < j) whose boxes (y0, x0, y1, x1) share at least one pixel."""
    y0 = np.maximum(boxes[:, None, 0], boxes[None, :, 0])
    x0 = np.maximum(boxes[:, None, 1], boxes[None, :, 1])
    y1 = np.minimum(boxes[:, None, 2], boxes[None, :, 2])
    x1 = np.minimum(boxes[:, None, 3], boxes[None, :, 3])
    overlap = np.triu((y1 > y0) & (x1 > x0), k=1)
    return np.nonzero(overlap)


def pairwise_mask_iou(masks: np.ndarray | CropMasks) -> np.ndarray:
    """IoU (n, n) between the instances of one image, computed only where boxes overlap."""
    crops = as_crops(masks)
    area = crops.areas()
    inter = np.diag(area).astype(np.int64)
    boxes = crops.boxes
    for i, j in zip(*overlapping_pairs(boxes), strict=True):
        y0, x0 = max(boxes[i, 0], boxes[j, 0]), max(boxes[i, 1], boxes[j, 1])
        y1, x1 = min(boxes[i, 2], boxes[j, 2]), min(boxes[i, 3], boxes[j, 3])
        a = crops.crops[i][y0 - boxes[i, 0]:y1 - boxes[i, 0], x0 - boxes[i, 1]:x1 - boxes[i, 1]]
        b = crops.crops[j][y0 - boxes[j, 0]:y1 - boxes[j, 0], x0 - boxes[j, 1]:x1 - boxes[j, 1]]
        inter[i, j] = inter[j, i] = np.count_nonzero(a & b)
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
