"""F@k, ngF@k and the predicate groups mR@k[G] / mNgR@k[G] (SPEC section 6).

Hand cases for each definition, each derive function against its all-resamples twin, the
default splits (PySGG's VG150 table, the training frequency thirds with ties), groups
files and their one-line errors, and a real evaluation: the console table, metrics.json,
per_predicate.parquet, report.html, ``--ci`` intervals (equal to the percentile interval of
the definition applied resample by resample) and ``compare``'s paired differences.
"""

from __future__ import annotations

import io
import json
from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import sgdask
from sgdask.batch.compare import CompareJob, run_compare
from sgdask.core.settings import Settings
from sgdask.errors import InputError, SgdaskError
from sgdask.io.predicate_groups import read_groups
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import fmeasure, groups
from sgdask.metrics.base import Context, FinalColumns, Finals
from sgdask.metrics.groups import frequency_thirds, vg150_groups
from sgdask.pipeline import evaluate, evaluate_protocols
from sgdask.report.intervals import scoring_of, selected
from sgdask.stats.bootstrap import (
    Scoring,
    bootstrap_samples,
    percentile_interval,
    plan_for,
)
from sgdask.stats.paired import Model, compare
from sgdask.store.store import StoreReader
from sgdask.testing.vg import VG150_PREDICATES
from tests.literal.sgbpytorch import PYSGG_VG150
from tests.stats.test_bootstrap import random_table

KS = parse_ks("20,50,100")


def finals_of(values: dict[str, float], per_predicate: dict[str, dict[int, float]] | None = None
              ) -> Finals:
    return Finals(lambda name: (per_predicate or {}).get(name, {}), values.get)


# --------------------------------------------------------------------------- F@k by hand


def test_f_is_the_harmonic_mean_of_the_printed_recall_and_mean_recall():
    """R@20 = 1/2, mR@20 = 1/4: F = 2 · 1/8 / (3/4) = 1/3. R@50 = mR@50 = 0: F = 0 (not
    0/0). R@100 = 0.4 without mR@100: no F@100. ngR@20 = 0.2, mNgR@20 = 0.6: ngF = 0.24 /
    0.8 = 0.3; no ngR@50: no ngF@50. R@x = 0.3, mR@x = 0 -> 0."""
    found = fmeasure.derive(finals_of({"R@20": 0.5, "mR@20": 0.25, "R@50": 0.0,
                                       "mR@50": 0.0, "R@100": 0.4, "ngR@20": 0.2,
                                       "mNgR@20": 0.6, "mNgR@50": 0.1}), Context(KS))
    assert found["F@20"] == pytest.approx(1 / 3, rel=1e-15)
    assert found["F@20"] == 2 * 0.5 * 0.25 / (0.5 + 0.25)
    assert found["F@50"] == 0.0
    assert "F@100" not in found and "ngF@50" not in found
    assert found["ngF@20"] == pytest.approx(0.3, rel=1e-15)
    one = fmeasure.derive(finals_of({"R@20": 0.3, "mR@20": 0.0}), Context(parse_ks("20")))
    assert one == {"F@20": 0.0}


cell = st.one_of(st.just(np.nan), st.just(0.0), st.floats(0, 1))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_f_for_every_resample_at_once_is_f_of_each(data):
    """``fmeasure.derive_columns`` gives, column by column, the very float ``derive``
    gives (NaN where an input has no value; 0 where both are 0)."""
    n = data.draw(st.integers(1, 6))
    names = ["R@20", "mR@20", "ngR@20", "mNgR@20"]
    columns = {name: np.array([data.draw(cell) for _ in range(n)]) for name in names}
    ctx = Context(parse_ks("20"))
    found = fmeasure.derive_columns(FinalColumns(lambda _: ((), ()), columns.get), ctx)
    for b in range(n):
        values = {name: float(v[b]) for name, v in columns.items() if v[b] == v[b]}
        expected = fmeasure.derive(finals_of(values), ctx)
        for name in ("F@20", "ngF@20"):
            if name in expected:
                assert found[name][b] == expected[name], (name, b)
            else:
                assert np.isnan(found[name][b]), (name, b)


# --------------------------------------------------------------------------- the groups


def test_frequency_thirds_sort_by_training_count_then_index():
    """Counts p0 5, p1 2, p2 2, p3 0 (absent), p4 7: order p4 p0 p1 p2 p3 (p1 before p2:
    a tie goes to the lower index); sizes ceil(5/3) = 2, ceil(3/2) = 2, 1."""
    found = frequency_thirds({0: 5, 1: 2, 2: 2, 4: 7}, 5)
    assert found.members == {"head": (0, 4), "body": (1, 2), "tail": (3,)}
    assert frequency_thirds({}, 7).members == {"head": (0, 1, 2), "body": (3, 4),
                                               "tail": (5, 6)}
    for n, sizes in {1: [1], 2: [1, 1], 3: [1, 1, 1], 4: [2, 1, 1], 50: [17, 17, 16],
                     56: [19, 19, 18]}.items():
        assert [len(m) for m in frequency_thirds({}, n).members.values()] == sizes, n


def test_vg150_default_is_pysggs_longtail_split():
    """The default VG150 split equals PySGG's table as printed in its config (the golden
    ``PYSGG_VG150`` of the literal Scene-Graph-Benchmark.pytorch implementation)."""
    found = vg150_groups(list(VG150_PREDICATES))
    assert found is not None and "PySGG" in found.source
    expected = {part: tuple(i - 1 for i, p in enumerate(PYSGG_VG150) if p == part[0])
                for part in ("head", "body", "tail")}
    assert found.members == expected
    assert [len(m) for m in found.members.values()] == [7, 21, 22]
    shuffled = list(reversed(VG150_PREDICATES))  # recognised by names, in any order
    again = vg150_groups(shuffled)
    assert again is not None
    assert {g: sorted(shuffled[i] for i in ids) for g, ids in again.members.items()} == \
        {g: sorted(VG150_PREDICATES[i] for i in ids) for g, ids in found.members.items()}
    assert vg150_groups([*VG150_PREDICATES[:-1], "flying on"]) is None
    assert vg150_groups(list(VG150_PREDICATES[:-1])) is None


def test_group_means_by_hand():
    """mR@20 per predicate: p0 1/2, p1 1/4, p3 1 (p2, p4 absent). Groups head {0, 4}, body
    {1, 2}, tail {3}, none {2}. Over the predicates with a value: head 1/2, body 1/4, tail 1,
    none: no value. Over the vocabulary (multimpo: absent counts 0): head (1/2 + 0)/2 =
    1/4, body 1/8, tail 1, none 0. mNgR@20 has no values: no mNgR group."""
    values = {0: Fraction(1, 2), 1: Fraction(1, 4), 3: Fraction(1)}
    members = {"head": (0, 4), "body": (1, 2), "tail": (3,), "none": (2,)}
    finals = finals_of({}, {"mR@20": values})
    ks = parse_ks("20")
    found = groups.derive(finals, Context(ks, groups=members))
    assert found == {"mR@20[head]": Fraction(1, 2), "mR@20[body]": Fraction(1, 4),
                     "mR@20[tail]": Fraction(1)}
    vocabulary = Context(ks, groups=members, occurring={"mR@20": frozenset(values)})
    assert groups.derive(finals, vocabulary) == {
        "mR@20[head]": Fraction(1, 4), "mR@20[body]": Fraction(1, 8),
        "mR@20[tail]": Fraction(1), "mR@20[none]": 0.0}
    assert groups.derive(finals, Context(ks)) == {}


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_groups_for_every_resample_at_once_are_groups_of_each(data):
    """``groups.derive_columns`` gives, column by column, the very float ``derive`` gives
    on that column's per-predicate values (ids in any order, predicates without a value,
    with and without the vocabulary rule)."""
    n_pred = data.draw(st.integers(0, 7))
    ids = np.array(data.draw(st.permutations(range(9)))[:n_pred], dtype=np.int64)
    n = data.draw(st.integers(1, 5))
    values = np.array([[data.draw(st.one_of(st.just(np.nan), st.floats(0, 1)))
                        for _ in range(n)] for _ in range(n_pred)]).reshape(n_pred, n)
    members = {f"g{i}": tuple(sorted(data.draw(st.sets(st.integers(0, 8), min_size=1,
                                                         max_size=4))))
               for i in range(data.draw(st.integers(1, 3)))}
    occurring = None
    if data.draw(st.booleans()):
        occurring = {"mR@20": frozenset(data.draw(st.sets(st.integers(0, 8))))}
    ctx = Context(parse_ks("20"), groups=members, occurring=occurring)
    found = groups.derive_columns(FinalColumns(
        lambda name: (ids, values) if name == "mR@20" else ((), np.empty((0, n)))), ctx)
    for b in range(n):
        column = {int(p): float(v) for p, v in zip(ids, values[:, b], strict=True) if v == v}
        expected = groups.derive(finals_of({}, {"mR@20": column}), ctx)
        for group in members:
            name = f"mR@20[{group}]"
            if name in expected:
                assert found[name][b] == expected[name], (name, b)
            else:
                assert name not in found or np.isnan(found[name][b]), (name, b)


@pytest.mark.parametrize("vocabulary", [False, True])
def test_a_group_of_every_predicate_is_mr_on_every_resample(vocabulary):
    """mR@50[all] (every predicate in one group) follows mR@50's rule on every resample,
    the vocabulary rule included (a predicate not drawn: as mR's resamples treat it)."""
    table = random_table(seed=4, n_images=30)
    ctx = Context(parse_ks("50"), groups={"all": tuple(range(8))},
                  occurring={"mR@50": frozenset(range(6))} if vocabulary else None)
    scoring = Scoring("per_predicate", derive=lambda f: groups.derive(f, ctx),
                      derive_columns=lambda c: groups.derive_columns(c, ctx),
                      vocabulary_means=frozenset({"mR@50"}) if vocabulary else frozenset(),
                      n_vocabulary=8 if vocabulary else 0)
    plan = plan_for([table], ["mR@50", "mR@50[all]"], scoring)
    samples = bootstrap_samples([table], plan, 60, 3)[0].metrics
    # (over the vocabulary the group counts predicates 6 and 7, absent, as 0: mR over 8)
    assert samples["mR@50[all]"] == pytest.approx(samples["mR@50"], rel=1e-12)


# --------------------------------------------------------------------------- groups files


def write(tmp_path, doc) -> str:
    path = tmp_path / "groups.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_a_groups_file_maps_names_to_ids(tmp_path):
    names = ["on", "has", "says", "near"]
    found = read_groups(write(tmp_path, {"frequent": ["on", "has"], "rare_1": ["says"]}),
                        names)
    assert found.members == {"frequent": (0, 1), "rare_1": (2,)}
    assert found.source.startswith("groups file ")


@pytest.mark.parametrize(("doc", "fragments"), [
    ({"head": ["on", "flies"]}, ["head[1]", "unknown predicate 'flies'"]),
    ({"head": ["on"], "tail": ["has", "on"]}, ["tail[1]", "predicate 'on' is in groups "
                                                "'head' and 'tail'"]),
    ({"head tail": ["on"]}, ["head tail: group name 'head tail' is not [A-Za-z0-9_-]+"]),
    ({"head": []}, ["head: not a non-empty list"]),
    ({"head": [3]}, ["head[0]: 3 is not a predicate name"]),
    (["on"], ["not a non-empty JSON object"]),
    ("{", ["not JSON"]),
])
def test_a_bad_groups_file_is_one_line_naming_file_and_field(tmp_path, doc, fragments):
    url = write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        read_groups(url, ["on", "has", "says"])
    message = str(err.value)
    assert message.startswith(url) and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_the_settings_check_the_groups_field():
    with pytest.raises(SgdaskError) as err:
        Settings(predicate_groups=" ").checked()
    assert err.value.render("cli").startswith("--predicate-groups: an empty path")
    assert str(err.value).startswith("predicate_groups: an empty path")


# --------------------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def reports(stores, client):
    """The synthetic PSG-shaped data (training statistics in the GT store: the frequency
    thirds of its 56 predicates) under singlempo and multimpo, with intervals."""
    return evaluate_protocols(stores.gt, stores.pred, "singlempo,multimpo", client=client,
                              ci=0.9, resamples=200, seed=3)


def group_of(report) -> dict[int, str]:
    return {row["predicate"]: row["group"] for row in report.per_predicate}


def test_f_and_groups_are_computed_from_the_printed_values(reports):
    for name, report in reports.items():
        m = report.metrics
        for k in report.ks:
            r, mr = m[f"R@{k}"], m[f"mR@{k}"]
            assert m[f"F@{k}"] == 2 * r * mr / (r + mr), (name, k)
            nr, nm = m[f"ngR@{k}"], m[f"mNgR@{k}"]
            assert m[f"ngF@{k}"] == 2 * nr * nm / (nr + nm), (name, k)
        members = report.predicate_groups["members"]
        assert [len(v) for v in members.values()] == [19, 19, 18]  # 56 predicates
        rows = report.per_predicate
        assert all(row["predicate"] in members[row["group"]] for row in rows)
        for group, ids in members.items():
            values = [row["mR@50"] for row in rows
                      if row["predicate"] in ids and row["mR@50"] is not None]
            expected = sum(values) / (len(ids) if name == "multimpo" else len(values))
            assert m[f"mR@50[{group}]"] == pytest.approx(expected, rel=1e-12), (name, group)
        assert any("predicate groups (the training split's predicate frequency in thirds):"
                   " head 19, body 19, tail 18 predicates" in n for n in report.notes)


def test_f_and_group_intervals_are_the_definition_on_every_resample(reports):
    """F@50's interval is the percentile interval of 2 R m / (R + m) over the resamples;
    mR@50[head]'s that of the mean over head's predicates of their resampled mR@50."""
    report = reports["singlempo"]
    ci = report.ci
    plan = plan_for([report.terms], ["R@50", "mR@50"], Scoring(report.aggregation))
    samples = bootstrap_samples([report.terms], plan, ci["resamples"], ci["seed"])[0]
    r, m = samples.metrics["R@50"], samples.metrics["mR@50"]
    assert report.intervals["F@50"] == list(percentile_interval(2 * r * m / (r + m),
                                                                ci["level"]))
    ids, values = samples.predicates["mR@50"]
    head = np.isin(ids, report.predicate_groups["members"]["head"])
    per_resample = [np.mean(v[~np.isnan(v)]) for v in values[head].T]
    low, high = report.intervals["mR@50[head]"]
    assert (low, high) == pytest.approx(percentile_interval(np.array(per_resample),
                                                            ci["level"]), rel=1e-12)
    for name in ("F@50", "ngF@20", "mR@50[head]", "mNgR@x1[tail]"):
        low, high = report.intervals[name]
        assert low <= report.metrics[name] <= high, name


def test_f_and_groups_reach_every_output(reports, tmp_path):
    from sgdask.cli.console import print_report
    from sgdask.report.html import render_html
    from sgdask.report.writers import write_reports

    report = reports["singlempo"]
    write_reports(reports, str(tmp_path / "out"))
    written = json.loads((tmp_path / "out" / "singlempo" / "metrics.json").read_text())
    for name in ("F@50", "ngF@x10", "mR@50[head]", "mNgR@100[body]"):
        assert written["metrics"][name] == report.metrics[name]
        assert written["intervals"][name] == report.intervals[name]
    assert written["predicate_groups"] == report.predicate_groups
    table = pq.read_table(tmp_path / "out" / "singlempo" / "per_predicate.parquet")
    assert table.column("group").to_pylist() == [row["group"] for row in
                                                 report.per_predicate]
    console = Console(file=io.StringIO(), width=250)
    print_report(report, console)
    text = console.file.getvalue()
    lines = [line for line in text.splitlines() if line.strip().startswith("│")]
    rows = [line.split("│")[1].strip() for line in lines]
    assert rows.index("F") < rows.index("mR[head]") < rows.index("mR[body]") \
        < rows.index("mR[tail]")
    assert f"{100 * report.metrics['mR@50[tail]']:.2f}" in text
    assert "head 19, body 19, tail 18" in text
    page = render_html(reports)
    assert "<td>F</td>" in page and "<td>mR[head]</td>" in page
    assert "<th>group</th>" in page and f"{100 * report.metrics['F@50']:.2f}" in page


def test_compare_gives_f_and_groups_paired_differences(reports, stores, tmp_path):
    """The model against itself: every difference 0 and p = 1; F and the groups are
    compared like every other metric; ``--metrics`` takes their names or rows; the
    printed comparison shows F@50 (a board column) and, asked for, the groups."""
    from sgdask.cli.console import print_comparison

    report = reports["singlempo"]
    found = compare([Model("a", [report.terms]), Model("b", [report.terms])], [(0, 1)],
                    scoring_of(report, None), resamples=50, permutations=50)
    for name in ("F@50", "ngF@20", "mR@50[head]", "mNgR@x10[tail]"):
        row = next(row for row in found.rows if row["metric"] == name)
        assert row["delta"] == 0 and row["p_value"] == 1, name
        assert row["a_value"] == pytest.approx(report.metrics[name], rel=1e-12), name
    assert selected(report, "F@50,mR[head]") == [
        "F@50", *(f"mR@{k}[head]" for k in report.ks)]
    for model in ("a", "b"):
        report.write(str(tmp_path / model))
    job = CompareJob(stores.gt, [("a", [str(tmp_path / "a")]), ("b", [str(tmp_path / "b")])],
                     resamples=40, permutations=40, metrics="F@50,mR@50[head]")
    comparison = run_compare(job)
    assert {row["metric"] for row in comparison.rows} == {"F@50", "mR@50[head]"}
    console = Console(file=io.StringIO(), width=250)
    print_comparison(comparison, job.metrics, console)
    assert "F@50" in console.file.getvalue() and "mR@50[head]" in console.file.getvalue()


def test_a_groups_file_image_aggregation_and_no_statistics(stores, client, tmp_path):
    names = StoreReader(stores.gt).manifest["predicate_classes"]
    url = write(tmp_path, {"spatial": names[:3], "rest_0": names[3:5]})
    report = evaluate(stores.gt, stores.pred, client=client, predicate_groups=url, ks="50")
    assert report.predicate_groups == {"source": f"groups file {url}",
                                       "members": {"spatial": [0, 1, 2], "rest_0": [3, 4]}}
    assert {n for n in report.metrics if "[" in n} == {
        "mR@50[spatial]", "mR@50[rest_0]", "mNgR@50[spatial]", "mNgR@50[rest_0]"}
    assert group_of(report)[5] is None
    image = evaluate(stores.gt, stores.pred, client=client, aggregation="image", ks="50")
    assert not any("[" in n for n in image.metrics) and image.predicate_groups == {}
    assert "--aggregation image" in image.left_out["mR@k[G]"]
    assert "F@50" in image.metrics
    ev = sgdask.Evaluator("singlempo", "20", [f"p{i}" for i in range(4)], 2)
    ev.update("a", {"relations": [[0, 1, 0]], "categories": [0, 1],
                    "boxes": [[0, 0, 10, 10], [20, 0, 30, 10]]},
              {"categories": [0, 1], "triplets": [[0, 1, 0]],
               "boxes": [[0, 0, 10, 10], [20, 0, 30, 10]]})
    alone = ev.compute()
    assert "no predicate groups" in alone.left_out["mR@k[G]"]
    assert alone.metrics["F@20"] == 1.0 and alone.predicate_groups == {}


def test_vg150_gets_pysggs_groups_without_statistics():
    """An in-memory VG150 evaluation (no training statistics): PySGG's split; 'on' is a
    head predicate, 'says' a tail one, no body predicate occurs (no body value)."""
    names = list(VG150_PREDICATES)
    on, says = names.index("on"), names.index("says")
    boxes = [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10]]
    ev = sgdask.Evaluator("singlempo", "1,20", names, 3)
    ev.update("a", {"relations": [[0, 1, on], [1, 2, says]], "categories": [0, 1, 2],
                    "boxes": boxes},
              {"categories": [0, 1, 2], "triplets": [[1, 2, says], [0, 1, on]],
               "boxes": boxes})
    report = ev.compute()
    assert "PySGG" in report.predicate_groups["source"]
    assert report.metrics["mR@1[head]"] == 0 and report.metrics["mR@1[tail]"] == 1
    assert "mR@1[body]" not in report.metrics
    assert report.metrics["F@1"] == pytest.approx(2 * 0.5 * 0.5 / 1.0)
    state = json.loads(json.dumps({k: v for k, v in ev.state().items()
                                   if k in ("settings",)}))
    assert state["settings"]["groups"] == report.predicate_groups
