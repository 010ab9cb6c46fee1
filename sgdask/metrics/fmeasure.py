"""F@k and ngF@k: the harmonic mean of a recall and its mean recall (SPEC section 6).

At the dataset level, from the values the report prints under the same protocol and
aggregation (after a protocol's vocabulary-wide mR, say):

    F@k = 2 · R@k · mR@k / (R@k + mR@k), 0 when both are 0;

``ngF@k`` the same from ``ngR@k`` and ``mNgR@k``. This is SGG-Benchmark's ``SGF1Score``
(Maelic/SGG-Benchmark at a6642012e66047c3544bed8784bbf9acdc87411b,
``sgg_benchmark/data/datasets/evaluation/sgg_metrics.py``), the number its documentation
tells users to watch. A DERIVED family: it computes no terms; on every bootstrap resample
and permutation it is derived again from that resample's R@k and mR@k.
"""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import DERIVED, Context, Family, FinalColumns, Finals, Metric

# (metric, the recall it reads, the mean recall it reads)
PAIRS = (("F", "R", "mR"), ("ngF", "ngR", "mNgR"))
EMPTY = "its recall or mean recall has no value"
METRICS = (
    Metric("F", DERIVED, "harmonic mean of R@k and mR@k (SGG-Benchmark's F1@K)",
           board=("50",), empty_reason=EMPTY),
    Metric("ngF", DERIVED, "harmonic mean of ngR@k and mNgR@k", needs=("ng",),
           empty_reason=EMPTY),
)


def _harmonic(recall: float, mean: float) -> float:
    """2 r m / (r + m), 0 when both are 0 (recalls are never negative)."""
    return 0.0 if recall + mean == 0 else 2 * recall * mean / (recall + mean)


def derive(finals: Finals, ctx: Context) -> dict[str, float]:
    """F@k and ngF@k for every k whose recall and mean recall have a value."""
    out: dict[str, float] = {}
    for name, recall, mean in PAIRS:
        for k in ctx.ks:
            r, m = finals.value(f"{recall}@{k.label}"), finals.value(f"{mean}@{k.label}")
            if r is not None and m is not None:
                out[f"{name}@{k.label}"] = _harmonic(float(r), float(m))
    return out


def derive_columns(columns: FinalColumns, ctx: Context) -> dict[str, np.ndarray]:
    """``derive`` for every weighting at once: the same operations in the same order, so
    each value is the float ``derive`` gives on its column (NaN where either input has
    none)."""
    out: dict[str, np.ndarray] = {}
    for name, recall, mean in PAIRS:
        for k in ctx.ks:
            r, m = columns.value(f"{recall}@{k.label}"), columns.value(f"{mean}@{k.label}")
            if r is None or m is None:
                continue
            total = r + m
            zero = total == 0
            out[f"{name}@{k.label}"] = np.where(zero, 0.0,
                                                2 * r * m / np.where(zero, 1.0, total))
    return out


FAMILY = Family("fmeasure", METRICS, derive=derive, derive_columns=derive_columns)
