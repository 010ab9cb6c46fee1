"""Independent per-predicate recall (SPEC section 6).

- ``IMR@k``: per predicate p of the image, the recall of G(p) by the first k NG triplets
  whose predicate is p (each predicate ranked on its own list);
- ``wIMR@k`` = Σ_c w_c · IMR_c with w_c = n_c^τ / Σ n^τ, n_c the number of distinct
  (subject category, object category) pairs of predicate c in the training split; c and
  the sum run over the predicates of the evaluated GT (a predicate never seen in training
  weighs 0). It is derived from IMR's per-predicate values under the aggregation mode.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from sgdask.metrics.base import (
    DERIVED,
    MEAN,
    Block,
    Context,
    Family,
    FinalColumns,
    Finals,
    HitsBatch,
    Metric,
    Terms,
    add_recalls,
    recall_blocks,
)
from sgdask.types import ImageHits

METRICS = (
    Metric("IMR", MEAN, "independent per-predicate recall: each predicate's own top-k of "
           "the NG list", needs=("ng",)),
    Metric("wIMR", DERIVED, "IMR weighted by the predicates' training compositions "
           "(n_c^tau)", needs=("ng", "stats")),
)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    if hits.imr_first is not None:
        add_recalls(terms, hits.imr_first, hits.predicates, ctx.ks, hits.n_gt_triplets,
                    None, "IMR")
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    if batch.imr_first is None:
        return []
    return recall_blocks(batch, batch.imr_first, ctx.ks, None, "IMR")


def weight(composition: dict[int, int], predicate: int, tau: float) -> float:
    """w_c before normalization: n_c^tau, 0 for a predicate never seen in training."""
    count = composition.get(predicate, 0)
    return count ** tau if count > 0 else 0.0


def weighted(finals: Finals, ctx: Context) -> dict[str, Fraction | float]:
    """wIMR@k per k (floats: the weights are real powers)."""
    composition = ctx.composition
    if not composition:
        return {}
    out: dict[str, Fraction | float] = {}
    for k in ctx.ks:
        values = finals.predicate_values(f"IMR@{k.label}")
        weights = {c: weight(composition, c, ctx.tau) for c in sorted(values)}
        total = sum(weights.values())
        if values and total > 0:
            out[f"wIMR@{k.label}"] = sum(weights[c] / total * float(values[c])
                                         for c in sorted(values))
    return out


def weighted_columns(columns: FinalColumns, ctx: Context) -> dict[str, np.ndarray]:
    """``weighted`` for every column of IMR's per-predicate values at once (the bootstrap's
    resamples): the same weights, products and sums in predicate order (a predicate without
    a value adds 0.0, which changes no sum), so every value is the float ``weighted``
    gives on that column."""
    composition = ctx.composition
    if not composition:
        return {}
    out: dict[str, np.ndarray] = {}
    for k in ctx.ks:
        ids, values = columns.predicate_values(f"IMR@{k.label}")
        if not len(ids):
            continue
        order = np.argsort(ids, kind="stable")
        ids, values = ids[order], values[order]
        weights = np.array([weight(composition, c, ctx.tau)
                            for c in ids.tolist()]).reshape(-1, 1)
        valid = ~np.isnan(values)
        drawn = np.where(valid, weights, 0.0)
        total = np.add.accumulate(drawn, axis=0)[-1]
        defined = valid.any(axis=0) & (total > 0)
        safe = np.where(defined, total, 1.0)
        terms = drawn / safe * np.where(valid, values, 0.0)  # 0.0 where no value
        out[f"wIMR@{k.label}"] = np.where(defined, np.add.accumulate(terms, axis=0)[-1],
                                          np.nan)
    return out


FAMILY = Family("imr", METRICS, image_terms, batch_terms, weighted, weighted_columns)
