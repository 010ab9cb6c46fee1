"""Metric values under image weights, and the percentile bootstrap over images.

Every dataset value of SPEC section 7 is a ratio of sums over images, or a mean of such
ratios over predicates: with a weight per image (how often a bootstrap resample drew it;
1 for the data itself) a value is a function of weighted column sums ``W @ M``, where M
holds each image's terms in a fixed column layout (``Layout``). M is sparse (a few
predicates per image), so a chunk of resamples costs one sparse-dense product; then
``finalize`` turns the sums into values with the aggregation's rules:

- image-level metrics: Σ w·(num/den) / Σ w over the images with a value;
- ratio metrics: Σ w·num / Σ w·den;
- mean metrics, per predicate: Σ w·(num/den) / Σ w over the images where the predicate
  occurs (``pooled``: Σ w·num / Σ w·den); the dataset value is the mean over the predicates
  that occur in the resample (a predicate absent from a resample is left out of its mean,
  as section 7 leaves out predicates absent from the data);
- mean metrics under ``image``: per image the mean over its predicates, then as an
  image-level metric; over all cells (sgbench's PRank): Σ w·Σ_p(num/den) / Σ w·cells;
- resampled states (``Ratios``, ``Counts``: panoptic quality's): per key its two sums,
  Σ w·addend; the state's final form under a weighting follows from them;
- derived metrics: the family's ``derive`` on each resample's values (per-predicate and
  dataset values, resampled states: ``sgdask.metrics.base.Finals``), or its
  ``derive_columns`` on every resample's at once.

Resample b draws ``rng.integers(0, n, n)`` (the b-th such draw of ``default_rng(seed)``)
over the images in canonical order (sorted ids): the same indices for every metric,
protocol and model of one run, whatever the partitioning. Under a protocol whose unit is a
group of images (``video``), the draw is over the n units instead and each image weighs
what its unit was drawn (``sgdask.stats.units``: the clustered bootstrap). Everything here
is a pure function of (terms, indices); nothing depends on Dask.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from sgdask.metrics.base import IMAGE, MEAN, RATIO, FinalColumns, Finals, StateColumns
from sgdask.metrics.state import SPECS, PairState
from sgdask.stats.table import TermTable, is_state
from sgdask.stats.units import n_units, per_image, shared_index, unit_of

if TYPE_CHECKING:
    from scipy import sparse

# The derived metrics' values from one weighting's finals (floats).
Derive = Callable[[Finals], dict[str, float]]
# All weightings at once (``Family.derive_columns``): per derived metric its values.
ColumnDerive = Callable[[FinalColumns], dict[str, np.ndarray]]
CHUNK_CELLS = 1 << 21  # resamples x images per chunk (16 MiB of float64 weights)
METHOD = "percentile"


@dataclass(frozen=True)
class Scoring:
    """How terms become values: the aggregation mode, the mean metrics taken over all
    (image, predicate) cells instead (sgbench's PRank), and the derived metrics (a function
    of final values, e.g. wIMR; None: no derived metric); ``vocabulary_means``: mean
    metrics whose value is the sum of their per-predicate values over ``n_vocabulary``
    (absent predicates count 0: multimpo's and sgbpytorch's printed mR)."""

    aggregation: str = "per_predicate"
    over_cells: frozenset[str] = frozenset()
    derive: Derive | None = None
    vocabulary_means: frozenset[str] = frozenset()
    n_vocabulary: int = 0
    derive_columns: ColumnDerive | None = None  # ``derive`` for every weighting at once


@dataclass
class Layout:
    """Columns of the weighted-sum matrix: per metric, where its sums are.

    ``scalar[name] = (top, bottom)``: value = sum[top] / sum[bottom]. ``predicates[name] =
    (ids, tops, bottoms)``: per predicate value = sum[top] / sum[bottom]. ``averaged``:
    mean metrics whose value is the mean of their per-predicate values; ``image_means``:
    mean metrics whose value is the mean over images of per-image means (``image`` mode);
    ``vocabulary``: averaged metrics printed over the predicate vocabulary, with the factor
    (occurring predicates / vocabulary) their mean is scaled by. ``states[name] = (spec,
    keys, firsts, seconds)``: a resampled state's two sums per key.
    """

    aggregation: str
    n_columns: int = 0
    scalar: dict[str, tuple[int, int]] = field(default_factory=dict)
    predicates: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)
    averaged: list[str] = field(default_factory=list)
    image_means: set[str] = field(default_factory=set)
    vocabulary: dict[str, float] = field(default_factory=dict)
    states: dict[str, tuple[PairState, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)

    def columns(self, n: int) -> np.ndarray:
        first = self.n_columns
        self.n_columns += n
        return np.arange(first, first + n)


def layout_of(tables: Sequence[TermTable], names: Sequence[str], scoring: Scoring) -> Layout:
    """One column layout for every table (the union of their predicates per metric)."""
    layout = Layout(scoring.aggregation)
    kinds = {n: k for t in tables for n, k in zip(t.names, t.kinds, strict=True)}
    for name in names:
        kind = kinds.get(name)
        if kind is not None and is_state(kind):
            spec = SPECS[kind](name, 2)
            assert isinstance(spec, PairState)
            ids = np.unique(np.concatenate([t.predicate[t.rows_of(name)] for t in tables]))
            cols = layout.columns(2 * len(ids))
            layout.states[name] = (spec, ids, cols[0::2], cols[1::2])
        elif kind in (IMAGE, RATIO):
            top, bottom = layout.columns(2)
            layout.scalar[name] = (int(top), int(bottom))
        elif kind == MEAN:
            ids = np.unique(np.concatenate([t.predicate[t.rows_of(name)] for t in tables]))
            cols = layout.columns(2 * len(ids))
            layout.predicates[name] = (ids, cols[0::2], cols[1::2])
            if name in scoring.over_cells or scoring.aggregation == "image":
                top, bottom = layout.columns(2)
                layout.scalar[name] = (int(top), int(bottom))
                if name not in scoring.over_cells:
                    layout.image_means.add(name)
            else:
                layout.averaged.append(name)
                if name in scoring.vocabulary_means and scoring.n_vocabulary:
                    layout.vocabulary[name] = len(ids) / scoring.n_vocabulary
    return layout


class TermMatrix:
    """A table's terms in a layout, transposed: (columns x images). Weighted sums use each
    distinct column once (the GT count columns of mR@20, mR@50, mNgR@50, IMR@50... are
    the same column: computing it once saves about half the work)."""

    def __init__(self, csr: sparse.csr_matrix) -> None:
        self.csr = csr
        self.distinct, self.rows = distinct_rows(csr)

    def __sub__(self, other: TermMatrix) -> TermMatrix:
        return TermMatrix((self.csr - other.csr).tocsr())

    @property
    def n_images(self) -> int:
        return int(self.csr.shape[1])

    def sums(self, weights: np.ndarray) -> np.ndarray:
        """Column sums under each weighting: (columns x B) for weights (B x images)."""
        return np.asarray(self.distinct @ np.ascontiguousarray(weights.T))[self.rows]


def distinct_rows(matrix: sparse.csr_matrix) -> tuple[sparse.csr_matrix, np.ndarray]:
    """The distinct rows of a sparse matrix, and for every row the index of its copy."""
    matrix = matrix.tocsr()
    matrix.sum_duplicates()
    matrix.sort_indices()
    first: dict[tuple[bytes, bytes], int] = {}
    rows = np.empty(matrix.shape[0], dtype=np.int64)
    keep = []
    for r in range(matrix.shape[0]):
        s, e = matrix.indptr[r], matrix.indptr[r + 1]
        key = (matrix.indices[s:e].tobytes(), matrix.data[s:e].tobytes())
        if key not in first:
            first[key] = len(keep)
            keep.append(r)
        rows[r] = first[key]
    return matrix[keep], rows


def term_matrix(layout: Layout, table: TermTable) -> TermMatrix:
    """The table's terms in the layout, transposed: (columns x images), duplicates
    summed."""
    # imported here: the pipeline imports this module for every evaluation, and only
    # intervals and comparisons build a term matrix (scipy.sparse costs ~20 ms to import)
    from scipy import sparse

    rows, cols, data = [], [], []

    def put(image: np.ndarray, col: np.ndarray | int, values: np.ndarray) -> None:
        rows.append(image)
        cols.append(np.broadcast_to(col, image.shape))
        data.append(values)

    for name, (spec, ids, firsts, seconds) in layout.states.items():
        sel = table.rows_of(name)
        j = np.searchsorted(ids, table.predicate[sel])
        first, second = spec.addends(table.num[sel], table.den[sel])
        put(table.image[sel], firsts[j], first)
        put(table.image[sel], seconds[j], second)
    for name in [*layout.scalar, *layout.predicates]:
        sel = table.rows_of(name)
        image, num, den = table.image[sel], table.num[sel], table.den[sel]
        value = num / den
        kind = table.kind_of(name) if len(sel) else None
        if name in layout.predicates:
            ids, tops, bottoms = layout.predicates[name]
            j = np.searchsorted(ids, table.predicate[sel])
            pooled = layout.aggregation == "pooled"
            put(image, tops[j], num.astype(float) if pooled else value)
            put(image, bottoms[j], den.astype(float) if pooled else np.ones(len(sel)))
        if name not in layout.scalar:
            continue
        top, bottom = layout.scalar[name]
        if kind == RATIO:
            put(image, top, num.astype(float))
            put(image, bottom, den.astype(float))
        elif name in layout.image_means:
            first, cells = group_sizes(image)
            put(image, top, value / cells)
            put(image[first], bottom, np.ones(len(first)))
        else:  # image-level value, or a mean over cells
            put(image, top, value)
            put(image, bottom, np.ones(len(sel)))
    shape = (layout.n_columns, table.n_images)
    if not rows:
        return TermMatrix(sparse.csr_matrix(shape))
    return TermMatrix(sparse.csr_matrix((np.concatenate(data), (np.concatenate(cols),
                                                                np.concatenate(rows))),
                                        shape=shape))


def group_sizes(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by image: the first row of each image, and per row its image's
    row count."""
    _, first, inverse, counts = np.unique(image, return_index=True, return_inverse=True,
                                          return_counts=True)
    return first, counts[inverse.reshape(-1)].astype(float)


@dataclass
class Values:
    """Values under B weightings: metric -> (B,), mean metric -> (predicate ids, (P, B));
    ``states``: resampled state -> (spec, keys, first sums (K, B), second sums (K, B))."""

    metrics: dict[str, np.ndarray]
    predicates: dict[str, tuple[np.ndarray, np.ndarray]]
    states: dict[str, tuple[PairState, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)

    @classmethod
    def joined(cls, parts: Sequence[Values]) -> Values:
        first = parts[0]
        return cls({n: np.concatenate([p.metrics[n] for p in parts]) for n in first.metrics},
                   {n: (ids, np.concatenate([p.predicates[n][1] for p in parts], axis=1))
                    for n, (ids, _) in first.predicates.items()},
                   {n: (spec, ids, *(np.concatenate([p.states[n][i] for p in parts], axis=1)
                                     for i in (2, 3)))
                    for n, (spec, ids, _, _) in first.states.items()})

    def mean(self, others: Sequence[Values]) -> Values:
        """The element-wise mean of this and ``others`` (runs of one model)."""
        every = [self, *others]
        return Values({n: np.mean([v.metrics[n] for v in every], axis=0)
                       for n in self.metrics},
                      {n: (ids, np.mean([v.predicates[n][1] for v in every], axis=0))
                       for n, (ids, _) in self.predicates.items()},
                      {n: (spec, ids, *(np.mean([v.states[n][i] for v in every], axis=0)
                                        for i in (2, 3)))
                       for n, (spec, ids, _, _) in self.states.items()})


def ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    out = np.full(np.broadcast(top, bottom).shape, np.nan)
    np.divide(top, bottom, out=out, where=bottom > 0)
    return out


def finalize(layout: Layout, sums: np.ndarray, derive: Derive | None = None,
             derived: Sequence[str] = (), derive_columns: ColumnDerive | None = None
             ) -> Values:
    """Values from column sums (columns x B); ``derived``: the derived names to compute
    (with ``derive_columns``, for every weighting in one call; else ``derive`` per
    weighting)."""
    per_predicate = {name: (ids, ratio(sums[tops], sums[bottoms]))
                     for name, (ids, tops, bottoms) in layout.predicates.items()}
    states = {name: (spec, ids, sums[firsts], sums[seconds])
              for name, (spec, ids, firsts, seconds) in layout.states.items()}
    metrics = {name: ratio(sums[top], sums[bottom])
               for name, (top, bottom) in layout.scalar.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: no predicate drawn
        for name in layout.averaged:
            values = per_predicate[name][1]
            metrics[name] = np.nanmean(values, axis=0) if len(values) \
                else np.full(sums.shape[1], np.nan)
            if name in layout.vocabulary:
                metrics[name] = metrics[name] * layout.vocabulary[name]
    n = sums.shape[1]
    if derive_columns is not None and derived:
        empty = (np.empty(0, dtype=np.int64), np.empty((0, n)))
        nothing = np.full(n, np.nan)
        found = derive_columns(FinalColumns(lambda name: per_predicate.get(name, empty),
                                            lambda name: metrics.get(name, nothing),
                                            lambda name: _state_columns(states, name)))
        metrics.update({name: found.get(name, nothing) for name in derived})
    elif derive is not None and derived:
        metrics.update(derived_values(per_predicate, metrics, states, derive, derived, n))
    return Values(metrics, per_predicate, states)


States = dict[str, tuple[PairState, np.ndarray, np.ndarray, np.ndarray]]


def _state_columns(states: States, name: str) -> StateColumns | None:
    """A resampled state's keys and two sums under every weighting (None: not computed)."""
    if name not in states:
        return None
    _, ids, first, second = states[name]
    return ids, first, second


def derived_values(per_predicate: dict[str, tuple[np.ndarray, np.ndarray]],
                   metrics: dict[str, np.ndarray], states: States, derive: Derive,
                   names: Sequence[str], n: int) -> dict[str, np.ndarray]:
    """Derived metrics per weighting: ``derive`` on that weighting's finals (predicates
    without a value left out; a metric without a value is None)."""
    out = {name: np.full(n, np.nan) for name in names}
    for b in range(n):
        finals = weighting_finals(per_predicate, metrics, b, states)
        for name, value in derive(finals).items():
            if name in out:
                out[name][b] = float(value)
    return out


def weighting_finals(per_predicate: dict[str, tuple[np.ndarray, np.ndarray]],
                     metrics: dict[str, np.ndarray], b: int, states: States | None = None
                     ) -> Finals:
    """The finals of weighting b, as ``derive`` reads them."""
    def value(name: str) -> float | None:
        found = metrics[name][b] if name in metrics else np.nan
        return float(found) if np.isfinite(found) else None

    return Finals(lambda name: predicate_dict(per_predicate, name, b), value,
                  lambda name: _state_dict(states or {}, name, b))


def _state_dict(states: States, name: str, b: int) -> dict[int, Any] | None:
    """Key -> a resampled state's final form under weighting b (keys whose sums are both
    0 left out: none of their rows was drawn); None for a state not computed."""
    if name not in states:
        return None
    spec, ids, first, second = states[name]
    a, c = first[:, b], second[:, b]
    return {int(k): spec.from_sums(float(x), float(y))
            for k, x, y in zip(ids.tolist(), a.tolist(), c.tolist(), strict=True)
            if x != 0 or y != 0}


def predicate_dict(per_predicate: dict[str, tuple[np.ndarray, np.ndarray]], name: str,
                   b: int) -> dict[int, float]:
    """Predicate -> value of a mean metric under weighting b (predicates without one left
    out; empty for a metric not computed)."""
    if name not in per_predicate:
        return {}
    ids, matrix = per_predicate[name]
    column = matrix[:, b]
    keep = ~np.isnan(column)
    return dict(zip(ids[keep].tolist(), column[keep].tolist(), strict=True))


@dataclass
class Plan:
    """What to compute for a set of tables: the layout, and which derived metrics."""

    layout: Layout
    derive: Derive | None
    derived: list[str]
    derive_columns: ColumnDerive | None = None

    def values(self, matrix: TermMatrix, weights: np.ndarray) -> Values:
        return self.finalize(matrix.sums(weights))

    def finalize(self, sums: np.ndarray) -> Values:
        return finalize(self.layout, sums, self.derive, self.derived, self.derive_columns)


def plan_for(tables: Sequence[TermTable], names: Sequence[str] | None, scoring: Scoring
             ) -> Plan:
    """The layout for ``names`` (None: every metric the tables have, derived ones included)
    over ``tables``; the metrics a derived metric reads (per-predicate or dataset values)
    are found by running ``derive`` once on the data."""
    common = [n for n in tables[0].names if all(n in t.names for t in tables)]
    common += sorted({n for t in tables for n, k in zip(t.names, t.kinds, strict=True)
                      if is_state(k)} - set(common))  # a table without a state's rows: none
    wanted = list(common) if names is None else [n for n in names if n in common]
    derived: list[str] = []
    if scoring.derive is not None:
        full = layout_of(tables, common, scoring)
        read: set[str] = set()
        found: set[str] | None = None
        for table in tables:
            values = finalize(full, term_matrix(full, table).sums(np.ones((1, table.n_images))))
            names_found = set(scoring.derive(recording(values, read)))
            found = names_found if found is None else found & names_found
        derived = sorted(n for n in found or () if names is None or n in names)
        if derived:
            wanted += [n for n in sorted(read) if n in common and n not in wanted]
    return Plan(layout_of(tables, wanted, scoring), scoring.derive, derived,
                scoring.derive_columns)


def recording(values: Values, read: set[str]) -> Finals:
    """The finals of ``values`` (one weighting), noting in ``read`` every metric and state
    asked for."""
    finals = weighting_finals(values.predicates, values.metrics, 0, values.states)

    def predicate_values(name: str) -> dict[int, float]:
        read.add(name)
        return finals.predicate_values(name)

    def value(name: str) -> float | None:
        read.add(name)
        return finals.value(name)

    def state(name: str) -> dict[int, Any] | None:
        read.add(name)
        return finals.state(name)

    return Finals(predicate_values, value, state)


def resample_indices(n_images: int, resamples: int, seed: int, start: int = 0
                     ) -> Iterator[np.ndarray]:
    """The image indices of resamples ``start`` .. ``resamples - 1``, in order: resample b
    is the b-th ``integers(0, n, n)`` draw of ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    for b in range(resamples):
        indices = rng.integers(0, n_images, size=n_images)
        if b >= start:
            yield indices


def count_chunks(n_images: int, resamples: int, seed: int, chunk: int | None = None,
                 start: int = 0, index: np.ndarray | None = None) -> Iterator[np.ndarray]:
    """Resample weights (how often each image was drawn) of resamples ``start`` ..
    ``resamples - 1``, a (chunk x images) array at a time: bounded memory whatever the
    number of resamples. ``index``: each image's unit (``sgdask.stats.units``); the units
    are drawn and an image weighs what its unit was drawn (None: images are drawn)."""
    size = chunk or max(1, CHUNK_CELLS // max(n_images, 1))
    units = n_units(index, n_images)
    batch: list[np.ndarray] = []
    for indices in resample_indices(units, resamples, seed, start):
        batch.append(np.bincount(indices, minlength=units))
        if len(batch) == size:
            yield per_image(np.array(batch, dtype=float), index)
            batch = []
    if batch:
        yield per_image(np.array(batch, dtype=float), index)


def percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float] | None:
    """The central ``level`` percentile interval of the finite samples (resamples where the
    value is undefined, e.g. no zero-shot triplet drawn, are left out); None when none is
    finite."""
    return percentile_intervals(samples[None, :], level)[0]


def percentile_intervals(samples: np.ndarray, level: float
                         ) -> list[tuple[float, float] | None]:
    """``percentile_interval`` of every row of a (rows x B) array at once: numpy's
    ``percentile`` (linear interpolation) over each row's finite values."""
    ordered = np.sort(np.where(np.isfinite(samples), samples, np.inf), axis=1)
    count = np.isfinite(ordered).sum(axis=1)
    bounds = [linear_percentile(ordered, count, q) for q in (50 * (1 - level),
                                                               50 * (1 + level))]
    return [(float(bounds[0][r]), float(bounds[1][r])) if count[r] else None
            for r in range(len(samples))]


def linear_percentile(ordered: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """Per row the q-th percentile of its first ``count`` (sorted) values, interpolated as
    ``numpy.percentile`` does."""
    virtual = np.maximum(count - 1, 0) * (q / 100)
    below = np.floor(virtual).astype(np.int64)
    above = np.minimum(below + 1, np.maximum(count - 1, 0))
    gamma = virtual - below
    rows = np.arange(len(ordered))
    a, b = ordered[rows, below], ordered[rows, above]
    with np.errstate(invalid="ignore"):
        diff = b - a
        return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)


@dataclass
class Intervals:
    """Bootstrap intervals of one evaluation: per metric, and per mean metric and
    predicate."""

    level: float
    resamples: int
    seed: int
    metrics: dict[str, tuple[float, float]]
    predicates: dict[str, dict[int, tuple[float, float]]]
    unit: str = "image"

    def settings(self) -> dict[str, object]:
        return {"level": self.level, "resamples": self.resamples, "method": METHOD,
                "unit": self.unit, "seed": self.seed}


def block_samples(matrices: Sequence[TermMatrix], plan: Plan, seed: int, start: int,
                  stop: int, index: np.ndarray | None = None) -> list[Values]:
    """Per term matrix, its values under resamples ``start`` .. ``stop - 1`` (``index``:
    the images' units, as ``count_chunks``)."""
    n = matrices[0].n_images
    parts: list[list[Values]] = [[] for _ in matrices]
    for weights in count_chunks(n, stop, seed, start=start, index=index):
        for i, matrix in enumerate(matrices):
            parts[i].append(plan.values(matrix, weights))
    return [Values.joined(p) for p in parts]


# ``mapper(func, shared, blocks)``: ``[func(*shared, *block) for block in blocks]``, maybe
# elsewhere (``sgdask.pipeline.cluster_mapper`` runs the blocks as Dask tasks).
Mapper = Callable[[Callable[..., Any], tuple, list[tuple]], list[Any]]
# Term rows x resamples per block when a mapper spreads the work: the PSG test split (2177
# images, ~250k rows, 1000 resamples) stays in one block, where shipping the terms would
# cost more than it saves; Visual Genome's 26k images go to the cluster in blocks.
BLOCK_WORK = 500_000_000


def bootstrap_samples(tables: Sequence[TermTable], plan: Plan, resamples: int, seed: int,
                      mapper: Mapper | None = None) -> list[Values]:
    """Per table, its values under every resample (the same resamples for every table:
    the tables must hold the same images, grouped into the same units). With a ``mapper``,
    blocks of resamples may run elsewhere; every resample is computed on its own, so the
    values are the same."""
    work = sum(len(t) for t in tables) * resamples
    blocks = 1 if mapper is None else min(max(1, work // BLOCK_WORK), resamples)
    matrices = [term_matrix(plan.layout, t) for t in tables]
    index = shared_index(tables)
    if blocks == 1:
        return block_samples(matrices, plan, seed, 0, resamples, index)
    edges = np.linspace(0, resamples, blocks + 1).astype(int).tolist()
    sample = block_samples if index is None else functools.partial(block_samples,
                                                                   index=index)
    done = mapper(sample, (matrices, plan, seed), list(pairwise(edges)))
    return [Values.joined([d[i] for d in done]) for i in range(len(tables))]


def bootstrap(table: TermTable, scoring: Scoring, level: float = 0.95,
              resamples: int = 1000, seed: int = 0, names: Sequence[str] | None = None,
              mapper: Mapper | None = None) -> Intervals:
    """Percentile bootstrap intervals over the table's units (images unless grouped) for
    ``names`` (None: every metric)."""
    plan = plan_for([table], names, scoring)
    samples = bootstrap_samples([table], plan, resamples, seed, mapper)[0]
    shown = set(plan.layout.scalar) | set(plan.layout.averaged) | set(plan.derived)
    if names is not None:
        shown &= set(names)
    names_shown = sorted(shown)
    found = percentile_intervals(np.array([samples.metrics[n] for n in names_shown])
                                 .reshape(len(names_shown), -1), level)
    metrics = {n: iv for n, iv in zip(names_shown, found, strict=True) if iv is not None}
    predicates = {}
    for name, (ids, matrix) in samples.predicates.items():
        if name in shown:
            rows = percentile_intervals(matrix, level)
            predicates[name] = {int(p): iv for p, iv in zip(ids.tolist(), rows, strict=True)
                                if iv is not None}
    return Intervals(level, resamples, seed, metrics, predicates, unit_of(table))


def point_values(table: TermTable, scoring: Scoring, names: Sequence[str] | None = None
                 ) -> dict[str, float]:
    """The values on the data itself (every image weight 1): what the report shows."""
    plan = plan_for([table], names, scoring)
    values = plan.values(term_matrix(plan.layout, table), np.ones((1, table.n_images)))
    return {n: float(v[0]) for n, v in values.metrics.items() if np.isfinite(v[0])}
