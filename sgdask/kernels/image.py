"""One image under one set of rules: normalize -> match -> select -> remap (SPEC section 3).

A protocol (``sgdask.protocols``) states its per-image rules as an ``ImageRules`` and calls
``image_hits``; nothing here knows a protocol. The result is ``ImageHits``: for every GT
triplet (and GT pair) the first position of each
list that hits it, the matched GT instances and the PRank ranks. Every metric family reads
these (``sgdask.metrics``), so the expensive work (IoU, merge, matching, list walks) is done
once per image and protocol however many metrics are asked for. Each step is one compiled
call (``bits``, ``lists``), so no Python runs per instance, pair or triplet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdask.errors import InstanceMismatch
from sgdask.kernels.bits import cross_intersections, iou_of_intersections
from sgdask.kernels.hits import NEVER, first_hits_triplet, gt_pair_rows, on_gt_pair
from sgdask.kernels.lists import (
    box_iou,
    clipped_to_image,
    deduplicated,
    inclusive_box_iou,
    mapped_hits,
    same_boxes,
    triplet_level_hits,
)
from sgdask.kernels.matching import (
    IOU_THRESHOLD,
    hit_coverage,
    match_many_to_one,
    match_one_to_one,
)
from sgdask.kernels.normalize import NormalizedPred, merge_masks, normalize_prediction
from sgdask.kernels.panoptic import missing_panoptic_hits, panoptic_hits
from sgdask.types import ImageGT, ImageHits, ImagePred, PanopticHits


@dataclass(frozen=True)
class ImageRules:
    """How one image is scored (what a protocol decides per image).

    ``normalization``: ``singlempo`` (the mask merge of SPEC 5.1) | ``dedup`` | ``none``;
    ``matching``: ``one_to_one`` | ``many_to_one`` (instance mappings) | ``triplet``;
    ``zero_area_nan``: two zero-area boxes have IoU NaN, which the argmax takes (sgbench
    1.0.0); ``inclusive_iou``: box IoU in inclusive pixel coordinates in float32
    (maskrcnn_benchmark's ``boxlist_iou``); ``clip_gt``: GT boxes clipped to the image;
    ``keep_duplicates``: GT relations kept as given; ``ng_cut``: the NG list cut at this
    many entries; ``pairs_by_index``: the pair accuracy by index (legacy positions);
    ``first_per_pair``: after the remap only the first triplet of each remapped pair in
    the top k counts; ``boxes_only``: instances matched by boxes even when both sides have
    masks; ``label``: how errors name the rules (the protocol's name).
    """

    normalization: str
    matching: str
    zero_area_nan: bool = False
    inclusive_iou: bool = False
    clip_gt: bool = False
    keep_duplicates: bool = False
    ng_cut: int | None = None
    pairs_by_index: bool = False
    first_per_pair: bool = False
    boxes_only: bool = False
    label: str = "the"


def as_float32(boxes: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)


def gt_relations(gt: ImageGT, keep_duplicates: bool = False) -> np.ndarray:
    """GT triplets as a set (duplicates removed), or as given (``keep_duplicates``)."""
    relations = np.ascontiguousarray(gt.relations, dtype=np.int64).reshape(-1, 3)
    return relations if keep_duplicates else deduplicated(relations)


def without_proposals(pred: ImagePred | None) -> bool:
    """True when the image has no relation proposals: no prediction or an empty graph
    list."""
    return pred is None or len(pred.graph) == 0


def gt_boxes_of(gt: ImageGT, clip: bool) -> np.ndarray:
    """The GT boxes to match against (clipped to the image with ``clip``)."""
    boxes = np.ascontiguousarray(gt.boxes, dtype=np.float64).reshape(-1, 4)
    if clip:
        if gt.size is None:
            raise InstanceMismatch("the protocol clips GT boxes to the image, but the GT "
                                   "image has no size")
        return clipped_to_image(boxes, *gt.size).astype(np.float64)
    return boxes


def boxes_are_gt(gt: ImageGT, boxes: np.ndarray | None) -> bool:
    """True when the predicted boxes are the GT boxes in the same order (as stored or as
    clipped to the image), to 0.01 pixel: then a predicted index is a GT index
    (predcls / sgcls), which Scene-Graph-Benchmark.pytorch's pair accuracy assumes."""
    if boxes is None or gt.boxes is None:
        return False
    boxes = np.ascontiguousarray(boxes, dtype=np.float64).reshape(-1, 4)
    raw = np.ascontiguousarray(gt.boxes, dtype=np.float64).reshape(-1, 4)
    return same_boxes(boxes, raw, 0.01) or (
        gt.size is not None and same_boxes(boxes, clipped_to_image(raw, *gt.size), 0.01))


def instance_iou(gt: ImageGT, pred: NormalizedPred, match_labels: bool,
                 zero_area_nan: bool = False, rules: ImageRules | None = None) -> np.ndarray:
    """IoU of predicted vs GT instances, 0 for pairs of different categories when
    ``match_labels``: masks when both sides have them (unless the rules match boxes only;
    the pixels each pair shares are kept in ``pred.intersections``, which panoptic
    quality reuses), else boxes (``zero_area_nan``:
    sgbench 1.0.0's NaN for two zero-area boxes, which its argmax then takes; ``rules``
    with ``inclusive_iou`` / ``clip_gt``: maskrcnn_benchmark's box IoU against the clipped
    GT boxes)."""
    pred_labels = np.asarray(pred.labels, dtype=np.int64)
    gt_labels = np.asarray(gt.labels, dtype=np.int64)
    box_protocol = rules is not None and rules.boxes_only
    if box_protocol and (pred.boxes is None or gt.boxes is None):
        raise InstanceMismatch(f"the {rules.label} protocol matches boxes, but the "
                               + ("prediction" if pred.boxes is None else "GT image")
                               + " has none")
    gt_masks = None if box_protocol else gt.bit_masks()
    if pred.masks is not None and gt_masks is not None:
        masks = pred.masks
        gt_area = gt.areas if gt.areas is not None else gt_masks.areas()
        pred_area = masks.areas() if pred.areas is None else pred.areas
        pred.intersections = cross_intersections(
            masks.boxes, masks.starts, masks.words, pred_labels, gt_masks.boxes,
            gt_masks.starts, gt_masks.words, gt_labels, match_labels)
        return iou_of_intersections(pred.intersections, pred_area,
                                    np.asarray(gt_area, dtype=np.int64))
    if pred.boxes is not None and gt.boxes is not None:
        if rules is not None and (rules.inclusive_iou or rules.clip_gt):
            gt_boxes = gt_boxes_of(gt, rules.clip_gt)
            pred_boxes = np.asarray(pred.boxes, dtype=np.float64).reshape(-1, 4)
            if rules.clip_gt and boxes_are_gt(gt, pred_boxes):
                pred_boxes = gt_boxes  # predcls: its evaluator scores the clipped GT boxes
            if rules.inclusive_iou:
                return inclusive_box_iou(as_float32(pred_boxes), pred_labels,
                                         as_float32(gt_boxes), gt_labels, match_labels)
            return box_iou(pred_boxes, pred_labels, gt_boxes, gt_labels, match_labels,
                           zero_area_nan)
        return box_iou(np.asarray(pred.boxes, dtype=np.float64).reshape(-1, 4), pred_labels,
                       np.asarray(gt.boxes, dtype=np.float64).reshape(-1, 4), gt_labels,
                       match_labels, zero_area_nan)
    raise InstanceMismatch("no common instance representation with the GT (the prediction "
                           "has " + ("masks" if pred.masks is not None else "boxes") +
                           ", the GT image has none)")


def shared_iou(gt: ImageGT, norm: NormalizedPred, rules: ImageRules, match_labels: bool,
               shared: dict | None) -> np.ndarray:
    """The IoU matrix, computed once per image for the rules that match the unmerged
    instances (two protocols share it when their box rule is the same)."""
    zero_area = rules.zero_area_nan
    if shared is None or rules.normalization == "singlempo":
        return instance_iou(gt, norm, match_labels, zero_area, rules)
    key = ("iou", zero_area, rules.inclusive_iou, rules.clip_gt)
    if key not in shared:
        shared[key] = instance_iou(gt, norm, match_labels, zero_area, rules)
    return shared[key]


def image_hits(gt: ImageGT, pred: ImagePred, rules: ImageRules, with_ng: bool = True,
               match_labels: bool = True, shared: dict | None = None,
               legacy: bool = True) -> ImageHits:
    """Every hit position of one image under ``rules``.

    ``shared``: a dict kept across the protocols of one image, so that rules that match
    the unmerged masks compute their IoU against the GT once.
    ``legacy``: also the positions only the legacy metrics use where they cost extra work
    (the pair accuracy by index).
    """
    relations = gt_relations(gt, rules.keep_duplicates)
    norm = normalize_prediction(pred, rules.normalization)
    if rules.ng_cut is not None and len(norm.ng) > rules.ng_cut:
        norm.ng = np.ascontiguousarray(norm.ng[:rules.ng_cut])
    iou = shared_iou(gt, norm, rules, match_labels, shared)
    n_gt = gt.n_instances
    extra: dict[str, int] = {}
    if rules.matching == "triplet":
        hit = iou >= IOU_THRESHOLD
        graph_first, pair_first, ng_first, imr_first = triplet_level_hits(
            relations, norm.graph, norm.ng, hit, n_gt, with_ng)
        prank = legacy_first = None
        if rules.pairs_by_index and legacy:
            legacy_first = pairs_by_index_first(relations, norm.graph, hit, n_gt)
            extra["pred_boxes_not_gt"] = int(not boxes_are_gt(gt, pred.boxes))
        matched, unmatched = hit_coverage(hit)
    else:
        match = match_one_to_one if rules.matching == "one_to_one" else match_many_to_one
        mapping = match(iou, IOU_THRESHOLD)
        graph_first, pair_first, legacy_first, ng_first, imr_first, prank = mapped_hits(
            relations, norm.graph, norm.ng, mapping, n_gt, with_ng,
            rules.first_per_pair)
        matched = np.zeros(n_gt, dtype=bool)
        matched[mapping[mapping >= 0]] = True
        unmatched = int((mapping < 0).sum())
    panoptic = _panoptic_of(gt, pred, norm, shared)
    if panoptic is not None:
        extra["masks_overlap"] = int(panoptic.overlap)
    diagnostics = {**norm.diagnostics, "pred_instances": pred.n_instances,
                   "pred_unmatched": unmatched, "gt_instances": n_gt,
                   "gt_unmatched": n_gt - int(matched.sum()), **extra}
    return ImageHits(gt.image_id, False, relations, np.asarray(gt.labels), matched,
                     graph_first, pair_first, ng_first if with_ng else None,
                     imr_first if with_ng else None, prank if with_ng else None,
                     legacy_first, diagnostics=diagnostics, panoptic=panoptic)


def _has_panoptic(gt: ImageGT) -> bool:
    """Whether the GT allows panoptic quality: masks and the crowd flags."""
    return gt.has_masks and gt.crowd is not None


def _panoptic_of(gt: ImageGT, pred: ImagePred, norm: NormalizedPred, shared: dict | None
                ) -> PanopticHits | None:
    """Panoptic quality's counts of the image (None without masks on both sides or crowd
    flags). The same under every protocol, so computed once per image with ``shared``:
    from the prediction's own ``segments`` when it has them, else from the mask merge these
    rules made and the pixels its matching counted, else from a merge of its own."""
    if pred.masks is None or not _has_panoptic(gt):
        return None
    if shared is not None and "panoptic" in shared:
        return shared["panoptic"]
    if pred.segments is not None:
        masks, labels = pred.segments
        found = panoptic_hits(gt, masks, labels, masks.areas())
    else:
        merge = norm.merge if norm.merge is not None else merge_masks(pred.masks, pred.scores)
        inter = norm.intersections if norm.merge is not None else None
        found = panoptic_hits(gt, merge.masks, np.asarray(pred.labels)[merge.kept],
                              merge.areas, inter, merge.overlap)
    if shared is not None:
        shared["panoptic"] = found
    return found


def pairs_by_index_first(relations: np.ndarray, graph: np.ndarray, hit: np.ndarray,
                         n_gt: int) -> np.ndarray:
    """Scene-Graph-Benchmark.pytorch's pair accuracy: the first hit of each GT triplet among
    the graph entries whose (subject, object) *indices* are a GT pair (a predicted index
    taken as the GT index of the same number)."""
    n_pred = hit.shape[0]
    identity = np.where(np.arange(n_pred) < n_gt, np.arange(n_pred), -1).astype(np.int64)
    on_pair = on_gt_pair(graph, identity, relations, n_gt)
    return first_hits_triplet(relations, np.ascontiguousarray(graph[on_pair]), hit, True)


def missing_image_hits(gt: ImageGT, rules: ImageRules, with_ng: bool = True) -> ImageHits:
    """An image of the GT without prediction: nothing hits, no PRank value."""
    relations = gt_relations(gt, rules.keep_duplicates)
    n_gt = gt.n_instances
    never = np.full(len(relations), NEVER, dtype=np.int64)
    pairs = gt_pair_rows(relations, n_gt)
    mapped = rules.matching != "triplet"
    return ImageHits(
        gt.image_id, True, relations, np.asarray(gt.labels), np.zeros(n_gt, dtype=bool),
        graph_first=never, pair_first=np.full(len(pairs), NEVER, dtype=np.int64),
        ng_first=never if with_ng else None, imr_first=never if with_ng else None,
        legacy_first=never if mapped else None,
        diagnostics={"gt_instances": n_gt, "gt_unmatched": n_gt},
        panoptic=missing_panoptic_hits(gt) if _has_panoptic(gt) else None)
