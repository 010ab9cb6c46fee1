"""A literal, slow implementation of SPEC sections 3-7: the reference every fast kernel is
checked against (tests/differential/test_literal.py, tests/properties/test_properties.py).

Written from the SPEC, one plain loop per definition: masks are sets of pixels, IoU is
pixel counting, every value is an exact rational. It shares no code with ``sgdask`` and
never imports it, so a bug there cannot hide here. Speed does not matter; only that each
function reads like the sentence of the SPEC it implements.

Inputs: ``GT`` (categories, relations as given, a label image (H, W) holding instance
index + 1 with 0 = no instance, or boxes ``[x1, y1, x2, y2]``) and ``Pred`` (categories,
graph list, NG list, dense boolean masks (n, H, W) or boxes, optional scores).
Outputs: ``ImageTerms`` (per metric a rational term ``(numerator, denominator)``, per
predicate for the mean metrics) and ``Dataset`` (SPEC 7 aggregation, exact Fractions).

Where the SPEC is silent, the decisions sgdask has written down (docs/metrics.md, "Decisions
where the specification is silent") are
followed:

- IoU of two empty instances (union 0) is 0, for masks and boxes; except that the
  ``sgbench`` and ``sgbench2`` protocols reproduce sgbench's NaN for two zero-area boxes.
- ``sgbench2`` (SPEC 5.5) is ``sgbench`` except that X_k keeps, of the first k graph
  triplets, only the first of each remapped (subject, object) pair (an unmatched side
  taking part as -1): every metric read from X_k follows (R, mR, PR, zR, mzR); the NG
  list and A@k (its own selection) do not.
- singlempo drops every triplet whose subject and object are the same instance after the
  merge (the submission format allows no triplet on one instance before it).
- multimpo normalizes nothing (not even exact duplicates), has no instance mapping (no
  PRank, no A@k) and counts a GT instance as found (InstR, R@inf) when some prediction of
  its category overlaps it with IoU >= 0.5.
- Relative k is ``ceil(F * |G|)`` with ``|G|`` the image's (deduplicated) GT triplets, for
  every metric: PR@k, IMR@k and zR@k included.
- An image without prediction: 0 on every recall and InstR, no PRank; under ``sgbench``
  it is left out of every mean metric (only its image-level zeros count); A@k counts its
  GT triplets (except under multimpo, which has no A@k).
- Mean metrics average over the predicates that occur (sgbench 1.0.0 prints NaN when one
  is absent), except that multimpo (SPEC 5.3, version 2) prints mR@k and mNgR@k over every
  predicate of the vocabulary, an absent one counting 0 (not under the ``image``
  aggregation, which averages each image's predicates).
- Under the ``image`` aggregation the per-predicate values (table, wIMR) are the
  per-predicate means of ``per_predicate``.
- wIMR@k weights ``n_c ** tau`` are normalized over the predicates that have an IMR@k
  value; a predicate never seen in training weighs 0; no weight at all: no wIMR.
- F@k (ngF@k) is computed from the printed floats of R@k and mR@k (ngR@k, mNgR@k), as
  SGG-Benchmark computes it from its printed numbers: a float, 0 when both are 0.
- Predicate groups (mR@k[G], mNgR@k[G]) are, with a training split, the thirds of the
  predicates by training relation count; not under the ``image`` aggregation; a group's
  value is the mean over its predicates with a value, or (multimpo) its sum over |G|.
- Panoptic quality (SPEC 6, as COCO panopticapi counts it) is computed for every image with
  a GT label image and predicted masks or no prediction, the same under every protocol, on
  the SPEC 5.1 merge of the predicted masks; VOID = pixels of no GT instance; the crowd
  region of a category is its last crowd instance (panopticapi keeps one per category);
  ``masks_overlap`` (a diagnostic of images with masks on both sides) says whether two
  predicted masks share a pixel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

Triplet = tuple[int, int, int]
Term = tuple[int, int]
Shape = frozenset | tuple  # a set of (y, x) pixels, or a box (x1, y1, x2, y2) of Fractions
THRESHOLD = Fraction(1, 2)
AGGREGATIONS = ("per_predicate", "pooled", "image")


# --------------------------------------------------------------------------- inputs


@dataclass
class GT:
    """Ground truth of one image; ``label_image`` or ``boxes`` (or both)."""

    image_id: str
    categories: list[int]
    relations: list[Triplet]
    label_image: np.ndarray | None = None
    boxes: list[list[float]] | None = None
    crowd: list[bool] | None = None  # per instance: a crowd region (None: none is)


@dataclass
class Pred:
    """A model's output for one image; ``masks`` (n, H, W) bool or ``boxes``."""

    categories: list[int]
    graph: list[Triplet]
    ng: list[Triplet]
    masks: np.ndarray | None = None
    boxes: list[list[float]] | None = None
    scores: list[float] | None = None


@dataclass(frozen=True)
class Training:
    """The training split: per image its instance categories and relations."""

    images: tuple[tuple[tuple[int, ...], tuple[Triplet, ...]], ...]

    def seen_types(self) -> set[Triplet]:
        """(subject category, object category, predicate) of every training relation."""
        seen = set()
        for categories, relations in self.images:
            for s, o, p in relations:
                seen.add((categories[s], categories[o], p))
        return seen

    def composition(self) -> dict[int, int]:
        """n_c: distinct (subject category, object category) pairs of predicate c."""
        pairs: dict[int, set[tuple[int, int]]] = {}
        for s_cat, o_cat, p in self.seen_types():
            pairs.setdefault(p, set()).add((s_cat, o_cat))
        return {p: len(v) for p, v in pairs.items()}


@dataclass(frozen=True)
class Protocol:
    name: str
    normalization: str  # "singlempo" | "dedup" | "none"
    matching: str  # "one_to_one" | "many_to_one" | "triplet"
    missing_in_means: bool  # an image without prediction counts 0 in the mean metrics
    prank_over_cells: bool  # PRank = mean over all (image, predicate) cells
    vocabulary_means: bool = False  # mR@k, mNgR@k over every predicate of the vocabulary
    first_per_remapped_pair: bool = False  # X_k: one triplet per remapped pair (sgbench2)


PROTOCOLS = {
    "singlempo": Protocol("singlempo", "singlempo", "one_to_one", True, False),
    "sgbench": Protocol("sgbench", "dedup", "many_to_one", False, True),
    "sgbench2": Protocol("sgbench2", "dedup", "many_to_one", False, True,
                         first_per_remapped_pair=True),
    "multimpo": Protocol("multimpo", "none", "triplet", True, False, vocabulary_means=True),
}


# --------------------------------------------------------------------------- outputs


@dataclass
class ImageTerms:
    """What one image contributes: exact terms, never rounded.

    ``scalars``: image-level metrics; ``per_predicate``: mean metrics, predicate -> term
    (a metric with no term is absent); ``pooled``: summed before dividing (A@k);
    ``pq_matches``: per category, the sorted (intersection, union) of its panoptic true
    positives; ``pq_errors``: per category with any, its (false positives, false
    negatives).
    """

    image_id: str
    missing: bool
    n_gt_triplets: int
    gt_per_predicate: dict[int, int]
    scalars: dict[str, Term] = field(default_factory=dict)
    per_predicate: dict[str, dict[int, Term]] = field(default_factory=dict)
    pooled: dict[str, Term] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)
    pq_matches: dict[int, list[Term]] = field(default_factory=dict)
    pq_errors: dict[int, Term] = field(default_factory=dict)


# --------------------------------------------------------------------------- IoU (SPEC 4)


def mask_pixels(mask: np.ndarray) -> frozenset:
    """The set of (y, x) where the mask is set."""
    h, w = mask.shape
    return frozenset((y, x) for y in range(h) for x in range(w) if mask[y, x])


def gt_pixels(label_image: np.ndarray, index: int) -> frozenset:
    """Pixels of GT instance ``index`` (label value index + 1)."""
    h, w = label_image.shape
    return frozenset((y, x) for y in range(h) for x in range(w)
                     if label_image[y, x] == index + 1)


def as_box(coords) -> tuple:
    return tuple(Fraction(float(c)) for c in coords[:4])


def box_area(box: tuple) -> Fraction:
    x1, y1, x2, y2 = box
    return (x2 - x1) * (y2 - y1)


def iou(a: Shape, b: Shape) -> Fraction:
    """|a & b| / |a | b| by pixel counting, or the box IoU with area (x2-x1)*(y2-y1)."""
    if isinstance(a, frozenset):
        inter, union = len(a & b), len(a | b)
    else:
        width = max(Fraction(0), min(a[2], b[2]) - max(a[0], b[0]))
        height = max(Fraction(0), min(a[3], b[3]) - max(a[1], b[1]))
        inter = width * height
        union = box_area(a) + box_area(b) - inter
    return Fraction(inter) / union if union else Fraction(0)


def shapes_of(gt: GT, pred: Pred) -> tuple[str, list[Shape], list[Shape]]:
    """(kind, predicted shapes, GT shapes): masks when both sides have them, else boxes."""
    if pred.masks is not None and gt.label_image is not None:
        return ("masks", [mask_pixels(m) for m in pred.masks],
                [gt_pixels(gt.label_image, g) for g in range(len(gt.categories))])
    if pred.boxes is not None and gt.boxes is not None:
        return "boxes", [as_box(b) for b in pred.boxes], [as_box(b) for b in gt.boxes]
    raise ValueError("no common instance representation")


# --------------------------------------------------------------------------- normalization


def first_of_each(items: list, key: Callable = lambda t: t) -> list:
    """Items whose key has not been seen before, order kept."""
    seen, out = set(), []
    for item in items:
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)
    return out


@dataclass
class Normalized:
    """The prediction after normalization: instances (renumbered), lists and counts.

    ``sources[i]``: the original index that kept instance i came from.
    """

    shapes: list[Shape]
    categories: list[int]
    sources: list[int]
    graph: list[Triplet]
    ng: list[Triplet]
    masks_merged: int = 0
    masks_dropped: int = 0


@dataclass
class Merge:
    kept: list[int]  # original index of each kept instance, in the order kept
    owner: list[int | None]  # original index -> kept index (None: dropped)
    new_masks: list[frozenset]
    merged: int
    dropped: int


def merge_masks(masks: list[frozenset], scores: list[float] | None) -> Merge:
    """SPEC 5.1 mask merge, walking by score descending (stable) or by index."""
    n = len(masks)
    order = list(range(n)) if scores is None else sorted(range(n), key=lambda i: -scores[i])
    owner: list[int | None] = [None] * n
    merged_away = [False] * n
    claimed: set = set()
    kept, new_masks, dropped = [], [], 0
    for position, m in enumerate(order):
        if merged_away[m]:
            continue
        new = masks[m] - claimed
        if not new:
            dropped += 1
            continue
        owner[m] = len(kept)
        kept.append(m)
        new_masks.append(frozenset(new))
        claimed |= new
        for later in order[position + 1:]:
            if not merged_away[later] and owner[later] is None \
                    and iou(masks[m], masks[later]) >= THRESHOLD:
                merged_away[later] = True
                owner[later] = owner[m]
    return Merge(kept, owner, new_masks, sum(merged_away), dropped)


def onto_kept(triplets: list[Triplet], owner: list[int | None]) -> list[Triplet]:
    """Triplets on kept instances; those touching a dropped instance or whose subject and
    object became the same instance are removed."""
    out = []
    for s, o, p in triplets:
        if owner[s] is not None and owner[o] is not None and owner[s] != owner[o]:
            out.append((owner[s], owner[o], p))
    return out


def normalize(pred: Pred, kind: str, shapes: list[Shape], protocol: Protocol) -> Normalized:
    """SPEC 3.1 and 5.1 (singlempo), exact-duplicate removal (sgbench), nothing (multimpo)."""
    n = len(pred.categories)
    graph, ng = [tuple(t) for t in pred.graph], [tuple(t) for t in pred.ng]
    if protocol.normalization == "none":
        return Normalized(shapes, list(pred.categories), list(range(n)), graph, ng)
    if protocol.normalization == "dedup":
        return Normalized(shapes, list(pred.categories), list(range(n)), first_of_each(graph),
                          first_of_each(ng))
    if kind == "masks":
        merge = merge_masks(shapes, pred.scores)
    else:  # boxes: no merge
        merge = Merge(list(range(n)), list(range(n)), shapes, 0, 0)
    return Normalized(merge.new_masks, [pred.categories[i] for i in merge.kept], merge.kept,
                      first_of_each(onto_kept(graph, merge.owner), key=lambda t: t[:2]),
                      first_of_each(onto_kept(ng, merge.owner)), merge.merged, merge.dropped)


# --------------------------------------------------------------------------- matching


def best_gt(ious: list[Fraction], allowed: list[bool]) -> int | None:
    """argmax of the IoU over allowed GT instances; ties: the lowest index."""
    best = None
    for g, value in enumerate(ious):
        if allowed[g] and (best is None or value > ious[best]):
            best = g
    return best


def match_one_to_one(table: list[list[Fraction]], pred_cats: list[int], gt_cats: list[int]
                     ) -> list[int]:
    """SGBench paper Algorithm 2: L (pred -> GT index or -1)."""
    claimed_by: dict[int, int] = {}  # J
    for m, row in enumerate(table):
        x = best_gt(row, [pred_cats[m] == c for c in gt_cats])
        if x is None or row[x] < THRESHOLD:
            continue
        if x not in claimed_by or row[x] > table[claimed_by[x]][x]:
            claimed_by[x] = m
    mapping = [-1] * len(table)
    for g, m in claimed_by.items():
        mapping[m] = g
    return mapping


def match_many_to_one(table: list[list[Fraction]], pred_cats: list[int], gt_cats: list[int]
                      ) -> list[int]:
    """SGBench 1.0 code: each prediction takes its argmax GT if IoU >= t."""
    mapping = []
    for m, row in enumerate(table):
        x = best_gt(row, [pred_cats[m] == c for c in gt_cats])
        mapping.append(-1 if x is None or row[x] < THRESHOLD else x)
    return mapping


def with_sgbench_zero_area_boxes(mapping: list[int], pred_boxes: list[Shape],
                                 gt_boxes: list[Shape], pred_cats: list[int],
                                 gt_cats: list[int]) -> list[int]:
    """sgbench 1.0.0 computes the IoU of two zero-area boxes as 0 / 0 = NaN, which its
    argmax takes as the maximum and its ``IoU < 0.5`` test lets through: a zero-area
    predicted box matches the first zero-area GT box of its category."""
    out = list(mapping)
    for m, box in enumerate(pred_boxes):
        flat = [g for g, other in enumerate(gt_boxes)
                if box_area(other) == 0 and gt_cats[g] == pred_cats[m]]
        if box_area(box) == 0 and flat:
            out[m] = flat[0]
    return out


def matcher(norm: Normalized, kind: str, gt_shapes: list[Shape], gt_cats: list[int],
            protocol: Protocol) -> tuple[Callable[[int, int], bool], list[int] | None]:
    """``same(m, g)``: predicted instance m stands for GT instance g; and L (None when the
    protocol has no instance mapping).

    Mapped protocols: L[m] == g. multimpo (SPEC 5.3): same category and IoU >= 0.5.
    """
    table = [[iou(p, g) for g in gt_shapes] for p in norm.shapes]
    if protocol.matching == "triplet":
        return (lambda m, g: norm.categories[m] == gt_cats[g] and table[m][g] >= THRESHOLD,
                None)
    match = match_one_to_one if protocol.matching == "one_to_one" else match_many_to_one
    mapping = match(table, norm.categories, gt_cats)
    if protocol.name in ("sgbench", "sgbench2") and kind == "boxes":
        mapping = with_sgbench_zero_area_boxes(mapping, norm.shapes, gt_shapes,
                                               norm.categories, gt_cats)
    return (lambda m, g: mapping[m] == g), mapping


# --------------------------------------------------------------------------- metrics


def resolve(k: str, n_gt: int) -> int:
    """``"20"`` -> 20; ``"x1.5"`` -> ceil(1.5 * |G|)."""
    return math.ceil(Fraction(k[1:]) * n_gt) if k.startswith("x") else int(k)


def gt_set(relations: list[Triplet]) -> list[Triplet]:
    """GT triplets as a set (SPEC 2), in order of first occurrence."""
    return first_of_each([tuple(t) for t in relations])


def top_k(graph: list[Triplet], k: int, mapping: list[int] | None, protocol: Protocol
          ) -> list[Triplet]:
    """X_k before remapping: the first k graph triplets; under sgbench2 (SPEC 5.5) only
    the first of each remapped (subject, object) pair among them, an unmatched side
    taking part as -1 (the cut at k comes first)."""
    top = graph[:k]
    if protocol.first_per_remapped_pair:
        top = first_of_each(top, key=lambda t: (mapping[t[0]], mapping[t[1]]))
    return top


def hits(entry: Triplet, t: Triplet, same: Callable[[int, int], bool]) -> bool:
    """A (predicted) list entry hits GT triplet t: same predicate, instances that stand for
    t's subject and object."""
    return entry[2] == t[2] and same(entry[0], t[0]) and same(entry[1], t[1])


def terms(targets: list[Triplet], recalled: list[bool]) -> tuple[Term, dict[int, Term]]:
    """Image term |recalled| / |targets| and the same per predicate of the targets."""
    per_predicate: dict[int, Term] = {}
    for t, r in zip(targets, recalled, strict=True):
        num, den = per_predicate.get(t[2], (0, 0))
        per_predicate[t[2]] = (num + int(r), den + 1)
    return (sum(recalled), len(targets)), per_predicate


def recall(targets: list[Triplet], selected: list[Triplet], same) -> tuple[Term, dict]:
    """Recall of ``targets`` by the selected (top-k) entries, image and per predicate."""
    return terms(targets, [any(hits(e, t, same) for e in selected) for t in targets])


def pair_recall(G: list[Triplet], selected: list[Triplet], same) -> Term:
    """|pairs(G) recalled by the selected list (any predicate)| / |pairs(G)|."""
    pairs = first_of_each([t[:2] for t in G])
    found = [any(same(e[0], s) and same(e[1], o) for e in selected) for s, o in pairs]
    return sum(found), len(pairs)


def independent_recall(G: list[Triplet], ng: list[Triplet], k: int, same) -> dict[int, Term]:
    """IMR@k: per predicate p of G, recall of G(p) by the first k NG triplets of predicate p."""
    out = {}
    for p in sorted({t[2] for t in G}):
        own = [e for e in ng if e[2] == p][:k]
        out.update(recall([t for t in G if t[2] == p], own, same)[1])
    return out


def predicate_rank(G: list[Triplet], ng: list[Triplet], mapping: list[int]) -> dict[int, Term]:
    """PRank terms (rank sum, found) per predicate with a found GT triplet.

    The remapped NG list is walked once; a triplet's rank is the number of distinct
    predicates its pair received before its first occurrence; unmatched ones are skipped.
    """
    rank_of: dict[Triplet, int] = {}
    predicates_of_pair: dict[tuple[int, int], list[int]] = {}
    for s, o, p in ng:
        t = (mapping[s], mapping[o], p)
        if t[0] < 0 or t[1] < 0 or t in rank_of:
            continue
        seen = predicates_of_pair.setdefault(t[:2], [])
        rank_of[t] = len(seen)
        seen.append(p)
    out: dict[int, Term] = {}
    for t in G:
        if t in rank_of:
            total, found = out.get(t[2], (0, 0))
            out[t[2]] = (total + rank_of[t], found + 1)
    return out


def pair_accuracy(G: list[Triplet], graph: list[Triplet], mapping: list[int], k: int,
                  same) -> Term:
    """Legacy A@k: top-k of the predictions whose remapped pair is a GT pair; hits / |G|."""
    gt_pairs = {t[:2] for t in G}
    on_gt_pair = [e for e in graph if (mapping[e[0]], mapping[e[1]]) in gt_pairs]
    return recall(G, on_gt_pair[:k], same)[0]


def zero_shot(G: list[Triplet], gt_cats: list[int], training: Training) -> list[Triplet]:
    """GT triplets whose (subject category, object category, predicate) training never saw."""
    seen = training.seen_types()
    return [t for t in G if (gt_cats[t[0]], gt_cats[t[1]], t[2]) not in seen]


def per_predicate_counts(G: list[Triplet]) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in G:
        out[t[2]] = out.get(t[2], 0) + 1
    return out


def score(out: ImageTerms, G: list[Triplet], gt: GT, norm: Normalized, same,
          mapping: list[int] | None, ks: list[str], with_ng: bool, training: Training | None,
          legacy: bool, protocol: Protocol) -> None:
    """Every metric of SPEC 6 for one image (``mapping`` None: no instance mapping)."""
    n = len(G)
    for k in ks:
        top = top_k(norm.graph, resolve(k, n), mapping, protocol)
        out.scalars[f"R@{k}"], out.per_predicate[f"mR@{k}"] = recall(G, top, same)
        out.scalars[f"PR@{k}"] = pair_recall(G, top, same)
    n_instances = len(gt.categories)
    found = [any(same(m, g) for m in range(len(norm.categories))) for g in range(n_instances)]
    out.scalars["R@inf"], out.per_predicate["mR@inf"] = terms(
        G, [found[s] and found[o] for s, o, _ in G])
    out.scalars["InstR"] = (sum(found), n_instances)
    unseen = zero_shot(G, gt.categories, training) if training is not None else []
    if unseen:
        for k in ks:
            out.scalars[f"zR@{k}"], out.per_predicate[f"mzR@{k}"] = recall(
                unseen, top_k(norm.graph, resolve(k, n), mapping, protocol), same)
    if with_ng:
        for k in ks:
            out.scalars[f"ngR@{k}"], out.per_predicate[f"mNgR@{k}"] = recall(
                G, norm.ng[:resolve(k, n)], same)
            out.per_predicate[f"IMR@{k}"] = independent_recall(G, norm.ng, resolve(k, n), same)
        if mapping is not None:
            out.per_predicate["PRank"] = predicate_rank(G, norm.ng, mapping)
    if legacy and mapping is not None:
        for k in ks:
            out.pooled[f"A@{k}"] = pair_accuracy(G, norm.graph, mapping, resolve(k, n), same)
    out.per_predicate = {m: v for m, v in out.per_predicate.items() if v}


def panoptic(out: ImageTerms, gt: GT, pred: Pred | None) -> None:
    """SPEC 6's panoptic quality counts of one image, as panopticapi's
    ``pq_compute_single_core`` counts them: GT segments = GT instances, predicted segments
    = the SPEC 5.1 merge of the predicted masks (none without prediction)."""
    if gt.label_image is None or (pred is not None and pred.masks is None):
        return
    n_gt = len(gt.categories)
    crowd = gt.crowd or [False] * n_gt
    gt_segments = [gt_pixels(gt.label_image, g) for g in range(n_gt)]
    covered = frozenset().union(*gt_segments)
    segments: list[tuple[int, frozenset]] = []
    if pred is not None:
        masks = [mask_pixels(m) for m in pred.masks]
        merge = merge_masks(masks, pred.scores)
        segments = [(pred.categories[m], new) for m, new in zip(merge.kept, merge.new_masks,
                                                               strict=True)]
        out.diagnostics["masks_overlap"] = int(any(
            masks[i] & masks[j] for i in range(len(masks)) for j in range(i + 1, len(masks))))
    matched_pred, matched_gt = set(), set()
    for p, (category, segment) in enumerate(segments):
        void = len(segment - covered)
        for g, gt_segment in enumerate(gt_segments):
            inter = len(segment & gt_segment)
            if inter == 0 or crowd[g] or gt.categories[g] != category:
                continue
            union = len(segment) + len(gt_segment) - inter - void
            if Fraction(inter, union) > THRESHOLD:
                out.pq_matches.setdefault(category, []).append((inter, union))
                matched_pred.add(p)
                matched_gt.add(g)
    crowd_of = {}
    errors: dict[int, list[int]] = {}
    for g in range(n_gt):
        if crowd[g]:
            crowd_of[gt.categories[g]] = g  # the last one of its category stays
        elif g not in matched_gt:
            errors.setdefault(gt.categories[g], [0, 0])[1] += 1
    for p, (category, segment) in enumerate(segments):
        if p in matched_pred:
            continue
        ignored = len(segment - covered)
        if category in crowd_of:
            ignored += len(segment & gt_segments[crowd_of[category]])
        if not Fraction(ignored, len(segment)) > THRESHOLD:
            errors.setdefault(category, [0, 0])[0] += 1
    out.pq_matches = {c: sorted(v) for c, v in out.pq_matches.items()}
    out.pq_errors = {c: (fp, fn) for c, (fp, fn) in errors.items()}


def panoptic_values(images: list[ImageTerms], things: set[int] | None
                    ) -> dict[str, Fraction]:
    """PQ, SQ, RQ (and with ``things``, ``_th`` and ``_st``): per category over the images
    ``PQ_c = Σ IoU / (TP + FP/2 + FN/2)``, ``SQ_c = Σ IoU / TP`` (0 without TP),
    ``RQ_c = TP / (TP + FP/2 + FN/2)``, means over the categories with TP + FP + FN > 0."""
    iou: dict[int, Fraction] = {}
    counts: dict[int, list[int]] = {}
    for image in images:
        for c, pairs in image.pq_matches.items():
            iou[c] = iou.get(c, Fraction(0)) + sum(Fraction(i, u) for i, u in pairs)
            counts.setdefault(c, [0, 0, 0])[0] += len(pairs)
        for c, (fp, fn) in image.pq_errors.items():
            row = counts.setdefault(c, [0, 0, 0])
            row[1] += fp
            row[2] += fn
    per_category = {}
    for c, (tp, fp, fn) in counts.items():
        if tp + fp + fn:
            d = tp + Fraction(fp + fn, 2)
            total = iou.get(c, Fraction(0))
            per_category[c] = (total / d, total / tp if tp else Fraction(0), tp / d)
    groups = {"": set(per_category)}
    if things is not None:
        groups.update(_th=set(per_category) & things, _st=set(per_category) - things)
    out = {}
    for suffix, chosen in groups.items():
        for i, name in enumerate(("PQ", "SQ", "RQ")):
            if chosen:
                out[name + suffix] = mean([per_category[c][i] for c in chosen])
    return out


def instance_mapping(gt: GT, pred: Pred, protocol: str) -> tuple[Normalized, list[int]]:
    """The normalized prediction and L (normalized instance -> GT index or -1) of a
    protocol with an instance mapping (SPEC 3 steps 1-2)."""
    proto = PROTOCOLS[protocol]
    kind, pred_shapes, gt_shapes = shapes_of(gt, pred)
    norm = normalize(pred, kind, pred_shapes, proto)
    _, mapping = matcher(norm, kind, gt_shapes, gt.categories, proto)
    assert mapping is not None, f"{protocol} has no instance mapping"
    return norm, mapping


def image_terms(gt: GT, pred: Pred | None, protocol: str, ks: list[str], *,
                with_ng: bool = True, training: Training | None = None,
                legacy: bool = False) -> ImageTerms:
    """SPEC 3: normalize -> match -> select top-k -> remap -> score, for one image."""
    proto = PROTOCOLS[protocol]
    G = gt_set(gt.relations)
    out = ImageTerms(gt.image_id, pred is None, len(G), per_predicate_counts(G))
    n_gt = len(gt.categories)
    if pred is None:  # nothing stands for anything: every recall and InstR are 0
        nothing = Normalized([], [], [], [], [])
        mapping = None if proto.matching == "triplet" else []
        score(out, G, gt, nothing, lambda m, g: False, mapping, ks, with_ng, training, legacy,
              proto)
        out.per_predicate.pop("PRank", None)  # no PRank without a prediction
        if not proto.missing_in_means:
            out.per_predicate = {}
        out.diagnostics = {"gt_instances": n_gt, "gt_unmatched": n_gt}
        panoptic(out, gt, None)
        return out
    kind, pred_shapes, gt_shapes = shapes_of(gt, pred)
    norm = normalize(pred, kind, pred_shapes, proto)
    same, mapping = matcher(norm, kind, gt_shapes, gt.categories, proto)
    score(out, G, gt, norm, same, mapping, ks, with_ng, training, legacy, proto)
    out.diagnostics = {
        "masks_merged": norm.masks_merged,
        "masks_dropped": norm.masks_dropped,
        "graph_triplets_removed": len(pred.graph) - len(norm.graph),
        "ng_triplets_removed": len(pred.ng) - len(norm.ng),
        "pred_instances": len(pred.categories),
        "pred_unmatched": sum(not any(same(m, g) for g in range(n_gt))
                              for m in range(len(norm.categories))),
        "gt_instances": n_gt,
        "gt_unmatched": n_gt - out.scalars["InstR"][0],
    }
    panoptic(out, gt, pred)
    return out


# --------------------------------------------------------------------------- dataset (SPEC 7)


@dataclass
class Dataset:
    """Dataset scores: ``metrics`` (Fractions; wIMR floats), the per-predicate table
    (predicate -> metric -> value or None, plus ``gt_count``) and diagnostic totals."""

    metrics: dict[str, Fraction | float]
    per_predicate: dict[int, dict[str, Fraction | int | None]]
    diagnostics: dict[str, int]
    groups: dict[int, str | None] = field(default_factory=dict)  # predicate -> its group


def mean(values: list[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


def predicate_values(images: list[ImageTerms], name: str, aggregation: str
                     ) -> dict[int, Fraction]:
    """Per predicate: total hits / total count (pooled), else the mean over the images
    where the predicate has a term."""
    terms: dict[int, list[Term]] = {}
    for image in images:
        for p, term in image.per_predicate.get(name, {}).items():
            terms.setdefault(p, []).append(term)
    if aggregation == "pooled":
        return {p: Fraction(sum(n for n, _ in ts), sum(d for _, d in ts))
                for p, ts in terms.items()}
    return {p: mean([Fraction(*t) for t in ts]) for p, ts in terms.items()}


def mean_metric(images: list[ImageTerms], name: str, aggregation: str, over_cells: bool
                ) -> Fraction:
    """SPEC 7's three modes, or (sgbench PRank) the mean over every (image, predicate) cell."""
    if over_cells:
        return mean([Fraction(*t) for image in images
                     for t in image.per_predicate.get(name, {}).values()])
    if aggregation == "image":
        return mean([mean([Fraction(*t) for t in image.per_predicate[name].values()])
                     for image in images if name in image.per_predicate])
    return mean(list(predicate_values(images, name, aggregation).values()))


def weighted_imr(images: list[ImageTerms], k: str, aggregation: str, composition: dict,
                 tau: float) -> float | None:
    """wIMR@k = sum_c w_c IMR_c, w_c = n_c^tau / sum n^tau over the predicates with a value."""
    values = predicate_values(images, f"IMR@{k}", aggregation)
    weights = {c: composition[c] ** tau if composition.get(c, 0) > 0 else 0.0
               for c in values}
    total = math.fsum(weights.values())
    if not values or total <= 0:
        return None
    return math.fsum(weights[c] * float(values[c]) for c in values) / total


def frequency_groups(training: Training, n_predicates: int) -> dict[str, list[int]]:
    """head / body / tail: the predicates sorted by their number of training relations
    (descending, ties by index), cut into ceil(n/3), ceil(rest/2) and the rest."""
    counts = dict.fromkeys(range(n_predicates), 0)
    for _, relations in training.images:
        for _, _, p in relations:
            counts[p] += 1
    ranked = sorted(range(n_predicates), key=lambda p: (-counts[p], p))
    head = math.ceil(n_predicates / 3)
    body = math.ceil((n_predicates - head) / 2)
    parts = {"head": ranked[:head], "body": ranked[head:head + body],
             "tail": ranked[head + body:]}
    return {name: sorted(ps) for name, ps in parts.items() if ps}


def harmonic(r: float, m: float) -> float:
    """F = 2 r m / (r + m), 0 when r = m = 0."""
    return 0.0 if r == 0 and m == 0 else 2 * r * m / (r + m)


def aggregate(images: list[ImageTerms], protocol: str, aggregation: str, ks: list[str], *,
              training: Training | None = None, tau: float = 0.5,
              n_predicates: int | None = None, things: set[int] | None = None) -> Dataset:
    """Dataset scores of per-image terms under an aggregation mode (SPEC 7);
    ``n_predicates``: the size of the predicate vocabulary (protocols that print mR over
    the vocabulary need it); ``things``: the thing categories (None: unknown, no PQ_th,
    PQ_st)."""
    proto = PROTOCOLS[protocol]
    metrics: dict[str, Fraction | float] = {}
    for name in sorted({n for image in images for n in image.scalars}):
        metrics[name] = mean([Fraction(*image.scalars[name]) for image in images
                              if name in image.scalars])
    mean_names = sorted({n for image in images for n in image.per_predicate})
    for name in mean_names:
        over_cells = proto.prank_over_cells and name == "PRank"
        metrics[name] = mean_metric(images, name, aggregation, over_cells)
        if (proto.vocabulary_means and aggregation != "image"
                and name.split("@")[0] in ("mR", "mNgR") and name != "mR@inf"):
            assert n_predicates, "the vocabulary size is needed"
            values = predicate_values(images, name, aggregation)
            metrics[name] = sum(values.values(), Fraction(0)) / n_predicates
    for name in sorted({n for image in images for n in image.pooled}):
        metrics[name] = Fraction(sum(i.pooled[name][0] for i in images if name in i.pooled),
                                 sum(i.pooled[name][1] for i in images if name in i.pooled))
    metrics.update(panoptic_values(images, things))
    composition = training.composition() if training is not None else {}
    if composition:
        for k in ks:
            value = weighted_imr(images, k, aggregation, composition, tau)
            if value is not None:
                metrics[f"wIMR@{k}"] = value
    for f, r, m in (("F", "R", "mR"), ("ngF", "ngR", "mNgR")):
        for k in ks:
            if f"{r}@{k}" in metrics and f"{m}@{k}" in metrics:
                metrics[f"{f}@{k}"] = harmonic(float(metrics[f"{r}@{k}"]),
                                               float(metrics[f"{m}@{k}"]))
    groups = {}
    if training is not None and aggregation != "image":
        assert n_predicates, "the vocabulary size is needed"
        groups = frequency_groups(training, n_predicates)
    for name in mean_names:
        if name.split("@")[0] not in ("mR", "mNgR") or name.endswith("@inf") or not groups:
            continue
        values = predicate_values(images, name, aggregation)
        for group, members in groups.items():
            found = [values[p] for p in members if p in values]
            if proto.vocabulary_means:
                metrics[f"{name}[{group}]"] = sum(found, Fraction(0)) / len(members)
            elif found:
                metrics[f"{name}[{group}]"] = mean(found)
    table: dict[int, dict[str, Fraction | int | None]] = {}
    for image in images:
        for p, count in image.gt_per_predicate.items():
            row = table.setdefault(p, {"gt_count": 0})
            row["gt_count"] += count
    for name in mean_names:
        values = predicate_values(images, name, aggregation)
        for p, row in table.items():
            row[name] = values.get(p)
    diagnostics = {"images_missing": sum(image.missing for image in images)}
    for image in images:
        for key, value in image.diagnostics.items():
            diagnostics[key] = diagnostics.get(key, 0) + value
    group_of = {p: group for group, members in groups.items() for p in members}
    grouped = any("[" in name for name in metrics)  # the report names groups it uses
    return Dataset(metrics, table, diagnostics,
                   {p: group_of.get(p) for p in table} if grouped else {})
