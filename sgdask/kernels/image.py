"""One image, one protocol: normalize -> match -> select -> remap (SPEC section 3).

The result is ``ImageHits``: for every GT triplet (and GT pair) the first position of each
list that hits it, the matched GT instances and the PRank ranks. Every metric family reads
these (``sgdask.metrics``), so the expensive work (IoU, merge, matching, list walks) is done
once per image and protocol however many metrics are asked for.
"""

from __future__ import annotations

import numpy as np

from sgdask.errors import InstanceMismatch
from sgdask.kernels.bits import cross_iou
from sgdask.kernels.hits import (
    NEVER,
    first_hits_mapped,
    first_hits_triplet,
    gt_pair_rows,
    max_predicate,
    on_gt_pair,
    predicate_ranks,
    rank_within_predicate,
    within_predicate_first,
)
from sgdask.kernels.iou import box_iou_matrix
from sgdask.kernels.matching import IOU_THRESHOLD, match_instances
from sgdask.kernels.normalize import NormalizedPred, dedup_triplets, normalize_prediction
from sgdask.protocols import Protocol
from sgdask.types import ImageGT, ImageHits, ImagePred


def gt_relations(gt: ImageGT) -> np.ndarray:
    """GT triplets as a set (duplicates removed)."""
    return dedup_triplets(np.asarray(gt.relations, dtype=np.int64).reshape(-1, 3))


def same_category(pred_labels: np.ndarray, gt_labels: np.ndarray, match_labels: bool
                  ) -> np.ndarray:
    """(n_pred, n_gt): pairs that may match at all."""
    if not match_labels:
        return np.ones((len(pred_labels), len(gt_labels)), dtype=bool)
    return np.asarray(pred_labels)[:, None] == np.asarray(gt_labels)[None, :]


def instance_iou(gt: ImageGT, pred: NormalizedPred, allowed: np.ndarray,
                 sgbench_boxes: bool = False) -> np.ndarray:
    """IoU of predicted vs GT instances where ``allowed`` (0 elsewhere): masks when both
    sides have them, else boxes (``sgbench_boxes``: with sgbench 1.0.0's NaN for two
    zero-area boxes)."""
    gt_masks = gt.bit_masks()
    if pred.masks is not None and gt_masks is not None:
        pred_masks = pred.masks
        gt_area = gt.areas if gt.areas is not None else gt_masks.areas()
        return cross_iou(pred_masks.boxes, pred_masks.starts, pred_masks.words,
                         pred_masks.areas(), gt_masks.boxes, gt_masks.starts,
                         gt_masks.words, np.asarray(gt_area, dtype=np.int64), allowed)
    if pred.boxes is not None and gt.boxes is not None:
        iou = box_iou_matrix(pred.boxes, gt.boxes)
        if sgbench_boxes:
            iou = with_zero_area_pairs(iou, pred.boxes, gt.boxes)
        return np.where(allowed, iou, 0.0)
    raise InstanceMismatch("no common instance representation with the GT (the prediction "
                           "has " + ("masks" if pred.masks is not None else "boxes") +
                           ", the GT image has none)")


def with_zero_area_pairs(iou: np.ndarray, pred_boxes: np.ndarray, gt_boxes: np.ndarray
                         ) -> np.ndarray:
    """NaN where both boxes have zero area: sgbench 1.0.0 divides 0 by 0 there, and its
    argmax takes NaN as the maximum and its ``IoU < 0.5`` test lets it through, so such a
    prediction matches the first zero-area GT box of its category. NaN reproduces that."""
    def flat(boxes: np.ndarray) -> np.ndarray:
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) == 0

    return np.where(flat(pred_boxes)[:, None] & flat(gt_boxes)[None, :], np.nan, iou)


def n_predicates_of(relations: np.ndarray) -> int:
    return int(max_predicate(relations)) + 1


def image_hits(gt: ImageGT, pred: ImagePred, protocol: Protocol, with_ng: bool = True,
               match_labels: bool = True, shared: dict | None = None) -> ImageHits:
    """Every hit position of one image under one protocol.

    ``shared``: a dict kept across the protocols of one image, so that protocols that
    match the unmerged masks (sgbench, multimpo) compute their IoU against the GT once.
    """
    relations = gt_relations(gt)
    norm = normalize_prediction(pred, protocol.normalization)
    allowed = same_category(norm.labels, gt.labels, match_labels)
    key = ("iou", protocol.zero_area_boxes_match)  # same masks, same boxes, same rule
    unmerged = protocol.normalization != "singlempo"
    if shared is not None and unmerged and key in shared:
        iou = shared[key]
    else:
        iou = instance_iou(gt, norm, allowed, protocol.zero_area_boxes_match)
        if shared is not None and unmerged:
            shared[key] = iou
    n_gt, n_p = gt.n_instances, n_predicates_of(relations)
    pairs = relations[gt_pair_rows(relations, n_gt)]
    if protocol.matching == "triplet":
        hit = iou >= IOU_THRESHOLD
        hits = triplet_level_hits(relations, pairs, norm, hit, with_ng)
        matched = hit.any(axis=0)
        unmatched = int((~hit.any(axis=1)).sum())
    else:
        mapping = match_instances(iou, norm.labels, gt.labels,
                                  one_to_one=protocol.matching == "one_to_one",
                                  match_labels=match_labels)
        hits = mapped_hits(relations, pairs, norm, mapping, n_gt, n_p, with_ng)
        matched = np.zeros(n_gt, dtype=bool)
        matched[mapping[mapping >= 0]] = True
        unmatched = int((mapping < 0).sum())
    diagnostics = {**norm.diagnostics, "pred_instances": pred.n_instances,
                   "pred_unmatched": unmatched, "gt_instances": n_gt,
                   "gt_unmatched": n_gt - int(matched.sum())}
    return ImageHits(gt.image_id, False, relations, np.asarray(gt.labels), matched,
                     diagnostics=diagnostics, **hits)


def mapped_hits(relations: np.ndarray, pairs: np.ndarray, norm: NormalizedPred,
                mapping: np.ndarray, n_gt: int, n_p: int, with_ng: bool
                ) -> dict[str, np.ndarray | None]:
    """Hit positions through an instance mapping (singlempo, sgbench)."""
    graph, ng = norm.graph, norm.ng
    out: dict[str, np.ndarray | None] = {
        "graph_first": first_hits_mapped(relations, graph, mapping, n_gt, n_p, True),
        "pair_first": first_hits_mapped(pairs, graph, mapping, n_gt, 1, False),
        "legacy_first": first_hits_mapped(
            relations, graph[on_gt_pair(graph, mapping, relations, n_gt)], mapping, n_gt,
            n_p, True),
    }
    if with_ng:
        ng_first = first_hits_mapped(relations, ng, mapping, n_gt, n_p, True)
        out["ng_first"] = ng_first
        out["imr_first"] = within_predicate_first(
            ng_first, rank_within_predicate(ng, max(n_p, n_predicates_of(ng))))
        out["prank"] = predicate_ranks(relations, ng, mapping, n_gt)
    return out


def triplet_level_hits(relations: np.ndarray, pairs: np.ndarray, norm: NormalizedPred,
                       hit: np.ndarray, with_ng: bool) -> dict[str, np.ndarray | None]:
    """Hit positions at the triplet level (multimpo): no mapping, so no PRank or A@k."""
    out: dict[str, np.ndarray | None] = {
        "graph_first": first_hits_triplet(relations, norm.graph, hit, True),
        "pair_first": first_hits_triplet(pairs, norm.graph, hit, False),
    }
    if with_ng:
        ng_first = first_hits_triplet(relations, norm.ng, hit, True)
        out["ng_first"] = ng_first
        out["imr_first"] = within_predicate_first(
            ng_first, rank_within_predicate(norm.ng, n_predicates_of(norm.ng)))
    return out


def missing_image_hits(gt: ImageGT, protocol: Protocol, with_ng: bool = True) -> ImageHits:
    """An image of the GT without prediction: nothing hits, no PRank value."""
    relations = gt_relations(gt)
    n_gt = gt.n_instances
    never = np.full(len(relations), NEVER, dtype=np.int64)
    pairs = gt_pair_rows(relations, n_gt)
    mapped = protocol.matching != "triplet"
    return ImageHits(
        gt.image_id, True, relations, np.asarray(gt.labels), np.zeros(n_gt, dtype=bool),
        graph_first=never, pair_first=np.full(len(pairs), NEVER, dtype=np.int64),
        ng_first=never if with_ng else None, imr_first=never if with_ng else None,
        legacy_first=never if mapped else None,
        diagnostics={"gt_instances": n_gt, "gt_unmatched": n_gt})
