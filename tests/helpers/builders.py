"""Tiny hand-built inputs shared by the hand-computed kernel tests."""

from __future__ import annotations

import numpy as np

from sgdask.core.accum import AGGREGATIONS, Accumulator


def labels_of(*rows: str) -> np.ndarray:
    """A GT label image from digit rows ("1122": instance index + 1, 0 = none)."""
    return np.array([[int(c) for c in row] for row in rows], dtype=np.int64)


def mask_of(*rows: str) -> np.ndarray:
    """A boolean mask from rows of '#' (set) and '.' (unset)."""
    return np.array([[c == "#" for c in row] for row in rows], dtype=bool)


def box(i: int) -> list[float]:
    """The i-th 10x10 box of a row of disjoint boxes (area 100)."""
    return [10.0 * i, 0.0, 10.0 * i + 10.0, 10.0]


def snapshot(acc: Accumulator) -> dict:
    """Every final number of an accumulator (exact Fractions) plus its counts."""
    out: dict = {}
    for name in acc.mean_metric_names():
        for aggregation in AGGREGATIONS:
            out[(name, aggregation)] = acc.mean_metric(name, aggregation, False)
            out[(name, "values", aggregation)] = acc.predicate_values(
                name, aggregation)
        out[(name, "cells")] = acc.mean_metric(name, "per_predicate", True)
    for name in acc.image_metric_names():
        out[name] = acc.image_value(name)
    out["gt_per_predicate"] = dict(acc.gt_per_predicate)
    out["diagnostics"] = dict(acc.diagnostics)
    out["ratios"] = {name: acc.ratio_value(name) for name in acc.ratio_metric_names()}
    out["states"] = {name: {k: v.tolist() if isinstance(v, np.ndarray) else v
                            for k, v in rows.final().items()}
                     for name, rows in acc.states.items()}
    return out
