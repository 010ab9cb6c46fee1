"""Panoptic quality's counts of one image (SPEC section 6): what COCO panopticapi's
``pq_compute_single_core`` counts, on word masks.

panopticapi compares two panoptic PNGs (one segment id per pixel, 0 = VOID). Here the GT
segments are the GT instances (disjoint: one label image), the predicted segments the
singlempo merge of the predicted masks (disjoint; the masks themselves when they do not
overlap: the merge then keeps every non-empty mask as it is), and VOID the pixels of no GT
segment. Per image:

- a predicted and a GT segment of the same category that share a pixel, the GT one not a
  crowd region, are a true positive when IoU > 1/2, the union leaving VOID out:
  ``union = |p| + |g| - |p ∩ g| - |p ∩ VOID|``;
- a GT segment no prediction matched is a false negative, unless it is a crowd region;
- a predicted segment no GT segment matched is a false positive, unless more than half of
  it is VOID or the crowd region of its category (the last crowd segment of that category
  in GT order: panopticapi keeps one per category in a dict, the last one written).

Areas are pixel counts (panopticapi reads the GT's from the JSON's ``area``, which COCO and
psg.json hold as the segment's pixel count); every comparison is in integers (IoU > 1/2 is
``2 |p ∩ g| > union``), so the counts are exact.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT, covered_pixels, cross_intersections
from sgdask.types import BitMasks, ImageGT, PanopticHits

NOTHING = np.empty(0, dtype=np.int64)


@njit(**JIT)
def _quality_counts(inter: np.ndarray, labels: np.ndarray, area: np.ndarray, void: np.ndarray,
                   gt_labels: np.ndarray, gt_area: np.ndarray, crowd: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(true positives' predicted index, GT index and union; false positive flag per
    prediction; false negative flag per GT segment) from the pixels each same-category
    pair shares (``inter``), the predictions' areas and VOID pixels, the GT areas and
    crowd flags."""
    n_pred, n_gt = inter.shape
    tp_pred = np.empty(n_pred * n_gt, dtype=np.int64)
    tp_gt = np.empty(n_pred * n_gt, dtype=np.int64)
    tp_union = np.empty(n_pred * n_gt, dtype=np.int64)
    pred_matched = np.zeros(n_pred, dtype=np.bool_)
    gt_matched = np.zeros(n_gt, dtype=np.bool_)
    k = 0
    for p in range(n_pred):
        for g in range(n_gt):
            shared = inter[p, g]
            if shared == 0 or crowd[g] or labels[p] != gt_labels[g]:
                continue
            union = area[p] + gt_area[g] - shared - void[p]
            if 2 * shared > union:
                tp_pred[k], tp_gt[k], tp_union[k] = p, g, union
                pred_matched[p] = gt_matched[g] = True
                k += 1
    n_categories = 1
    for c in labels:
        n_categories = max(n_categories, c + 1)
    for c in gt_labels:
        n_categories = max(n_categories, c + 1)
    crowd_of = np.full(n_categories, -1, dtype=np.int64)
    false_negative = np.zeros(n_gt, dtype=np.bool_)
    for g in range(n_gt):
        if crowd[g]:
            crowd_of[gt_labels[g]] = g
        elif not gt_matched[g]:
            false_negative[g] = True
    false_positive = np.zeros(n_pred, dtype=np.bool_)
    for p in range(n_pred):
        if pred_matched[p] or area[p] == 0:
            continue
        ignored = void[p]
        if crowd_of[labels[p]] >= 0:
            ignored += inter[p, crowd_of[labels[p]]]
        false_positive[p] = not 2 * ignored > area[p]
    return tp_pred[:k], tp_gt[:k], tp_union[:k], false_positive, false_negative


def panoptic_hits(gt: ImageGT, masks: BitMasks, labels: np.ndarray, areas: np.ndarray,
                  intersections: np.ndarray | None = None, overlap: bool = False
                  ) -> PanopticHits:
    """The counts of one image from disjoint predicted masks (``labels``, ``areas``) and
    the GT (with masks and crowd flags); ``intersections``: the pixels each (prediction,
    GT) pair shares when the matching counted them already (same-category pairs at
    least), else counted here; ``overlap``: the masks are a merge of overlapping ones."""
    gt_masks = gt.bit_masks()
    assert gt_masks is not None and gt.crowd is not None, "panoptic quality needs GT masks"
    labels = np.asarray(labels, dtype=np.int64)
    gt_labels = np.asarray(gt.labels, dtype=np.int64)
    gt_area = np.asarray(gt.areas if gt.areas is not None else gt_masks.areas(), np.int64)
    if intersections is None:
        intersections = cross_intersections(masks.boxes, masks.starts, masks.words, labels,
                                            gt_masks.boxes, gt_masks.starts, gt_masks.words,
                                            gt_labels, True)
    areas = np.asarray(areas, dtype=np.int64)
    void = areas - covered_pixels(masks.boxes, masks.starts, masks.words, gt_masks.boxes,
                                  gt_masks.starts, gt_masks.words, *gt_masks.shape)
    tp_pred, tp_gt, tp_union, fp, fn = _quality_counts(
        intersections, labels, areas, void, gt_labels, gt_area,
        np.asarray(gt.crowd, dtype=np.bool_))
    return PanopticHits(gt_labels[tp_gt], intersections[tp_pred, tp_gt], tp_union,
                        labels[fp], gt_labels[fn], overlap)


def missing_panoptic_hits(gt: ImageGT) -> PanopticHits:
    """An image without prediction: every GT segment but the crowd regions is a false
    negative."""
    assert gt.crowd is not None
    gt_labels = np.asarray(gt.labels, dtype=np.int64)
    return PanopticHits(NOTHING, NOTHING, NOTHING, NOTHING,
                        gt_labels[~np.asarray(gt.crowd, dtype=bool)])
