"""Instance matching (SPEC section 4): predicted instance index -> GT index or -1."""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT

IOU_THRESHOLD = 0.5


def allowed_iou(iou: np.ndarray, pred_labels: np.ndarray, gt_labels: np.ndarray,
                match_labels: bool = True) -> np.ndarray:
    """The IoU matrix with pairs of different categories set to 0 (never matchable)."""
    if not match_labels:
        return iou
    same = np.asarray(pred_labels)[:, None] == np.asarray(gt_labels)[None, :]
    return np.where(same, iou, 0.0)


@njit(**JIT)
def match_many_to_one(iou: np.ndarray, threshold: float = IOU_THRESHOLD) -> np.ndarray:
    """SGBench 1.0 matching: each prediction takes its argmax GT (lowest index on ties; a
    NaN counts as the maximum and passes the threshold, as numpy's argmax and ``<`` do)."""
    n_pred, n_gt = iou.shape
    mapping = np.full(n_pred, -1, dtype=np.int64)
    if n_gt == 0:
        return mapping
    for m in range(n_pred):
        best = 0
        for g in range(n_gt):
            if np.isnan(iou[m, g]):
                best = g
                break
            if iou[m, g] > iou[m, best]:
                best = g
        if not iou[m, best] < threshold:
            mapping[m] = best
    return mapping


@njit(**JIT)
def match_one_to_one(iou: np.ndarray, threshold: float = IOU_THRESHOLD) -> np.ndarray:
    """SGBench paper Algorithm 2: a GT instance is claimed by at most one prediction.

    Predictions are visited in index order; a later one steals a GT instance only with a
    strictly higher IoU, so earlier predictions win ties. The loser stays unmatched.
    """
    n_pred, n_gt = iou.shape
    owner = np.full(n_gt, -1, dtype=np.int64)
    mapping = np.full(n_pred, -1, dtype=np.int64)
    if n_gt == 0:
        return mapping
    for m in range(n_pred):
        x = 0
        for g in range(1, n_gt):  # argmax, lowest index on ties
            if iou[m, g] > iou[m, x]:
                x = g
        value = iou[m, x]
        if value >= threshold and (owner[x] < 0 or value > iou[owner[x], x]):
            owner[x] = m
    for g in range(n_gt):
        if owner[g] >= 0:
            mapping[owner[g]] = g
    return mapping


def match_instances(iou: np.ndarray, pred_labels: np.ndarray, gt_labels: np.ndarray, *,
                    one_to_one: bool, match_labels: bool = True,
                    threshold: float = IOU_THRESHOLD) -> np.ndarray:
    """Mapping pred -> GT (-1 = unmatched) under the chosen matching rule."""
    scores = allowed_iou(iou, pred_labels, gt_labels, match_labels)
    if one_to_one:
        return match_one_to_one(scores, threshold)
    return match_many_to_one(scores, threshold)


@njit(**JIT)
def hit_coverage(hit: np.ndarray) -> tuple[np.ndarray, int]:
    """Of a (n_pred, n_gt) hit matrix: which GT instances some prediction hits, and how
    many predictions hit no GT instance."""
    matched = np.zeros(hit.shape[1], dtype=np.bool_)
    unmatched = 0
    for i in range(hit.shape[0]):
        any_hit = False
        for j in range(hit.shape[1]):
            if hit[i, j]:
                matched[j] = True
                any_hit = True
        unmatched += not any_hit
    return matched, unmatched
