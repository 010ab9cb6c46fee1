"""Open Images V6 (``oiv6``, SPEC 5.6): pooled recall and average precision over the test
set, as ``eval_rel_results`` and ``ap_eval_rel`` of RelDN / BGNN (PySGG) compute them.

- ``R@50``: every GT relation hit by one of its image's first 50 candidates, over every
  GT relation of the evaluated images: ``float(hits) / (float(GT) + 1e-12)``;
- ``AP_rel`` / ``AP_phr`` (per predicate, in ``per_predicate.parquet``): VOC average
  precision (all-point interpolation) of the predicate's candidates of the whole test set
  ranked by score, true positives as ``sgdask.protocols.oiv6.kernels`` marks them per image; recall
  divides by ``npos + 1e-12``; a predicate without GT has AP 0;
- ``mAP_rel`` / ``mAP_phr``: the plain means over every predicate of the vocabulary;
  ``wmAP_rel`` / ``wmAP_phr``: weighted by each predicate's share of the GT relations;
- ``score_wtd = 0.4 wmAP_rel + 0.2 R@50 + 0.4 wmAP_phr`` (the reference's order of adding).

State (``sgdask.metrics.state``): ``DETECTIONS`` (``FlaggedRuns``: one row per candidate,
its two true-positive flags packed with its image key), in its final form per key ``2 p +
kind`` (kind 0 relationship, 1 phrase) one row ``(-score, true positive, image key)`` per
candidate of predicate p; ``GT_ROWS``, per predicate one row ``(GT relations, of them hit
at 50, image key)`` per image. Both merge by concatenation and sort canonically, so any
partitioning gives the same run. The canonical order is the ranking: score descending and,
among equal scores, **false positives first**. The reference sorts with numpy's unstable
``argsort``, which leaves the order of equal scores to the numpy version and the CPU; of
its possible orders sgdask takes the one that gives the lowest AP (a model gains nothing
from ties), and the report counts the tied detections whose order could move the AP
(``ap_tied_rel``, ``ap_tied_phr``: detections sharing predicate and score with a detection
of the other true-positive status). Which image a detection comes from (its key: 48 bits
of the SHA-256 of the image id) never orders it; it lets the bootstrap weight images.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from sgdask.metrics.base import DERIVED, Context, Family, Finals, HitsBatch, Metric, Terms
from sgdask.metrics.state import FlaggedRuns, Runs, StateRows
from sgdask.types import Detections, ImageHits

K = 50
REL, PHR = 0, 1
KINDS = {REL: "rel", PHR: "phr"}
DETECTIONS = FlaggedRuns("oiv6_detections")
GT_ROWS = Runs("oiv6_gt", 3)
EPS = 1e-12  # the reference's guard in both recalls' denominators
NEED = ("oiv6",)
METRICS = (
    Metric("R", DERIVED, "Open Images V6 recall: GT relations hit by one of their image's "
           "first 50 candidates over all GT relations (pooled, not per image)", needs=NEED),
    Metric("mAP_rel", DERIVED, "mean relationship AP over the predicate vocabulary",
           per_k=False, needs=NEED),
    Metric("wmAP_rel", DERIVED, "relationship AP weighted by each predicate's share of the "
           "GT relations", per_k=False, needs=NEED),
    Metric("mAP_phr", DERIVED, "mean phrase AP (union boxes) over the predicate vocabulary",
           per_k=False, needs=NEED),
    Metric("wmAP_phr", DERIVED, "phrase AP weighted by each predicate's share of the GT "
           "relations", per_k=False, needs=NEED),
    Metric("score_wtd", DERIVED, "0.4 wmAP_rel + 0.2 R@50 + 0.4 wmAP_phr (the Open Images "
           "V6 leaderboard's number)", per_k=False, needs=NEED),
)


def _image_key(image_id: str) -> float:
    """A number naming the image in state rows: 48 bits of its id's SHA-256 (exact in a
    float64)."""
    return float(int.from_bytes(hashlib.sha256(image_id.encode()).digest()[:6], "big"))


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    """The image's state rows: its candidates (none for an image without prediction) and
    per predicate its GT relations and how many of them the first 50 candidates hit."""
    key = _image_key(hits.image_id)
    predicates, counts = np.unique(hits.predicates, return_counts=True)
    hit = np.bincount(np.searchsorted(predicates, hits.predicates),
                      weights=hits.graph_first < K, minlength=len(predicates))
    gt = GT_ROWS.rows(predicates, np.stack([counts, hit, np.full(len(counts), key)], 1))
    det = hits.detections
    if det is None or not len(det):
        return Terms(states=[gt, DETECTIONS.empty()])
    return Terms(states=[gt, _detection_rows(det, np.full(len(det), key))])


def _detection_rows(det: Detections, keys: np.ndarray) -> StateRows:
    """``DETECTIONS`` rows of candidates from images of these keys: one per candidate,
    its two true-positive flags and its image's key packed in one exact float."""
    code = det.tp_rel.astype(np.float64) * (1 << REL) + det.tp_phr * (1 << PHR) + 4.0 * keys
    return DETECTIONS.rows(det.predicates, np.stack([-det.scores.astype(np.float64), code], 1))


def batch_terms(batch: HitsBatch, ctx: Context) -> list[StateRows]:
    """``image_terms`` of every image of a partition at once (the same rows, in image
    order)."""
    keys = np.array([_image_key(i) for i in batch.image_ids])
    hit = np.bincount(batch.group, weights=batch.graph_first < K,
                      minlength=len(batch.group_count))
    gt = GT_ROWS.rows(batch.group_predicate,
                      np.stack([batch.group_count, hit, keys[batch.group_image]], 1))
    if batch.detections is None or batch.d_image is None:
        return [gt, DETECTIONS.empty()]
    return [gt, _detection_rows(batch.detections, keys[batch.d_image])]


def _average_precision(tp: np.ndarray, npos: float) -> float:
    """``ap_eval``'s AP of true-positive flags in rank order (float64, its operations in
    its order: cumulative sums, recall over ``npos + 1e-12``, the precision envelope, the
    sum over recall changes)."""
    tp = np.asarray(tp, dtype=np.float64)
    fp = np.cumsum(1.0 - tp)
    tp = np.cumsum(tp)
    rec = tp / (float(npos) + EPS)
    prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    mrec = np.concatenate(([0.0], rec, [1.0]))
    mpre = np.concatenate(([0.0], prec, [0.0]))
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def _vocabulary(finals: Finals, ctx: Context) -> int:
    """Predicates of the vocabulary (the GT's; else the largest predicate seen + 1)."""
    if ctx.n_predicates:
        return ctx.n_predicates
    gt = finals.state(GT_ROWS.name) or {}
    det = finals.state(DETECTIONS.name) or {}
    return max([*gt, *(k // 2 for k in det), -1]) + 1


def _npos_of(finals: Finals, n: int) -> list[int]:
    """GT relations per predicate (0 for a predicate without)."""
    gt = finals.state(GT_ROWS.name) or {}
    return [int(gt[p][:, 0].sum()) if p in gt else 0 for p in range(n)]


def predicate_aps(finals: Finals, ctx: Context) -> dict[str, dict[int, float]]:
    """``AP_rel`` and ``AP_phr`` of every predicate of the vocabulary."""
    runs = finals.state(DETECTIONS.name)
    if finals.state(GT_ROWS.name) is None or runs is None:
        return {}
    n = _vocabulary(finals, ctx)
    npos = _npos_of(finals, n)
    empty = np.empty((0, 3))
    return {f"AP_{name}": {p: _average_precision(runs.get(2 * p + kind, empty)[:, 1], npos[p])
                           for p in range(n)}
            for kind, name in KINDS.items()}


def derive(finals: Finals, ctx: Context) -> dict[str, float]:
    """R@50, the AP means and score_wtd, as ``eval_rel_results`` adds them up."""
    gt = finals.state(GT_ROWS.name)
    aps = predicate_aps(finals, ctx)
    if gt is None or not aps:
        return {}
    hits = sum(int(rows[:, 1].sum()) for rows in gt.values())
    total = sum(int(rows[:, 0].sum()) for rows in gt.values())
    return _means(aps, _npos_of(finals, _vocabulary(finals, ctx)), hits, total)


def _means(aps: dict[str, dict[int, float]], npos: list[int], hits: float, total: float
          ) -> dict[str, float]:
    """The dataset values from per-predicate APs, GT counts and the recall's hits."""
    out = {f"R@{K}": float(hits) / (float(total) + EPS)}
    all_npos = sum(npos)
    for name in KINDS.values():
        plain, weighted = 0.0, 0.0
        for p, npos_p in enumerate(npos):
            ap = aps[f"AP_{name}"][p]
            weighted += ap * float(npos_p) / float(all_npos)
            plain += ap
        out[f"mAP_{name}"] = plain / len(npos)
        out[f"wmAP_{name}"] = weighted
    out["score_wtd"] = 0.4 * out["wmAP_rel"] + 0.2 * out[f"R@{K}"] + 0.4 * out["wmAP_phr"]
    return out


def tied(finals: Finals) -> dict[str, int]:
    """Detections sharing predicate and score with one of the other true-positive status
    (the ones whose order among equal scores could move an AP), per kind."""
    runs = finals.state(DETECTIONS.name) or {}
    out = {f"ap_tied_{name}": 0 for name in KINDS.values()}
    for key, rows in runs.items():
        if not len(rows):
            continue
        starts = np.flatnonzero(np.r_[True, rows[1:, 0] != rows[:-1, 0]])
        positives = np.add.reduceat(rows[:, 1], starts)
        sizes = np.diff(np.r_[starts, len(rows)])
        mixed = (positives > 0) & (positives < sizes)
        out[f"ap_tied_{KINDS[key % 2]}"] += int(sizes[mixed].sum())
    return out


def _run_aps(tp: np.ndarray, image: np.ndarray, bounds: np.ndarray, weights: np.ndarray,
             npos: np.ndarray) -> np.ndarray:
    """``weighted_aps`` of integer image weights (resamples x images), each weight as the
    narrowest integer that holds it and the counts in one that holds any run's total."""
    w = np.asarray(weights)
    if not np.array_equal(w, np.round(w)) or (w < 0).any():
        raise ValueError("image weights must be non-negative integers (multiplicities)")
    top = int(w.max(initial=0))
    from sgdask.protocols.oiv6.kernels import RESAMPLE_BLOCK, weighted_aps  # numba: on use

    narrow = np.uint8 if top <= np.iinfo(np.uint8).max else np.int64
    longest = int(np.diff(bounds).max(initial=0))
    wide = np.int32 if top * longest < np.iinfo(np.int32).max else np.int64
    return weighted_aps(tp, image, bounds, np.ascontiguousarray(w.T, dtype=narrow), npos,
                        np.zeros(RESAMPLE_BLOCK, wide), np.zeros(RESAMPLE_BLOCK, wide))


def _image_index(image_ids: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
    """Image keys -> positions in ``image_ids``."""
    known = np.array([_image_key(i) for i in image_ids])
    order = np.argsort(known)
    if len(np.unique(known)) != len(known):
        raise ValueError("two image ids share an image key (48 bits of their SHA-256)")

    def positions(keys: np.ndarray) -> np.ndarray:
        return order[np.minimum(np.searchsorted(known[order], keys), len(order) - 1)]

    return positions


def samples(finals: Mapping[str, dict[int, np.ndarray]], image_ids: Sequence[str],
            ctx: Context
            ) -> Callable[[np.ndarray], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """A function of image weights (resamples x images, in ``image_ids`` order) giving the
    metrics (resamples,) and per-predicate APs (predicates x resamples) under them, from
    the states' final (ranked) runs: what the bootstrap reads instead of re-sorting each
    resample."""
    gt, det = finals[GT_ROWS.name], finals[DETECTIONS.name]
    n = ctx.n_predicates or (max([*gt, *(k // 2 for k in det), -1]) + 1)
    positions = _image_index(image_ids)
    gt_rows = [(p, positions(rows[:, 2]), rows[:, 0], rows[:, 1]) for p, rows in gt.items()]
    empty = np.empty((0, 3))
    runs = [det.get(2 * p + kind, empty) for kind in KINDS for p in range(n)]
    rows = np.concatenate(runs)
    bounds = np.cumsum([0, *(len(r) for r in runs)])
    tp, image = rows[:, 1] > 0, positions(rows[:, 2])

    def under(weights: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        w = np.ascontiguousarray(weights, dtype=np.float64)
        npos = np.zeros((n, len(w)))
        hits = np.zeros(len(w))
        for p, where, count, hit in gt_rows:
            npos[p] = w[:, where] @ count
            hits += w[:, where] @ hit
        aps = _run_aps(tp, image, bounds, w, np.concatenate([npos, npos]))
        return _sampled_values(aps, npos, hits, n)

    return under


def _sampled_values(aps: np.ndarray, npos: np.ndarray, hits: np.ndarray, n: int
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Metrics (columns,) and per-predicate APs from every run's AP (rel runs, then phr
    runs; runs x columns), GT counts (predicates x columns) and recall hits (columns,)."""
    metrics = {f"R@{K}": hits / (npos.sum(0) + EPS)}
    per_predicate = {}
    for kind, name in KINDS.items():
        ap = aps[kind * n:(kind + 1) * n]
        per_predicate[f"AP_{name}"] = ap
        metrics[f"mAP_{name}"] = ap.sum(0) / n
        metrics[f"wmAP_{name}"] = (ap * npos).sum(0) / npos.sum(0)
    metrics["score_wtd"] = (0.4 * metrics["wmAP_rel"] + 0.2 * metrics[f"R@{K}"]
                            + 0.4 * metrics["wmAP_phr"])
    return metrics, per_predicate


def swapped(finals_a: Mapping[str, dict[int, np.ndarray]],
            finals_b: Mapping[str, dict[int, np.ndarray]], image_ids: Sequence[str],
            ctx: Context) -> Callable[[np.ndarray], tuple[dict[str, np.ndarray], ...]]:
    """A function of swap masks (permutations x images, 1: the image's candidates change
    models) giving both swapped models' metrics (and per-predicate APs): the two models'
    runs merged in one fixed order once, each detection weighing 1 in the model it goes
    to and 0 in the other (approximate randomization without re-sorting)."""
    positions = _image_index(image_ids)
    n_images = len(image_ids)
    gt_a, gt_b = finals_a[GT_ROWS.name], finals_b[GT_ROWS.name]
    det_a, det_b = finals_a[DETECTIONS.name], finals_b[DETECTIONS.name]
    n = ctx.n_predicates or (max([*gt_a, *(k // 2 for k in [*det_a, *det_b]), -1]) + 1)
    npos = np.array([gt_a[p][:, 0].sum() if p in gt_a else 0.0 for p in range(n)])
    hits = [np.zeros(n_images), np.zeros(n_images)]
    for gt, out in ((gt_a, hits[0]), (gt_b, hits[1])):
        for rows in gt.values():
            np.add.at(out, positions(rows[:, 2]), rows[:, 1])
    empty = np.empty((0, 3))
    runs, images = [], []
    for kind in KINDS:
        for p in range(n):
            a, b = det_a.get(2 * p + kind, empty), det_b.get(2 * p + kind, empty)
            both = np.concatenate([a, b])
            order = np.lexsort((both[:, 1], both[:, 0]))  # the canonical order: FP first
            runs.append(both[order])
            images.append(np.concatenate([positions(a[:, 2]),
                                          n_images + positions(b[:, 2])])[order])
    rows = np.concatenate(runs)
    bounds = np.cumsum([0, *(len(r) for r in runs)])
    tp, image = rows[:, 1] > 0, np.concatenate(images)

    def under(swaps: np.ndarray) -> tuple[dict[str, np.ndarray], ...]:
        s = np.asarray(swaps, dtype=np.float64)
        counts = np.repeat(npos[:, None], len(s), 1)
        out = []
        for keep, take in ((1.0 - s, s), (s, 1.0 - s)):
            aps = _run_aps(tp, image, bounds, np.concatenate([keep, take], 1),
                           np.concatenate([counts, counts]))
            out.append(_sampled_values(aps, counts, keep @ hits[0] + take @ hits[1], n)[0])
        return tuple(out)

    return under


FAMILY = Family("oiv6", METRICS, image_terms, batch_terms, derive=derive,
                states=(DETECTIONS, GT_ROWS), derive_predicates=predicate_aps,
                state_diagnostics=tied, state_samples=samples, state_swaps=swapped)
