"""Prediction normalization (SPEC 3.1 and 5.1): duplicate removal, mask merge, graph constraint."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT, merge_kernel, self_iou, subset
from sgdask.types import BitMasks, ImagePred, as_bit_masks

MERGE_IOU = 0.5


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


def first_occurrences(rows: np.ndarray) -> np.ndarray:
    """Sorted positions of the first occurrence of each distinct row (or value)."""
    rows = np.asarray(rows, dtype=np.int64)
    return np.flatnonzero(first_occurrence(rows.reshape(len(rows), -1)))


def dedup_triplets(triplets: np.ndarray) -> np.ndarray:
    """Triplets with exact duplicates removed, first occurrence kept, order preserved."""
    if len(triplets) == 0:
        return triplets
    return triplets[first_occurrence(np.ascontiguousarray(triplets, dtype=np.int64))]


@dataclass
class MaskMerge:
    """Result of the singlempo mask merge.

    ``instance_map[i]`` is the kept index original instance i now belongs to (-1: dropped);
    ``kept`` lists, per kept instance, the original index that defined it; ``masks`` are the
    kept instances' new (non-overlapping) masks.
    """

    masks: BitMasks
    kept: np.ndarray
    instance_map: np.ndarray
    n_merged: int
    n_dropped: int


def merge_order(n: int, scores: np.ndarray | None) -> np.ndarray:
    """Visit order of the merge: by score descending (stable) when given, else by index."""
    if scores is None:
        return np.arange(n)
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def merge_masks(masks: np.ndarray | BitMasks, scores: np.ndarray | None = None,
                areas: np.ndarray | None = None) -> MaskMerge:
    """NMS-like merge of duplicate masks into non-overlapping kept masks (SPEC 5.1)."""
    bits = as_bit_masks(masks)
    area = bits.areas() if areas is None else areas
    iou = self_iou(bits.boxes, bits.starts, bits.words, area)
    instance_map, kept, new_words, n_merged, n_dropped = merge_kernel(
        bits.boxes, bits.starts, bits.words, iou, merge_order(len(bits), scores),
        bits.shape[0], bits.shape[1], MERGE_IOU)
    return MaskMerge(subset(bits, kept, new_words), kept, instance_map, n_merged, n_dropped)


@dataclass
class NormalizedPred:
    """A prediction ready for matching: instances, lists and what normalization removed."""

    labels: np.ndarray
    graph: np.ndarray
    ng: np.ndarray
    boxes: np.ndarray | None
    masks: BitMasks | None
    diagnostics: dict[str, int] = field(default_factory=dict)


def bit_masks_of(pred: ImagePred) -> BitMasks | None:
    return None if pred.masks is None else as_bit_masks(pred.masks)


def remap_instances(triplets: np.ndarray, instance_map: np.ndarray) -> np.ndarray:
    """Triplets moved onto kept instances; those touching a dropped one or now s == o go."""
    if len(triplets) == 0:
        return triplets
    subj, obj = instance_map[triplets[:, 0]], instance_map[triplets[:, 1]]
    keep = (subj >= 0) & (obj >= 0) & (subj != obj)
    return np.stack([subj, obj, triplets[:, 2]], axis=1)[keep]


def enforce_graph_constraint(graph: np.ndarray) -> np.ndarray:
    """Only the first triplet of each (subject, object) pair."""
    if len(graph) == 0:
        return graph
    return graph[first_occurrence(np.ascontiguousarray(graph[:, :2]))]


def removal_counts(pred: ImagePred, graph: np.ndarray, ng: np.ndarray, merged: int = 0,
                   dropped: int = 0) -> dict[str, int]:
    return {"masks_merged": merged, "masks_dropped": dropped,
            "graph_triplets_removed": len(pred.graph) - len(graph),
            "ng_triplets_removed": len(pred.ng) - len(ng)}


def normalize_singlempo(pred: ImagePred) -> NormalizedPred:
    """Mask merge + relation dedup + graph constraint (the fair protocol)."""
    graph, ng = dedup_triplets(pred.graph), dedup_triplets(pred.ng)
    merged, dropped, masks, boxes, labels = 0, 0, bit_masks_of(pred), pred.boxes, pred.labels
    instance_map = np.arange(pred.n_instances, dtype=np.int64)
    if masks is not None:
        merge = merge_masks(masks, pred.scores)
        instance_map, masks = merge.instance_map, merge.masks
        merged, dropped = merge.n_merged, merge.n_dropped
        labels = pred.labels[merge.kept]
        boxes = None if pred.boxes is None else pred.boxes[merge.kept]
    graph = enforce_graph_constraint(remap_instances(graph, instance_map))
    ng = dedup_triplets(remap_instances(ng, instance_map))
    return NormalizedPred(labels, graph, ng, boxes, masks,
                          removal_counts(pred, graph, ng, merged, dropped))


def normalize_dedup(pred: ImagePred) -> NormalizedPred:
    """Exact-duplicate removal only (SGBench 1.0.0)."""
    graph, ng = dedup_triplets(pred.graph), dedup_triplets(pred.ng)
    return NormalizedPred(pred.labels, graph, ng, pred.boxes, bit_masks_of(pred),
                          removal_counts(pred, graph, ng))


def normalize_none(pred: ImagePred) -> NormalizedPred:
    """No normalization at all (legacy multimpo)."""
    return NormalizedPred(pred.labels, pred.graph, pred.ng, pred.boxes, bit_masks_of(pred),
                          removal_counts(pred, pred.graph, pred.ng))


NORMALIZERS = {"singlempo": normalize_singlempo, "dedup": normalize_dedup, "none": normalize_none}


def normalize_prediction(pred: ImagePred, normalization: str) -> NormalizedPred:
    """Apply the named normalization of a protocol."""
    return NORMALIZERS[normalization](pred)
