"""Normalized triplet lists and their hit positions, one compiled call per image.

The per-image work around matching: duplicate removal, the singlempo remap and graph
constraint (SPEC 5.1), box IoU, and the first-hit positions every metric family reads
(``sgdask.kernels.hits``), as compiled loops so that no Python runs per triplet, pair or
instance.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT
from sgdask.kernels.hits import (
    first_hits_mapped,
    first_hits_triplet,
    gt_pair_rows,
    max_predicate,
    on_gt_pair,
    predicate_ranks,
    rank_within_predicate,
    within_predicate_first,
)

NONE, DEDUP, SINGLEMPO = 0, 1, 2  # normalization modes
NORMALIZATIONS = {"none": NONE, "dedup": DEDUP, "singlempo": SINGLEMPO}


@njit(**JIT)
def first_occurrence(rows: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each distinct row of an (n, c) int array."""
    n, c = rows.shape
    keep = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return keep
    keys = np.zeros(n, dtype=np.int64)
    for j in range(c):
        lo, hi = rows[0, j], rows[0, j]
        for i in range(n):
            lo, hi = min(lo, rows[i, j]), max(hi, rows[i, j])
        for i in range(n):
            keys[i] = keys[i] * (hi - lo + 1) + (rows[i, j] - lo)
    order = np.argsort(keys, kind="mergesort")
    keep[order[0]] = True
    for i in range(1, n):
        if keys[order[i]] != keys[order[i - 1]]:
            keep[order[i]] = True
    return keep


@njit(**JIT)
def remapped(triplets: np.ndarray, instance_map: np.ndarray) -> np.ndarray:
    """Triplets moved onto kept instances; those touching a dropped one or now s == o go."""
    out = np.empty_like(triplets)
    n = 0
    for j in range(triplets.shape[0]):
        s, o = instance_map[triplets[j, 0]], instance_map[triplets[j, 1]]
        if s >= 0 and o >= 0 and s != o:
            out[n, 0], out[n, 1], out[n, 2] = s, o, triplets[j, 2]
            n += 1
    return out[:n]


@njit(**JIT)
def deduplicated(triplets: np.ndarray) -> np.ndarray:
    if triplets.shape[0] == 0:
        return triplets
    return triplets[first_occurrence(triplets)]


@njit(**JIT)
def first_per_pair(graph: np.ndarray) -> np.ndarray:
    """Only the first triplet of each (subject, object) pair (the graph constraint)."""
    if graph.shape[0] == 0:
        return graph
    return graph[first_occurrence(graph[:, :2].copy())]


@njit(**JIT)
def normalized_lists(graph: np.ndarray, ng: np.ndarray, instance_map: np.ndarray, mode: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The lists a protocol scores: as given (NONE), exact duplicates removed (DEDUP), or
    deduplicated, remapped onto the merged instances and graph-constrained (SINGLEMPO)."""
    if mode == NONE:
        return graph, ng
    graph, ng = deduplicated(graph), deduplicated(ng)
    if mode == DEDUP:
        return graph, ng
    return (first_per_pair(remapped(graph, instance_map)),
            deduplicated(remapped(ng, instance_map)))


@njit(**JIT)
def first_of_remapped_pair_only(graph: np.ndarray, mapping: np.ndarray) -> np.ndarray:
    """The graph list in which every triplet that is not the first of its remapped
    (subject, object) pair (an unmatched side taking part as -1) has predicate -1, so that
    it never hits. Positions are kept: the cut at k still counts it, and the rule never
    pulls a later triplet into the top k (SGBench 2.0.0's ``deduplicate_pairs``)."""
    n = graph.shape[0]
    out = graph.copy()
    if n == 0:
        return out
    pairs = np.empty((n, 2), dtype=np.int64)
    for j in range(n):
        pairs[j, 0], pairs[j, 1] = mapping[graph[j, 0]], mapping[graph[j, 1]]
    first = first_occurrence(pairs)
    for j in range(n):
        if not first[j]:
            out[j, 2] = -1
    return out


@njit(**JIT)
def mapped_hits(relations: np.ndarray, graph: np.ndarray, ng: np.ndarray,
                mapping: np.ndarray, n_gt: int, with_ng: bool, first_per_remapped_pair: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                           np.ndarray]:
    """(graph_first, pair_first, legacy_first, ng_first, imr_first, prank) through an
    instance mapping (the NG arrays are empty without ``with_ng``);
    ``first_per_remapped_pair``: graph_first counts only the first triplet of each
    remapped pair (``first_of_remapped_pair_only``)."""
    n_p = max_predicate(relations) + 1
    pairs = relations[gt_pair_rows(relations, n_gt)]
    counted = first_of_remapped_pair_only(graph, mapping) if first_per_remapped_pair \
        else graph
    graph_first = first_hits_mapped(relations, counted, mapping, n_gt, n_p, True)
    pair_first = first_hits_mapped(pairs, graph, mapping, n_gt, 1, False)
    on_pair = graph[on_gt_pair(graph, mapping, relations, n_gt)]
    legacy_first = first_hits_mapped(relations, on_pair, mapping, n_gt, n_p, True)
    empty = np.empty(0, dtype=np.int64)
    if not with_ng:
        return graph_first, pair_first, legacy_first, empty, empty, empty
    ng_first = first_hits_mapped(relations, ng, mapping, n_gt, n_p, True)
    within = rank_within_predicate(ng, max(n_p, max_predicate(ng) + 1))
    return (graph_first, pair_first, legacy_first, ng_first,
            within_predicate_first(ng_first, within),
            predicate_ranks(relations, ng, mapping, n_gt))


@njit(**JIT)
def triplet_level_hits(relations: np.ndarray, graph: np.ndarray, ng: np.ndarray,
                       hit: np.ndarray, n_gt: int, with_ng: bool
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(graph_first, pair_first, ng_first, imr_first) at the triplet level (multimpo)."""
    pairs = relations[gt_pair_rows(relations, n_gt)]
    graph_first = first_hits_triplet(relations, graph, hit, True)
    pair_first = first_hits_triplet(pairs, graph, hit, False)
    empty = np.empty(0, dtype=np.int64)
    if not with_ng:
        return graph_first, pair_first, empty, empty
    ng_first = first_hits_triplet(relations, ng, hit, True)
    within = rank_within_predicate(ng, max_predicate(ng) + 1)
    return graph_first, pair_first, ng_first, within_predicate_first(ng_first, within)


@njit(**JIT)
def box_iou(pred: np.ndarray, pred_labels: np.ndarray, gt: np.ndarray,
            gt_labels: np.ndarray, match_labels: bool, zero_area_nan: bool) -> np.ndarray:
    """IoU (n_pred, n_gt) of [x1, y1, x2, y2] boxes, area (x2-x1)*(y2-y1), no +1, in
    SGBench 1.0.0's arithmetic (its numpy operations, one by one); 0 for pairs of
    different categories when ``match_labels``; ``zero_area_nan``: NaN for two zero-area
    boxes (SGBench divides 0 by 0 there)."""
    n, m = pred.shape[0], gt.shape[0]
    out = np.zeros((n, m), dtype=np.float64)
    for i in range(n):
        area_p = (pred[i, 2] - pred[i, 0]) * (pred[i, 3] - pred[i, 1])
        for j in range(m):
            if match_labels and pred_labels[i] != gt_labels[j]:
                continue
            area_g = (gt[j, 2] - gt[j, 0]) * (gt[j, 3] - gt[j, 1])
            if zero_area_nan and area_p == 0 and area_g == 0:
                out[i, j] = np.nan
                continue
            w = min(pred[i, 2], gt[j, 2]) - max(pred[i, 0], gt[j, 0])
            h = min(pred[i, 3], gt[j, 3]) - max(pred[i, 1], gt[j, 1])
            inter = max(w, 0.0) * max(h, 0.0)
            union = area_p + area_g - inter
            if union > 0:
                out[i, j] = inter / union
    return out


@njit(**JIT, error_model="numpy")
def inclusive_box_iou(pred: np.ndarray, pred_labels: np.ndarray, gt: np.ndarray,
                      gt_labels: np.ndarray, match_labels: bool) -> np.ndarray:
    """IoU (n_pred, n_gt) of float32 [x1, y1, x2, y2] boxes in inclusive pixel coordinates,
    in maskrcnn_benchmark's arithmetic (``boxlist_iou``: float32, ``+1`` on width and
    height, intersection sides clamped at 0, ``inter / (area_a + area_b - inter)``, numpy's
    division semantics); 0 for pairs of different categories when ``match_labels`` and
    where that division is undefined (its NaN never passes a threshold)."""
    one, zero = np.float32(1.0), np.float32(0.0)
    n, m = pred.shape[0], gt.shape[0]
    out = np.zeros((n, m), dtype=np.float64)
    for i in range(n):
        area_p = (pred[i, 2] - pred[i, 0] + one) * (pred[i, 3] - pred[i, 1] + one)
        for j in range(m):
            if match_labels and pred_labels[i] != gt_labels[j]:
                continue
            area_g = (gt[j, 2] - gt[j, 0] + one) * (gt[j, 3] - gt[j, 1] + one)
            w = max(min(gt[j, 2], pred[i, 2]) - max(gt[j, 0], pred[i, 0]) + one, zero)
            h = max(min(gt[j, 3], pred[i, 3]) - max(gt[j, 1], pred[i, 1]) + one, zero)
            inter = w * h
            iou = inter / (area_g + area_p - inter)
            if iou == iou:
                out[i, j] = iou
    return out


@njit(**JIT)
def clipped_to_image(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """float64 boxes clipped to an image of ``height`` x ``width`` as maskrcnn_benchmark's
    ``clip_to_image`` does: float32, x in [0, width - 1], y in [0, height - 1]."""
    zero = np.float32(0.0)
    limits = (np.float32(width - 1), np.float32(height - 1))
    out = np.empty(boxes.shape, dtype=np.float32)
    for i in range(boxes.shape[0]):
        for c in range(4):
            out[i, c] = min(max(np.float32(boxes[i, c]), zero), limits[c % 2])
    return out


@njit(**JIT)
def same_boxes(a: np.ndarray, b: np.ndarray, tolerance: float) -> bool:
    """True when the (n, 4) boxes of ``a`` and ``b`` (any float dtypes) are equal to
    ``tolerance``, coordinate by coordinate."""
    if a.shape[0] != b.shape[0]:
        return False
    for i in range(a.shape[0]):
        for c in range(4):
            if not abs(np.float64(a[i, c]) - np.float64(b[i, c])) <= tolerance:
                return False
    return True
