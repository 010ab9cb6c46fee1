"""PVSG's numbers as ``tools/rel_test_full.py`` prints them (``calculate_final_metrics``) and
``tools/rel_test.py``'s pair recall, from two resampled states:

- ``COUNTS`` (``Counts``), per video and key ``8 p + 2 j + weak`` (predicate p, the
  protocol's j-th k, strong or weak hits): (hits among the top k, GT relations);
- ``PAIRS`` (``Ratios``), per video and key j: (GT pairs among the top k pair proposals,
  GT pairs), (0, 1) for a video without GT pairs (the reference's 0).

``R@k`` / ``wR@k``: hits (weak hits) over all GT relations, pooled over videos; ``mR@k`` /
``wmR@k``: per predicate present in the GT, pooled over videos, then the mean over those
predicates; ``PR@k``: the mean over videos of each video's pair recall (the reference prints
k = 20). A video's weak hits may outnumber its GT relations under ``pvsg`` (the reference's
counting, ``sgdask.kernels.pvsg.relation_ranks``): weak recall can pass 1.
"""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import DERIVED, Context, Family, Finals, Metric, Terms
from sgdask.metrics.state import Counts, Ratios
from sgdask.types import ImageHits

#: the input only the PVSG protocols' evaluations have (their metrics need it)
INPUT = "pvsg"
COUNTS = Counts("pvsg_counts")
PAIRS = Ratios("pvsg_pairs")
#: key slots per predicate: 2 (strong, weak) per k, for at most 4 ks
SLOTS = 8
NEED = (INPUT,)
METRICS = (
    Metric("R", DERIVED, "PVSG recall: GT relations hit (classes, predicate, vIoU >= 0.5 "
           "between mask tubes) by one of the top k relations of their video, pooled over "
           "videos", needs=NEED),
    Metric("mR", DERIVED, "PVSG mean recall: R@k per predicate present in the GT (pooled "
           "over videos), averaged over those predicates", needs=NEED),
    Metric("wR", DERIVED, "PVSG weak recall: as R@k at vIoU >= 0.1, weak hits counted as "
           "the protocol says (pvsg: per matching relation, as the reference)", needs=NEED),
    Metric("wmR", DERIVED, "PVSG weak mean recall: wR@k per predicate present in the GT, "
           "averaged", needs=NEED),
    Metric("PR", DERIVED, "PVSG pair recall: GT pairs (moved onto the predicted tracks as "
           "prepare_rel_set.py does) among the top k pair proposals, averaged over videos",
           needs=NEED),
)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    """A video's rows of both states (``hits``: a ``VideoHits``)."""
    if len(ctx.ks) * 2 > SLOTS:
        raise ValueError(f"the PVSG metrics take at most {SLOTS // 2} ks")
    predicates = hits.predicates.astype(np.int64)
    present = np.unique(predicates)
    where = np.searchsorted(present, predicates)
    weak_relation = getattr(hits, "weak_relation", np.zeros(0, np.int64))
    weak_rank = getattr(hits, "weak_rank", np.zeros(0, np.int64))
    total = np.bincount(where, minlength=len(present))
    keys, values = [], []
    for j, k in enumerate(ctx.ks):
        limit = k.resolve(len(predicates))
        strong = np.bincount(where, weights=hits.graph_first < limit, minlength=len(present))
        weak = np.bincount(where[weak_relation], weights=weak_rank < limit,
                           minlength=len(present))
        for slot, found in ((0, strong), (1, weak)):
            keys.append(present * SLOTS + 2 * j + slot)
            values.append(np.stack([found, total], 1))
    counts = COUNTS.rows(np.concatenate(keys), np.concatenate(values).astype(np.int64)) \
        if keys and len(present) else COUNTS.empty()
    pair_hits = getattr(hits, "pair_hits", {})
    pair_rows = [(j, *(pair_hits.get(j, (0, 0)) if pair_hits.get(j, (0, 0))[1] else (0, 1)))
                 for j in range(len(ctx.ks))]
    pairs = PAIRS.rows(np.asarray([r[0] for r in pair_rows], np.int64),
                       np.asarray([r[1:] for r in pair_rows], np.int64).reshape(-1, 2))
    return Terms(states=[counts, pairs])


def derive(finals: Finals, ctx: Context) -> dict[str, float]:
    """Every metric from the two states' final forms (sums, or weighted sums in the
    bootstrap)."""
    counts = finals.state(COUNTS.name) or {}
    pairs = finals.state(PAIRS.name) or {}
    out: dict[str, float] = {}
    for j, k in enumerate(ctx.ks):
        for slot, (overall, mean) in enumerate((("R", "mR"), ("wR", "wmR"))):
            rows = [v for key, v in sorted(counts.items()) if key % SLOTS == 2 * j + slot]
            total = sum(float(v[1]) for v in rows)
            if total > 0:
                out[f"{overall}@{k.label}"] = sum(float(v[0]) for v in rows) / total
                valid = [float(v[0]) / float(v[1]) for v in rows if v[1] > 0]
                out[f"{mean}@{k.label}"] = sum(valid) / len(valid)
        found = pairs.get(j)
        if found is not None and found.count > 0:
            out[f"PR@{k.label}"] = found.total / found.count
    return out


def predicate_recalls(finals: Finals, ctx: Context) -> dict[str, dict[int, float]]:
    """The per-predicate table's columns: each predicate's recall and weak recall at every
    k (hits over its GT relations, pooled over videos), the terms ``mR@k`` and ``wmR@k``
    average."""
    counts = finals.state(COUNTS.name) or {}
    out: dict[str, dict[int, float]] = {}
    for j, k in enumerate(ctx.ks):
        for slot, prefix in enumerate(("R", "wR")):
            out[f"{prefix}@{k.label}"] = {
                key // SLOTS: float(v[0]) / float(v[1]) for key, v in sorted(counts.items())
                if key % SLOTS == 2 * j + slot and v[1] > 0}
    return out


FAMILY = Family("pvsg", METRICS, image_terms, derive=derive, states=(COUNTS, PAIRS),
                derive_predicates=predicate_recalls)
