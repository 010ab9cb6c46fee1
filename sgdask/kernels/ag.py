"""Action Genome, one video at a time: per frame and k, the GT relations hit, counted by
predicate (``docs/video.md``, section "Action Genome", is the definition; the literal twin
in ``tests/literal_ag.py`` is its plain-Python reading).

Vectorised numpy, no I/O. Every float is computed in the reference's order of operations
(box IoU with +1, the no-constraint top 100 by box scores multiplied in their own dtype, the
ranking by the float64 product), and ties rank in candidate order (stable sorts), so the
counts equal the twin's exactly.
"""

from __future__ import annotations

import numpy as np

from sgdask.types_ag import CONSTRAINTS, OFFSETS, PREDICATES, AGFrame, AGVideo, AGVideoPred

KS = (10, 20, 50, 100)
IOU = 0.5
SEMI_THRESHOLD = 0.9
NO_CONSTRAINT_TOP = 100
N_PREDICATES = len(PREDICATES)
#: the first hit of a GT relation no candidate hits: beyond every k
NEVER = np.iinfo(np.int64).max


def video_counts(video: AGVideo, pred: AGVideoPred, constraint: str,
                 ks: tuple[int, ...] = KS, threshold: float = SEMI_THRESHOLD
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(hits, gt): ``hits[f, i, p]`` the GT relations of predicate p in frame f hit by the
    first ``ks[i]`` candidates, ``gt[f, p]`` the frame's GT relations of predicate p."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint {constraint!r} (expected one of {CONSTRAINTS})")
    order = np.argsort(pred.frames, kind="stable")
    bounds = np.searchsorted(pred.frames[order], np.arange(len(video.frames) + 1))
    hits = np.zeros((len(video.frames), len(ks), N_PREDICATES), dtype=np.int64)
    gt = np.zeros((len(video.frames), N_PREDICATES), dtype=np.int64)
    for f, frame in enumerate(video.frames):
        hits[f], gt[f] = frame_counts(frame, pred, order[bounds[f]:bounds[f + 1]], constraint,
                                      ks, threshold)
    return hits, gt


def frame_counts(frame: AGFrame, pred: AGVideoPred, pairs: np.ndarray, constraint: str,
                 ks: tuple[int, ...] = KS, threshold: float = SEMI_THRESHOLD
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(hits (len(ks), 26), gt (26,)) of one frame whose predicted pairs are ``pairs``
    (indices into the video's pairs, in pair order)."""
    predicates = frame.relations[:, 2]
    gt = np.bincount(predicates, minlength=N_PREDICATES)
    subjects, objects, predicate = ranked(pred, pairs, constraint, threshold)
    first = first_hits(frame, pred, subjects, objects, predicate)
    hits = np.stack([np.bincount(predicates[first < k], minlength=N_PREDICATES) for k in ks])
    return hits, gt


def rows(pred: AGVideoPred, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(subjects, objects, scores (3n, 26)): attention rows, spatial rows (subject and
    object swapped), contacting rows, each in pair order, zero outside their kind."""
    n = len(pairs)
    s, o = pred.pairs[pairs, 0], pred.pairs[pairs, 1]
    scores = np.zeros((3 * n, N_PREDICATES), dtype=np.float64)
    for kind, dist in enumerate((pred.attention, pred.spatial, pred.contacting)):
        scores[kind * n:(kind + 1) * n, OFFSETS[kind]:OFFSETS[kind] + dist.shape[1]] = \
            dist[pairs]
    return np.concatenate([s, o, s]), np.concatenate([o, s, o]), scores


def candidates(pred: AGVideoPred, pairs: np.ndarray, constraint: str,
               threshold: float = SEMI_THRESHOLD
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(subjects, objects, predicates, predicate scores) before ranking, in the reference's
    candidate order."""
    subjects, objects, scores = rows(pred, pairs)
    if constraint == "no":
        both = pred.scores[subjects] * pred.scores[objects]  # in the scores' own dtype
        overall = (both[:, None] * scores).ravel()
        top = np.argsort(-overall, kind="stable")[:NO_CONSTRAINT_TOP]
        row, column = np.divmod(top, N_PREDICATES)
        return subjects[row], objects[row], column, scores[row, column]
    best = np.zeros(scores.shape, dtype=bool)
    if len(scores):
        best[np.arange(len(scores)), scores.argmax(1)] = True
    if constraint == "with":
        chosen = best
    else:
        attention = scores[:, 0] + scores[:, 1] > 0
        other = ~attention & ((scores[:, 3] + scores[:, 4] > 0)
                              | (scores[:, 9] + scores[:, 10] > 0))
        chosen = (best & attention[:, None]) | ((scores > threshold) & other[:, None])
    row, column = np.nonzero(chosen)
    return subjects[row], objects[row], column, scores[row, column]


def ranked(pred: AGVideoPred, pairs: np.ndarray, constraint: str,
           threshold: float = SEMI_THRESHOLD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(subjects, objects, predicates) of the candidates from the best, by subject x object
    x predicate score in float64, ties in candidate order."""
    subjects, objects, predicate, value = candidates(pred, pairs, constraint, threshold)
    score = (pred.scores[subjects].astype(np.float64)
             * pred.scores[objects].astype(np.float64) * value)
    order = np.argsort(-score, kind="stable")
    return subjects[order], objects[order], predicate[order]


def first_hits(frame: AGFrame, pred: AGVideoPred, subjects: np.ndarray, objects: np.ndarray,
               predicate: np.ndarray) -> np.ndarray:
    """Per GT relation, the rank of the first candidate that hits it (``NEVER`` if none
    does): same predicate and classes, both boxes at IoU >= 0.5."""
    gs, go, gp = frame.relations.T
    hit = ((gp[:, None] == predicate[None])
           & (frame.classes[gs][:, None] == pred.labels[subjects][None])
           & (frame.classes[go][:, None] == pred.labels[objects][None]))
    hit &= iou(frame.boxes[gs], pred.boxes[subjects]) >= IOU
    hit &= iou(frame.boxes[go], pred.boxes[objects]) >= IOU
    if not len(subjects):
        return np.full(len(gp), NEVER)
    return np.where(hit.any(1), hit.argmax(1), NEVER)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (GT) with every box of ``b``, +1 pixel convention, in the
    reference's order of operations."""
    a, b = a[:, None, :], b[None, :, :]
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + 1
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + 1
    b_area = (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)
    union = (a[..., 2] - a[..., 0] + 1) * (a[..., 3] - a[..., 1] + 1) + b_area - iw * ih
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
