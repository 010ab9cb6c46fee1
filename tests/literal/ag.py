"""Action Genome's R@k and mR@k, written in plain Python from the definition: the literal
twin the golden values and any faster implementation are checked against.

The definition is STTran's ``lib/evaluation_recall.py`` (``evaluate_scene_graph``,
``evaluate_from_dict``, ``evaluate_recall``) for R@k and TEMPURA's ``calc_mrecall``
(``sayaknag/unbiasedSGG``) for mR@k (``docs/video.md``, section "Action Genome"):

- per GT frame, three rows per predicted pair of that frame: the attention distribution for
  (subject, object), the spatial one for (object, subject), the contacting one for
  (subject, object); each row spans all 26 predicates, zero outside its kind;
- ``with``: each row's best predicate; ``semi``: an attention row (its first two scores sum
  above 0) gives its best predicate, a spatial row (scores 3 and 4 sum above 0) or a
  contacting row (scores 9 and 10) every predicate scored above the threshold, any other
  row nothing; ``no``: the 100 best (row, predicate) by subject score x object score x
  predicate score, the box scores multiplied in their own dtype first;
- candidates ranked by subject x object x predicate score (float64) from the best, ties in
  candidate order (the reference sorts without a stable order: see the docs);
- a GT relation is hit by a candidate of its classes and predicate whose subject and object
  boxes both reach IoU >= 0.5 (+1 pixel convention); R@k of a frame is the share of its GT
  relations hit by the first k; R@k of the data set the mean over all GT frames;
- mR@k: hits and GT relations pooled over frames per predicate, hits / relations averaged
  over all 26 predicates, a predicate without GT relations counting 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sgdask.types_ag import OFFSETS, PREDICATES, AGFrame, AGVideo, AGVideoPred

KS = (10, 20, 50, 100)
IOU = 0.5
SEMI_THRESHOLD = 0.9
#: candidates kept per frame under no constraint
NO_CONSTRAINT_TOP = 100


def iou(a: list[float], b: list[float]) -> float:
    """Box IoU with the +1 pixel convention, in the reference's order of operations
    (``a`` the GT box, ``b`` the predicted one)."""
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    if iw <= 0:
        return 0.0
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if ih <= 0:
        return 0.0
    b_area = (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    union = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + b_area - iw * ih
    return iw * ih / union


def rows(pred: AGVideoPred, frame: int) -> list[tuple[int, int, list[float]]]:
    """(subject, object, 26 scores) of the frame's rows: attention rows, spatial rows
    (object and subject swapped), contacting rows, each in pair order."""
    pairs = [i for i in range(len(pred.frames)) if int(pred.frames[i]) == frame]
    out = []
    for kind, dist in enumerate((pred.attention, pred.spatial, pred.contacting)):
        for i in pairs:
            s, o = int(pred.pairs[i][0]), int(pred.pairs[i][1])
            if kind == 1:
                s, o = o, s
            scores = [0.0] * len(PREDICATES)
            for j, value in enumerate(dist[i]):
                scores[OFFSETS[kind] + j] = float(value)
            out.append((s, o, scores))
    return out


def candidates(pred: AGVideoPred, frame: int, constraint: str,
               threshold: float = SEMI_THRESHOLD) -> list[tuple[int, int, int, float]]:
    """(subject, object, predicate, predicate score) of the frame under ``constraint``,
    before ranking."""
    out = []
    frame_rows = rows(pred, frame)
    if constraint == "with":
        for s, o, scores in frame_rows:
            best = max(scores)
            out.append((s, o, scores.index(best), best))
    elif constraint == "semi":
        for s, o, scores in frame_rows:
            if scores[0] + scores[1] > 0:
                best = max(scores)
                out.append((s, o, scores.index(best), best))
            elif scores[3] + scores[4] > 0 or scores[9] + scores[10] > 0:
                out += [(s, o, p, v) for p, v in enumerate(scores) if v > threshold]
    else:
        entries = []
        for s, o, scores in frame_rows:
            both = pred.scores[s] * pred.scores[o]  # numpy scalars: the scores' own dtype
            for p, v in enumerate(scores):
                entries.append((float(both * np.float64(v)), s, o, p, v))
        ranked = sorted(range(len(entries)), key=lambda i: -entries[i][0])
        out = [entries[i][1:] for i in ranked[:NO_CONSTRAINT_TOP]]
    return out


def frame_hits(frame: AGFrame, pred: AGVideoPred, index: int, constraint: str,
               ks: tuple[int, ...] = KS, threshold: float = SEMI_THRESHOLD
               ) -> dict[int, set[int]]:
    """k -> the GT relations (row indices) hit by the frame's first k ranked candidates."""
    cands = candidates(pred, index, constraint, threshold)
    score = [float(pred.scores[s]) * float(pred.scores[o]) * v for s, o, _, v in cands]
    order = sorted(range(len(cands)), key=lambda i: -score[i])
    matched: list[set[int]] = []
    for i in order:
        s, o, p, _ = cands[i]
        hit = set()
        for g, (gs, go, gp) in enumerate(frame.relations.tolist()):
            if (gp == p and int(frame.classes[gs]) == int(pred.labels[s])
                    and int(frame.classes[go]) == int(pred.labels[o])
                    and iou(frame.boxes[gs].tolist(), pred.boxes[s].tolist()) >= IOU
                    and iou(frame.boxes[go].tolist(), pred.boxes[o].tolist()) >= IOU):
                hit.add(g)
        matched.append(hit)
    return {k: set().union(*matched[:k]) for k in ks}


def evaluate(videos: list[AGVideo], preds: Mapping[str, AGVideoPred], constraint: str,
             ks: tuple[int, ...] = KS, threshold: float = SEMI_THRESHOLD
             ) -> dict[str, float]:
    """R@k (mean over frames) and mR@k (pooled per predicate, over all 26) of the data set."""
    recalls: dict[int, list[float]] = {k: [] for k in ks}
    hits = {k: [0] * len(PREDICATES) for k in ks}
    counts = [0] * len(PREDICATES)
    for video in videos:
        for index, frame in enumerate(video.frames):
            found = frame_hits(frame, preds[video.name], index, constraint, ks, threshold)
            predicates = [int(p) for p in frame.relations[:, 2]]
            for p in predicates:
                counts[p] += 1
            for k in ks:
                recalls[k].append(len(found[k]) / len(predicates))
                for g in found[k]:
                    hits[k][predicates[g]] += 1
    out = {}
    for k in ks:
        out[f"R@{k}"] = sum(recalls[k]) / len(recalls[k])
        out[f"mR@{k}"] = sum(h / c if c else 0.0 for h, c in zip(hits[k], counts, strict=True)
                             ) / len(PREDICATES)
    return out
