"""Prediction normalization (SPEC 3.1 and 5.1): duplicate removal, mask merge, graph constraint."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sgdask.kernels.iou import pairwise_mask_iou
from sgdask.kernels.masks import CropMasks, as_crops
from sgdask.types import ImagePred

MERGE_IOU = 0.5


def row_keys(rows: np.ndarray) -> np.ndarray:
    """One int64 per row of non-negative ints, equal exactly when the rows are equal."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim == 1:
        return rows
    keys = np.zeros(len(rows), dtype=np.int64)
    for col in rows.T:
        keys = keys * (int(col.max(initial=0)) + 1) + col
    return keys


def first_occurrences(keys: np.ndarray) -> np.ndarray:
    """Sorted positions of the first occurrence of each distinct row/value of ``keys``."""
    if len(keys) == 0:
        return np.empty(0, dtype=np.int64)
    if keys.ndim > 1 and keys.min() < 0:
        _, first = np.unique(keys, axis=0, return_index=True)
    else:
        _, first = np.unique(row_keys(keys), return_index=True)
    return np.sort(first)


def dedup_triplets(triplets: np.ndarray) -> np.ndarray:
    """Triplets with exact duplicates removed, first occurrence kept, order preserved."""
    return triplets[first_occurrences(triplets)]


@dataclass
class MaskMerge:
    """Result of the singlempo mask merge.

    ``instance_map[i]`` is the kept index original instance i now belongs to (-1: dropped);
    ``kept`` lists, per kept instance, the original index that defined it; ``masks`` are the
    kept instances' new (non-overlapping) masks.
    """

    masks: CropMasks
    kept: np.ndarray
    instance_map: np.ndarray
    n_merged: int
    n_dropped: int


def merge_order(n: int, scores: np.ndarray | None) -> np.ndarray:
    """Visit order of the merge: by score descending (stable) when given, else by index."""
    if scores is None:
        return np.arange(n)
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def merge_masks(masks: np.ndarray | CropMasks, scores: np.ndarray | None = None) -> MaskMerge:
    """NMS-like merge of duplicate masks into non-overlapping kept masks (SPEC 5.1)."""
    crops = as_crops(masks)
    n = len(crops)
    order = merge_order(n, scores)
    iou = pairwise_mask_iou(crops)
    instance_map = np.full(n, -1, dtype=np.int64)
    merged = np.zeros(n, dtype=bool)
    claimed = np.zeros(crops.shape, dtype=bool)
    kept: list[int] = []
    kept_crops: list[np.ndarray] = []
    n_dropped = 0
    for pos, m in enumerate(order):
        if merged[m]:
            continue
        y0, x0, y1, x1 = crops.boxes[m]
        new = crops.crops[m] & ~claimed[y0:y1, x0:x1]
        if not new.any():
            n_dropped += 1
            continue
        instance_map[m] = len(kept)
        kept.append(int(m))
        kept_crops.append(new)
        claimed[y0:y1, x0:x1] |= new
        later = order[pos + 1 :]
        absorb = later[(iou[m, later] >= MERGE_IOU) & ~merged[later] & (instance_map[later] < 0)]
        merged[absorb] = True
        instance_map[absorb] = instance_map[m]
    kept_index = np.asarray(kept, dtype=np.int64)
    return MaskMerge(crops.subset(kept_index, kept_crops), kept_index, instance_map,
                     int(merged.sum()), n_dropped)


@dataclass
class NormalizedPred:
    """A prediction ready for matching: instances, lists and what normalization removed."""

    labels: np.ndarray
    graph: np.ndarray
    ng: np.ndarray
    boxes: np.ndarray | None
    masks: CropMasks | None
    diagnostics: dict[str, int] = field(default_factory=dict)


def crops_of(pred: ImagePred) -> CropMasks | None:
    return None if pred.masks is None else as_crops(pred.masks)


def remap_instances(triplets: np.ndarray, instance_map: np.ndarray) -> np.ndarray:
    """Triplets moved onto kept instances; those touching a dropped one or now s == o go."""
    if len(triplets) == 0:
        return triplets
    subj, obj = instance_map[triplets[:, 0]], instance_map[triplets[:, 1]]
    keep = (subj >= 0) & (obj >= 0) & (subj != obj)
    return np.stack([subj, obj, triplets[:, 2]], axis=1)[keep]


def enforce_graph_constraint(graph: np.ndarray) -> np.ndarray:
    """Only the first triplet of each (subject, object) pair."""
    return graph[first_occurrences(graph[:, :2])] if len(graph) else graph


def normalize_singlempo(pred: ImagePred) -> NormalizedPred:
    """Mask merge + relation dedup + graph constraint (the fair protocol)."""
    graph, ng = dedup_triplets(pred.graph), dedup_triplets(pred.ng)
    n = pred.n_instances
    merged, dropped, masks, boxes, labels = 0, 0, pred.masks, pred.boxes, pred.labels
    instance_map = np.arange(n, dtype=np.int64)
    if pred.masks is not None:
        merge = merge_masks(pred.masks, pred.scores)
        instance_map, masks = merge.instance_map, merge.masks
        merged, dropped = merge.n_merged, merge.n_dropped
        labels = pred.labels[merge.kept]
        boxes = None if pred.boxes is None else pred.boxes[merge.kept]
    graph = enforce_graph_constraint(remap_instances(graph, instance_map))
    ng = dedup_triplets(remap_instances(ng, instance_map))
    diagnostics = {
        "masks_merged": merged,
        "masks_dropped": dropped,
        "graph_triplets_removed": len(pred.graph) - len(graph),
        "ng_triplets_removed": len(pred.ng) - len(ng),
    }
    return NormalizedPred(labels, graph, ng, boxes, masks, diagnostics)


def normalize_dedup(pred: ImagePred) -> NormalizedPred:
    """Exact-duplicate removal only (SGBench 1.0.0)."""
    graph, ng = dedup_triplets(pred.graph), dedup_triplets(pred.ng)
    diagnostics = {
        "masks_merged": 0,
        "masks_dropped": 0,
        "graph_triplets_removed": len(pred.graph) - len(graph),
        "ng_triplets_removed": len(pred.ng) - len(ng),
    }
    return NormalizedPred(pred.labels, graph, ng, pred.boxes, crops_of(pred), diagnostics)


def normalize_none(pred: ImagePred) -> NormalizedPred:
    """No normalization at all (legacy multimpo)."""
    diagnostics = {"masks_merged": 0, "masks_dropped": 0,
                   "graph_triplets_removed": 0, "ng_triplets_removed": 0}
    return NormalizedPred(pred.labels, pred.graph, pred.ng, pred.boxes, crops_of(pred),
                          diagnostics)


NORMALIZERS = {"singlempo": normalize_singlempo, "dedup": normalize_dedup, "none": normalize_none}


def normalize_prediction(pred: ImagePred, normalization: str) -> NormalizedPred:
    """Apply the named normalization of a protocol."""
    return NORMALIZERS[normalization](pred)
