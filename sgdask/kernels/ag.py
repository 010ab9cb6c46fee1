"""Action Genome, one video at a time: per frame and k, the GT relations hit, counted by
predicate (``docs/video.md``, section "Action Genome", is the definition; the literal twin
in ``tests/literal/ag.py`` is its plain-Python reading).

Vectorised numpy over a whole video, no I/O: the rows of every frame are built, chosen,
ranked and matched in one pass (stable sorts keyed by frame first), so a frame costs no
Python call. Every float is computed in the reference's order of operations (box IoU with
+1, the no-constraint top 100 by box scores multiplied in their own dtype, the ranking by
the float64 product), and ties rank in candidate order, so the counts equal the twin's
exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT
from sgdask.types_ag import (
    CONSTRAINTS,
    OFFSETS,
    PREDICATES,
    SEMI_THRESHOLD,
    AGFrame,
    AGVideo,
    AGVideoPred,
)

KS = (10, 20, 50, 100)
IOU = 0.5
NO_CONSTRAINT_TOP = 100
N_PREDICATES = len(PREDICATES)
#: the first hit of a GT relation no candidate hits: beyond every k
NEVER = np.iinfo(np.int64).max


def video_counts(video: AGVideo, pred: AGVideoPred, constraint: str,
                 ks: tuple[int, ...] = KS, threshold: float = SEMI_THRESHOLD
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(hits, gt): ``hits[f, i, p]`` the GT relations of predicate p in frame f hit by the
    first ``ks[i]`` candidates of the frame, ``gt[f, p]`` its GT relations of predicate p."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint {constraint!r} (expected one of {CONSTRAINTS})")
    n_frames = len(video.frames)
    frame, subjects, objects, predicate, rank = ranked(pred, constraint, threshold)
    gt_frame, gs, go, gp, gt_boxes, gt_classes = gt_relations(video)
    first = first_hits(gt_frame * N_PREDICATES + gp, frame * N_PREDICATES + predicate, rank,
                       (gt_classes[gs], pred.labels[subjects], gt_classes[go],
                        pred.labels[objects]),
                       (gt_boxes[gs], pred.boxes[subjects], gt_boxes[go], pred.boxes[objects]))
    cell = gt_frame * N_PREDICATES + gp
    size = n_frames * N_PREDICATES
    hits = np.stack([np.bincount(cell[first < k], minlength=size) for k in ks], axis=1)
    return (hits.reshape(n_frames, N_PREDICATES, len(ks)).transpose(0, 2, 1),
            np.bincount(cell, minlength=size).reshape(n_frames, N_PREDICATES))


def frame_first_hits(frame: AGFrame, pred: AGVideoPred, constraint: str,
                     threshold: float = SEMI_THRESHOLD, pairs: np.ndarray | None = None,
                     built: tuple[np.ndarray, ...] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(per GT relation of one frame, the rank of the first candidate that hits it; per GT
    pair of ``pairs`` (rows of ``frame.relations``), the rank of the first candidate on
    it, any predicate), ``NEVER`` for none. ``pred``: the frame's output as a one-frame
    video; its candidates ranked as ``video_counts`` ranks them, matched by
    ``_frame_matches`` (``first_hits``' rule, compiled: a frame's arrays are small);
    ``built``: ``rows(pred)``, when the constraint modes of a frame share it."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint {constraint!r} (expected one of {CONSTRAINTS})")
    _, subjects, objects, predicate, rank = ranked(pred, constraint, threshold, built)
    pair_rows = np.zeros(0, np.int64) if pairs is None else np.asarray(pairs, np.int64)
    return _frame_matches(
        np.ascontiguousarray(frame.relations, np.int64), pair_rows,
        np.ascontiguousarray(frame.classes, np.int64),
        np.ascontiguousarray(frame.boxes, np.float64),
        np.ascontiguousarray(pred.labels[subjects], np.int64),
        np.ascontiguousarray(pred.labels[objects], np.int64),
        np.ascontiguousarray(pred.boxes[subjects], np.float64).reshape(-1, 4),
        np.ascontiguousarray(pred.boxes[objects], np.float64).reshape(-1, 4),
        np.ascontiguousarray(predicate, np.int64), np.ascontiguousarray(rank, np.int64))


@njit(**JIT)
def _box_iou(a: np.ndarray, b: np.ndarray) -> float:
    """``iou`` of one GT box ``a`` and one predicted box ``b``, the same operations in the
    same order."""
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if not (iw > 0 and ih > 0):
        return 0.0
    b_area = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    union = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + b_area - iw * ih
    return iw * ih / union


@njit(**JIT)
def _frame_matches(relations: np.ndarray, pairs: np.ndarray, classes: np.ndarray,
                   boxes: np.ndarray, c_subject: np.ndarray, c_object: np.ndarray,
                   c_subject_box: np.ndarray, c_object_box: np.ndarray,
                   c_predicate: np.ndarray, rank: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The first-hit ranks of ``frame_first_hits``: a candidate hits a GT relation when
    its predicate, both classes and both boxes (IoU >= 0.5) match; a GT pair (a row of
    ``relations``) when the classes and boxes do, any predicate."""
    n_rel, n_pairs, n_cand = relations.shape[0], pairs.shape[0], len(rank)
    first = np.full(n_rel, NEVER, dtype=np.int64)
    pair_first = np.full(n_pairs, NEVER, dtype=np.int64)
    on_pair = np.zeros((n_rel, n_cand), dtype=np.bool_)
    for g in range(n_rel):
        gs, go = relations[g, 0], relations[g, 1]
        for c in range(n_cand):
            if (classes[gs] == c_subject[c] and classes[go] == c_object[c]
                    and _box_iou(boxes[gs], c_subject_box[c]) >= IOU
                    and _box_iou(boxes[go], c_object_box[c]) >= IOU):
                on_pair[g, c] = True
                if relations[g, 2] == c_predicate[c] and rank[c] < first[g]:
                    first[g] = rank[c]
    for q in range(n_pairs):
        g = pairs[q]
        for c in range(n_cand):
            if on_pair[g, c] and rank[c] < pair_first[q]:
                pair_first[q] = rank[c]
    return first, pair_first


def gt_relations(video: AGVideo) -> tuple[np.ndarray, ...]:
    """The video's GT relations (frame, subject, object, predicate; subject and object as
    rows of the video's stacked GT boxes), the stacked boxes and classes."""
    offsets = np.cumsum([0] + [len(f.boxes) for f in video.frames])
    relations = [f.relations for f in video.frames]
    frame = np.repeat(np.arange(len(relations)), [len(r) for r in relations])
    stacked = np.concatenate(relations) if relations else np.zeros((0, 3), np.int64)
    boxes = (np.concatenate([f.boxes for f in video.frames]) if video.frames
             else np.zeros((0, 4)))
    classes = (np.concatenate([f.classes for f in video.frames]) if video.frames
               else np.zeros(0, np.int64))
    return (frame, stacked[:, 0] + offsets[frame], stacked[:, 1] + offsets[frame],
            stacked[:, 2], boxes, classes)


def rows(pred: AGVideoPred) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(frame, subjects, objects, scores (3p, 26)) of every row: per frame its attention
    rows, spatial rows (subject and object swapped), contacting rows, each in pair order,
    zero outside their kind."""
    p = len(pred.pairs)
    kind, pair = np.repeat(np.arange(3), p), np.tile(np.arange(p), 3)
    order = np.lexsort((pair, kind, pred.frames[pair]))
    kind, pair = kind[order], pair[order]
    s, o = pred.pairs[pair, 0], pred.pairs[pair, 1]
    swapped = kind == 1
    scores = np.zeros((3 * p, N_PREDICATES), dtype=np.float64)
    for k, dist in enumerate((pred.attention, pred.spatial, pred.contacting)):
        mine = kind == k
        scores[mine, OFFSETS[k]:OFFSETS[k] + dist.shape[1]] = dist[pair[mine]]
    return (pred.frames[pair], np.where(swapped, o, s), np.where(swapped, s, o), scores)


def candidates(pred: AGVideoPred, constraint: str, threshold: float = SEMI_THRESHOLD,
               built: tuple[np.ndarray, ...] | None = None) -> tuple[np.ndarray, ...]:
    """(frame, subjects, objects, predicates, predicate scores) before ranking, each
    frame's in the reference's candidate order, frames in order (``built``: ``rows(pred)``
    if already built)."""
    frame, subjects, objects, scores = rows(pred) if built is None else built
    if constraint == "no":
        both = pred.scores[subjects] * pred.scores[objects]  # in the scores' own dtype
        overall = (both[:, None] * scores).ravel()
        entry_frame = np.repeat(frame, N_PREDICATES)
        order = np.lexsort((-overall, entry_frame))
        top = order[_within_group(entry_frame[order]) < NO_CONSTRAINT_TOP]
        row, column = np.divmod(top, N_PREDICATES)
    else:
        chosen = np.zeros(scores.shape, dtype=bool)
        if len(scores):
            chosen[np.arange(len(scores)), scores.argmax(1)] = True
        if constraint == "semi":
            attention = scores[:, 0] + scores[:, 1] > 0
            other = ~attention & ((scores[:, 3] + scores[:, 4] > 0)
                                  | (scores[:, 9] + scores[:, 10] > 0))
            chosen = (chosen & attention[:, None]) | ((scores > threshold) & other[:, None])
        row, column = np.nonzero(chosen)
    return frame[row], subjects[row], objects[row], column, scores[row, column]


def ranked(pred: AGVideoPred, constraint: str, threshold: float = SEMI_THRESHOLD,
           built: tuple[np.ndarray, ...] | None = None) -> tuple[np.ndarray, ...]:
    """(frame, subjects, objects, predicates, rank in the frame) of the candidates, each
    frame's from the best by subject x object x predicate score in float64, ties in
    candidate order."""
    frame, subjects, objects, predicate, value = candidates(pred, constraint, threshold,
                                                            built)
    score = (pred.scores[subjects].astype(np.float64)
             * pred.scores[objects].astype(np.float64) * value)
    order = np.lexsort((-score, frame))
    return (frame[order], subjects[order], objects[order], predicate[order],
            _within_group(frame[order]))


def _within_group(keys: np.ndarray) -> np.ndarray:
    """Each position's index among the equal keys before it (``keys`` sorted)."""
    return np.arange(len(keys)) - np.searchsorted(keys, keys, side="left")


def first_hits(gt_keys: np.ndarray, keys: np.ndarray, rank: np.ndarray,
               classes: tuple[np.ndarray, ...], boxes: tuple[np.ndarray, ...]) -> np.ndarray:
    """Per GT relation, the rank of the first candidate of its frame and predicate (same
    ``keys``) that hits it: both classes equal, both boxes at IoU >= 0.5 (``NEVER`` if
    none). ``classes`` and ``boxes``: (GT subject, candidate subject, GT object, candidate
    object), indexed like ``gt_keys`` and ``keys``."""
    by_key = np.argsort(keys, kind="stable")
    lo = np.searchsorted(keys[by_key], gt_keys, side="left")
    hi = np.searchsorted(keys[by_key], gt_keys, side="right")
    counts = hi - lo
    g = np.repeat(np.arange(len(gt_keys)), counts)
    c = by_key[np.repeat(lo, counts) + _within_group(g)]
    gs_cls, cs_cls, go_cls, co_cls = classes
    gs_box, cs_box, go_box, co_box = boxes
    hit = ((gs_cls[g] == cs_cls[c]) & (go_cls[g] == co_cls[c])
           & (iou(gs_box[g], cs_box[c]) >= IOU) & (iou(go_box[g], co_box[c]) >= IOU))
    first = np.full(len(gt_keys), NEVER)
    np.minimum.at(first, g[hit], rank[c[hit]])
    return first


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each GT box of ``a`` with the box of ``b`` in the same row, +1 pixel
    convention, in the reference's order of operations."""
    iw = np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]) + 1
    ih = np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]) + 1
    b_area = (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)
    union = (a[:, 2] - a[:, 0] + 1) * (a[:, 3] - a[:, 1] + 1) + b_area - iw * ih
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((iw > 0) & (ih > 0), iw * ih / union, 0.0)


def metrics(hits: np.ndarray, gt: np.ndarray, ks: tuple[int, ...] = KS) -> dict[str, float]:
    """R@k (mean over frames of hits / GT relations) and mR@k (hits and GT relations pooled
    per predicate, averaged over all 26, a predicate without GT counting 0) of frames'
    counts stacked along the first axis."""
    frame_gt = gt.sum(1)
    pooled_gt = gt.sum(0)
    out = {}
    for i, k in enumerate(ks):
        out[f"R@{k}"] = float(np.mean(hits[:, i].sum(1) / frame_gt))
        pooled = hits[:, i].sum(0)
        present = pooled_gt > 0
        out[f"mR@{k}"] = float((pooled[present] / pooled_gt[present]).sum() / N_PREDICATES)
    return out
