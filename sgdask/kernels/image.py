"""One image, one protocol: normalize -> match -> select -> remap -> score (SPEC section 3).

Every metric is computed from *first-hit positions*: for each GT triplet (or pair), the
first position of the selected list that hits it. A triplet is recalled at k when that
position is below k, so selection happens before matching, as the SPEC requires, and all
ks cost one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sgdask.errors import InstanceMismatch
from sgdask.kernels.iou import box_iou_matrix, mask_iou_matrix
from sgdask.kernels.matching import IOU_THRESHOLD, allowed_iou, match_instances
from sgdask.kernels.metrics import (
    NEVER,
    Term,
    first_hits_by_matrix,
    first_positions,
    predicate_rank_terms,
    rank_within_predicate,
    recall_terms,
    triplet_hit_matrix,
    triplet_keys,
)
from sgdask.kernels.normalize import NormalizedPred, dedup_triplets, normalize_prediction
from sgdask.kernels.selection import KSpec
from sgdask.protocols import Protocol
from sgdask.types import EMPTY_TRIPLETS, ImageGT, ImagePred


@dataclass
class ImageResult:
    """What one image adds to the accumulators: rational terms, never rounded floats.

    ``scalars``: image-level metrics (``R@20``, ``InstR``...) as (numerator, denominator).
    ``per_predicate``: mean metrics (``mR@20``, ``PRank``...) -> predicate -> term.
    ``pooled``: metrics summed over the dataset before dividing (legacy ``A@k``).
    """

    image_id: str
    missing: bool
    n_gt_triplets: int
    gt_per_predicate: dict[int, int] = field(default_factory=dict)
    scalars: dict[str, Term] = field(default_factory=dict)
    per_predicate: dict[str, dict[int, Term]] = field(default_factory=dict)
    pooled: dict[str, Term] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ZeroShot:
    """Triplet types seen in training: sorted keys (subject cat, object cat, predicate)."""

    seen: np.ndarray
    n_classes: int
    n_predicates: int

    def key(self, subj_cat: np.ndarray, obj_cat: np.ndarray, pred: np.ndarray) -> np.ndarray:
        return (subj_cat * self.n_classes + obj_cat) * self.n_predicates + pred

    def flags(self, relations: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """True for GT triplets whose type never occurs in the training split."""
        keys = self.key(categories[relations[:, 0]], categories[relations[:, 1]],
                        relations[:, 2])
        return ~np.isin(keys, self.seen)


class MappedMatcher:
    """Hits through an instance mapping pred -> GT (singlempo, sgbench)."""

    def __init__(self, mapping: np.ndarray, n_gt: int) -> None:
        self.mapping, self.n_gt = mapping, n_gt

    def remap(self, triplets: np.ndarray) -> np.ndarray:
        if len(triplets) == 0:
            return triplets
        m = self.mapping
        return np.stack([m[triplets[:, 0]], m[triplets[:, 1]], triplets[:, 2]], axis=1)

    def first_hits(self, triplets: np.ndarray, relations: np.ndarray) -> np.ndarray:
        n_pred = int(max(relations[:, 2].max(initial=0), triplets[:, 2].max(initial=0))) + 1
        return first_positions(triplet_keys(relations, self.n_gt, n_pred),
                               triplet_keys(self.remap(triplets), self.n_gt, n_pred))

    def first_pair_hits(self, triplets: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        return self.first_hits(with_zero_predicate(triplets), with_zero_predicate(pairs))

    def gt_matched(self) -> np.ndarray:
        matched = np.zeros(self.n_gt, dtype=bool)
        matched[self.mapping[self.mapping >= 0]] = True
        return matched


class TripletMatcher:
    """Legacy multimpo: a triplet hits when both its instances overlap the GT ones (SPEC 5.3)."""

    def __init__(self, instance_hit: np.ndarray) -> None:
        self.instance_hit = instance_hit

    def first_hits(self, triplets: np.ndarray, relations: np.ndarray) -> np.ndarray:
        return first_hits_by_matrix(triplet_hit_matrix(relations, triplets, self.instance_hit))

    def first_pair_hits(self, triplets: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        hit = triplet_hit_matrix(with_zero_predicate(pairs), triplets, self.instance_hit,
                                 with_predicate=False)
        return first_hits_by_matrix(hit)

    def gt_matched(self) -> np.ndarray:
        return self.instance_hit.any(axis=0)


class NullMatcher:
    """Nothing hits: an image of the GT that has no prediction."""

    def __init__(self, n_gt: int) -> None:
        self.n_gt = n_gt

    def first_hits(self, triplets: np.ndarray, relations: np.ndarray) -> np.ndarray:
        return np.full(len(relations), NEVER, dtype=np.int64)

    first_pair_hits = first_hits

    def gt_matched(self) -> np.ndarray:
        return np.zeros(self.n_gt, dtype=bool)


Matcher = MappedMatcher | TripletMatcher | NullMatcher


def with_zero_predicate(triplets: np.ndarray) -> np.ndarray:
    """(s, o, p) -> (s, o, 0): pair-level comparisons reuse the triplet machinery."""
    out = np.array(triplets[:, :2], dtype=np.int64).reshape(-1, 2)
    return np.concatenate([out, np.zeros((len(out), 1), dtype=np.int64)], axis=1)


def instance_iou(gt: ImageGT, pred: NormalizedPred, sgbench_boxes: bool = False
                 ) -> np.ndarray:
    """IoU of predicted vs GT instances: masks when both sides have them, else boxes
    (``sgbench_boxes``: with sgbench 1.0.0's NaN for two zero-area boxes)."""
    if pred.masks is not None and gt.label_image is not None:
        return mask_iou_matrix(pred.masks, gt.label_image, gt.n_instances, gt.areas)
    if pred.boxes is not None and gt.boxes is not None:
        iou = box_iou_matrix(pred.boxes, gt.boxes)
        return with_zero_area_pairs(iou, pred.boxes, gt.boxes) if sgbench_boxes else iou
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


def gt_relations(gt: ImageGT) -> np.ndarray:
    """GT triplets as a set (duplicates removed)."""
    return dedup_triplets(np.asarray(gt.relations, dtype=np.int64).reshape(-1, 3))


def predicate_counts(predicates: np.ndarray) -> dict[int, int]:
    """GT triplets per predicate."""
    values, counts = np.unique(predicates, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def add_recalls(result: ImageResult, names: tuple[str, str | None], first_pos: np.ndarray,
                gt_predicates: np.ndarray, ks: tuple[KSpec, ...], n_gt: int) -> None:
    """Image-level and per-predicate recall terms for every k (relative k uses ``n_gt``)."""
    image_name, mean_name = names
    for k in ks:
        overall, per_pred = recall_terms(first_pos < k.resolve(n_gt), gt_predicates)
        if image_name:
            result.scalars[f"{image_name}@{k.label}"] = overall
        if mean_name:
            result.per_predicate[f"{mean_name}@{k.label}"] = per_pred


def legacy_pair_accuracy(result: ImageResult, matcher: MappedMatcher, graph: np.ndarray,
                         relations: np.ndarray, ks: tuple[KSpec, ...]) -> None:
    """A@k: only predictions whose remapped pair is a GT pair count (pooled hits / |G|)."""
    remapped = matcher.remap(graph)
    gt_pairs = relations[:, 0] * matcher.n_gt + relations[:, 1]
    on_gt_pair = (np.isin(remapped[:, 0] * matcher.n_gt + remapped[:, 1], gt_pairs)
                  & (remapped[:, 0] >= 0) & (remapped[:, 1] >= 0)) if len(remapped) \
        else np.zeros(0, dtype=bool)
    first = matcher.first_hits(graph[on_gt_pair] if len(graph) else graph, relations)
    for k in ks:
        result.pooled[f"A@{k.label}"] = (int((first < k.resolve(len(relations))).sum()),
                                         len(relations))


def score_image(gt: ImageGT, relations: np.ndarray, graph: np.ndarray, ng: np.ndarray,
                matcher: Matcher, ks: tuple[KSpec, ...], with_ng: bool,
                zero_shot: ZeroShot | None, legacy: bool, missing: bool) -> ImageResult:
    """Every metric term of one image given its normalized lists and a matcher."""
    preds, n_gt = relations[:, 2], len(relations)
    result = ImageResult(gt.image_id, missing, n_gt, predicate_counts(preds))
    graph_first = matcher.first_hits(graph, relations)
    add_recalls(result, ("R", "mR"), graph_first, preds, ks, n_gt)
    pairs = np.unique(relations[:, :2], axis=0)
    pair_first = matcher.first_pair_hits(graph, pairs)
    for k in ks:
        result.scalars[f"PR@{k.label}"] = (int((pair_first < k.resolve(n_gt)).sum()),
                                           len(pairs))
    matched = matcher.gt_matched()
    reachable = matched[relations[:, 0]] & matched[relations[:, 1]]
    overall, per_pred = recall_terms(reachable, preds)
    result.scalars["R@inf"], result.per_predicate["mR@inf"] = overall, per_pred
    if zero_shot is not None:
        unseen = zero_shot.flags(relations, gt.labels)
        if unseen.any():
            add_recalls(result, ("zR", "mzR"), graph_first[unseen], preds[unseen], ks, n_gt)
    if with_ng:
        ng_first = matcher.first_hits(ng, relations)
        add_recalls(result, ("ngR", "mNgR"), ng_first, preds, ks, n_gt)
        within = rank_within_predicate(ng)
        imr_first = np.where(ng_first < NEVER, within[np.minimum(ng_first, len(ng) - 1)],
                             NEVER) if len(ng) else ng_first
        add_recalls(result, (None, "IMR"), imr_first, preds, ks, n_gt)
        if isinstance(matcher, MappedMatcher):
            n_pred = int(max(preds.max(initial=0), ng[:, 2].max(initial=0))) + 1
            result.per_predicate["PRank"] = predicate_rank_terms(
                triplet_keys(relations, gt.n_instances, n_pred), preds,
                triplet_keys(matcher.remap(ng), gt.n_instances, n_pred), n_pred)
    if legacy and isinstance(matcher, MappedMatcher):
        legacy_pair_accuracy(result, matcher, graph, relations, ks)
    elif legacy and isinstance(matcher, NullMatcher):
        result.pooled.update({f"A@{k.label}": (0, n_gt) for k in ks})
    result.scalars["InstR"] = (int(matched.sum()), gt.n_instances)
    return result


def build_matcher(gt: ImageGT, norm: NormalizedPred, protocol: Protocol,
                  match_labels: bool = True) -> Matcher:
    iou = allowed_iou(instance_iou(gt, norm, sgbench_boxes=protocol.name == "sgbench"),
                      norm.labels, gt.labels, match_labels)
    if protocol.matching == "triplet":
        return TripletMatcher(iou >= IOU_THRESHOLD)
    return MappedMatcher(match_instances(iou, norm.labels, gt.labels,
                                         one_to_one=protocol.matching == "one_to_one",
                                         match_labels=match_labels),
                         gt.n_instances)


def evaluate_image(gt: ImageGT, pred: ImagePred, protocol: Protocol, ks: tuple[KSpec, ...],
                   with_ng: bool = True, zero_shot: ZeroShot | None = None,
                   legacy: bool = False, match_labels: bool = True) -> ImageResult:
    """Every metric term of one image under one protocol (``match_labels=False``: a
    prediction may match a GT instance of another category, SPEC section 4)."""
    relations = gt_relations(gt)
    norm = normalize_prediction(pred, protocol.normalization)
    matcher = build_matcher(gt, norm, protocol, match_labels)
    result = score_image(gt, relations, norm.graph, norm.ng, matcher, ks, with_ng, zero_shot,
                         legacy, missing=False)
    unmatched = (int((matcher.mapping < 0).sum()) if isinstance(matcher, MappedMatcher)
                 else int((~matcher.instance_hit.any(axis=1)).sum()))
    result.diagnostics = {
        **norm.diagnostics,
        "pred_instances": pred.n_instances,
        "pred_unmatched": unmatched,
        "gt_instances": gt.n_instances,
        "gt_unmatched": gt.n_instances - result.scalars["InstR"][0],
    }
    return result


def missing_image_result(gt: ImageGT, protocol: Protocol, ks: tuple[KSpec, ...],
                         with_ng: bool = True, zero_shot: ZeroShot | None = None,
                         legacy: bool = False) -> ImageResult:
    """An image of the GT without prediction: 0 on every recall and InstR, no PRank.

    Under protocols that leave such images out of the mean metrics (SGBench), only the
    image-level zeros are recorded.
    """
    relations = gt_relations(gt)
    result = score_image(gt, relations, EMPTY_TRIPLETS, EMPTY_TRIPLETS,
                         NullMatcher(gt.n_instances), ks, with_ng, zero_shot,
                         legacy and protocol.matching != "triplet", missing=True)
    if not protocol.missing_counts_in_means:
        result.per_predicate = {}
    result.diagnostics = {"gt_instances": gt.n_instances, "gt_unmatched": gt.n_instances}
    return result
