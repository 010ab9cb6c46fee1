"""The resampling functions themselves (no pipeline): every interval against a literal loop
over the same resample indices, scipy's percentile bootstrap, a coverage simulation, the
paired statistics and the term table's file form."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.kernels.selection import parse_ks
from sgdask.metrics import imr
from sgdask.metrics.base import IMAGE, MEAN, RATIO, Context, FinalColumns, Finals
from sgdask.stats.bootstrap import Scoring, bootstrap, point_values, resample_indices
from sgdask.stats.paired import Model, compare, holm, rank_ranges
from sgdask.stats.table import NO_PREDICATE, TermTable

COMPOSITION = {0: 4, 1: 9, 2: 1, 3: 16, 4: 0, 5: 25}


def random_table(seed: int, n_images: int = 30) -> TermTable:
    """Terms of every kind: R@50 (every image), zR@50 (some images), A@50 (ratio), mR@50 and
    IMR@50 (1-4 predicates per image), PRank (rank sums over found triplets, some cells)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, str, int, int, int]] = []
    for i in range(n_images):
        n_gt = int(rng.integers(1, 9))
        hits = int(rng.integers(0, n_gt + 1))
        rows.append((i, "R@50", NO_PREDICATE, hits, n_gt))
        rows.append((i, "A@50", NO_PREDICATE, int(rng.integers(0, hits + 1)), n_gt))
        if rng.random() < 0.4:
            unseen = int(rng.integers(1, n_gt + 1))
            rows.append((i, "zR@50", NO_PREDICATE, int(rng.integers(0, unseen + 1)), unseen))
        for p in rng.choice(6, size=int(rng.integers(1, 5)), replace=False).tolist():
            count = int(rng.integers(1, 4))
            for name in ("mR@50", "IMR@50"):
                rows.append((i, name, p, int(rng.integers(0, count + 1)), count))
            if rng.random() < 0.6:
                found = int(rng.integers(1, count + 1))
                rows.append((i, "PRank", p, int(rng.integers(0, 3 * found + 1)), found))
    kinds = {"R@50": IMAGE, "zR@50": IMAGE, "A@50": RATIO, "mR@50": MEAN, "IMR@50": MEAN,
             "PRank": MEAN}
    names = list(kinds)
    ids = np.array([f"img{rng.integers(10**6):06d}-{i}" for i in range(n_images)],
                   dtype=object)
    arr = np.array([(i, names.index(n), p, num, den) for i, n, p, num, den in rows])
    return TermTable(ids, names, [kinds[n] for n in names], arr[:, 0].astype(np.int32),
                     arr[:, 1].astype(np.int32), arr[:, 2].astype(np.int32),
                     arr[:, 3].astype(np.int64), arr[:, 4].astype(np.int64)).canonical()


def wimr(finals: Finals) -> dict[str, float]:
    """sgdask's own wIMR (the imr family's derive), as the module under test uses it."""
    ctx = Context(parse_ks("50"), tau=0.5, composition=COMPOSITION)
    return {n: float(v) for n, v in imr.weighted(finals, ctx).items()}


# --- the literal loop --------------------------------------------------------------------------

def cells(table: TermTable, name: str) -> dict[int, list[tuple[int, Fraction, int, int]]]:
    """image -> [(predicate, num/den, num, den)] of one metric."""
    out: dict[int, list[tuple[int, Fraction, int, int]]] = {}
    code = table.names.index(name)
    for i, m, p, num, den in zip(table.image.tolist(), table.metric.tolist(),
                                 table.predicate.tolist(), table.num.tolist(),
                                 table.den.tolist(), strict=True):
        if m == code:
            out.setdefault(i, []).append((p, Fraction(num, den), num, den))
    return out


def literal_predicates(table: TermTable, name: str, drawn: list[int], mode: str
                       ) -> dict[int, Fraction]:
    """Per predicate occurring in the drawn images: the mean of its per-image values over
    the draws where it occurs (pooled: Σ num / Σ den over those draws)."""
    by_image = cells(table, name)
    values: dict[int, list[Fraction]] = {}
    totals: dict[int, list[int]] = {}
    for i in drawn:
        for p, value, num, den in by_image.get(i, []):
            values.setdefault(p, []).append(value)
            t = totals.setdefault(p, [0, 0])
            t[0] += num
            t[1] += den
    if mode == "pooled":
        return {p: Fraction(n, d) for p, (n, d) in totals.items()}
    return {p: sum(v, Fraction(0)) / len(v) for p, v in values.items()}


def literal_value(table: TermTable, name: str, drawn: list[int], mode: str,
                  over_cells: bool) -> float:
    """SPEC section 7 read literally on the multiset of drawn images (NaN: no value)."""
    kind = table.kind_of(name)
    by_image = cells(table, name)
    if kind == IMAGE:
        values = [by_image[i][0][1] for i in drawn if i in by_image]
        return float(sum(values, Fraction(0)) / len(values)) if values else np.nan
    if kind == RATIO:
        num = sum(by_image[i][0][2] for i in drawn if i in by_image)
        den = sum(by_image[i][0][3] for i in drawn if i in by_image)
        return float(Fraction(num, den)) if den else np.nan
    if over_cells:
        values = [v for i in drawn for _, v, _, _ in by_image.get(i, [])]
        return float(sum(values, Fraction(0)) / len(values)) if values else np.nan
    if mode == "image":
        means = [sum((v for _, v, _, _ in by_image[i]), Fraction(0)) / len(by_image[i])
                 for i in drawn if i in by_image]
        return float(sum(means, Fraction(0)) / len(means)) if means else np.nan
    per_predicate = literal_predicates(table, name, drawn, mode)
    if not per_predicate:
        return np.nan
    return float(sum(per_predicate.values(), Fraction(0)) / len(per_predicate))


def literal_wimr(table: TermTable, drawn: list[int], mode: str) -> float:
    """Σ_c w_c IMR_c, w_c = n_c^0.5 / Σ n^0.5 over the predicates of the drawn images."""
    values = literal_predicates(table, "IMR@50", drawn, mode)
    weights = {c: COMPOSITION[c] ** 0.5 if COMPOSITION.get(c, 0) > 0 else 0.0 for c in values}
    total = sum(weights.values())
    return sum(weights[c] / total * float(values[c]) for c in sorted(values)) if total \
        else np.nan


def literal_interval(samples: list[float], level: float) -> tuple[float, float]:
    finite = np.array([s for s in samples if not np.isnan(s)])
    lo, hi = np.percentile(finite, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


@pytest.mark.parametrize("mode", ["per_predicate", "pooled", "image"])
def test_every_interval_equals_a_literal_loop(mode):
    table = random_table(seed=11)
    level, resamples, seed = 0.9, 40, 3
    over_cells = frozenset({"PRank"}) if mode == "per_predicate" else frozenset()
    found = bootstrap(table, Scoring(mode, over_cells, wimr), level, resamples, seed)
    draws = [idx.tolist() for idx in resample_indices(table.n_images, resamples, seed)]
    assert set(found.metrics) == {*table.names, "wIMR@50"}
    for name in table.names:
        samples = [literal_value(table, name, d, mode, name in over_cells) for d in draws]
        assert found.metrics[name] == pytest.approx(literal_interval(samples, level),
                                                    rel=1e-12, abs=1e-12), name
    samples = [literal_wimr(table, d, mode) for d in draws]
    assert found.metrics["wIMR@50"] == pytest.approx(literal_interval(samples, level),
                                                     rel=1e-12, abs=1e-12)
    for name in ("mR@50", "IMR@50", "PRank"):
        per_draw = [literal_predicates(table, name, d, mode) for d in draws]
        for p, interval in found.predicates[name].items():
            samples = [float(v[p]) if p in v else np.nan for v in per_draw]
            assert interval == pytest.approx(literal_interval(samples, level),
                                             rel=1e-12, abs=1e-12), (name, p)


def test_point_values_are_the_literal_values_of_all_images():
    table = random_table(seed=5)
    everything = list(range(table.n_images))
    for mode in ("per_predicate", "pooled", "image"):
        values = point_values(table, Scoring(mode, frozenset({"PRank"}), wimr))
        for name in table.names:
            assert values[name] == pytest.approx(
                literal_value(table, name, everything, mode, name == "PRank"), rel=1e-12)
        assert values["wIMR@50"] == pytest.approx(literal_wimr(table, everything, mode))


def test_mean_of_per_image_values_agrees_with_scipy():
    rng = np.random.default_rng(0)
    n = 300
    n_gt = rng.integers(1, 12, size=n)
    hits = rng.binomial(n_gt, 0.4)
    table = TermTable(np.array([f"{i:04d}" for i in range(n)], dtype=object), ["R@50"],
                      [IMAGE], np.arange(n, dtype=np.int32), np.zeros(n, np.int32),
                      np.full(n, NO_PREDICATE, np.int32), hits.astype(np.int64),
                      n_gt.astype(np.int64))
    ours = bootstrap(table, Scoring(), 0.95, 5000, 0).metrics["R@50"]
    theirs = scipy.stats.bootstrap((hits / n_gt,), np.mean, n_resamples=5000,
                                   method="percentile", confidence_level=0.95,
                                   rng=np.random.default_rng(1)).confidence_interval
    width = ours[1] - ours[0]
    assert abs(ours[0] - theirs.low) < 0.06 * width
    assert abs(ours[1] - theirs.high) < 0.06 * width


def simulated_table(rng: np.random.Generator, n_images: int, shares: np.ndarray,
                    recalls: np.ndarray) -> TermTable:
    """Per image 1 + Poisson(2) GT triplets, predicate c with probability shares[c], each
    found at k with probability recalls[c]: R@k and mR@k terms."""
    counts = 1 + rng.poisson(2, size=n_images)
    t_image = np.repeat(np.arange(n_images), counts)
    preds = rng.choice(len(shares), size=len(t_image), p=shares)
    found = rng.random(len(t_image)) < recalls[preds]
    cell, inverse = np.unique(t_image * len(shares) + preds, return_inverse=True)
    n_cells = len(cell)
    image = np.concatenate([np.arange(n_images), cell // len(shares)])
    return TermTable(
        np.array([f"{i:05d}" for i in range(n_images)], dtype=object), ["R@50", "mR@50"],
        [IMAGE, MEAN], image.astype(np.int32),
        np.repeat([0, 1], [n_images, n_cells]).astype(np.int32),
        np.concatenate([np.full(n_images, NO_PREDICATE), cell % len(shares)]).astype(np.int32),
        np.concatenate([np.bincount(t_image, weights=found, minlength=n_images),
                        np.bincount(inverse, weights=found, minlength=n_cells)]).astype(np.int64),
        np.concatenate([counts, np.bincount(inverse, minlength=n_cells)]).astype(np.int64))


def test_coverage_of_r_and_mr_intervals():
    """500 datasets from a known population: the 95% intervals of R@k and of mR@k (over
    predicates common enough to occur in every dataset) cover the population value in
    95% ± 3% of them."""
    shares = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
    recalls = np.array([0.7, 0.5, 0.3, 0.6, 0.2])
    truth = {"R@50": float(shares @ recalls), "mR@50": float(recalls.mean())}
    rng = np.random.default_rng(2024)
    covered = {name: 0 for name in truth}
    trials = 500
    for trial in range(trials):
        table = simulated_table(rng, 250, shares, recalls)
        found = bootstrap(table, Scoring(), 0.95, 400, seed=trial).metrics
        for name, value in truth.items():
            covered[name] += found[name][0] <= value <= found[name][1]
    for name in truth:
        assert 0.92 <= covered[name] / trials <= 0.98, (name, covered[name] / trials)


# --- paired statistics ------------------------------------------------------------------------

def weaker(table: TermTable, keep: float, seed: int) -> TermTable:
    """The same images with fewer hits (each hit kept with probability ``keep``)."""
    rng = np.random.default_rng(seed)
    num = rng.binomial(table.num, keep).astype(np.int64)
    num[table.metric == table.names.index("PRank")] = \
        table.num[table.metric == table.names.index("PRank")]
    return TermTable(table.image_ids, table.names, table.kinds, table.image, table.metric,
                     table.predicate, num, table.den)


def test_model_against_itself_and_against_a_weaker_one():
    table = random_table(seed=2, n_images=120)
    models = [Model("a", [table]), Model("a again", [table]),
              Model("weak", [weaker(table, 0.3, 1)])]
    found = compare(models, [(0, 1), (0, 2)], Scoring(), 0.95, 300, 300, 0)
    same = [r for r in found.rows if r["b"] == "a again"]
    assert same and all(r["delta"] == 0 and r["p_value"] == 1 and r["p_holm"] == 1
                        and r["ci_low"] == r["ci_high"] == 0 for r in same)
    assert all(r["losses"] == 0 and r["wins"] == 0 for r in same if r["wins"] is not None)
    weak = {r["metric"]: r for r in found.rows if r["b"] == "weak"}
    for name in ("R@50", "mR@50", "IMR@50"):
        assert weak[name]["delta"] < 0 and weak[name]["ci_high"] < 0
        assert weak[name]["p_value"] < 0.01 and weak[name]["p_holm"] < 0.01
        assert weak[name]["losses"] > weak[name]["wins"]
    assert weak["PRank"]["delta"] == 0


def test_group_of_runs_reports_mean_and_sd():
    table = random_table(seed=4, n_images=60)
    runs = [weaker(table, keep, seed) for seed, keep in enumerate((0.8, 0.7, 0.9))]
    found = compare([Model("base", [table]), Model("group", runs)], [(0, 1)], Scoring(),
                    0.95, 100, 50, 0)
    values = [point_values(r, Scoring())["R@50"] for r in runs]
    group = found.models[1]["metrics"]["R@50"]
    assert group["value"] == pytest.approx(np.mean(values))
    assert group["sd"] == pytest.approx(np.std(values, ddof=1))
    assert found.models[0]["metrics"]["R@50"]["sd"] is None


def test_holm():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])


def test_rank_ranges():
    table = random_table(seed=8, n_images=150)
    weak = weaker(table, 0.3, 0)
    found = rank_ranges([weak, table, weak], "R@50", Scoring(), 0.95, 200, 0, False)
    assert [r for _, r in found] == [(2, 3), (1, 1), (2, 3)]
    assert found[0][0] == found[2][0]


# --- the table --------------------------------------------------------------------------------

def test_table_order_and_partitioning_do_not_matter():
    table = random_table(seed=9, n_images=40)
    rng = np.random.default_rng(0)
    order = rng.permutation(table.n_images)
    parts = []
    for chunk in np.array_split(order, 4):
        sel = np.isin(table.image, chunk)
        local = {int(i): j for j, i in enumerate(chunk.tolist())}
        parts.append(TermTable(table.image_ids[chunk], table.names, table.kinds,
                               np.array([local[i] for i in table.image[sel].tolist()],
                                        np.int32), table.metric[sel], table.predicate[sel],
                               table.num[sel], table.den[sel]))
    joined = TermTable.concat(parts[::-1])
    for column in ("image_ids", "image", "metric", "predicate", "num", "den"):
        assert np.array_equal(getattr(joined, column), getattr(table, column)), column
    a = bootstrap(table, Scoring(), 0.95, 50, 1)
    b = bootstrap(joined, Scoring(), 0.95, 50, 1)
    assert a.metrics == b.metrics and a.predicates == b.predicates


def in_blocks(func, shared, blocks):
    """A mapper that runs the blocks here, last first."""
    return [func(*shared, *block) for block in blocks[::-1]][::-1]


def test_blocks_of_resamples_give_the_same_intervals(monkeypatch):
    import sgdask.stats.bootstrap as bootstrap_module

    table = random_table(seed=12, n_images=50)
    scoring = Scoring("per_predicate", frozenset({"PRank"}), wimr)
    whole = bootstrap(table, scoring, 0.95, 90, 4)
    monkeypatch.setattr(bootstrap_module, "BLOCK_WORK", 10 * len(table))
    blocks = bootstrap(table, scoring, 0.95, 90, 4, mapper=in_blocks)
    assert blocks.metrics == whole.metrics and blocks.predicates == whole.predicates


def test_arrow_round_trip():
    table = random_table(seed=3)
    arrow = table.to_arrow()
    assert pa.types.is_dictionary(arrow.schema.field("image_id").type)
    back = TermTable.from_arrow(arrow)
    assert back.names == table.names and back.kinds == table.kinds
    for column in ("image_ids", "image", "metric", "predicate", "num", "den"):
        assert np.array_equal(getattr(back, column), getattr(table, column)), column


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_wimr_for_every_resample_at_once_is_wimr_of_each(data):
    """``imr.weighted_columns`` (all resamples in one call) gives, column by column, the
    very float ``imr.weighted`` gives on that column's per-predicate values: predicates
    without a value, never seen in training, or in any order of ids."""
    n_pred = data.draw(st.integers(0, 8))
    ids = np.array(data.draw(st.permutations(range(20)))[:n_pred], dtype=np.int64)
    n_cols = data.draw(st.integers(1, 6))
    cell = st.one_of(st.just(np.nan), st.floats(0, 1))
    values = np.array([[data.draw(cell) for _ in range(n_cols)] for _ in range(n_pred)]
                      ).reshape(n_pred, n_cols)
    composition = {int(c): data.draw(st.integers(0, 50)) for c in ids
                   if data.draw(st.booleans())}
    composition[99] = 1  # a composition is never empty when wIMR is asked for
    ctx = Context(parse_ks("20"), tau=data.draw(st.sampled_from([0.0, 0.5, 1.0, 0.37])),
                  composition=composition)
    found = imr.weighted_columns(FinalColumns(lambda name: (ids, values)), ctx)
    for b in range(n_cols):
        column = {int(c): float(v) for c, v in zip(ids, values[:, b], strict=True) if v == v}
        expected = imr.weighted(Finals(lambda name, column=column: column), ctx)
        if "wIMR@20" in expected:
            assert found["wIMR@20"][b] == expected["wIMR@20"]
        else:
            assert "wIMR@20" not in found or np.isnan(found["wIMR@20"][b])


def f_at_50(finals: Finals) -> dict[str, float]:
    """A metric derived from dataset values: the harmonic mean of R@50 and mR@50."""
    r, m = finals.value("R@50"), finals.value("mR@50")
    return {"F@50": 2 * r * m / (r + m)} if r is not None and m is not None and r + m else {}


def f_at_50_columns(columns: FinalColumns) -> dict[str, np.ndarray]:
    r, m = columns.value("R@50"), columns.value("mR@50")
    return {"F@50": 2 * r * m / (r + m)}


@pytest.mark.parametrize("mode", ["per_predicate", "pooled", "image"])
def test_metric_derived_from_dataset_values_resample_by_resample_or_at_once(mode):
    """A derived metric reading R@50 and mR@50 (no training statistics): its point value is
    the formula on the data's values, its interval the same whether derived resample by
    resample or for every resample at once (``derive_columns``)."""
    table = random_table(seed=21, n_images=40)
    one = Scoring(mode, derive=f_at_50)
    both = Scoring(mode, derive=f_at_50, derive_columns=f_at_50_columns)
    values = point_values(table, one)
    assert values["F@50"] == f_at_50(Finals(lambda _: {}, values.get))["F@50"]
    assert point_values(table, both)["F@50"] == values["F@50"]
    per_resample = bootstrap(table, one, 0.9, 120, 5, ["F@50"])
    at_once = bootstrap(table, both, 0.9, 120, 5, ["F@50"])
    assert per_resample.metrics == at_once.metrics
    assert set(per_resample.metrics) == {"F@50"}
