"""Panoptic quality's counts of one image (SPEC section 6): what COCO panopticapi's
``pq_compute_single_core`` counts, on word masks.

panopticapi compares two panoptic PNGs (one segment id per pixel, 0 = VOID). Here the GT
segments are the GT instances (disjoint: one label image), the predicted segments the
singlempo merge of the predicted masks (disjoint; the masks themselves when they do not
overlap: the merge then keeps every non-empty mask as it is), and VOID the pixels of no GT
segment (the GT segments are disjoint, so a GT whose segments' areas add up to the
image's has none). Per image:

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
def _categorised(inter: np.ndarray, labels: np.ndarray, area: np.ndarray, void: np.ndarray,
                 gt_labels: np.ndarray, gt_area: np.ndarray, crowd: np.ndarray,
                 skip_empty: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(true positives' category, intersection and union; false positives' categories;
    false negatives' categories), as panopticapi's ``pq_compute_single_core`` counts them,
    from the pixels each (prediction, GT segment) pair shares (``inter``, a column per GT
    segment, more columns ignored), the predictions' areas and pixels on VOID, the GT
    segments' categories, areas and crowd flags. ``skip_empty``: a prediction of no pixel
    is no false positive. A crowd segment is never matched, so it is no false negative: it
    excuses the pixels a prediction of its category puts on it."""
    n_pred, n_gt = len(labels), len(gt_labels)
    tp_category = np.empty(n_pred * n_gt, dtype=np.int64)
    tp_inter = np.empty(n_pred * n_gt, dtype=np.int64)
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
                tp_category[k], tp_inter[k], tp_union[k] = gt_labels[g], shared, union
                pred_matched[p] = gt_matched[g] = True
                k += 1
    n_categories = 1
    for c in labels:
        n_categories = max(n_categories, c + 1)
    for c in gt_labels:
        n_categories = max(n_categories, c + 1)
    crowd_of = np.full(n_categories, -1, dtype=np.int64)
    fn_category = np.empty(n_gt, dtype=np.int64)
    n_fn = 0
    for g in range(n_gt):
        if crowd[g]:
            crowd_of[gt_labels[g]] = g
        elif not gt_matched[g]:
            fn_category[n_fn] = gt_labels[g]
            n_fn += 1
    fp_category = np.empty(n_pred, dtype=np.int64)
    n_fp = 0
    for p in range(n_pred):
        if pred_matched[p] or (skip_empty and area[p] == 0):
            continue
        ignored = void[p]
        if crowd_of[labels[p]] >= 0:
            ignored += inter[p, crowd_of[labels[p]]]
        if not 2 * ignored > area[p]:
            fp_category[n_fp] = labels[p]
            n_fp += 1
    return (tp_category[:k], tp_inter[:k], tp_union[:k], fp_category[:n_fp],
            fn_category[:n_fn])


@njit(**JIT)
def _counts(inter: np.ndarray, labels: np.ndarray, area: np.ndarray, boxes: np.ndarray,
            starts: np.ndarray, words: np.ndarray, gt_labels: np.ndarray, gt_area: np.ndarray,
            crowd: np.ndarray, gt_boxes: np.ndarray, gt_starts: np.ndarray,
            gt_words: np.ndarray, height: int, width: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_categorised`` from the pixels each same-category (prediction, GT) pair shares
    (``inter``), the predicted masks and areas, the GT masks, areas and crowd flags. A GT
    whose disjoint segments cover every pixel has no VOID; else a prediction's VOID pixels
    are those no GT segment covers."""
    n_pred = inter.shape[0]
    if gt_area.sum() == height * width:
        void = np.zeros(n_pred, dtype=np.int64)
    else:
        void = area - covered_pixels(boxes, starts, words, gt_boxes, gt_starts, gt_words,
                                     height, width)
    return _categorised(inter, labels, area, void, gt_labels, gt_area, crowd, True)


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
    found = _counts(intersections, labels, np.asarray(areas, dtype=np.int64), masks.boxes,
                    masks.starts, masks.words, gt_labels, gt_area,
                    np.asarray(gt.crowd, dtype=np.bool_), gt_masks.boxes, gt_masks.starts,
                    gt_masks.words, *gt_masks.shape)
    return PanopticHits(*found, overlap)


def missing_panoptic_hits(gt: ImageGT) -> PanopticHits:
    """An image without prediction: every GT segment but the crowd regions is a false
    negative."""
    assert gt.crowd is not None
    gt_labels = np.asarray(gt.labels, dtype=np.int64)
    return PanopticHits(NOTHING, NOTHING, NOTHING, NOTHING,
                        gt_labels[~np.asarray(gt.crowd, dtype=bool)])


# ------------------------------------------------- two panoptic PNGs (COCO panoptic files)


@njit(**JIT)
def _segment_of(rgb: np.ndarray, i: int, j: int) -> int:
    """The segment id of pixel (i, j) of a panoptic RGB image: R + 256 G + 65536 B."""
    return int(rgb[i, j, 0]) + 256 * int(rgb[i, j, 1]) + 65536 * int(rgb[i, j, 2])


@njit(**JIT)
def _position(sorted_ids: np.ndarray, order: np.ndarray, segment: int, missing: int) -> int:
    """The JSON position of ``segment`` (``missing`` when it is not listed)."""
    at = np.searchsorted(sorted_ids, segment)
    if at < len(sorted_ids) and sorted_ids[at] == segment:
        return order[at]
    return missing


@njit(**JIT)
def _table_counts(table: np.ndarray, labels: np.ndarray, gt_labels: np.ndarray,
                  gt_area: np.ndarray, crowd: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_categorised`` from a ``pair_runs`` table: a prediction's area is its pixel
    count, a GT segment's the JSON's ``area``, VOID is GT id 0."""
    n_pred, n_gt = len(labels), len(gt_labels)
    area = table[:n_pred].sum(axis=1)
    void = table[:n_pred, n_gt]
    return _categorised(table, labels, area, void, gt_labels, gt_area, crowd, False)


def table_hits(table: np.ndarray, labels: np.ndarray, gt_labels: np.ndarray,
               gt_area: np.ndarray, crowd: np.ndarray) -> PanopticHits:
    """One image's counts from its ``pair_runs`` table, the predicted segments'
    categories and the GT segments' categories, areas and crowd flags (JSON order)."""
    found = _table_counts(table, np.asarray(labels, dtype=np.int64),
                          np.asarray(gt_labels, dtype=np.int64),
                          np.asarray(gt_area, dtype=np.int64), np.asarray(crowd, dtype=np.bool_))
    return PanopticHits(*found, False)


@njit(**JIT)
def rgb_runs(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A panoptic RGB image as runs in raster order: ``ends`` (one past each run's last
    pixel, as a flat index) and ``ids`` (its segment id, R + 256 G + 65536 B)."""
    height, width = rgb.shape[0], rgb.shape[1]
    ends = np.empty(height * width, dtype=np.int64)
    ids = np.empty(height * width, dtype=np.int64)
    n, last = 0, -1
    for i in range(height):
        for j in range(width):
            segment = _segment_of(rgb, i, j)
            if segment != last:
                if n:
                    ends[n - 1] = i * width + j
                ids[n], last = segment, segment
                n += 1
    if n:
        ends[n - 1] = height * width
    return ends[:n], ids[:n]


@njit(**JIT)
def pair_runs(gt_ends: np.ndarray, gt_runs: np.ndarray, gt_ids: np.ndarray,
              pred_ends: np.ndarray, pred_runs: np.ndarray, pred_ids: np.ndarray
              ) -> tuple[np.ndarray, int]:
    """The pixels each (predicted, GT) pair of segments shares, from two panoptic images of
    the same pixel count as runs in raster order (``rgb_runs``: ``*_ends`` and the runs'
    segment ids ``*_runs``) and the segment ids their JSON lists (``*_ids``, in its order):
    rows are the predicted segments, then VOID (id 0); columns the GT segments, then VOID,
    then ids the GT's JSON does not list. Returns the table and the first id (raster
    order) the prediction's PNG holds but its JSON does not list (-1: none). Each run is
    looked up once, each overlap of two runs added at once."""
    n_pred, n_gt = len(pred_ids), len(gt_ids)
    pred_order, gt_order = np.argsort(pred_ids), np.argsort(gt_ids)
    pred_sorted, gt_sorted = pred_ids[pred_order], gt_ids[gt_order]
    table = np.zeros((n_pred + 1, n_gt + 2), dtype=np.int64)
    a, b, at = 0, 0, 0
    p, g = -1, -1
    while a < len(pred_ends) and b < len(gt_ends):
        if p < 0:
            segment = pred_runs[a]
            p = n_pred if segment == 0 else _position(pred_sorted, pred_order, segment, -1)
            if p < 0:
                return table, segment
        if g < 0:
            segment = gt_runs[b]
            g = n_gt if segment == 0 else _position(gt_sorted, gt_order, segment, n_gt + 1)
        end = min(pred_ends[a], gt_ends[b])
        table[p, g] += end - at
        at = end
        if pred_ends[a] == end:
            a, p = a + 1, -1
        if gt_ends[b] == end:
            b, g = b + 1, -1
    return table, -1
