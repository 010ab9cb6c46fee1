"""Metric state beyond integer sums (``sgdask.metrics.state``): a toy family declaring
``Runs`` and ``FloatRows`` gives bit-identical finals for any partitioning of the images,
any order, any merge order, through the literal per-image path, the vectorized one, the
Evaluator's shards and states, and the Dask pipeline."""

from __future__ import annotations

import pickle
import struct
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sgdask
from sgdask.core.accum import Accumulator
from sgdask.kernels.hits import NEVER
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import register, unregister
from sgdask.metrics.base import DERIVED, Context, Family, Finals, HitsBatch, Metric, Terms
from sgdask.metrics.state import (
    Counts,
    FlaggedRuns,
    FloatRows,
    FloatSum,
    Ratios,
    Runs,
    StateRows,
)
from sgdask.metrics.terms import batch_blocks, image_result
from sgdask.protocols import SINGLEMPO
from sgdask.types import ImageHits
from tests.core.test_evaluator import comparable, evaluator, fed, through_json
from tests.helpers import scenes

RUNS = Runs("toy_runs")  # per predicate: (score, true positive) of every GT triplet
IOUS = FloatRows("toy_ious")  # per predicate: a float per true positive
CTX = Context(parse_ks("20,50"))
INPUTS = {"graph"}


def scores(first: np.ndarray) -> np.ndarray:
    """Floats of many magnitudes from hit positions (a plain sum of them depends on the
    order of adding)."""
    f = np.minimum(first, 40).astype(np.float64)
    return (f + 1) / 3 * 10.0 ** (f % 9 - 4)


def state_rows(predicates: np.ndarray, first: np.ndarray) -> list[StateRows]:
    hit = first < 5
    score = scores(first)
    return [RUNS.rows(predicates, np.stack([score, hit], 1)),
            IOUS.rows(predicates[hit], score[hit])]


def toy_terms(hits: ImageHits, ctx: Context) -> Terms:
    return Terms(states=state_rows(hits.predicates, hits.graph_first))


def toy_batch(batch: HitsBatch, ctx: Context) -> list:
    return state_rows(batch.predicates, batch.graph_first)


def average_precision(rows: np.ndarray) -> float:
    """Rows (score, true positive) ascending: precision at each true positive, scores
    descending, averaged (order-sensitive float arithmetic)."""
    tp = rows[::-1, 1]
    precision = np.cumsum(tp) / np.arange(1, len(tp) + 1)
    return float(precision[tp == 1].sum() / max(1.0, tp.sum()))


def toy_derive(finals: Finals, ctx: Context) -> dict[str, float]:
    runs, ious = finals.state(RUNS.name), finals.state(IOUS.name)
    out = {}
    if runs:
        out["ToyAP"] = sum(average_precision(r) for r in runs.values()) / len(runs)
    if ious:
        out["ToyPQ"] = sum(s.total / s.count for s in ious.values()) / len(ious)
    return out


TOY_STATE = Family(
    "toy_state",
    (Metric("ToyAP", DERIVED, "toy average precision from Runs", per_k=False),
     Metric("ToyPQ", DERIVED, "toy mean IoU of true positives from FloatRows", per_k=False)),
    toy_terms, toy_batch, toy_derive, states=(RUNS, IOUS))


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


def finals_of(acc: Accumulator) -> dict:
    """Every final of the toy family's state, to the bit."""
    runs, ious = acc.state_final(RUNS.name) or {}, acc.state_final(IOUS.name) or {}
    derived = toy_derive(Finals(lambda _: {}, state=acc.state_final), CTX)
    return {"runs": {k: v.tobytes() for k, v in runs.items()},
            "ious": {k: (bits(s.total), s.count) for k, s in ious.items()},
            "derived": {n: bits(v) for n, v in derived.items()}}


# --------------------------------------------------------------------------- the rows


@st.composite
def image_hits(draw, image_id: str) -> ImageHits:
    t = draw(st.integers(1, 7))
    relations = np.array([(0, 1, draw(st.integers(0, 3))) for _ in range(t)], np.int64)
    first = draw(st.lists(st.one_of(st.just(int(NEVER)), st.integers(0, 12)),
                          min_size=t, max_size=t))
    return ImageHits(image_id, draw(st.booleans()), relations, np.zeros(2, np.int64),
                     np.ones(2, bool), np.array(first, np.int64), np.zeros(1, np.int64))


@st.composite
def partitionings(draw):
    """Images, a permutation of them cut into partitions, and an order of merging."""
    images = [draw(image_hits(f"img{i}")) for i in range(draw(st.integers(1, 12)))]
    order = draw(st.permutations(range(len(images))))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(images) - 1)),
                               max_size=len(images) - 1)))
    parts = [[images[i] for i in order[a:b]]
             for a, b in zip([0, *cuts], [*cuts, len(images)], strict=True)]
    merges = draw(st.lists(st.integers(0, 10**6), min_size=len(parts), max_size=len(parts)))
    return images, [p for p in parts if p], merges


def merged_in_order(accs: list[Accumulator], merges: list[int]) -> Accumulator:
    """Merge random pairs (either side first) until one accumulator is left."""
    accs = list(accs)
    step = 0
    while len(accs) > 1:
        i = merges[step % len(merges)] % len(accs)
        a = accs.pop(i)
        j = merges[(step + 1) % len(merges)] % len(accs)
        b = accs.pop(j)
        accs.append(a.merged(b) if merges[step % len(merges)] % 2 else b.merged(a))
        step += 1
    return accs[0]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitionings(), st.booleans())
def test_any_partitioning_and_merge_order_gives_bit_identical_finals(data, vectorized):
    """Partitions scored by the fast path (or the family's plain function inside it),
    merged in any order, equal the literal path image by image in the given order."""
    images, parts, merges = data
    family = TOY_STATE if vectorized else replace(TOY_STATE, batch_terms=None)
    literal = Accumulator()
    for hits in images:
        literal.update(image_result(hits, CTX, SINGLEMPO, INPUTS, [TOY_STATE]))
    accs = []
    for part in parts:
        acc = Accumulator()
        acc.add_blocks(batch_blocks(part, CTX, SINGLEMPO, INPUTS, [family]))
        accs.append(acc)
    assert finals_of(merged_in_order(accs, merges)) == finals_of(literal)
    assert "ToyAP" in finals_of(literal)["derived"]  # ToyPQ: when some triplet is hit


floats = st.one_of(st.floats(-1e300, 1e300), st.just(-0.0), st.just(0.0))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), floats, floats), max_size=30),
       st.randoms(use_true_random=False))
def test_runs_and_float_rows_merge_to_one_canonical_final(rows, rng):
    """Any split of the rows, merged in any order: the Runs final is every key's rows
    sorted as Python sorts the tuples, the FloatRows total the correctly rounded exact
    sum (Fractions), -0.0 stored as 0.0."""
    def split(spec, width: int) -> list[StateRows]:
        shuffled = list(rows)
        rng.shuffle(shuffled)
        cut = sorted(rng.sample(range(len(shuffled) + 1), k=min(3, len(shuffled) + 1)))
        pieces = [shuffled[a:b] for a, b in zip([0, *cut], [*cut, len(shuffled)], strict=True)]
        return [spec.rows([r[0] for r in p], [r[1:1 + width] for r in p]) if p
                else spec.empty() for p in pieces]

    def merged(parts: list[StateRows]) -> StateRows:
        rng.shuffle(parts)
        total = parts[0]
        for part in parts[1:]:
            total = total.merged(part) if rng.random() < 0.5 else part.merged(total)
        return total

    runs = merged(split(RUNS, 2)).final()
    ious = merged(split(IOUS, 1)).final()
    keys = sorted({k for k, _, _ in rows})
    assert list(runs) == keys and list(ious) == keys
    for key in keys:
        mine = sorted((a + 0.0, b + 0.0) for k, a, b in rows if k == key)
        assert [tuple(r) for r in runs[key].tolist()] == mine
        assert not np.signbit(runs[key][runs[key] == 0]).any()
        values = [a for k, a, _ in rows if k == key]
        assert ious[key] == FloatSum(float(sum(map(Fraction, values), Fraction(0))),
                                     len(values))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 10**9), st.integers(1, 10**9)),
                max_size=30), st.randoms(use_true_random=False))
def test_ratios_and_counts_merge_to_one_exact_final(rows, rng):
    """Any split of integer rows, merged in any order: a Ratios key's total is the
    correctly rounded sum of its rows' correctly rounded quotients (math.fsum), a Counts
    key's sums are exact; the images ride along, in row order."""
    ratios, counts = Ratios("r"), Counts("c")
    image = list(range(len(rows)))

    def merged(spec) -> StateRows:
        cuts = sorted(rng.sample(range(len(rows) + 1), k=min(3, len(rows) + 1)))
        bounds = list(zip([0, *cuts], [*cuts, len(rows)], strict=True))
        parts = [spec.rows([r[0] for r in rows[a:b]], [r[1:] for r in rows[a:b]],
                           image[a:b]) for a, b in bounds]
        total = parts[0]
        for part in parts[1:]:
            total = total.merged(part)
        assert total.image.tolist() == image
        return total

    keys = sorted({k for k, _, _ in rows})
    got_ratios, got_counts = merged(ratios).final(), merged(counts).final()
    for key in keys:
        mine = [(n, d) for k, n, d in rows if k == key]
        exact = sum((Fraction(float(Fraction(n, d))) for n, d in mine), Fraction(0))
        assert got_ratios[key] == FloatSum(float(exact), len(mine))
        assert got_counts[key] == (sum(n for n, _ in mine), sum(d for _, d in mine))
    assert list(got_ratios) == keys == list(got_counts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), floats, st.integers(0, 3),
                          st.integers(0, 2**48 - 1)), max_size=30),
       st.randoms(use_true_random=False))
def test_flagged_runs_finalize_as_the_runs_of_each_flag(rows, rng):
    """FlaggedRuns (value, flags + 4 tag) rows, split and merged in any order, finalize as
    Runs of (value, flag, tag) rows under key 2 k + flag would: every key's rows sorted as
    Python sorts the tuples."""
    flagged = FlaggedRuns("toy_flagged")
    shuffled = list(rows)
    rng.shuffle(shuffled)
    cut = rng.randint(0, len(shuffled))
    parts = [flagged.rows([r[0] for r in p], [(r[1], r[2] + 4.0 * r[3]) for r in p])
             for p in (shuffled[:cut], shuffled[cut:])]
    final = parts[1].merged(parts[0]).final()
    expected: dict[int, list[tuple[float, float, float]]] = {}
    for key, value, flags, tag in rows:
        for flag in (0, 1):
            expected.setdefault(2 * key + flag, []).append(
                (value + 0.0, float(flags >> flag & 1), float(tag)))
    assert list(final) == sorted(expected)
    for key, found in final.items():
        assert [tuple(r) for r in found.tolist()] == sorted(expected[key])

def test_flagged_runs_final_form_is_held_once_for_every_flag():
    """The final form holds each item once (16 bytes: what the task that finalizes keeps
    and sends to the driver), and reads back the same rows after a pickle round trip."""
    rng = np.random.default_rng(0)
    n = 20_000
    flagged = FlaggedRuns("toy_flagged")
    state = flagged.rows(rng.integers(0, 30, n),
                         np.stack([-rng.integers(0, 50, n) / 64.0,
                                   rng.integers(0, 4, n) + 4.0 * rng.integers(0, 9, n)], 1))
    final = state.final()
    data = pickle.dumps(final)
    assert len(data) < 17 * n
    again = pickle.loads(data)
    assert list(again) == list(final) == [2 * k + f for k in range(30) for f in (0, 1)]
    for key in final:
        assert np.array_equal(again[key], final[key])
    assert 2 * 30 not in final and final.get(60) is None
    for shift in (-5, 1 << 21):  # keys counted by sorting them, not in an array
        moved = flagged.rows(state.keys + shift, state.values).final()
        assert list(moved) == [2 * (k + shift) + f for k in range(30) for f in (0, 1)]
        assert all(np.array_equal(moved[2 * (k + shift) + f], final[2 * k + f])
                   for k in range(30) for f in (0, 1))


def test_ratios_and_counts_refuse_what_is_not_an_integer():
    for bad in ([[1.5, 2]], [[1, 0]], [[2.0**53, 1]]):
        with pytest.raises(ValueError, match=r"integer|denominator"):
            Ratios("r").rows([0], bad)
    with pytest.raises(ValueError, match="integer"):
        Counts("c").rows([0], [[0.5, 1]])


def test_float_rows_total_is_the_correctly_rounded_sum():
    """Added in any order a float sum loses the 1.0s next to 1e16; fsum does not."""
    parts = [IOUS.rows([5, 5], [1e16, 1.0]), IOUS.rows([5, 5], [-1e16, 1.0])]
    assert parts[0].merged(parts[1]).final() == {5: FloatSum(2.0, 4)}
    assert parts[1].merged(parts[0]).final() == {5: FloatSum(2.0, 4)}


def test_nan_rows_and_conflicting_declarations_are_refused():
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="not finite"):
            IOUS.rows([0], [bad])
    with pytest.raises(ValueError, match="declared"):
        Runs("toy_runs", 3).empty().merged(RUNS.empty())
    register(TOY_STATE)
    try:
        with pytest.raises(ValueError, match="already declared by family toy_state"):
            register(Family("other", (), toy_terms, states=(Runs("toy_runs"),)))
    finally:
        unregister("toy_state")


# --------------------------------------------------------------------------- through the API


@pytest.fixture
def toy_state_registered():
    register(TOY_STATE)
    yield
    unregister("toy_state")


@settings(max_examples=10, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenes.datasets(max_images=6), st.randoms(use_true_random=False))
def test_evaluator_shards_and_states_keep_the_state(toy_state_registered, images, rng):
    """Evaluators over shuffled shards, sent through state() / JSON / from_state and
    merged in a shuffled order, report the one evaluator's ToyAP and ToyPQ."""
    reference = fed(evaluator("singlempo", ["20", "50"]), images).compute()
    order = list(images)
    rng.shuffle(order)
    n_shards = rng.randint(1, len(order))
    states = [through_json(fed(evaluator("singlempo", ["20", "50"]), order[i::n_shards])
                           .state()) for i in range(n_shards)]
    rng.shuffle(states)
    total = sgdask.Evaluator.from_state(states[0])
    for state in states[1:]:
        total.merge(sgdask.Evaluator.from_state(state))
    report = total.compute()
    assert comparable(report) == comparable(reference)
    assert {"ToyAP", "ToyPQ"} & set(reference.metrics)


def test_pipeline_partitionings_give_the_same_state_metrics(toy_state_registered, stores,
                                                            client):
    from sgdask.pipeline import evaluate_protocols

    reports = [evaluate_protocols(stores.gt, stores.pred, "singlempo", partition_size=size,
                                  client=client)["singlempo"] for size in (3, 11, 1000)]
    values = [{n: bits(r.metrics[n]) for n in ("ToyAP", "ToyPQ")} for r in reports]
    assert values[0] == values[1] == values[2]
    assert 0 < reports[0].metrics["ToyAP"] <= 1
