"""Prediction normalization (SPEC 3.1 and 5.1): duplicate removal, mask merge, graph constraint."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sgdask.kernels.bits import merged_masks
from sgdask.kernels.lists import (
    DEDUP,
    SINGLEMPO,
    deduplicated,
    normalized_lists,
)
from sgdask.types import BitMasks, ImagePred, as_bit_masks

MERGE_IOU = 0.5


def dedup_triplets(triplets: np.ndarray) -> np.ndarray:
    """Triplets with exact duplicates removed, first occurrence kept, order preserved."""
    return deduplicated(np.ascontiguousarray(triplets, dtype=np.int64).reshape(-1, 3))


@dataclass
class MaskMerge:
    """Result of the singlempo mask merge.

    ``instance_map[i]`` is the kept index original instance i now belongs to (-1: dropped);
    ``kept`` lists, per kept instance, the original index that defined it; ``masks`` are the
    kept instances' new (non-overlapping) masks, ``areas`` their pixel counts. ``overlap``:
    the original masks overlapped (then, and only then, the kept masks hold fewer pixels
    than the original ones together: a pixel of two masks is kept once, merged-away masks
    are not kept at all).
    """

    masks: BitMasks
    kept: np.ndarray
    instance_map: np.ndarray
    n_merged: int
    n_dropped: int
    areas: np.ndarray
    overlap: bool = False


def merge_order(n: int, scores: np.ndarray | None) -> np.ndarray:
    """Visit order of the merge: by score descending (stable) when given, else by index."""
    if scores is None:
        return np.arange(n)
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def merge_masks(masks: np.ndarray | BitMasks, scores: np.ndarray | None = None) -> MaskMerge:
    """NMS-like merge of duplicate masks into non-overlapping kept masks (SPEC 5.1)."""
    bits = as_bit_masks(masks)
    instance_map, kept, starts, words, areas, n_merged, n_dropped, original = merged_masks(
        bits.boxes, bits.starts, bits.words, merge_order(len(bits), scores),
        bits.shape[0], bits.shape[1], MERGE_IOU)
    return MaskMerge(BitMasks(bits.shape, bits.boxes[kept], starts, words), kept,
                     instance_map, n_merged, n_dropped, areas,
                     int(original.sum()) > int(areas.sum()))


@dataclass
class NormalizedPred:
    """A prediction ready for matching: instances, lists and what normalization removed."""

    labels: np.ndarray
    graph: np.ndarray
    ng: np.ndarray
    boxes: np.ndarray | None
    masks: BitMasks | None
    diagnostics: dict[str, int] = field(default_factory=dict)
    areas: np.ndarray | None = None  # the masks' pixel counts, when normalization has them
    merge: MaskMerge | None = None  # the singlempo mask merge that made ``masks``
    intersections: np.ndarray | None = None  # pixels each (instance, GT) pair shares


def bit_masks_of(pred: ImagePred) -> BitMasks | None:
    return None if pred.masks is None else as_bit_masks(pred.masks)


def removal_counts(pred: ImagePred, graph: np.ndarray, ng: np.ndarray, merged: int = 0,
                   dropped: int = 0) -> dict[str, int]:
    return {"masks_merged": merged, "masks_dropped": dropped,
            "graph_triplets_removed": len(pred.graph) - len(graph),
            "ng_triplets_removed": len(pred.ng) - len(ng)}


def lists_of(pred: ImagePred, instance_map: np.ndarray, mode: int
             ) -> tuple[np.ndarray, np.ndarray]:
    return normalized_lists(np.ascontiguousarray(pred.graph, dtype=np.int64),
                            np.ascontiguousarray(pred.ng, dtype=np.int64), instance_map, mode)


def normalize_singlempo(pred: ImagePred) -> NormalizedPred:
    """Mask merge + relation dedup + graph constraint (the fair protocol)."""
    merged, dropped, masks, boxes, labels = 0, 0, bit_masks_of(pred), pred.boxes, pred.labels
    instance_map = np.arange(pred.n_instances, dtype=np.int64)
    areas, merge = None, None
    if masks is not None:
        merge = merge_masks(masks, pred.scores)
        instance_map, masks, areas = merge.instance_map, merge.masks, merge.areas
        merged, dropped = merge.n_merged, merge.n_dropped
        labels = pred.labels[merge.kept]
        boxes = None if pred.boxes is None else pred.boxes[merge.kept]
    graph, ng = lists_of(pred, instance_map, SINGLEMPO)
    return NormalizedPred(labels, graph, ng, boxes, masks,
                          removal_counts(pred, graph, ng, merged, dropped), areas, merge)


def normalize_dedup(pred: ImagePred) -> NormalizedPred:
    """Exact-duplicate removal only (SGBench 1.0.0)."""
    graph, ng = lists_of(pred, np.empty(0, dtype=np.int64), DEDUP)
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
