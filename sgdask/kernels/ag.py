"""Action Genome, one frame at a time: per GT relation the rank of the first candidate
that hits it (``docs/video.md``, section "Action Genome", is the definition; the literal
twin in ``tests/literal/ag.py`` is its plain-Python reading).

One compiled call per frame for all its constraint modes, or one for many frames stacked
(``stacked_first_hits_modes``), no I/O: a frame's rows are built and matched to the GT
pairs once, then each mode's candidates chosen, ranked and matched. Every float is computed
in the reference's order of operations (box IoU with +1, the no-constraint top 100 by box
scores multiplied in their own dtype, the ranking by the float64 product), and ties rank in
candidate order (stable sorts), so the counts equal the twin's exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT
from sgdask.kernels.hits import gt_pair_rows
from sgdask.types_ag import (
    CONSTRAINTS,
    OFFSETS,
    PREDICATES,
    SEMI_THRESHOLD,
    AGFrame,
    AGVideoPred,
)

KS = (10, 20, 50, 100)
IOU = 0.5
NO_CONSTRAINT_TOP = 100
N_PREDICATES = len(PREDICATES)
#: the first hit of a GT relation no candidate hits: beyond every k
NEVER = np.iinfo(np.int64).max


#: the constraint modes as the compiled kernel takes them
_CODES = {constraint: i for i, constraint in enumerate(CONSTRAINTS)}
_WITH, _SEMI, _NO = (_CODES[c] for c in ("with", "semi", "no"))


def _codes(constraints: tuple[str, ...]) -> np.ndarray:
    for constraint in constraints:
        if constraint not in CONSTRAINTS:
            raise ValueError(f"constraint {constraint!r} (expected one of {CONSTRAINTS})")
    return np.array([_CODES[c] for c in constraints], np.int64)


#: every mode, in ``CONSTRAINTS`` order (the protocols ask for all three of a frame)
_ALL_CODES = _codes(CONSTRAINTS)


def frame_first_hits(frame: AGFrame, pred: AGVideoPred, constraint: str,
                     threshold: float = SEMI_THRESHOLD, pairs: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(per GT relation of one frame, the rank of the first candidate that hits it; per GT
    pair of ``pairs`` (rows of ``frame.relations``), the rank of the first candidate on
    it, any predicate), ``NEVER`` for none. ``pred``: the frame's output as a one-frame
    video."""
    return frame_first_hits_modes(frame, pred, (constraint,), threshold, pairs)[0]


def frame_first_hits_modes(frame: AGFrame, pred: AGVideoPred, constraints: tuple[str, ...],
                           threshold: float = SEMI_THRESHOLD, pairs: np.ndarray | None = None
                           ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``frame_first_hits`` under each of ``constraints``, in one compiled pass: the
    frame's rows and which GT relation each row's boxes and classes match are found once,
    then each mode's candidates are chosen, ranked and matched (``_first_hits``)."""
    codes = _ALL_CODES if constraints == CONSTRAINTS else _codes(constraints)
    pair_rows = np.zeros(0, np.int64) if pairs is None else np.asarray(pairs, np.int64)
    first, pair_first = _first_hits(
        np.ascontiguousarray(frame.relations, np.int64), pair_rows,
        np.ascontiguousarray(frame.classes, np.int64),
        np.ascontiguousarray(frame.boxes, np.float64).reshape(-1, 4),
        np.ascontiguousarray(pred.boxes, np.float64).reshape(-1, 4),
        np.ascontiguousarray(pred.labels, np.int64),
        np.ascontiguousarray(pred.scores),
        np.ascontiguousarray(pred.pairs, np.int64).reshape(-1, 2),
        np.ascontiguousarray(pred.attention, np.float64),
        np.ascontiguousarray(pred.spatial, np.float64),
        np.ascontiguousarray(pred.contacting, np.float64),
        codes, float(threshold))
    return list(zip(first, pair_first, strict=True))


def stacked_first_hits_modes(relations: list[np.ndarray], boxes: list[np.ndarray],
                             classes: list[np.ndarray], preds: list[AGVideoPred],
                             threshold: float = SEMI_THRESHOLD, class_offset: int = 0
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``frame_first_hits_modes`` of many frames under every mode (``CONSTRAINTS`` order)
    in one compiled call, frame ``i`` given by its GT arrays (``relations[i]``, ``boxes[i]``
    (n, 4), ``classes[i]`` + ``class_offset``: 1 for the GT store's 0-based categories) and
    its output as a one-frame video ``preds[i]``, its GT pairs its ``gt_pair_rows``. All
    frames' box scores of one dtype (the no-constraint ranking multiplies them in it).

    Returns (``first`` (3, all GT relations), its offsets per frame, ``pair_first`` (3, all
    GT pairs), its offsets): frame ``i``'s ``first[:, offsets[i]:offsets[i + 1]]``."""
    rel_at = _offsets([len(r) for r in relations])
    gt_at = _offsets([len(c) for c in classes])
    relations = _stacked(relations, np.int64, 3)
    boxes = _stacked(boxes, np.float64, 4)
    classes = _stacked(classes, np.int64, None) + class_offset
    pred_boxes = _stacked([p.boxes for p in preds], np.float64, 4)
    pairs = _stacked([p.pairs for p in preds], np.int64, 2)
    pred_scores = [np.asarray(p.scores) for p in preds]
    dtype = pred_scores[0].dtype if pred_scores else np.dtype(np.float64)
    if any(s.dtype != dtype for s in pred_scores):
        raise ValueError("frames' box scores of more than one dtype")
    first, pair_first, pair_offsets = _frames_first_hits(
        relations, rel_at, classes, boxes, gt_at, pred_boxes,
        _stacked([p.labels for p in preds], np.int64, None),
        np.concatenate(pred_scores) if pred_scores else np.zeros(0, dtype),
        _offsets([len(p.labels) for p in preds]), pairs,
        _stacked([p.attention for p in preds], np.float64, 3),
        _stacked([p.spatial for p in preds], np.float64, 6),
        _stacked([p.contacting for p in preds], np.float64, 17),
        _offsets([len(p.pairs) for p in preds]), _ALL_CODES, float(threshold))
    return first, rel_at, pair_first, pair_offsets


def _stacked(arrays: list[np.ndarray], dtype: type, columns: int | None) -> np.ndarray:
    """``arrays`` (each of rows of ``columns``, or 1-d) concatenated as one contiguous
    ``dtype`` array."""
    shape = (-1,) if columns is None else (-1, columns)
    if not arrays:
        return np.zeros((0,) if columns is None else (0, columns), dtype)
    return np.ascontiguousarray(np.concatenate(arrays).astype(dtype, copy=False)
                                .reshape(shape))


def _offsets(sizes: list[int]) -> np.ndarray:
    """CSR offsets of consecutive blocks of ``sizes``."""
    out = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


@njit(**JIT)
def _frames_first_hits(relations: np.ndarray, rel_at: np.ndarray, classes: np.ndarray,
                       boxes: np.ndarray, gt_at: np.ndarray, pred_boxes: np.ndarray,
                       labels: np.ndarray, box_scores: np.ndarray, box_at: np.ndarray,
                       pred_pairs: np.ndarray, attention: np.ndarray, spatial: np.ndarray,
                       contacting: np.ndarray, pair_at: np.ndarray, constraints: np.ndarray,
                       threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_first_hits`` of each frame (its blocks of the stacked arrays: ``*_at`` the CSR
    offsets), its GT pairs ``gt_pair_rows``: (first, pair_first, pair_first's offsets)."""
    n_frames = rel_at.shape[0] - 1
    first = np.empty((len(constraints), relations.shape[0]), np.int64)
    pair_first = np.empty((len(constraints), relations.shape[0]), np.int64)
    pair_out = np.zeros(n_frames + 1, np.int64)
    for f in range(n_frames):
        a, b = rel_at[f], rel_at[f + 1]
        c, d = gt_at[f], gt_at[f + 1]
        e, g = box_at[f], box_at[f + 1]
        h, i = pair_at[f], pair_at[f + 1]
        frame_relations = relations[a:b]
        rows = gt_pair_rows(frame_relations, d - c)
        found, pair_found = _first_hits(
            frame_relations, rows, classes[c:d], boxes[c:d], pred_boxes[e:g], labels[e:g],
            box_scores[e:g], pred_pairs[h:i], attention[h:i], spatial[h:i],
            contacting[h:i], constraints, threshold)
        first[:, a:b] = found
        pair_out[f + 1] = pair_out[f] + len(rows)
        pair_first[:, pair_out[f]:pair_out[f + 1]] = pair_found
    return first, pair_first[:, :pair_out[n_frames]].copy(), pair_out


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
def _rows(pairs: np.ndarray, attention: np.ndarray, spatial: np.ndarray,
          contacting: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(subjects, objects, scores (3p, 26)) of a frame's rows: its attention rows, spatial
    rows (subject and object swapped), contacting rows, each in pair order, zero outside
    their kind."""
    p = pairs.shape[0]
    subjects = np.empty(3 * p, np.int64)
    objects = np.empty(3 * p, np.int64)
    scores = np.zeros((3 * p, N_PREDICATES), np.float64)
    for kind, dist in enumerate((attention, spatial, contacting)):
        for i in range(p):
            r = kind * p + i
            s, o = pairs[i, 0], pairs[i, 1]
            subjects[r], objects[r] = (o, s) if kind == 1 else (s, o)
            for j in range(dist.shape[1]):
                scores[r, OFFSETS[kind] + j] = dist[i, j]
    return subjects, objects, scores


@njit(**JIT)
def _chosen(scores: np.ndarray, box_scores: np.ndarray, subjects: np.ndarray,
            objects: np.ndarray, constraint: int, threshold: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """(row, predicate) of the candidates the constraint keeps, in the reference's
    candidate order: row by row under ``with`` and ``semi``; under ``no`` the best
    ``NO_CONSTRAINT_TOP`` (row, predicate) by the box scores multiplied in their own dtype,
    times the predicate score, ties in row-major order."""
    n = scores.shape[0]
    if constraint == _NO:
        overall = np.empty(n * N_PREDICATES, np.float64)
        for r in range(n):
            both = np.float64(box_scores[subjects[r]] * box_scores[objects[r]])
            for p in range(N_PREDICATES):
                overall[r * N_PREDICATES + p] = -(both * scores[r, p])
        top = np.argsort(overall, kind="mergesort")[:NO_CONSTRAINT_TOP]
        return top // N_PREDICATES, top % N_PREDICATES
    keep = np.zeros(scores.shape, np.bool_)
    for r in range(n):
        row = scores[r]
        attention = row[0] + row[1] > 0
        if constraint == _WITH or attention:
            keep[r, np.argmax(row)] = True
        elif constraint == _SEMI and (row[3] + row[4] > 0 or row[9] + row[10] > 0):
            for p in range(N_PREDICATES):
                keep[r, p] = row[p] > threshold
    found = np.nonzero(keep)
    return found[0], found[1]


@njit(**JIT)
def _first_hits(relations: np.ndarray, pairs: np.ndarray, classes: np.ndarray,
                boxes: np.ndarray, pred_boxes: np.ndarray, labels: np.ndarray,
                box_scores: np.ndarray, pred_pairs: np.ndarray, attention: np.ndarray,
                spatial: np.ndarray, contacting: np.ndarray, constraints: np.ndarray,
                threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """``frame_first_hits_modes``, one row of ``first`` and ``pair_first`` per mode:
    candidates ranked by subject x object x predicate score in float64 from the best, ties
    in candidate order; a candidate hits a GT relation when its predicate, both classes and
    both boxes (IoU >= 0.5) match, a GT pair (a row of ``relations``) when the classes and
    boxes do, any predicate."""
    subjects, objects, scores = _rows(pred_pairs, attention, spatial, contacting)
    n_rel, n_pairs, n_rows = relations.shape[0], pairs.shape[0], len(subjects)
    on_pair = np.zeros((n_rel, n_rows), dtype=np.bool_)
    for g in range(n_rel):
        gs, go = relations[g, 0], relations[g, 1]
        for r in range(n_rows):
            s, o = subjects[r], objects[r]
            on_pair[g, r] = (classes[gs] == labels[s] and classes[go] == labels[o]
                             and _box_iou(boxes[gs], pred_boxes[s]) >= IOU
                             and _box_iou(boxes[go], pred_boxes[o]) >= IOU)
    first = np.full((len(constraints), n_rel), NEVER, dtype=np.int64)
    pair_first = np.full((len(constraints), n_pairs), NEVER, dtype=np.int64)
    for m in range(len(constraints)):
        row, predicate = _chosen(scores, box_scores, subjects, objects, constraints[m],
                                 threshold)
        n_cand = len(row)
        negated = np.empty(n_cand, np.float64)
        for c in range(n_cand):
            r = row[c]
            negated[c] = -(np.float64(box_scores[subjects[r]])
                           * np.float64(box_scores[objects[r]]) * scores[r, predicate[c]])
        rank = np.empty(n_cand, np.int64)
        rank[np.argsort(negated, kind="mergesort")] = np.arange(n_cand)
        for g in range(n_rel):
            for c in range(n_cand):
                if (on_pair[g, row[c]] and relations[g, 2] == predicate[c]
                        and rank[c] < first[m, g]):
                    first[m, g] = rank[c]
        for q in range(n_pairs):
            g = pairs[q]
            for c in range(n_cand):
                if on_pair[g, row[c]] and rank[c] < pair_first[m, q]:
                    pair_first[m, q] = rank[c]
    return first, pair_first


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
