"""Accumulators (SPEC section 7): aggregation modes, exact sums, associative merging.

Images are built through ``evaluate_image`` on 10x10 boxes in a row (GT instance i =
``box(i)``, predictions copy the GT boxes, so matching is the identity); the expected
dataset values are exact fractions worked out by hand in each docstring.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sgdask.core.accum import (
    AGGREGATIONS,
    Accumulator,
    RationalSum,
    compacted,
    grouped_fraction_sums,
    image_mean_terms,
)
from sgdask.kernels.rows import lexsort_rows
from sgdask.kernels.selection import parse_ks
from sgdask.metrics.state import FlaggedRuns
from sgdask.metrics.terms import evaluate_image, missing_image_result
from sgdask.protocols import SGBENCH, SINGLEMPO, Protocol
from sgdask.types import ImageGT, ImagePred, ImageResult, as_triplets
from tests.helpers.builders import snapshot

KS = parse_ks("20")


def box(i: int) -> list[float]:
    return [10.0 * i, 0.0, 10.0 * i + 10.0, 10.0]


def scene(image_id: str, n: int, relations, graph, ng=()) -> tuple[ImageGT, ImagePred]:
    """n GT instances of category 0 and a prediction with exactly the same boxes."""
    boxes = np.asarray([box(i) for i in range(n)], dtype=np.float64)
    labels = np.zeros(n, dtype=np.int64)
    gt = ImageGT(image_id, labels, as_triplets(relations), boxes=boxes)
    pred = ImagePred(image_id, labels.copy(), as_triplets(graph), as_triplets(ng),
                     boxes=boxes.copy())
    return gt, pred


def evaluated(protocol: Protocol, image_id: str, n: int, relations, graph, ng=()
              ) -> ImageResult:
    gt, pred = scene(image_id, n, relations, graph, ng)
    return evaluate_image(gt, pred, protocol, KS)


def merge_all(items: list[Accumulator]) -> Accumulator:
    total = Accumulator()
    for item in items:
        total = total.merged(item)
    return total


def accumulate(results: list[ImageResult]) -> Accumulator:
    acc = Accumulator()
    for r in results:
        acc.update(r)
    return acc


# --------------------------------------------------------------------------- aggregation


def mr_dataset() -> list[ImageResult]:
    """Two images under singlempo.

    img1: GT (0,1,0) (1,2,1) (2,0,1) (0,2,1); graph (0,1,0) (1,2,1)
          -> R@20 = 2/4; mR@20: p0 1/1, p1 1/3.
    img2: GT (0,1,0) (1,2,0) (2,0,0); graph (1,0,0) (a miss) -> R@20 = 0/3; mR@20: p0 0/3.
    """
    return [
        evaluated(SINGLEMPO, "img1", 3, [[0, 1, 0], [1, 2, 1], [2, 0, 1], [0, 2, 1]],
                  [[0, 1, 0], [1, 2, 1]]),
        evaluated(SINGLEMPO, "img2", 3, [[0, 1, 0], [1, 2, 0], [2, 0, 0]], [[1, 0, 0]]),
    ]


def test_image_results_of_the_mr_dataset():
    img1, img2 = mr_dataset()
    assert img1.predicate_terms["mR@20"] == {0: (1, 1), 1: (1, 3)}
    assert img2.predicate_terms["mR@20"] == {0: (0, 3)}


def test_three_aggregation_modes_differ():
    """per_predicate: p0 = mean(1, 0) = 1/2, p1 = mean(1/3) = 1/3 -> (1/2 + 1/3)/2 = 5/12.
    pooled:        p0 = (1+0)/(1+3) = 1/4, p1 = 1/3       -> (1/4 + 1/3)/2 = 7/24.
    image:         img1 (1 + 1/3)/2 = 2/3, img2 0/3 = 0    -> (2/3 + 0)/2 = 1/3.
    R@20 (image level): (2/4 + 0)/2 = 1/4.
    """
    acc = accumulate(mr_dataset())
    expected = {"per_predicate": Fraction(5, 12), "pooled": Fraction(7, 24),
                "image": Fraction(1, 3)}
    for aggregation, value in expected.items():
        assert acc.mean_metric("mR@20", aggregation, False) == value
    assert acc.predicate_values("mR@20", "per_predicate") == {0: Fraction(1, 2),
                                                             1: Fraction(1, 3)}
    assert acc.predicate_values("mR@20", "pooled") == {0: Fraction(1, 4), 1: Fraction(1, 3)}
    assert acc.image_value("R@20") == Fraction(1, 4)
    assert acc.image_value("InstR") == 1
    assert acc.gt_per_predicate == {0: 4, 1: 3}
    assert acc.diagnostics["images"] == 2
    assert acc.diagnostics["images_missing"] == 0


def prank_dataset() -> list[ImageResult]:
    """Three images under sgbench (NG lists only).

    img1: GT (0,1,0) (1,2,1) (2,0,1); NG (0,1,0) (1,2,3) (1,2,1) (2,0,4) (2,0,5) (2,0,1)
          ranks: (0,1,0) 0; (1,2,1) 1; (2,0,1) 2 -> PRank p0 (0, 1), p1 (3, 2).
    img2: GT (0,1,0); NG (0,1,2) (0,1,0) -> rank 1 -> PRank p0 (1, 1).
    img3: GT (0,1,0); NG (1,0,0): the GT triplet is not found -> no PRank value at all.
    """
    return [
        evaluated(SGBENCH, "img1", 3, [[0, 1, 0], [1, 2, 1], [2, 0, 1]], [],
                  [[0, 1, 0], [1, 2, 3], [1, 2, 1], [2, 0, 4], [2, 0, 5], [2, 0, 1]]),
        evaluated(SGBENCH, "img2", 2, [[0, 1, 0]], [], [[0, 1, 2], [0, 1, 0]]),
        evaluated(SGBENCH, "img3", 2, [[0, 1, 0]], [], [[1, 0, 0]]),
    ]


def test_image_results_of_the_prank_dataset():
    img1, img2, img3 = prank_dataset()
    assert img1.predicate_terms["PRank"] == {0: (0, 1), 1: (3, 2)}
    assert img2.predicate_terms["PRank"] == {0: (1, 1)}
    assert img3.predicate_terms["PRank"] == {}


def test_sgbench_prank_over_cells_vs_per_predicate():
    """Defined cells (image, predicate): (img1, p0) 0, (img1, p1) 3/2, (img2, p0) 1.

    over cells (sgbench): (0 + 3/2 + 1)/3 = 5/6.
    per_predicate: p0 = mean(0, 1) = 1/2, p1 = 3/2 -> (1/2 + 3/2)/2 = 1.
    pooled: p0 = (0+1)/(1+1) = 1/2, p1 = 3/2 -> 1.
    image: img1 (0 + 3/2)/2 = 3/4, img2 1; img3 has no value -> (3/4 + 1)/2 = 7/8.
    """
    acc = accumulate(prank_dataset())
    assert SGBENCH.prank_over_cells
    assert acc.mean_metric("PRank", "per_predicate", over_cells=True) == Fraction(5, 6)
    assert acc.mean_metric("PRank", "per_predicate", False) == 1
    assert acc.mean_metric("PRank", "pooled", False) == 1
    assert acc.mean_metric("PRank", "image", False) == Fraction(7, 8)
    assert acc.predicate_values("PRank", "per_predicate") == {0: Fraction(1, 2),
                                                             1: Fraction(3, 2)}


def test_missing_images_in_the_means():
    """img1 (evaluated): GT (0,1,0), hit -> R@20 1/1, mR@20 p0 1/1; NG (0,1,1) (0,1,0): the GT
    triplet is the pair's second predicate -> PRank p0 = 1.
    img2 (missing): GT (0,1,0) (1,0,1) -> R@20 0/2.

    singlempo: the missing image counts 0 in the means: p0 = mean(1, 0) = 1/2, p1 = 0
      -> mR@20 = 1/4; R@20 = (1 + 0)/2 = 1/2.
    sgbench: left out of the means: p0 = 1, p1 never evaluated -> mR@20 = 1;
      still 0 for R@20 -> 1/2. Neither gives the missing image a PRank value: PRank stays
      1 (a missing image wrongly ranked 0 would pull it to 1/2, or 1/3 over cells).
    """
    for protocol, mr in ((SINGLEMPO, Fraction(1, 4)), (SGBENCH, Fraction(1))):
        gt2, _ = scene("img2", 2, [[0, 1, 0], [1, 0, 1]], [])
        results = [evaluated(protocol, "img1", 2, [[0, 1, 0]], [[0, 1, 0]],
                             [[0, 1, 1], [0, 1, 0]]),
                   missing_image_result(gt2, protocol, KS)]
        acc = accumulate(results)
        assert acc.mean_metric("mR@20", "per_predicate", False) == mr
        assert acc.image_value("R@20") == Fraction(1, 2)
        assert acc.image_value("InstR") == Fraction(1, 2)
        for aggregation in AGGREGATIONS:
            assert acc.mean_metric("PRank", aggregation, False) == 1
        assert acc.mean_metric("PRank", "per_predicate", True) == 1
        assert acc.diagnostics["images_missing"] == 1
        assert acc.gt_per_predicate == {0: 2, 1: 1}


def test_undefined_metric_is_none():
    acc = accumulate([prank_dataset()[2]])
    assert acc.mean_metric("PRank", "per_predicate", False) is None
    assert acc.mean_metric("PRank", "image", False) is None
    assert acc.mean_metric("PRank", "per_predicate", True) is None


# --------------------------------------------------------------------------- merging


def all_results() -> list[ImageResult]:
    gt_missing, _ = scene("img9", 3, [[0, 1, 2], [2, 1, 0]], [])
    return [*mr_dataset(), *prank_dataset(), missing_image_result(gt_missing, SINGLEMPO, KS)]


def singletons(results: list[ImageResult]) -> list[Accumulator]:
    return [accumulate([r]) for r in results]


def test_merge_of_singletons_equals_sequential_update():
    results = all_results()
    assert snapshot(merge_all(singletons(results))) == snapshot(accumulate(results))


def test_merge_is_commutative_and_associative_exactly():
    """Every order of 4 partial accumulators and every bracketing gives identical values."""
    results = all_results()
    parts = [accumulate(results[:2]), accumulate(results[2:3]), accumulate(results[3:5]),
             accumulate(results[5:])]
    reference = snapshot(accumulate(results))
    for a, b, c, d in itertools.permutations(parts):
        left = a.merged(b).merged(c).merged(d)
        right = a.merged(b.merged(c.merged(d)))
        balanced = a.merged(b).merged(c.merged(d))
        assert snapshot(left) == reference
        assert snapshot(right) == reference
        assert snapshot(balanced) == reference


def test_any_split_of_the_images_gives_identical_values():
    results = all_results()
    reference = snapshot(accumulate(results))
    for order in itertools.permutations(range(len(results)), len(results)):
        if order[0] > 1:  # keep the test quick: 2 * 5! orders, each split at every point
            continue
        ordered = [results[i] for i in order]
        for cut in range(len(ordered) + 1):
            merged = accumulate(ordered[:cut]).merged(accumulate(ordered[cut:]))
            assert snapshot(merged) == reference


def test_merged_all_equals_merging_one_by_one():
    """``Accumulator.merged_all`` (the finalizing task's merge: each state concatenated
    once) gives what merging the parts one after the other gives, declared states included
    (a ``FlaggedRuns`` in only some parts), in every order."""
    results = all_results()
    parts = [accumulate(results[:2]), accumulate(results[2:3]), accumulate(results[3:5]),
             accumulate(results[5:])]
    flagged = FlaggedRuns("toy_flagged")
    for i, part in enumerate(parts[:3]):
        part.add_state(flagged.rows([i % 2, 1], [[-0.5, 4.0 * i + 1], [-0.25, 4.0 * i + 2]]))
    for order in itertools.permutations(parts):
        merged = Accumulator.merged_all(order)
        assert snapshot(merged) == snapshot(merge_all(list(order)))
        assert len(merged.states["toy_flagged"]) == 6


def test_merging_an_empty_accumulator_changes_nothing():
    acc = accumulate(all_results())
    assert snapshot(acc.merged(Accumulator())) == snapshot(acc)
    assert snapshot(Accumulator().merged(acc)) == snapshot(acc)


def test_merged_is_a_new_accumulator():
    """Updating the result of a merge must not change the accumulators that were merged."""
    results = all_results()
    a, b = accumulate(results[:3]), accumulate(results[3:5])
    before_a, before_b = snapshot(a), snapshot(b)
    c = a.merged(b)
    c.update(results[5])
    c.update(results[0])
    assert snapshot(a) == before_a
    assert snapshot(b) == before_b
    assert snapshot(c) == snapshot(accumulate([*results, results[0]]))


# --------------------------------------------------------------------------- RationalSum


def test_rational_sum_is_exact():
    """1/3 three times is exactly 1 (float: 0.333.. * 3 sums may not be); 1/10 ten times is
    exactly 1 (float sum 0.9999999999999999)."""
    thirds = RationalSum()
    for _ in range(3):
        thirds.add((1, 3))
    assert thirds.total() == 1
    assert thirds.mean() == Fraction(1, 3)
    assert thirds.count == 3
    tenths = RationalSum()
    for _ in range(10):
        tenths.add((1, 10))
    assert tenths.total() == 1
    assert sum([0.1] * 10) != 1.0


def test_rational_sum_mixed_terms_and_merge():
    """(2, 6) reduces to 1/3; 1/3 + 1/3 + Fraction(1, 2) + 0/5 = 7/6 over 4 terms."""
    a, b = RationalSum(), RationalSum()
    a.add((2, 6))
    a.add((1, 3))
    b.add(Fraction(1, 2))
    b.add((0, 5))
    merged = a.merged(b)
    assert merged.total() == Fraction(7, 6)
    assert merged.count == 4
    assert merged.mean() == Fraction(7, 24)
    assert b.merged(a).total() == merged.total()
    assert RationalSum().mean() is None
    assert RationalSum().total() == 0


@given(st.lists(st.tuples(st.integers(-2**62, 2**62), st.integers(-3, 40),
                          st.integers(0, 5), st.integers(0, 9)), min_size=1, max_size=60),
       st.booleans())
def test_compaction_equals_a_literal_lexsort(rows, small_first):
    """The packed single-key sort of ``compacted`` (fast path) gives the rows, sums and
    order of a literal lexsort + group sum, also when the key ranges do not fit one int64."""
    keys = np.array([r[:3] for r in rows], dtype=np.int64)
    if small_first:
        keys[:, 0] %= 7
    values = np.array([[r[3], 1] for r in rows], dtype=np.int64)
    got = compacted(keys, values)
    literal: dict[tuple[int, ...], list[int]] = {}
    for key, value in zip(keys.tolist(), values.tolist(), strict=True):
        sums = literal.setdefault(tuple(key), [0, 0])
        sums[0] += value[0]
        sums[1] += value[1]
    assert got.keys.tolist() == [list(k) for k in sorted(literal)]
    assert got.values.tolist() == [literal[k] for k in sorted(literal)]


@given(st.lists(st.tuples(st.integers(-2**40, 2**40), st.integers(-1, 3), st.integers(0, 2)),
                max_size=40), st.booleans())
def test_packed_row_order_equals_lexsort(rows, wide):
    """``lexsort_rows(stable=True)`` is exactly numpy's lexsort (the literal), packed or
    not (``wide``: ranges too large to pack)."""
    columns = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(3)]
    if not wide:
        columns[0] %= 1000
    expected = np.lexsort(columns[::-1]) if rows else np.empty(0, np.int64)
    assert lexsort_rows(columns, stable=True).tolist() == expected.tolist()


PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61]


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([*PRIMES, 1, 4, 6, 8, 9]),
                          st.integers(0, 10**6)), max_size=60))
def test_grouped_fraction_sums_are_the_sums_of_fractions(rows):
    """Per group, Σ num / den over the lcm in Python integers equals the Fraction sum, also
    when the lcm of the denominators (the primes to 61) is far beyond int64."""
    rows.sort()
    groups, dens, nums = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    expected: dict[int, Fraction] = {}
    for g, d, n in rows:
        expected[g] = expected.get(g, Fraction(0)) + Fraction(n, d)
    assert grouped_fraction_sums(groups, dens, nums) == expected


@given(st.lists(st.sampled_from(PRIMES), min_size=1, max_size=18, unique=True),
       st.integers(1, 5))
def test_image_means_stay_exact_when_the_lcm_would_wrap_in_int64(dens, scale):
    """Denominators whose lcm overflows int64 (the primes to 53 and more) take the exact
    path: a wrapped int64 lcm could look like a valid one."""
    den = np.array(dens, dtype=np.int64)
    num = np.arange(len(dens), dtype=np.int64) % 2 * scale % den
    _, n, d = image_mean_terms(np.zeros(len(den), np.int64), np.zeros(len(den), np.int64),
                               num, den)
    expected = sum((Fraction(int(a), int(b)) for a, b in zip(num, den, strict=True)),
                   Fraction(0)) / len(den)
    assert Fraction(int(n[0]), int(d[0])) == expected
