"""One image under ``oiv6``: the Open Images V6 relationship evaluation of RelDN, as
BGNN/PySGG run it (``oi_evaluation.eval_rel_results`` with ``ap_eval_rel``).

Per image, as the reference computes it:

1. every scored pair's best two predicates are candidates (``TopPredicates``: the score
   file's rows, background column dropped at conversion), each scored
   ``float32(subject score x object score) x predicate score`` in float32;
2. the 100 highest-scoring candidates are kept (equal scores: pair order, then the
   better predicate first: a stable sort where the reference's ``argsort`` is unstable),
   and only then candidates scoring ``<= float32(1e-5)`` are dropped;
3. recall: a GT relation is hit by a candidate of its subject label, predicate and object
   label whose boxes both have IoU ``>= 0.5`` with the GT's (``graph_first``: the first
   such candidate);
4. average precision: per predicate, candidates in order are matched VOC style to the
   image's GT relations of that predicate: the GT with the largest overlap among those
   with the candidate's subject and object labels (overlap 0 for the others; ties: the
   first), a true positive when that overlap is ``> 0.5`` (strict) and the GT is not yet
   claimed (then it is). Relationship overlap: ``min(IoU subject, IoU object)``; phrase
   overlap: IoU of the union boxes. A NaN overlap (two zero-area boxes) is never a true
   positive, as numpy's ``max`` makes it.

IoU in float32 with the ``+1`` pixel convention (``boxlist_iou``); GT boxes clipped to the
image, predicted boxes not. The dataset-wide ranking and the AP itself are
``sgdask.protocols.oiv6.metrics``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.errors import InstanceMismatch, Option
from sgdask.kernels.bits import JIT
from sgdask.kernels.hits import NEVER
from sgdask.kernels.lists import clipped_to_image
from sgdask.protocols.oiv6.metrics import EPS
from sgdask.types import Detections, ImageGT, ImageHits, ImagePred

CANDIDATES = 100
SCORE_FLOOR = np.float32(1e-5)
IOU_RECALL = np.float32(0.5)  # a recall hit needs IoU >= 0.5
IOU_AP = np.float32(0.5)  # a true positive needs an overlap > 0.5


@njit(**JIT)
def _iou(a: np.ndarray, b: np.ndarray) -> np.float32:
    """maskrcnn_benchmark's ``boxlist_iou`` of two float32 boxes: ``+1`` on the sides,
    intersection sides clamped at 0, ``inter / (area_a + area_b - inter)`` (NaN when that
    is 0 / 0)."""
    one, zero = np.float32(1.0), np.float32(0.0)
    area_a = (a[2] - a[0] + one) * (a[3] - a[1] + one)
    area_b = (b[2] - b[0] + one) * (b[3] - b[1] + one)
    w = max(min(a[2], b[2]) - max(a[0], b[0]) + one, zero)
    h = max(min(a[3], b[3]) - max(a[1], b[1]) + one, zero)
    inter = w * h
    union = area_a + area_b - inter
    if union == zero:
        return np.float32(np.nan) if inter == zero else np.float32(np.inf)
    return np.float32(inter / union)


@njit(**JIT)
def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.empty(4, dtype=np.float32)
    out[0], out[1] = min(a[0], b[0]), min(a[1], b[1])
    out[2], out[3] = max(a[2], b[2]), max(a[3], b[3])
    return out


@njit(**JIT)
def _candidate_rows(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
                    instance_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the image's candidates, most confident first: the first
    ``CANDIDATES`` rows by descending ``(s * o) * score`` (float32; equal scores keep row
    order), then those scoring ``<= SCORE_FLOOR`` dropped."""
    n = len(subjects)
    spo = np.empty(n, dtype=np.float32)
    for r in range(n):
        so = instance_scores[subjects[r]] * instance_scores[objects[r]]
        spo[r] = so * scores[r]
    order = np.argsort(-spo, kind="mergesort")[:CANDIDATES]
    keep = spo[order] > SCORE_FLOOR
    return order[keep], spo[order][keep]


@njit(**JIT)
def _matched_candidates(cand_s: np.ndarray, cand_o: np.ndarray, cand_p: np.ndarray,
                        labels: np.ndarray, boxes: np.ndarray, gt_labels: np.ndarray,
                        gt_boxes: np.ndarray, relations: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first hit of each GT relation, true positives of relationship AP, of phrase AP)
    for candidates (subject, object, predicate) in rank order (module docstring, 3 and 4)."""
    n_cand, n_rel = len(cand_p), relations.shape[0]
    first = np.full(n_rel, NEVER, dtype=np.int64)
    tp_rel = np.zeros(n_cand, dtype=np.bool_)
    tp_phr = np.zeros(n_cand, dtype=np.bool_)
    claimed_rel = np.zeros(n_rel, dtype=np.bool_)
    claimed_phr = np.zeros(n_rel, dtype=np.bool_)
    for c in range(n_cand):
        s, o, p = cand_s[c], cand_o[c], cand_p[c]
        box_s, box_o = boxes[s], boxes[o]
        union = _union(box_s, box_o)
        best_rel, best_phr = np.float32(-np.inf), np.float32(-np.inf)
        at_rel, at_phr = -1, -1
        nan_rel, nan_phr = False, False
        same_predicate, valid = 0, 0
        for g in range(n_rel):
            if relations[g, 2] != p:
                continue
            same_predicate += 1
            gs, go = relations[g, 0], relations[g, 1]
            iou_s, iou_o = _iou(gt_boxes[gs], box_s), _iou(gt_boxes[go], box_o)
            labelled = gt_labels[gs] == labels[s] and gt_labels[go] == labels[o]
            if labelled:
                valid += 1
                if first[g] == NEVER and iou_s >= IOU_RECALL and iou_o >= IOU_RECALL:
                    first[g] = c
            # overlaps times the label mask, as the reference (NaN or inf times 0 is NaN)
            mask = np.float32(1.0) if labelled else np.float32(0.0)
            both = np.float32(np.nan) if (iou_s != iou_s or iou_o != iou_o) \
                else min(iou_s, iou_o)
            rel = both * mask
            phr = _iou(union, _union(gt_boxes[gs], gt_boxes[go])) * mask
            nan_rel |= rel != rel
            nan_phr |= phr != phr
            if rel > best_rel:
                best_rel, at_rel = rel, g
            if phr > best_phr:
                best_phr, at_phr = phr, g
        if same_predicate == 0 or valid == 0:
            continue  # no GT of the predicate, or none with these labels: false positive
        if not nan_rel and best_rel > IOU_AP and not claimed_rel[at_rel]:
            tp_rel[c] = True
            claimed_rel[at_rel] = True
        if not nan_phr and best_phr > IOU_AP and not claimed_phr[at_phr]:
            tp_phr[c] = True
            claimed_phr[at_phr] = True
    return first, tp_rel, tp_phr


@njit(**JIT)
def _repeated(keys: np.ndarray) -> int:
    """A key occurring twice (-1: none)."""
    ordered = np.sort(keys)
    for i in range(1, len(ordered)):
        if ordered[i] == ordered[i - 1]:
            return ordered[i]
    return -1


def _duplicate_pair(pred: ImagePred) -> tuple[int, int] | None:
    """A (subject, object) pair the image's score rows give twice, if any."""
    pairs = pred.pairs
    assert pairs is not None
    k = pairs.per_pair
    twice = int(_repeated(pairs.subjects[::k] * (pred.n_instances + 1) + pairs.objects[::k]))
    return None if twice < 0 else divmod(twice, pred.n_instances + 1)


def oiv6_hits(gt: ImageGT, pred: ImagePred, relations: np.ndarray) -> ImageHits:
    """One image's hits and detections under ``oiv6`` (``relations``: the GT relations
    as given, duplicates included)."""
    if pred.pairs is None:
        raise InstanceMismatch("the oiv6 protocol ranks each pair's predicate scores, and "
                               "this prediction has none (convert the submission with ",
                               Option("from_scores"), ")")
    if pred.scores is None and len(pred.pairs):
        raise InstanceMismatch("the oiv6 protocol multiplies instance scores into each "
                               "candidate's score, and this image's instances have none")
    if pred.boxes is None or gt.boxes is None:
        raise InstanceMismatch("the oiv6 protocol matches boxes, but the "
                               + ("prediction" if pred.boxes is None else "GT image")
                               + " has none")
    if gt.size is None:
        raise InstanceMismatch("the oiv6 protocol clips GT boxes to the image, but the GT "
                               "image has no size")
    twice = _duplicate_pair(pred)
    if twice is not None:
        raise InstanceMismatch(f"pair ({twice[0]}, {twice[1]}) is scored twice: the oiv6 "
                               "protocol takes one score vector per pair (the reference "
                               "has no duplicate pairs)")
    pairs = pred.pairs
    instance_scores = (np.zeros(pred.n_instances, np.float32) if pred.scores is None
                       else np.ascontiguousarray(pred.scores, dtype=np.float32))
    rows, scores = _candidate_rows(pairs.subjects, pairs.objects,
                                  np.ascontiguousarray(pairs.scores, dtype=np.float32),
                                  instance_scores)
    cand_p = pairs.predicates[rows]
    boxes = np.ascontiguousarray(pred.boxes, dtype=np.float32).reshape(-1, 4)
    gt_boxes = clipped_to_image(np.ascontiguousarray(gt.boxes, dtype=np.float64)
                                .reshape(-1, 4), *gt.size)
    labels = np.ascontiguousarray(pred.labels, dtype=np.int64)
    gt_labels = np.ascontiguousarray(gt.labels, dtype=np.int64)
    first, tp_rel, tp_phr = _matched_candidates(
        pairs.subjects[rows], pairs.objects[rows], cand_p, labels, boxes, gt_labels,
        gt_boxes, relations)
    n_gt = gt.n_instances
    return ImageHits(
        gt.image_id, False, relations, gt_labels, np.zeros(n_gt, dtype=bool),
        graph_first=first, pair_first=np.empty(0, dtype=np.int64),
        diagnostics={"pred_instances": pred.n_instances, "gt_instances": n_gt,
                     "candidates": len(rows)},
        detections=Detections(cand_p, scores, tp_rel, tp_phr))


RESAMPLE_BLOCK = 64  # resamples a pass over the runs advances together


@njit(**JIT)
def weighted_aps(tp: np.ndarray, image: np.ndarray, bounds: np.ndarray,
                  weights: np.ndarray, npos: np.ndarray, t: np.ndarray, f: np.ndarray
                  ) -> np.ndarray:
    """AP of every run (rows ``bounds[k]:bounds[k + 1]`` in rank order) under every
    weighting of the images (``weights``: images x resamples, integer multiplicities; a row
    weighs its image's weight, as that many copies of the detection): cumulative weighted
    counts, the precision envelope from the end, each true positive's weight times the
    envelope at its last copy, over ``npos + 1e-12``. The fixed order is never sorted
    again: copies of a detection are tied with it, and ties keep false positives first.

    The counts are integers (``t``, ``f``: a block of resamples' accumulators, of a dtype
    wide enough for the largest weighted run), so the precisions are the float64
    quotients of exact counts, as with float64 sums; narrow integer weights (``uint8``
    when every weight is at most 255) cut the memory each row reads by 8.

    The envelope is taken over the true positives' precisions only: a false positive's
    precision is below the point before it, so it never raises an envelope (nor does a
    true positive of weight 0, whose precision is the point's before it). Resamples advance
    in blocks, the innermost loop running over them (contiguous weights of one image)."""
    n_runs, n_resamples = len(bounds) - 1, weights.shape[1]
    out = np.zeros((n_runs, n_resamples))
    positives = 0
    for k in range(n_runs):
        count = 0
        for d in range(bounds[k], bounds[k + 1]):
            count += tp[d]
        positives = max(positives, count)
    eps = np.finfo(np.float64).eps
    for lo in range(0, n_resamples, RESAMPLE_BLOCK):
        hi = min(lo + RESAMPLE_BLOCK, n_resamples)
        m = hi - lo
        precision = np.empty((positives, m))
        at = np.empty(positives, dtype=np.int64)
        envelope, total = np.empty(m), np.empty(m)
        for k in range(n_runs):
            t[:m] = 0
            f[:m] = 0
            j = 0
            for d in range(bounds[k], bounds[k + 1]):
                w = weights[image[d], lo:hi]
                if tp[d]:
                    for b in range(m):
                        t[b] += w[b]
                        precision[j, b] = t[b] / max(float(t[b] + f[b]), eps)
                    at[j] = d
                    j += 1
                else:
                    for b in range(m):
                        f[b] += w[b]
            envelope[:] = 0.0
            total[:] = 0.0
            for i in range(j - 1, -1, -1):
                w = weights[image[at[i]], lo:hi]
                for b in range(m):
                    envelope[b] = max(envelope[b], precision[i, b])
                    total[b] += w[b] * envelope[b]
            for b in range(m):
                out[k, lo + b] = total[b] / (npos[k, lo + b] + EPS)
    return out
