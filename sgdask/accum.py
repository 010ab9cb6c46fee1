"""Accumulators (SPEC section 7): update per image, merge associatively, finalize per mode.

Every per-image value is a rational term (numerator, denominator), and sums are kept
exact (numerators summed per denominator, Python ints). Merging is therefore associative
and commutative *exactly*: any partitioning, any worker count, any order gives
bit-identical final numbers. Floats appear only in ``finalize``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd, lcm

from sgdask.kernels.image import ImageResult
from sgdask.kernels.metrics import Term

AGGREGATIONS = ("per_predicate", "pooled", "image")


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


def mean_of_terms(terms: dict[int, Term]) -> Term:
    """(sum of num/den over the terms) / count, as one exact (numerator, denominator)."""
    common = lcm(*(den for _, den in terms.values()))
    total = sum(num * (common // den) for num, den in terms.values())
    return (total, common * len(terms))


def _merge_sums(a: dict, b: dict) -> dict:
    # fresh RationalSums on every key: the merge must not share (and later mutate) its inputs
    empty = RationalSum()
    return {key: a.get(key, empty).merged(b.get(key, empty)) for key in {**a, **b}}


def _merge_counts(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        out[key] = out.get(key, 0) + value
    return out


def _merge_pairs(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, (num, den) in b.items():
        old = out.get(key, (0, 0))
        out[key] = (old[0] + num, old[1] + den)
    return out


@dataclass
class Accumulator:
    """State of a dataset evaluation: TorchMetrics-style update / merge / finalize.

    - ``image_level[m]``: sum over images of the image's value of metric m;
    - ``per_predicate[(m, p)]``: sum over images where p occurs of the image's value;
    - ``pooled[(m, p)]``: (total numerator, total denominator), e.g. hits / GT count;
    - ``image_mean[m]``: sum over images of the mean over the image's predicates;
    - ``cells[m]``: sum over all defined (image, predicate) cells;
    - ``pooled_totals[m]``: (total numerator, total denominator) of pooled metrics (A@k).
    """

    image_level: dict[str, RationalSum] = field(default_factory=dict)
    per_predicate: dict[tuple[str, int], RationalSum] = field(default_factory=dict)
    pooled: dict[tuple[str, int], Term] = field(default_factory=dict)
    image_mean: dict[str, RationalSum] = field(default_factory=dict)
    cells: dict[str, RationalSum] = field(default_factory=dict)
    pooled_totals: dict[str, Term] = field(default_factory=dict)
    gt_per_predicate: dict[int, int] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)

    def update(self, result: ImageResult) -> None:
        """Add one image's terms."""
        for name, term in result.scalars.items():
            self.image_level.setdefault(name, RationalSum()).add(term)
        for name, terms in result.per_predicate.items():
            if not terms:
                continue
            self.image_mean.setdefault(name, RationalSum()).add(mean_of_terms(terms))
            cells = self.cells.setdefault(name, RationalSum())
            for p, term in terms.items():
                self.per_predicate.setdefault((name, p), RationalSum()).add(term)
                cells.add(term)
                old = self.pooled.get((name, p), (0, 0))
                self.pooled[(name, p)] = (old[0] + term[0], old[1] + term[1])
        for name, (num, den) in result.pooled.items():
            old = self.pooled_totals.get(name, (0, 0))
            self.pooled_totals[name] = (old[0] + num, old[1] + den)
        for p, n in result.gt_per_predicate.items():
            self.gt_per_predicate[p] = self.gt_per_predicate.get(p, 0) + n
        counts = {**result.diagnostics, "images": 1, "images_missing": int(result.missing)}
        for key, value in counts.items():
            self.diagnostics[key] = self.diagnostics.get(key, 0) + value

    def merged(self, other: Accumulator) -> Accumulator:
        """A new accumulator holding both (associative, commutative, exact)."""
        return Accumulator(
            image_level=_merge_sums(self.image_level, other.image_level),
            per_predicate=_merge_sums(self.per_predicate, other.per_predicate),
            pooled=_merge_pairs(self.pooled, other.pooled),
            image_mean=_merge_sums(self.image_mean, other.image_mean),
            cells=_merge_sums(self.cells, other.cells),
            pooled_totals=_merge_pairs(self.pooled_totals, other.pooled_totals),
            gt_per_predicate=_merge_counts(self.gt_per_predicate, other.gt_per_predicate),
            diagnostics=_merge_counts(self.diagnostics, other.diagnostics),
        )

    def predicate_values(self, name: str, aggregation: str) -> dict[int, Fraction]:
        """Per-predicate value of mean metric ``name`` (predicates with a defined value):
        pooled ratios under ``pooled``, else per-predicate means over images (``image``
        mode has no per-predicate value of its own and shows these)."""
        if aggregation == "pooled":
            return {p: Fraction(num, den) for (m, p), (num, den) in self.pooled.items()
                    if m == name and den}
        return {p: s.mean() for (m, p), s in self.per_predicate.items() if m == name}

    def mean_metric(self, name: str, aggregation: str, over_cells: bool) -> Fraction | None:
        """Dataset value of a mean metric under an aggregation mode (SPEC section 7)."""
        if over_cells:
            return self.cells[name].mean() if name in self.cells else None
        if aggregation == "image":
            return self.image_mean[name].mean() if name in self.image_mean else None
        values = self.predicate_values(name, aggregation)
        return sum(values.values(), Fraction(0)) / len(values) if values else None

    def mean_metric_names(self) -> list[str]:
        return sorted({m for m, _ in self.per_predicate}, key=metric_sort_key)

    def image_metric_names(self) -> list[str]:
        return sorted(self.image_level, key=metric_sort_key)


def metric_sort_key(name: str) -> tuple:
    """Report order: family, then absolute k ascending, then relative k ascending."""
    family, _, k = name.partition("@")
    families = ["R", "mR", "ngR", "mNgR", "PR", "zR", "mzR", "IMR", "wIMR", "A",
                "InstR", "PRank"]
    fam = families.index(family) if family in families else len(families)
    if not k:
        return (fam, 0, Fraction(0), name)
    if k == "inf":
        return (fam, 3, Fraction(0), name)
    if k.startswith("x"):
        return (fam, 2, Fraction(k[1:]), name)
    return (fam, 1, Fraction(k), name)
