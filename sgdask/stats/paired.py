"""Paired comparison of models on the same images: bootstrap intervals of differences,
approximate randomization p-values (Holm-corrected), per-image wins, and rank ranges.

A *model* is one evaluation or a group of runs (training seeds); a group's value is the
mean over its runs, reported with the standard deviation over runs next to its test-set
interval.

- **Difference**: ``b − a`` in the metric's own units (``b`` the model compared with the
  baseline ``a``; for rank metrics lower is better). Its interval is the percentile
  bootstrap of ``b − a`` over the *same* resampled images for both models (paired).
- **p-value** (two-sided, paired approximate randomization, as sacrebleu's paired-ar):
  each permutation swaps each image's terms between the two models with probability 1/2
  and recomputes the difference; p = (1 + #{|d_perm| ≥ |d|}) / (1 + permutations). For
  groups every (run of a, run of b) pair is swapped on the same images and the differences
  averaged. A model against itself gets d = 0 and p = 1.
- **Units**: under a protocol whose unit is a group of images (``video``), the bootstrap
  draws units and a permutation swaps whole units (``sgdask.stats.units``); wins, ties and
  losses stay per image.
- **Holm**: per metric, over all compared pairs (step-down, monotone).
- **Rank ranges** (leaderboard): model j is significantly better than i when the paired
  bootstrap interval of their difference excludes 0; i ranks from 1 + #(significantly
  better) to the number of models not significantly worse (itself included).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sgdask.errors import SgdaskError
from sgdask.metrics import sort_key
from sgdask.metrics.base import IMAGE, RATIO, Context
from sgdask.stats.bootstrap import (
    CHUNK_CELLS,
    METHOD,
    Plan,
    Scoring,
    Values,
    block_samples,
    bootstrap_samples,
    count_chunks,
    percentile_interval,
    plan_for,
    term_matrix,
)
from sgdask.stats.table import TermTable
from sgdask.stats.units import n_units, per_image, shared_index, unit_of

DEFAULT_PERMUTATIONS = 1000
PERMUTATION_STREAM = 1  # the swaps' generator: default_rng((seed, 1)), apart from resamples
TIE = 1e-12


@dataclass
class Model:
    """A model to compare: one run, or several (a group of training seeds); ``states``:
    per run, its report's final states (``Report.states``; metrics derived from state,
    as oiv6's AP, are compared when every run has them)."""

    name: str
    runs: list[TermTable]
    states: list[dict[str, Any] | None] = field(default_factory=list)


def same_images(models: Sequence[Model]) -> np.ndarray:
    """The images every run was evaluated on (they must be the same)."""
    first = models[0].runs[0].image_ids
    for model in models:
        for run in model.runs:
            if run.n_images != len(first) or not np.array_equal(run.image_ids, first):
                raise SgdaskError(f"{model.name}: evaluated on other images than "
                                  f"{models[0].name} ({run.n_images} vs {len(first)} "
                                  "images): compare needs the same ground truth")
    return first


def metric_names(plan: Plan) -> list[str]:
    """Every metric a plan computes, in report order."""
    names = {*plan.layout.scalar, *plan.layout.averaged, *plan.derived}
    return sorted(names, key=sort_key)


def swap_chunks(n_images: int, permutations: int, seed: int,
                index: np.ndarray | None = None) -> Iterator[np.ndarray]:
    """Per permutation, which images swap models (1.0) and which stay (0.0), a chunk of
    permutations at a time; ``index``: each image's unit, whose images swap together
    (``sgdask.stats.units``; None: each image on its own)."""
    rng = np.random.default_rng((seed, PERMUTATION_STREAM))
    size = max(1, CHUNK_CELLS // max(n_images, 1))
    units = n_units(index, n_images)
    done = 0
    while done < permutations:
        count = min(size, permutations - done)
        yield per_image((rng.random((count, units)) < 0.5).astype(float), index)
        done += count


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given)."""
    order = np.argsort(p_values, kind="stable")
    m = len(p_values)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted.tolist()


def image_values(table: TermTable, name: str) -> np.ndarray:
    """Per image (canonical order) its own value of a metric: num/den of image-level and
    ratio metrics, the mean over its predicates of a mean metric; NaN where the image has
    none."""
    rows = table.rows_of(name)
    out = np.full(table.n_images, np.nan)
    if not len(rows):
        return out
    image, value = table.image[rows], table.num[rows] / table.den[rows]
    if table.kind_of(name) in (IMAGE, RATIO):
        out[image] = value
        return out
    totals = np.bincount(image, weights=value, minlength=table.n_images)
    counts = np.bincount(image, minlength=table.n_images)
    np.divide(totals, counts, out=out, where=counts > 0)
    return out


def wins_ties_losses(a: np.ndarray, b: np.ndarray, lower_is_better: bool
                     ) -> tuple[int, int, int]:
    """Images where b is better than, as good as, worse than a (images where either has no
    value are left out)."""
    both = ~(np.isnan(a) | np.isnan(b))
    diff = (b - a)[both] * (-1 if lower_is_better else 1)
    return (int((diff > TIE).sum()), int((np.abs(diff) <= TIE).sum()),
            int((diff < -TIE).sum()))


@dataclass
class Comparison:
    """What ``compare`` found; ``rows``: one per (pair, metric)."""

    settings: dict[str, Any]
    models: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    per_predicate: list[dict[str, Any]]
    image_ids: np.ndarray
    image_values: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def model_values(runs: list[Values]) -> Values:
    return runs[0].mean(runs[1:]) if len(runs) > 1 else runs[0]


def randomization_p(plan: Plan, a: list, b: list, observed: dict[str, float],
                    names: list[str], permutations: int, seed: int,
                    index: np.ndarray | None = None) -> dict[str, float | None]:
    """Two-sided paired approximate-randomization p-value per metric (a, b: the runs'
    term matrices; None where the difference itself is undefined; ``index``: the images'
    units, swapped whole)."""
    n = a[0].n_images
    extreme = dict.fromkeys(names, 0)
    ones = np.ones((1, n))
    pairs = [(mb - ma, ma.sums(ones), mb.sums(ones)) for ma in a for mb in b]
    for swaps in swap_chunks(n, permutations, seed, index):
        diffs: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for difference, sum_a, sum_b in pairs:
            moved = difference.sums(swaps)
            va, vb = plan.finalize(sum_a + moved), plan.finalize(sum_b - moved)
            for name in names:
                diffs[name].append(vb.metrics[name] - va.metrics[name])
        for name in names:
            d = np.mean(diffs[name], axis=0)
            limit = abs(observed[name]) - TIE * max(1.0, abs(observed[name]))
            extreme[name] += int((np.abs(d[~np.isnan(d)]) >= limit).sum())
    return {name: (1 + extreme[name]) / (1 + permutations)
            if np.isfinite(observed[name]) else None for name in names}


def compare(models: Sequence[Model], pairs: Sequence[tuple[int, int]], scoring: Scoring,
            level: float = 0.95, resamples: int = 1000,
            permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0,
            names: Sequence[str] | None = None,
            lower_is_better: frozenset[str] = frozenset(),
            state_context: Context | None = None) -> Comparison:
    """Compare models pairwise (``pairs`` of indices into ``models``: (baseline, other))
    on every metric they all have (or ``names``); metrics derived from state (oiv6's AP)
    too, when every run has its states and ``state_context`` is given."""
    image_ids = same_images(models)
    tables = [run for m in models for run in m.runs]
    try:
        index = shared_index(tables)
    except ValueError as err:
        raise SgdaskError(f"compare: {err}: compare needs the same protocol and ground "
                          "truth") from None
    unit = unit_of(tables[0])
    plan = plan_for(tables, names, scoring)
    # (the plan also holds what derived metrics read: R@k for F@k; only ``names`` compare)
    compared = [n for n in metric_names(plan) if names is None or n in names]
    matrices = [[term_matrix(plan.layout, run) for run in m.runs] for m in models]
    ones = np.ones((1, len(image_ids)))
    points = [[plan.values(mx, ones) for mx in runs] for runs in matrices]
    samples = [model_values(block_samples(runs, plan, seed, 0, resamples, index))
               for runs in matrices]
    summaries = [model_summary(m, p, s, compared, level)
                 for m, p, s in zip(models, points, samples, strict=True)]
    rows, per_predicate = [], []
    per_image = {m.name: {n: np.mean([image_values(r, n) for r in m.runs], axis=0)
                          for n in compared if n in m.runs[0].names} for m in models}
    for ia, ib in pairs:
        a, b = summaries[ia], summaries[ib]
        observed = {n: number(b["metrics"][n]["value"]) - number(a["metrics"][n]["value"])
                    for n in compared}
        p_values = randomization_p(plan, matrices[ia], matrices[ib], observed, compared,
                                   permutations, seed, index)
        for name in compared:
            delta = samples[ib].metrics[name] - samples[ia].metrics[name]
            interval = percentile_interval(delta, level) or (None, None)
            counts = (None, None, None)
            if name in per_image[models[ia].name]:
                counts = wins_ties_losses(per_image[models[ia].name][name],
                                          per_image[models[ib].name][name],
                                          name in lower_is_better)
            rows.append({"metric": name, "a": a["name"], "b": b["name"],
                         "a_value": nan_none(a["metrics"][name]["value"]),
                         "b_value": nan_none(b["metrics"][name]["value"]),
                         "delta": nan_none(observed[name]), "ci_low": interval[0],
                         "ci_high": interval[1], "p_value": p_values[name],
                         "p_holm": None, "wins": counts[0], "ties": counts[1],
                         "losses": counts[2], "a_sd": a["metrics"][name]["sd"],
                         "b_sd": b["metrics"][name]["sd"], "a_runs": a["runs"],
                         "b_runs": b["runs"]})
        per_predicate += predicate_differences(a["name"], b["name"], points[ia], points[ib],
                                               samples[ia], samples[ib], level)
    if state_context is not None:
        from_state = _StateComparison(models, [str(i) for i in image_ids], state_context,
                                     resamples, seed, names, index)
        for summary, found in zip(summaries, from_state.summaries(level), strict=True):
            summary["metrics"].update(found)
        for ia, ib in pairs:
            rows += from_state.rows(ia, ib, level, permutations)
            per_predicate += from_state.predicate_rows(ia, ib, level)
        compared += [n for n in from_state.names if n not in compared]
    for name in compared:
        mine = [r for r in rows if r["metric"] == name and r["p_value"] is not None]
        for row, adjusted in zip(mine, holm([r["p_value"] for r in mine]), strict=True):
            row["p_holm"] = adjusted
    settings = {"level": level, "resamples": resamples, "permutations": permutations,
                "seed": seed, "method": f"paired {METHOD} bootstrap over {unit}s; paired "
                "approximate randomization; Holm per metric", "aggregation":
                scoring.aggregation, "images": len(image_ids), "unit": unit}
    if index is not None:
        settings["units"] = n_units(index, len(image_ids))
    return Comparison(settings, summaries, rows, per_predicate, image_ids, per_image)


class _StateComparison:
    """The models' metrics derived from state, through the families' ``state_samples``
    (values under the bootstrap's image weights, the same resamples as the terms') and
    ``state_swaps`` (both models' values with images swapped, for the p-values)."""

    def __init__(self, models: Sequence[Model], image_ids: list[str], ctx: Context,
                 resamples: int, seed: int, names: Sequence[str] | None,
                 index: np.ndarray | None = None) -> None:
        from sgdask.metrics import FAMILIES

        self.models, self.ids, self.ctx, self.seed = models, image_ids, ctx, seed
        self.index = index  # the images' units (``sgdask.stats.units``)
        runs = [st for m in models for st in (m.states or [None])]
        self.families = [f for f in FAMILIES if f.state_samples and f.state_swaps and all(
            st is not None and all(spec.name in st for spec in f.states) for st in runs)]
        ones = np.ones((1, len(image_ids)))
        self.points = [[self.values(st, ones) for st in m.states] for m in models]
        found = self.points[0][0][0] if self.families else {}
        self.names = sorted((n for n in found if names is None or n in names), key=sort_key)
        self.samples = [[self.sampled(st, resamples) for st in m.states] for m in models]

    def values(self, states: dict[str, Any], weights: np.ndarray
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        metrics: dict[str, np.ndarray] = {}
        predicates: dict[str, np.ndarray] = {}
        for family in self.families:
            assert family.state_samples is not None
            found, per_predicate = family.state_samples(states, self.ids, self.ctx)(weights)
            metrics.update(found)
            predicates.update(per_predicate)
        return metrics, predicates

    def sampled(self, states: dict[str, Any], resamples: int
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        parts = [self.values(states, w) for w in count_chunks(len(self.ids), resamples,
                                                              self.seed, index=self.index)]
        return ({n: np.concatenate([p[0][n] for p in parts]) for n in parts[0][0]},
                {n: np.concatenate([p[1][n] for p in parts], 1) for n in parts[0][1]})

    def mean(self, runs: list, i: int, name: str) -> np.ndarray:
        return np.mean([r[i][name] for r in runs], axis=0)

    def summaries(self, level: float) -> list[dict[str, Any]]:
        out = []
        for points, samples in zip(self.points, self.samples, strict=True):
            metrics = {}
            for name in self.names:
                runs = np.array([p[0][name][0] for p in points])
                interval = percentile_interval(self.mean(samples, 0, name), level)
                metrics[name] = {"value": nan_none(float(np.mean(runs))),
                                 "sd": nan_none(float(np.std(runs, ddof=1)))
                                 if len(runs) > 1 else None,
                                 "runs": [nan_none(v) for v in runs.tolist()],
                                 "ci_low": (interval or (None, None))[0],
                                 "ci_high": (interval or (None, None))[1]}
            out.append(metrics)
        return out

    def rows(self, ia: int, ib: int, level: float, permutations: int
             ) -> list[dict[str, Any]]:
        a, b = self.models[ia], self.models[ib]
        observed = {n: float(self.mean(self.points[ib], 0, n)[0]
                             - self.mean(self.points[ia], 0, n)[0]) for n in self.names}
        p_values = self.randomization_p(ia, ib, observed, permutations)
        rows = []
        for name in self.names:
            delta = self.mean(self.samples[ib], 0, name) - self.mean(self.samples[ia], 0, name)
            low, high = percentile_interval(delta, level) or (None, None)
            value_a = float(self.mean(self.points[ia], 0, name)[0])
            value_b = float(self.mean(self.points[ib], 0, name)[0])
            rows.append({"metric": name, "a": a.name, "b": b.name,
                         "a_value": nan_none(value_a), "b_value": nan_none(value_b),
                         "delta": nan_none(observed[name]), "ci_low": low, "ci_high": high,
                         "p_value": p_values[name], "p_holm": None, "wins": None,
                         "ties": None, "losses": None,
                         "a_sd": None if len(a.runs) < 2 else nan_none(float(np.std(
                             [p[0][name][0] for p in self.points[ia]], ddof=1))),
                         "b_sd": None if len(b.runs) < 2 else nan_none(float(np.std(
                             [p[0][name][0] for p in self.points[ib]], ddof=1))),
                         "a_runs": len(a.runs), "b_runs": len(b.runs)})
        return rows

    def randomization_p(self, ia: int, ib: int, observed: dict[str, float],
                        permutations: int) -> dict[str, float | None]:
        """As ``randomization_p``: each permutation swaps each image's candidates between
        the two models (every pair of their runs, differences averaged)."""
        swaps = [family.state_swaps(sa, sb, self.ids, self.ctx)
                 for sa in self.models[ia].states for sb in self.models[ib].states
                 for family in self.families if family.state_swaps is not None]
        extreme = dict.fromkeys(self.names, 0)
        for mask in swap_chunks(len(self.ids), permutations, self.seed, self.index):
            diffs: dict[str, list[np.ndarray]] = {name: [] for name in self.names}
            for under in swaps:
                va, vb = under(mask)
                for name in self.names:
                    if name in va:
                        diffs[name].append(vb[name] - va[name])
            for name in self.names:
                d = np.mean(diffs[name], axis=0)
                limit = abs(observed[name]) - TIE * max(1.0, abs(observed[name]))
                extreme[name] += int((np.abs(d[~np.isnan(d)]) >= limit).sum())
        return {name: (1 + extreme[name]) / (1 + permutations)
                if np.isfinite(observed[name]) else None for name in self.names}

    def predicate_rows(self, ia: int, ib: int, level: float) -> list[dict[str, Any]]:
        rows = []
        for name in self.points[ia][0][1]:
            value_a, value_b = (self.mean(self.points[i], 1, name)[:, 0] for i in (ia, ib))
            sampled = self.mean(self.samples[ib], 1, name) - self.mean(self.samples[ia], 1,
                                                                      name)
            for predicate in range(len(value_a)):
                low, high = percentile_interval(sampled[predicate], level) or (None, None)
                rows.append({"a": self.models[ia].name, "b": self.models[ib].name,
                             "metric": name, "predicate": predicate,
                             "a_value": nan_none(value_a[predicate]),
                             "b_value": nan_none(value_b[predicate]),
                             "delta": nan_none(value_b[predicate] - value_a[predicate]),
                             "ci_low": low, "ci_high": high})
        return rows


def model_summary(model: Model, points: list[Values], samples: Values, names: list[str],
                  level: float) -> dict[str, Any]:
    """A model's value per metric (mean over runs), sd over runs, test-set interval."""
    metrics = {}
    for name in names:
        runs = np.array([p.metrics[name][0] for p in points])
        interval = percentile_interval(samples.metrics[name], level) or (None, None)
        metrics[name] = {"value": nan_none(float(np.mean(runs))),
                         "sd": nan_none(float(np.std(runs, ddof=1))) if len(runs) > 1
                         else None,
                         "runs": [nan_none(v) for v in runs.tolist()], "ci_low": interval[0],
                         "ci_high": interval[1]}
    return {"name": model.name, "runs": len(points), "metrics": metrics}


def predicate_differences(a: str, b: str, points_a: list[Values], points_b: list[Values],
                          samples_a: Values, samples_b: Values, level: float
                          ) -> list[dict[str, Any]]:
    """Per mean metric and predicate: b − a with its paired bootstrap interval."""
    rows = []
    full_a, full_b = model_values(points_a), model_values(points_b)
    for name, (ids, sampled_a) in samples_a.predicates.items():
        sampled = samples_b.predicates[name][1] - sampled_a
        value_a, value_b = full_a.predicates[name][1][:, 0], full_b.predicates[name][1][:, 0]
        for j, predicate in enumerate(ids.tolist()):
            interval = percentile_interval(sampled[j], level) or (None, None)
            rows.append({"a": a, "b": b, "metric": name, "predicate": int(predicate),
                         "a_value": nan_none(value_a[j]), "b_value": nan_none(value_b[j]),
                         "delta": nan_none(value_b[j] - value_a[j]),
                         "ci_low": interval[0], "ci_high": interval[1]})
    return rows


def nan_none(value: float) -> float | None:
    """JSON has no NaN: an undefined value is null."""
    return None if np.isnan(value) else float(value)


def number(value: float | None) -> float:
    return np.nan if value is None else value


def rank_ranges(tables: Sequence[TermTable], name: str, scoring: Scoring, level: float,
                resamples: int, seed: int, lower_is_better: bool
                ) -> list[tuple[tuple[float, float] | None, tuple[int, int]]]:
    """Per model: its bootstrap interval of ``name`` and its rank range among ``tables``
    (all on the same images, the same resamples)."""
    same_images([Model(str(i), [t]) for i, t in enumerate(tables)])
    plan = plan_for(tables, [name], scoring)
    samples = [s.metrics[name] for s in bootstrap_samples(tables, plan, resamples, seed)]
    sign = -1.0 if lower_is_better else 1.0
    m = len(tables)
    better = np.zeros((m, m), dtype=bool)  # better[j, i]: j significantly better than i
    for i in range(m):
        for j in range(m):
            if i != j:
                interval = percentile_interval(sign * (samples[j] - samples[i]), level)
                better[j, i] = interval is not None and interval[0] > 0
    return [(percentile_interval(samples[i], level),
             (1 + int(better[:, i].sum()), m - int(better[i, :].sum()))) for i in range(m)]
