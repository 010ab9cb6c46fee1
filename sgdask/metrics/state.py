"""Metric state beyond integer sums: rows that merge by concatenation.

Most families compute exact (numerator, denominator) terms that the accumulator adds as
integers. Some metrics need more than sums: average precision needs every (score, true
positive) pair of a predicate, panoptic quality the IoU of every true positive. Such a
family declares its state once, as TorchMetrics' ``add_state(name, default, merge)`` does:

- ``Runs(name, width)``: per integer key (a predicate), rows of ``width`` floats, e.g.
  (score, true positive); its final form is, per key, the rows sorted lexicographically
  (column 0 first), so the family's finalize reads the same array whatever the
  partitioning;
- ``FlaggedRuns(name)``: ``Runs`` of (value, flag, tag) rows for several flags at once,
  one row per item (its flags and tag packed in one exact float);
- ``FloatRows(name)``: per key, one float per row (a true positive's IoU); its final form
  is, per key, ``FloatSum(total, count)`` with ``total = math.fsum`` of the key's values:
  the correctly rounded sum of the exact values, which no order of adding changes;
- ``Ratios(name)``: per key, rows of two integers (numerator, denominator), e.g. a
  panoptic true positive's (intersection, union); its final form is, per key,
  ``FloatSum(math.fsum(num / den), count)``;
- ``Counts(name)``: per key, rows of two integers summed, e.g. a category's false
  positives and false negatives in one image; its final form is, per key, the two sums.

All merge by concatenation (``StateRows.merged``): associative, and commutative once
finalized. Rows are finite floats (NaN has no place in a canonical order, and fsum cannot
add +inf and -inf); -0.0 is stored as 0.0 (they compare equal, so a sort could not place
them canonically). The family emits ``StateRows`` from ``image_terms`` (in
``Terms.states``) or ``batch_terms`` (next to its term blocks); the accumulator keeps them
per state name; the family's ``derive`` reads ``finals.state(name)``.

``Ratios`` and ``Counts`` are *resampled*: their final form is a function of per-key sums
that each image adds to (the count and sum of ratios, the two counts), so their rows,
which carry the image they came from (``StateRows.image``, as term blocks do), are
per-image terms too (``sgdask.stats.table``): the bootstrap and the paired tests weight
them by image like any term, and a metric derived from them gets intervals. ``Runs`` and
``FloatRows`` are not (a sort of rows, a float per row): a metric derived from them gets
none.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

STATE = "state"  # the kind of StateRows among a partition's term blocks


class FloatSum(NamedTuple):
    """A key's final ``FloatRows`` value: the fsum of its rows and how many there were."""

    total: float
    count: int


@dataclass(frozen=True)
class StateSpec(ABC):
    """A declared state: its name (unique over the registry), row width, default
    (``empty``), merge and final form."""

    name: str
    width: int
    kind: ClassVar[str]
    #: whether the rows are per-image terms the bootstrap resamples (see the module)
    resampled: ClassVar[bool] = False

    def rows(self, keys: Any, values: Any, image: Any = None) -> StateRows:
        """State rows of this state: ``keys`` (n,) integers, ``values`` (n, width) or, for
        width 1, (n,) floats; ``image`` (n,): each row's image (its index in the batch of
        images, as ``Block.image``), None when not known (a resampled state's rows need
        it to become per-image terms)."""
        keys, values = _checked(self, keys, values)
        placed = None if image is None else np.asarray(image, np.int64).reshape(len(keys))
        return StateRows(self, keys, values, placed)

    def empty(self) -> StateRows:
        """The default: no row."""
        return self.rows(np.empty(0, np.int64), np.empty((0, self.width)))

    def merge(self, a: StateRows, b: StateRows) -> StateRows:
        """Both states' rows (concatenation: every kind merges so); their images when both
        carry them."""
        image = None if a.image is None or b.image is None else \
            np.concatenate([a.image, b.image])
        return StateRows(self, np.concatenate([a.keys, b.keys]),
                         np.concatenate([a.values, b.values]), image)

    @abstractmethod
    def final(self, state: StateRows) -> dict[int, Any]:
        """Per key, what the family's finalize reads."""


@dataclass(frozen=True)
class Runs(StateSpec):
    """Per key, runs of rows (e.g. a predicate's (score, true positive) pairs)."""

    width: int = 2
    kind: ClassVar[str] = "runs"

    def final(self, state: StateRows) -> dict[int, np.ndarray]:
        """Per key (ascending), its rows sorted lexicographically (column 0 first)."""
        keys, values = state.canonical()
        return {int(k): values[a:b] for k, a, b in _groups(keys)}


@dataclass(frozen=True)
class FlaggedRuns(StateSpec):
    """``Runs`` of rows (value, flag, tag), one per flag, held as one row per item: per key
    rows ``(value, code)`` with ``code = flags + 2**n_flags * tag`` (the item's flag bits
    and an integer tag below ``2**(53 - n_flags)``, exact in a float64). Its final form is
    the ``Runs`` final form of the rows each flag would have: per key ``key * n_flags +
    f`` (ascending), rows ``(value, bit f of the flags, tag)`` sorted lexicographically.
    oiv6 keeps each candidate once with its two true-positive flags (24 bytes a candidate,
    not the 64 of two ``Runs`` rows), so partitions' states stay small while merged."""

    width: int = 2
    n_flags: int = 2
    kind: ClassVar[str] = "flagged_runs"

    def final(self, state: StateRows) -> FlaggedFinal:
        """One sort by (key, value, code), shared by every flag (``FlaggedFinal`` puts a
        key's rows in each flag's order when they are read). Items equal in key, value
        and tag are ordered by their flags here; each flag's rows of them are equal."""
        order = np.lexsort((state.values[:, 1], state.values[:, 0], state.keys))
        keys, counts = _key_counts(state.keys)
        return FlaggedFinal(self.n_flags, keys, np.r_[0, np.cumsum(counts)],
                            state.values[order])


class FlaggedFinal(Mapping[int, np.ndarray]):
    """``FlaggedRuns``' final form: per key ``key * n_flags + f`` (ascending), the rows
    ``(value, bit f of the flags, tag)`` sorted lexicographically.

    Held as every item once, in (key, value, code) order (16 bytes an item), and each key's
    rows made when read: the rows of every flag at once would take 48 bytes an item (a
    million candidates on Open Images V6), in the task that finalizes and in the report
    sent to the driver. Within a key's (value) run, a stable sort by the flag's bit puts
    the rows without it first, tags still ascending: (value, bit, tag) order."""

    def __init__(self, n_flags: int, keys: np.ndarray, bounds: np.ndarray,
                 rows: np.ndarray) -> None:
        self.n_flags = n_flags
        self.keys = keys  # the item keys present, ascending
        self.bounds = bounds  # key i's items: rows[bounds[i]:bounds[i + 1]]
        self.rows = rows  # (value, code) in (key, value, code) order

    def __getitem__(self, key: int) -> np.ndarray:
        item_key, flag = divmod(int(key), self.n_flags)
        i = int(np.searchsorted(self.keys, item_key))
        if i == len(self.keys) or self.keys[i] != item_key:
            raise KeyError(key)
        rows = self.rows[self.bounds[i]:self.bounds[i + 1]]
        value, code = rows[:, 0], rows[:, 1].astype(np.int64)
        bit = (code >> flag) & 1
        run = np.cumsum(np.r_[False, value[1:] != value[:-1]])
        order = np.argsort(2 * run + bit, kind="stable")
        return np.stack([value[order], bit[order], code[order] >> self.n_flags], 1
                        ).astype(np.float64)

    def __iter__(self) -> Iterator[int]:
        return (k * self.n_flags + f for k in self.keys.tolist() for f in range(self.n_flags))

    def __len__(self) -> int:
        return len(self.keys) * self.n_flags


@dataclass(frozen=True)
class FloatRows(StateSpec):
    """Per key, one float per row (e.g. each true positive's IoU), summed at finalize."""

    width: int = 1
    kind: ClassVar[str] = "float_rows"

    def final(self, state: StateRows) -> dict[int, FloatSum]:
        """Per key (ascending), ``math.fsum`` of its values and their count."""
        keys, values = state.canonical()
        return {int(k): FloatSum(math.fsum(values[a:b, 0].tolist()), b - a)
                for k, a, b in _groups(keys)}


@dataclass(frozen=True)
class PairState(StateSpec):
    """A resampled state: rows of two integers whose final form per key follows from two
    per-key sums (``addends``, ``from_sums``), so that a weighting of the images (a
    bootstrap resample) weights the sums."""

    width: int = 2
    resampled: ClassVar[bool] = True

    @abstractmethod
    def addends(self, first: np.ndarray, second: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Per row (its two integers), what it adds to the key's two sums."""

    @abstractmethod
    def from_sums(self, first: float, second: float) -> Any:
        """A key's final form from its two (weighted) sums."""


@dataclass(frozen=True)
class Ratios(PairState):
    """Per key, rows (numerator, denominator) of integers, e.g. a true positive's
    (intersection, union); final per key ``FloatSum(math.fsum(num / den), count)``."""

    kind: ClassVar[str] = "ratios"

    def final(self, state: StateRows) -> dict[int, FloatSum]:
        """Per key (ascending), ``math.fsum`` of its rows' ratios (each the correctly
        rounded quotient of two integers) and their count."""
        keys, values = state.canonical()
        ratios = (values[:, 0] / values[:, 1]).tolist()
        return {int(k): FloatSum(math.fsum(ratios[a:b]), b - a) for k, a, b in _groups(keys)}

    def addends(self, first: np.ndarray, second: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        return first / second, np.ones(len(first))

    def from_sums(self, first: float, second: float) -> FloatSum:
        return FloatSum(first, second)


@dataclass(frozen=True)
class Counts(PairState):
    """Per key, rows of two integer counts; final per key the two sums (exact)."""

    kind: ClassVar[str] = "counts"

    def final(self, state: StateRows) -> dict[int, tuple[int, int]]:
        keys, values = state.canonical()
        counts = values.astype(np.int64)
        return {int(k): (int(counts[a:b, 0].sum()), int(counts[a:b, 1].sum()))
                for k, a, b in _groups(keys)}

    def addends(self, first: np.ndarray, second: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        return first.astype(np.float64), second.astype(np.float64)

    def from_sums(self, first: float, second: float) -> tuple[float, float]:
        return (first, second)


SPECS: dict[str, type[StateSpec]] = {"runs": Runs, "flagged_runs": FlaggedRuns,
                                     "float_rows": FloatRows, "ratios": Ratios,
                                     "counts": Counts}


@dataclass(frozen=True)
class StateRows:
    """Rows of one declared state: one image's, a partition's or a merged dataset's."""

    spec: StateSpec
    keys: np.ndarray
    values: np.ndarray
    image: np.ndarray | None = None  # per row, its image's index in the batch (or None)
    kind: ClassVar[str] = STATE

    @property
    def name(self) -> str:
        return self.spec.name

    def __len__(self) -> int:
        return len(self.keys)

    def merged(self, other: StateRows) -> StateRows:
        if other.spec != self.spec:
            raise ValueError(f"state {self.name}: declared as {self.spec} and {other.spec}")
        return self.spec.merge(self, other)

    def final(self) -> dict[int, Any]:
        """The declared final form (``Runs.final``, ``FloatRows.final``...)."""
        return self.spec.final(self)

    def at_image(self, index: int) -> StateRows:
        """These rows, all of image ``index`` of a batch."""
        return StateRows(self.spec, self.keys, self.values,
                         np.full(len(self.keys), index, dtype=np.int64))

    def unplaced(self) -> StateRows:
        """These rows without their images (what the accumulator keeps)."""
        return self if self.image is None else StateRows(self.spec, self.keys, self.values)

    def canonical(self) -> tuple[np.ndarray, np.ndarray]:
        """Keys and rows sorted by (key, column 0, column 1, ...): the same arrays for any
        order the rows were added or merged in."""
        order = np.lexsort([*self.values.T[::-1], self.keys])
        return self.keys[order], self.values[order]

    def plain(self) -> dict[str, Any]:
        """As plain data (``Evaluator.state``)."""
        return {"kind": self.spec.kind, "width": self.spec.width, "keys": self.keys,
                "values": self.values}


def rows_of_plain(name: str, plain: dict[str, Any]) -> StateRows:
    """The StateRows ``StateRows.plain`` described."""
    spec = SPECS[plain["kind"]](name, int(plain["width"]))
    return spec.rows(plain["keys"], plain["values"])


def merged_by_name(parts: list[StateRows]) -> list[StateRows]:
    """One StateRows per state name (in order of first appearance) from many: the same
    rows (and images, when every part carries them) as merging them one after the other,
    concatenated once per name (merging one by one copies the growing rows again for every
    part)."""
    groups: dict[str, list[StateRows]] = {}
    for part in parts:
        groups.setdefault(part.name, []).append(part)
    out = []
    for group in groups.values():
        spec = group[0].spec
        if any(p.spec != spec for p in group):
            other = next(p.spec for p in group if p.spec != spec)
            raise ValueError(f"state {spec.name}: declared as {spec} and {other}")
        images = [p.image for p in group]
        out.append(group[0] if len(group) == 1 else StateRows(
            spec, np.concatenate([p.keys for p in group]),
            np.concatenate([p.values for p in group]),
            None if any(i is None for i in images) else np.concatenate(images)))
    return out


def _checked(spec: StateSpec, keys: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    values = np.asarray(values, dtype=np.float64).reshape(len(keys), spec.width)
    if not np.isfinite(values).all():
        raise ValueError(f"state {spec.name}: a row holds a value that is not finite")
    if isinstance(spec, PairState):
        if (values != np.round(values)).any() or (np.abs(values) >= _EXACT).any():
            raise ValueError(f"state {spec.name}: a row holds a value that is not an integer "
                             f"below 2**53")
        if isinstance(spec, Ratios) and (values[:, 1] <= 0).any():
            raise ValueError(f"state {spec.name}: a row's denominator is not positive")
    return keys, values + 0.0  # -0.0 + 0.0 is 0.0


_EXACT = float(1 << 53)  # integers held exactly in a float64


def _key_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (ascending) and how many rows each has; counted without sorting
    the rows' keys when they are small non-negative integers (predicates)."""
    if len(keys) and keys.min() >= 0 and keys.max() < _COUNTED:
        counts = np.bincount(keys)
        present = np.flatnonzero(counts)
        return present, counts[present]
    return np.unique(keys, return_counts=True)


_COUNTED = 1 << 20  # keys below this are counted in an array of that many slots at most


def _groups(keys: np.ndarray) -> list[tuple[int, int, int]]:
    """(key, first row, end row) of each run of equal keys in sorted ``keys``."""
    if not len(keys):
        return []
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    return list(zip(keys[starts].tolist(), starts.tolist(), ends.tolist(), strict=True))
