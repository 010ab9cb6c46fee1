"""One image, one protocol: normalize -> match -> select -> remap -> score (SPEC section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sgdask.kernels.iou import box_iou_matrix, mask_iou_matrix
from sgdask.kernels.matching import match_instances
from sgdask.kernels.metrics import (
    Term,
    first_positions,
    instance_recall_term,
    predicate_rank_terms,
    recall_terms,
    triplet_keys,
)
from sgdask.kernels.normalize import NormalizedPred, dedup_triplets, normalize_prediction
from sgdask.kernels.selection import KSpec
from sgdask.protocols import Protocol
from sgdask.types import ImageGT, ImagePred

GRAPH_METRICS = ("R", "mR")
NG_METRICS = ("ngR", "mNgR")


@dataclass
class ImageResult:
    """What one image adds to the accumulators: rational terms, never rounded floats.

    ``scalars``: image-level metrics (``R@20``, ``InstR``...) as (numerator, denominator).
    ``per_predicate``: mean metrics (``mR@20``, ``PRank``...) -> predicate -> term.
    """

    image_id: str
    missing: bool
    n_gt_triplets: int
    gt_per_predicate: dict[int, int] = field(default_factory=dict)
    scalars: dict[str, Term] = field(default_factory=dict)
    per_predicate: dict[str, dict[int, Term]] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)


def instance_iou(gt: ImageGT, pred: NormalizedPred) -> np.ndarray:
    """IoU of predicted vs GT instances: masks when both sides have them, else boxes."""
    if pred.masks is not None and gt.label_image is not None:
        return mask_iou_matrix(pred.masks, gt.label_image, gt.n_instances)
    if pred.boxes is not None and gt.boxes is not None:
        return box_iou_matrix(pred.boxes, gt.boxes)
    raise ValueError(f"image {gt.image_id}: no common instance representation (masks or boxes)")


def remap(triplets: np.ndarray, mapping: np.ndarray) -> np.ndarray:
    """Triplets over predicted instances -> over GT instances (-1 where unmatched)."""
    if len(triplets) == 0:
        return triplets
    return np.stack([mapping[triplets[:, 0]], mapping[triplets[:, 1]], triplets[:, 2]], axis=1)


def gt_relations(gt: ImageGT) -> np.ndarray:
    """GT triplets as a set (duplicates removed)."""
    return dedup_triplets(np.asarray(gt.relations, dtype=np.int64).reshape(-1, 3))


def predicate_counts(predicates: np.ndarray) -> dict[int, int]:
    """GT triplets per predicate."""
    values, counts = np.unique(predicates, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def add_recalls(result: ImageResult, prefix: tuple[str, str], first_pos: np.ndarray,
                gt_predicates: np.ndarray, ks: tuple[KSpec, ...]) -> None:
    """R@k / mR@k style terms for every k, from first-hit positions of the GT triplets."""
    image_name, mean_name = prefix
    n_gt = len(first_pos)
    for k in ks:
        overall, per_pred = recall_terms(first_pos < k.resolve(n_gt), gt_predicates)
        result.scalars[f"{image_name}@{k.label}"] = overall
        result.per_predicate[f"{mean_name}@{k.label}"] = per_pred


def evaluate_image(gt: ImageGT, pred: ImagePred, protocol: Protocol, ks: tuple[KSpec, ...],
                   with_ng: bool = True) -> ImageResult:
    """Every metric term of one image under one protocol."""
    relations = gt_relations(gt)
    norm = normalize_prediction(pred, protocol.normalization)
    iou = instance_iou(gt, norm)
    mapping = match_instances(iou, norm.labels, gt.labels, one_to_one=protocol.one_to_one)
    n_predicates = int(max(relations[:, 2].max(initial=0), norm.graph[:, 2].max(initial=0),
                           norm.ng[:, 2].max(initial=0))) + 1
    gt_keys = triplet_keys(relations, gt.n_instances, n_predicates)
    gt_predicates = relations[:, 2]
    result = ImageResult(gt.image_id, False, len(relations), predicate_counts(gt_predicates))
    graph_keys = triplet_keys(remap(norm.graph, mapping), gt.n_instances, n_predicates)
    add_recalls(result, GRAPH_METRICS, first_positions(gt_keys, graph_keys), gt_predicates, ks)
    if with_ng:
        ng_keys = triplet_keys(remap(norm.ng, mapping), gt.n_instances, n_predicates)
        add_recalls(result, NG_METRICS, first_positions(gt_keys, ng_keys), gt_predicates, ks)
        result.per_predicate["PRank"] = predicate_rank_terms(
            gt_keys, gt_predicates, ng_keys, n_predicates)
    result.scalars["InstR"] = instance_recall_term(mapping, gt.n_instances)
    result.diagnostics = {
        **norm.diagnostics,
        "pred_instances": pred.n_instances,
        "pred_unmatched": int((mapping < 0).sum()),
        "gt_instances": gt.n_instances,
        "gt_unmatched": gt.n_instances - result.scalars["InstR"][0],
    }
    return result


def missing_image_result(gt: ImageGT, protocol: Protocol, ks: tuple[KSpec, ...],
                         with_ng: bool = True) -> ImageResult:
    """An image of the GT without prediction: 0 on every recall and InstR, no PRank.

    Under protocols that leave such images out of the mean metrics (SGBench), only the
    image-level zeros are recorded.
    """
    relations = gt_relations(gt)
    result = ImageResult(gt.image_id, True, len(relations), predicate_counts(relations[:, 2]))
    never = np.zeros(len(relations), dtype=bool)
    prefixes = [GRAPH_METRICS, NG_METRICS] if with_ng else [GRAPH_METRICS]
    for image_name, mean_name in prefixes:
        for k in ks:
            overall, per_pred = recall_terms(never, relations[:, 2])
            result.scalars[f"{image_name}@{k.label}"] = overall
            if protocol.missing_counts_in_means:
                result.per_predicate[f"{mean_name}@{k.label}"] = per_pred
    result.scalars["InstR"] = (0, gt.n_instances)
    result.diagnostics = {"gt_instances": gt.n_instances, "gt_unmatched": gt.n_instances}
    return result
