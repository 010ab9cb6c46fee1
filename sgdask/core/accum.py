"""Accumulators (SPEC section 7): add terms, merge associatively, finalize per aggregation.

Every per-image value is a rational term (numerator, denominator). The accumulator keeps
integer numerator sums indexed by (metric, [predicate,] denominator): adding images and
merging accumulators is integer addition, so any partitioning, any worker count and any
order give bit-identical final numbers. Floats appear only when a report is built.

State (``KeyedSums``: sorted integer keys -> integer sums):

- ``image_sums``   (metric, den) -> (Σ num, images): mean over images of image-level values;
- ``ratio_sums``   (metric) -> (Σ num, Σ den): ratio metrics (legacy A@k);
- ``cell_sums``    (metric, predicate, den) -> (Σ num, images): per-predicate means;
- ``cell_totals``  (metric, predicate) -> (Σ num, Σ den): the ``pooled`` aggregation;
- ``image_means``  (metric, den) -> (Σ num, images): per image the mean over its
  predicates (as one reduced fraction), for the ``image`` aggregation;
- ``gt_counts``    (predicate) -> (GT triplets,); plus integer diagnostics;
- ``states``       state name -> ``StateRows``: the rows of families' declared states
  (``sgdask.metrics.state``), merged by concatenation and put in a canonical order when
  finalized, so they too give the same finals for any partitioning.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from itertools import pairwise
from math import gcd, lcm
from typing import Any

import numpy as np

from sgdask.kernels.rows import lexsort_rows, packed_rows
from sgdask.metrics.base import IMAGE, MEAN, RATIO, Block
from sgdask.metrics.state import STATE, StateRows, merged_by_name
from sgdask.types import ImageResult, Term

AGGREGATIONS = ("per_predicate", "pooled", "image")
INT64_SAFE = 1 << 52  # lcm bound under which image-mode sums stay exact in int64


@dataclass
class RationalSum:
    """Exact sum of rational terms plus how many terms were added."""

    by_denominator: dict[int, int] = field(default_factory=dict)
    count: int = 0

    def add(self, value: Fraction | Term) -> None:
        num, den = (value.numerator, value.denominator) if isinstance(value, Fraction) else value
        g = gcd(num, den) or 1
        self.by_denominator[den // g] = self.by_denominator.get(den // g, 0) + num // g
        self.count += 1

    def merged(self, other: RationalSum) -> RationalSum:
        out = dict(self.by_denominator)
        for den, num in other.by_denominator.items():
            out[den] = out.get(den, 0) + num
        return RationalSum(out, self.count + other.count)

    def total(self) -> Fraction:
        return sum((Fraction(n, d) for d, n in self.by_denominator.items()), Fraction(0))

    def mean(self) -> Fraction | None:
        return self.total() / self.count if self.count else None


class KeyedSums:
    """Integer sums under integer keys, compacted (keys sorted and unique)."""

    def __init__(self, n_keys: int, n_values: int, keys: np.ndarray | None = None,
                 values: np.ndarray | None = None) -> None:
        self.keys = np.empty((0, n_keys), np.int64) if keys is None else keys
        self.values = np.empty((0, n_values), np.int64) if values is None else values

    def __len__(self) -> int:
        return len(self.keys)

    def added(self, keys: np.ndarray, values: np.ndarray) -> KeyedSums:
        """A new KeyedSums with the rows added (self unchanged)."""
        return compacted(np.concatenate([self.keys, keys.astype(np.int64, copy=False)]),
                         np.concatenate([self.values, values.astype(np.int64, copy=False)]))

    def merged(self, other: KeyedSums) -> KeyedSums:
        return self.added(other.keys, other.values)

    def remapped(self, codes: np.ndarray) -> KeyedSums:
        """Keys with column 0 (a metric code) translated through ``codes``."""
        keys = self.keys.copy()
        if len(keys):
            keys[:, 0] = codes[keys[:, 0]]
        return compacted(keys, self.values)

    def rows(self, metric: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) of one metric code."""
        sel = self.keys[:, 0] == metric
        return self.keys[sel], self.values[sel]


def compacted(keys: np.ndarray, values: np.ndarray) -> KeyedSums:
    """Rows with equal keys summed, keys sorted (lexicographically) and unique."""
    if len(keys) == 0:
        return KeyedSums(keys.shape[1], values.shape[1], keys, values)
    packed = packed_rows(list(keys.T))
    if packed is not None:  # one int64 per row: sorted and compared without the rows
        order = np.argsort(packed)  # (equal rows in any order: their sums are the same)
        packed = packed[order]
        new = np.ones(len(packed), dtype=bool)
        np.not_equal(packed[1:], packed[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        return KeyedSums(keys.shape[1], values.shape[1], keys[order[starts]],
                         np.add.reduceat(values[order], starts, axis=0))
    order = lexsort_rows(list(keys.T))
    keys, values = keys[order], values[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    return KeyedSums(keys.shape[1], values.shape[1], keys[starts],
                     np.add.reduceat(values, starts, axis=0))


def cat(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64, copy=False)


def fraction_sum(dens: np.ndarray, nums: np.ndarray) -> Fraction:
    """Σ num / den exactly (one row per distinct denominator)."""
    return grouped_fraction_sums(np.zeros(len(dens), dtype=np.int64), dens, nums).get(
        0, Fraction(0))


def grouped_fraction_sums(groups: np.ndarray, dens: np.ndarray, nums: np.ndarray
                          ) -> dict[int, Fraction]:
    """Per group (rows sorted by group), Σ num / den exactly: the numerators brought to the
    lcm of the group's denominators in Python integers (no overflow), one Fraction per
    group; adding Fractions row by row reduced by a gcd at every step (the report's cost)."""
    out: dict[int, Fraction] = {}
    if len(groups) == 0:
        return out
    new = np.ones(len(groups), dtype=bool)
    new[1:] = groups[1:] != groups[:-1]
    bounds = [*np.flatnonzero(new).tolist(), len(groups)]
    group_list, den_list, num_list = groups.tolist(), dens.tolist(), nums.tolist()
    for a, b in pairwise(bounds):
        common = lcm(*den_list[a:b])
        total = sum(n * (common // d) for d, n in zip(den_list[a:b], num_list[a:b],
                                                      strict=True))
        out[group_list[a]] = Fraction(total, common)
    return out


def image_mean_terms(image: np.ndarray, metric: np.ndarray, num: np.ndarray, den: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (image, metric): the mean of num/den over its predicate rows, as one reduced
    fraction. Returns (metric, numerator, denominator) per group."""
    order = np.lexsort((metric, image))
    image, metric, num, den = image[order], metric[order], num[order], den[order]
    new = np.ones(len(image), dtype=bool)
    new[1:] = (image[1:] != image[:-1]) | (metric[1:] != metric[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(image)))
    # The product of a group's denominators bounds their lcm: below INT64_SAFE the int64
    # lcm cannot have wrapped around (a wrapped value could pass any check on itself).
    bound = np.multiply.reduceat(den.astype(np.float64), starts)
    if len(bound) and (bound.max() >= INT64_SAFE or (den <= 0).any()):
        return exact_image_means(starts, counts, metric, num, den)
    common = np.lcm.reduceat(den, starts)  # <= the product: below INT64_SAFE, positive
    group = np.repeat(np.arange(len(starts)), counts)
    total = np.add.reduceat(num * (common[group] // den), starts)
    out_den = common * counts
    g = np.gcd(total, out_den)
    g[g == 0] = 1
    return metric[starts], total // g, out_den // g


def exact_image_means(starts: np.ndarray, counts: np.ndarray, metric: np.ndarray,
                      num: np.ndarray, den: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same with Python integers, for images whose denominators' lcm is huge."""
    nums, dens = [], []
    for s, c in zip(starts.tolist(), counts.tolist(), strict=True):
        value = sum((Fraction(int(n), int(d)) for n, d in zip(num[s:s + c], den[s:s + c],
                                                                strict=True)),
                    Fraction(0)) / c
        nums.append(value.numerator)
        dens.append(value.denominator)
    return metric[starts], np.array(nums, dtype=object), np.array(dens, dtype=object)


@dataclass
class Accumulator:
    """State of a dataset evaluation: TorchMetrics-style add / merge / finalize."""

    names: list[str] = field(default_factory=list)
    image_sums: KeyedSums = field(default_factory=lambda: KeyedSums(2, 2))
    ratio_sums: KeyedSums = field(default_factory=lambda: KeyedSums(1, 2))
    cell_sums: KeyedSums = field(default_factory=lambda: KeyedSums(3, 2))
    cell_totals: KeyedSums = field(default_factory=lambda: KeyedSums(2, 2))
    image_means: KeyedSums = field(default_factory=lambda: KeyedSums(2, 2))
    big_image_means: dict[int, RationalSum] = field(default_factory=dict)
    gt_counts: KeyedSums = field(default_factory=lambda: KeyedSums(1, 1))
    diagnostics: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    states: dict[str, StateRows] = field(default_factory=dict)

    # ------------------------------------------------------------------ adding terms

    def code(self, name: str) -> int:
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    def add_blocks(self, blocks: list[Block | StateRows]) -> None:
        """Add term blocks (``sgdask.metrics.base.Block``) of many images (one compaction
        per state table, however many blocks) and declared states' rows."""
        rows: dict[str, list[tuple[np.ndarray, ...]]] = {IMAGE: [], RATIO: [], MEAN: []}
        for b in blocks:
            if b.kind == STATE:
                assert isinstance(b, StateRows)
                self.add_state(b)
                continue
            assert isinstance(b, Block)
            if len(b.num) == 0:
                continue
            self.kinds[b.name] = b.kind
            codes = np.full(len(b.num), self.code(b.name), dtype=np.int64)
            predicate = codes if b.predicate is None else b.predicate  # (unused then)
            rows[b.kind].append((codes, b.image, predicate, b.num, b.den))
        if rows[IMAGE]:
            codes, _, _, num, den = (cat(c) for c in zip(*rows[IMAGE], strict=True))
            self.image_sums = self.image_sums.added(np.stack([codes, den], 1),
                                                    np.stack([num, np.ones_like(num)], 1))
        if rows[RATIO]:
            codes, _, _, num, den = (cat(c) for c in zip(*rows[RATIO], strict=True))
            self.ratio_sums = self.ratio_sums.added(codes[:, None], np.stack([num, den], 1))
        if rows[MEAN]:
            codes, image, predicate, num, den = (cat(c) for c in zip(*rows[MEAN], strict=True))
            self.cell_sums = self.cell_sums.added(np.stack([codes, predicate, den], 1),
                                                  np.stack([num, np.ones_like(num)], 1))
            self.cell_totals = self.cell_totals.added(np.stack([codes, predicate], 1),
                                                      np.stack([num, den], 1))
            self.add_image_means(image, codes, num, den)

    def add_state(self, rows: StateRows) -> None:
        """A declared state's rows (without their images: the sums forget images too)."""
        mine, rows = self.states.get(rows.name), rows.unplaced()
        self.states[rows.name] = rows if mine is None else mine.merged(rows)

    def add_image_means(self, image: np.ndarray, metric: np.ndarray, num: np.ndarray,
                        den: np.ndarray) -> None:
        codes, nums, dens = image_mean_terms(image.astype(np.int64), metric,
                                             num.astype(np.int64), den.astype(np.int64))
        if nums.dtype == object:  # exact fallback: Python integers
            for c, n, d in zip(codes.tolist(), nums, dens, strict=True):
                self.big_image_means.setdefault(c, RationalSum()).add((n, d))
            return
        self.image_means = self.image_means.added(
            np.stack([codes, dens], 1), np.stack([nums, np.ones(len(nums), np.int64)], 1))

    def add_counts(self, gt_predicates: np.ndarray, diagnostics: dict[str, int]) -> None:
        values, counts = np.unique(np.asarray(gt_predicates, dtype=np.int64),
                                   return_counts=True)
        self.gt_counts = self.gt_counts.added(values[:, None], counts[:, None])
        for key, value in diagnostics.items():
            self.diagnostics[key] = self.diagnostics.get(key, 0) + int(value)

    def update(self, result: ImageResult) -> None:
        """Add one image's terms (the plain path; the pipeline adds whole partitions); a
        skipped image adds only its diagnostics."""
        if result.skipped:
            self.add_counts(np.empty(0, dtype=np.int64), result.diagnostics)
            return
        blocks = [Block(name, IMAGE, np.zeros(1, np.int64), np.array([num]), np.array([den]))
                  for name, (num, den) in result.image_terms.items()]
        blocks += [Block(name, RATIO, np.zeros(1, np.int64), np.array([num]), np.array([den]))
                   for name, (num, den) in result.ratio_terms.items()]
        for name, terms in result.predicate_terms.items():
            if terms:
                preds = np.array(list(terms), dtype=np.int64)
                nums, dens = (np.array([t[i] for t in terms.values()], dtype=np.int64)
                              for i in (0, 1))
                blocks.append(Block(name, MEAN, np.zeros(len(preds), np.int64), nums, dens,
                                    preds))
        self.add_blocks([*blocks, *result.states])
        predicates = np.repeat(np.array(list(result.gt_per_predicate), dtype=np.int64),
                               list(result.gt_per_predicate.values()))
        self.add_counts(predicates, {**result.diagnostics, "images": 1,
                                     "images_missing": int(result.missing)})

    # ------------------------------------------------------------------ merging

    def merged(self, other: Accumulator) -> Accumulator:
        """A new accumulator holding both (associative, commutative, exact)."""
        names = list(dict.fromkeys([*self.names, *other.names]))
        mine = np.array([names.index(n) for n in self.names] or [0], dtype=np.int64)
        theirs = np.array([names.index(n) for n in other.names] or [0], dtype=np.int64)

        def both(a: KeyedSums, b: KeyedSums) -> KeyedSums:
            return a.remapped(mine).merged(b.remapped(theirs))

        big: dict[int, RationalSum] = {}
        for codes, source in ((mine, self.big_image_means), (theirs, other.big_image_means)):
            for code, value in source.items():
                key = int(codes[code])
                big[key] = big.get(key, RationalSum()).merged(value)
        diagnostics = dict(self.diagnostics)
        for key, value in other.diagnostics.items():
            diagnostics[key] = diagnostics.get(key, 0) + value
        states = dict(self.states)
        for name, rows in other.states.items():
            states[name] = states[name].merged(rows) if name in states else rows
        return Accumulator(
            names, both(self.image_sums, other.image_sums),
            both(self.ratio_sums, other.ratio_sums), both(self.cell_sums, other.cell_sums),
            both(self.cell_totals, other.cell_totals), both(self.image_means, other.image_means),
            big, self.gt_counts.merged(other.gt_counts), diagnostics,
            {**self.kinds, **other.kinds}, states)

    @staticmethod
    def merged_all(accumulators: Sequence[Accumulator]) -> Accumulator:
        """``merged`` of all of them in order, each declared state's rows concatenated once
        (merged one by one, the growing rows are copied again for every accumulator: a
        million oiv6 candidates in the task that finalizes)."""
        out = functools.reduce(Accumulator.merged,
                               [replace(a, states={}) for a in accumulators], Accumulator())
        out.states = {rows.name: rows for rows in merged_by_name(
            [rows for a in accumulators for rows in a.states.values()])}
        return out

    # ------------------------------------------------------------------ finalizing

    @property
    def gt_per_predicate(self) -> dict[int, int]:
        return {int(k[0]): int(v[0]) for k, v in zip(self.gt_counts.keys,
                                                     self.gt_counts.values, strict=True)}

    def names_of(self, kind: str) -> list[str]:
        from sgdask.metrics import sort_key

        return sorted((n for n in self.names if self.kinds.get(n) == kind), key=sort_key)

    def image_metric_names(self) -> list[str]:
        return self.names_of(IMAGE)

    def mean_metric_names(self) -> list[str]:
        return self.names_of(MEAN)

    def ratio_metric_names(self) -> list[str]:
        return self.names_of(RATIO)

    def state_final(self, name: str) -> dict[int, Any] | None:
        """A declared state's final form (``StateSpec.final``), None when no image added
        a row of it."""
        rows = self.states.get(name)
        return None if rows is None else rows.final()

    def image_value(self, name: str) -> Fraction | None:
        """Mean over images of an image-level metric."""
        if name not in self.names:
            return None
        keys, values = self.image_sums.rows(self.names.index(name))
        count = int(values[:, 1].sum())
        return fraction_sum(keys[:, 1], values[:, 0]) / count if count else None

    def image_count(self, name: str) -> int:
        """Images with a value of an image-level metric."""
        if name not in self.names:
            return 0
        return int(self.image_sums.rows(self.names.index(name))[1][:, 1].sum())

    def ratio_value(self, name: str) -> Fraction | None:
        """Total numerator / total denominator of a ratio metric."""
        if name not in self.names:
            return None
        _, values = self.ratio_sums.rows(self.names.index(name))
        den = int(values[:, 1].sum())
        return Fraction(int(values[:, 0].sum()), den) if den else None

    def predicate_values(self, name: str, aggregation: str) -> dict[int, Fraction]:
        """Per-predicate value of mean metric ``name`` (predicates with a defined value):
        pooled ratios under ``pooled``, else per-predicate means over images (``image``
        mode has no per-predicate value of its own and shows these)."""
        if name not in self.names:
            return {}
        code = self.names.index(name)
        if aggregation == "pooled":
            keys, values = self.cell_totals.rows(code)
            return {int(k[1]): Fraction(int(v[0]), int(v[1]))
                    for k, v in zip(keys, values, strict=True) if v[1]}
        keys, values = self.cell_sums.rows(code)  # sorted by (predicate, den)
        sums = grouped_fraction_sums(keys[:, 1], keys[:, 2], values[:, 0])
        predicates, first = np.unique(keys[:, 1], return_index=True)
        images = np.add.reduceat(values[:, 1], first).tolist() if len(first) else []
        return {p: sums[p] / n for p, n in zip(predicates.tolist(), images, strict=True)}

    def mean_metric(self, name: str, aggregation: str, over_cells: bool) -> Fraction | None:
        """Dataset value of a mean metric under an aggregation mode (SPEC section 7)."""
        if name not in self.names:
            return None
        code = self.names.index(name)
        if over_cells:
            keys, values = self.cell_sums.rows(code)
            count = int(values[:, 1].sum())
            return fraction_sum(keys[:, 2], values[:, 0]) / count if count else None
        if aggregation == "image":
            keys, values = self.image_means.rows(code)
            total = RationalSum({}, int(values[:, 1].sum()))
            for d, n in zip(keys[:, 1].tolist(), values[:, 0].tolist(), strict=True):
                total.by_denominator[d] = total.by_denominator.get(d, 0) + n
            total = total.merged(self.big_image_means.get(code, RationalSum()))
            return total.mean()
        values = self.predicate_values(name, aggregation)
        return sum(values.values(), Fraction(0)) / len(values) if values else None
