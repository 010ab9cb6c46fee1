"""A literal, slow implementation of Scene-Graph-Benchmark.pytorch's relation metrics, the
reference the ``sgbpytorch`` protocol is checked against (tests/protocols/test_sgbpytorch.py).

Written the way that repository's evaluator is (``vg_eval.py``'s loop over images,
``sgg_eval.py``'s ``_compute_pred_matches`` and result containers, ``boxlist_iou`` and
``clip_to_image`` of maskrcnn_benchmark): a Python loop over images, per image lists of
matched GT indices per prediction (``pred_to_gt``), float32 box arithmetic with ``+1`` on
width and height. It shares no code with ``sgdask`` and never imports it.

Conventions (SPEC 5.4), 0-based classes and predicates (the background removed):

- GT relations as given, duplicates included; GT boxes clipped to ``[0, w-1] x [0, h-1]``;
- a GT image without relations is not evaluated; an image without relation proposals (an
  empty graph list, or no prediction at all) is skipped;
- the graph list is the model's relation list in order (one predicate per pair); the NG
  list the given one, cut at 100;
- a prediction hits a GT relation when subject class, object class and predicate are equal
  and both boxes have IoU >= 0.5; predicted boxes that are the GT boxes (predcls) are
  replaced by the clipped GT boxes, as its evaluator does in predcls;
- R@k, ngR@k: per image ``|union of pred_to_gt[:k]| / |gt_rels|``, mean over images;
  zR@k, ngzR@k: the same over the zero-shot GT rows (types never seen in training), mean
  over the images that have one; mR@k, mNgR@k: per predicate the mean over the images where
  it occurs of hits / count, then the sum over *every* predicate of the vocabulary divided
  by its size; A@k (predcls / sgcls only: every image's predicted boxes are its GT boxes):
  only predictions whose (subject, object) indices are a GT pair, their matches in the
  first k, summed over images, over the summed GT counts;
- mR@k[head|body|tail], mNgR@k[...] (with ``longtail_part_dict``): PySGG's
  ``longtail_part_eval`` (``pysgg/data/datasets/evaluation/vg/vg_eval.py``), the mean of
  the per-predicate list (0 for an absent predicate) over the predicates of each part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NG_LIMIT = 100
THRESHOLD = 0.5
# PySGG's LONGTAIL_PART_DICT of configs/e2e_relBGNN_vg.yaml (SHTUPLUS/PySGG at
# a63942a076932b3756a477cf8919c3b74cd36207), as printed there: entry i is the part of
# VG150 predicate i (1-based; 0 is the background).
PYSGG_VG150 = [None, "b", "t", "t", "t", "b", "b", "b", "h", "b", "t", "b", "t", "t", "t",
               "t", "b", "t", "t", "b", "h", "b", "h", "b", "t", "b", "t", "t", "t", "h",
               "h", "h", "t", "b", "t", "b", "t", "t", "b", "t", "b", "b", "t", "b", "t",
               "t", "b", "b", "h", "b", "b"]
PARTS = {"h": "head", "b": "body", "t": "tail"}


@dataclass
class VGImage:
    """One image: GT (size, classes, float boxes, relations as given) and the prediction
    (None: the submission lacks the image)."""

    image_id: str
    height: int
    width: int
    gt_classes: list[int]
    gt_boxes: list[list[float]]
    gt_rels: list[tuple[int, int, int]]
    pred_classes: list[int] | None = None
    pred_boxes: list[list[float]] | None = None
    graph: list[tuple[int, int, int]] | None = None
    ng: list[tuple[int, int, int]] | None = None


def clip_to_image(box: list[float], width: int, height: int) -> list[np.float32]:
    """maskrcnn_benchmark's ``clip_to_image(remove_empty=False)``, one box, float32."""
    x1, y1, x2, y2 = (np.float32(v) for v in box)
    w_max, h_max = np.float32(width - 1), np.float32(height - 1)
    zero = np.float32(0)
    return [min(max(x1, zero), w_max), min(max(y1, zero), h_max),
            min(max(x2, zero), w_max), min(max(y2, zero), h_max)]


def boxlist_iou(a: list, b: list) -> np.float32:
    """``boxlist_iou`` of one box pair: float32, TO_REMOVE = 1."""
    one, zero = np.float32(1), np.float32(0)
    a = [np.float32(v) for v in a]
    b = [np.float32(v) for v in b]
    area_a = (a[2] - a[0] + one) * (a[3] - a[1] + one)
    area_b = (b[2] - b[0] + one) * (b[3] - b[1] + one)
    left, top = max(a[0], b[0]), max(a[1], b[1])
    right, bottom = min(a[2], b[2]), min(a[3], b[3])
    w = max(right - left + one, zero)
    h = max(bottom - top + one, zero)
    inter = w * h
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.float32(inter / (area_a + area_b - inter))


def compute_pred_matches(gt_rels, gt_classes, gt_boxes, pred_rels, pred_classes, pred_boxes
                         ) -> list[list[int]]:
    """``_compute_pred_matches``: for each predicted relation, the GT rows it hits."""
    pred_to_gt: list[list[int]] = [[] for _ in pred_rels]
    for gt_ind, (gs, go, gp) in enumerate(gt_rels):
        for i, (s, o, p) in enumerate(pred_rels):
            if (gt_classes[gs], gp, gt_classes[go]) != (pred_classes[s], p, pred_classes[o]):
                continue
            sub_iou = boxlist_iou(gt_boxes[gs], pred_boxes[s])
            obj_iou = boxlist_iou(gt_boxes[go], pred_boxes[o])
            if sub_iou >= THRESHOLD and obj_iou >= THRESHOLD:
                pred_to_gt[i].append(gt_ind)
    return pred_to_gt


def union_of(pred_to_gt: list[list[int]], k: int) -> set[int]:
    """``reduce(np.union1d, pred_to_gt[:k])`` as a set."""
    out: set[int] = set()
    for matches in pred_to_gt[:k]:
        out |= set(matches)
    return out


def boxes_are_gt(image: VGImage) -> bool:
    """The predicted boxes are the GT boxes (as given or clipped) in the same order."""
    if image.pred_boxes is None or len(image.pred_boxes) != len(image.gt_boxes):
        return False
    for candidate in (image.gt_boxes,
                      [clip_to_image(b, image.width, image.height) for b in image.gt_boxes]):
        if all(abs(float(p) - float(g)) <= 0.01
               for pb, gb in zip(image.pred_boxes, candidate, strict=True)
               for p, g in zip(pb, gb, strict=True)):
            return True
    return False


@dataclass
class Result:
    metrics: dict[str, float]
    mean_over_occurring: dict[str, float]
    skipped: int
    missing: int
    without_proposals: int
    absent_predicates: int


def evaluate(images: list[VGImage], ks: list[int], n_predicates: int,
             seen_types: set[tuple[int, int, int]] | None,
             longtail_part_dict: list[str | None] | None = None) -> Result:
    """Every relation metric of the dataset (``seen_types``: (subject class, object class,
    predicate) types of the training split; None: no zero-shot metrics;
    ``longtail_part_dict``: PySGG's part of each predicate, for the long-tail means)."""
    recall = {k: [] for k in ks}
    recall_ng = {k: [] for k in ks}
    zero = {k: [] for k in ks}
    zero_ng = {k: [] for k in ks}
    collect = {k: [[] for _ in range(n_predicates)] for k in ks}
    collect_ng = {k: [[] for _ in range(n_predicates)] for k in ks}
    acc_hit = {k: [] for k in ks}
    acc_count = {k: [] for k in ks}
    all_gt_boxes = True
    skipped = missing = without = 0
    for image in images:
        gt_rels = list(image.gt_rels)
        if not gt_rels:
            continue
        if image.graph is None:
            skipped += 1
            missing += 1
            continue
        if len(image.graph) == 0:
            skipped += 1
            without += 1
            continue
        gt_boxes = [clip_to_image(b, image.width, image.height) for b in image.gt_boxes]
        pred_boxes = [[np.float32(v) for v in b] for b in image.pred_boxes]
        if boxes_are_gt(image):  # predcls: the evaluator puts the (clipped) GT boxes here
            pred_boxes = gt_boxes
        graph = list(image.graph)
        ng = list(image.ng or [])[:NG_LIMIT]
        pred_to_gt = compute_pred_matches(gt_rels, image.gt_classes, gt_boxes, graph,
                                          image.pred_classes, pred_boxes)
        ng_to_gt = compute_pred_matches(gt_rels, image.gt_classes, gt_boxes, ng,
                                        image.pred_classes, pred_boxes)
        zeroshot_idx = [] if seen_types is None else [
            i for i, (s, o, p) in enumerate(gt_rels)
            if (image.gt_classes[s], image.gt_classes[o], p) not in seen_types]
        gt_pairs = {(s, o) for s, o, _ in gt_rels}
        on_pair = [m for (s, o, _), m in zip(graph, pred_to_gt, strict=True)
                   if (s, o) in gt_pairs]
        all_gt_boxes = all_gt_boxes and boxes_are_gt(image)
        for k in ks:
            for lists, store, coll in ((pred_to_gt, recall, collect),
                                       (ng_to_gt, recall_ng, collect_ng)):
                match = union_of(lists, k)
                store[k].append(len(match) / len(gt_rels))
                count = [0] * n_predicates
                hit = [0] * n_predicates
                for _, _, p in gt_rels:
                    count[p] += 1
                for i in match:
                    hit[gt_rels[i][2]] += 1
                for p in range(n_predicates):
                    if count[p] > 0:
                        coll[k][p].append(hit[p] / count[p])
            if zeroshot_idx:
                for lists, store in ((pred_to_gt, zero), (ng_to_gt, zero_ng)):
                    match = union_of(lists, k)
                    found = len(set(zeroshot_idx) & match)
                    store[k].append(found / len(zeroshot_idx))
            acc_hit[k].append(len(union_of(on_pair, k)))
            acc_count[k].append(len(gt_rels))
    metrics: dict[str, float] = {}
    occurring: dict[str, float] = {}
    evaluated = len(recall[ks[0]]) if ks else 0
    present = 0
    for k in ks:
        if not evaluated:
            break
        metrics[f"R@{k}"] = float(np.mean(recall[k]))
        metrics[f"ngR@{k}"] = float(np.mean(recall_ng[k]))
        if zero[k]:
            metrics[f"zR@{k}"] = float(np.mean(zero[k]))
            metrics[f"ngzR@{k}"] = float(np.mean(zero_ng[k]))
        for name, coll in ((f"mR@{k}", collect[k]), (f"mNgR@{k}", collect_ng[k])):
            values = [float(np.mean(c)) if c else 0.0 for c in coll]
            metrics[name] = sum(values) / n_predicates
            if longtail_part_dict is not None:  # PySGG's longtail_part_eval
                part_recall: dict[str, list[float]] = {"h": [], "b": [], "t": []}
                for idx, each_cat_recall in enumerate(values):
                    part_recall[longtail_part_dict[idx + 1]].append(each_cat_recall)
                for part, recalls in part_recall.items():
                    metrics[f"{name}[{PARTS[part]}]"] = float(np.mean(recalls))
            present = sum(1 for c in coll if c)
            occurring[name] = sum(values) / present
        if all_gt_boxes:
            metrics[f"A@{k}"] = sum(acc_hit[k]) / sum(acc_count[k])
    return Result(metrics, occurring, skipped, missing, without, n_predicates - present)
