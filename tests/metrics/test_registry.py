"""The metric registry: the fast (vectorized) path equals every family's plain per-image
function; a toy metric, a toy derived metric (Gm@k, registered here with its interval) and the
derived F@k (with its interval and paired test) reach every output; the kernels import alone."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from sgdask.core.accum import Accumulator
from sgdask.kernels.hits import NEVER
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import FAMILIES, register, unregister
from sgdask.metrics.base import DERIVED, IMAGE, Context, Family, Finals, Metric, Terms
from sgdask.metrics.terms import batch_blocks, image_result
from sgdask.protocols import MULTIMPO, SGBENCH, SINGLEMPO
from sgdask.types import ImageHits, PanopticHits
from tests.helpers.builders import snapshot

KS = parse_ks("1,2,5,x1,x2")
N_PREDICATES = 4


@st.composite
def panoptic_hits(draw) -> PanopticHits:
    """Random panoptic counts: true positives (category, intersection <= union), false
    positives and negatives by category."""
    categories = st.lists(st.integers(0, 3), max_size=4)
    tp = draw(categories)
    unions = [draw(st.integers(1, 50)) for _ in tp]
    return PanopticHits(
        np.array(tp, np.int64), np.array([draw(st.integers(1, u)) for u in unions], np.int64),
        np.array(unions, np.int64), np.array(draw(categories), np.int64),
        np.array(draw(categories), np.int64), draw(st.booleans()))


@st.composite
def image_hits(draw, mapped: bool, with_ng: bool, stats: bool, image_id: str,
               panoptic: bool = False) -> ImageHits:
    n = draw(st.integers(2, 5))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          min_size=1, max_size=6))
    rows = {(s, o, draw(st.integers(0, N_PREDICATES - 1))) for s, o in pairs}
    relations = np.array(sorted(rows), dtype=np.int64)
    t = len(relations)
    positions = st.one_of(st.just(int(NEVER)), st.integers(0, 12))

    def firsts(size: int) -> np.ndarray:
        return np.array(draw(st.lists(positions, min_size=size, max_size=size)), np.int64)

    n_pairs = len({(int(s), int(o)) for s, o, _ in relations})
    missing = draw(st.booleans())
    return ImageHits(
        image_id, missing, relations, np.zeros(n, dtype=np.int64),
        np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        graph_first=firsts(t), pair_first=firsts(n_pairs),
        ng_first=firsts(t) if with_ng else None, imr_first=firsts(t) if with_ng else None,
        prank=(np.array(draw(st.lists(st.integers(-1, 3), min_size=t, max_size=t)), np.int64)
               if with_ng and mapped and not missing else None),
        legacy_first=firsts(t) if mapped else None,
        zero_shot=(np.array(draw(st.lists(st.booleans(), min_size=t, max_size=t)), bool)
                   if stats else None),
        diagnostics={"gt_instances": n},
        panoptic=draw(st.none() | panoptic_hits()) if panoptic else None)


@st.composite
def datasets(draw):
    protocol = draw(st.sampled_from([SINGLEMPO, SGBENCH, MULTIMPO]))
    mapped = protocol.matching != "triplet"
    with_ng, stats, masks = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    images = [draw(image_hits(mapped, with_ng, stats, f"img{i}", masks))
              for i in range(draw(st.integers(1, 6)))]
    inputs = {"graph", "legacy"} | ({"ng"} if with_ng else set()) | \
        ({"mapping"} if mapped else set()) | ({"stats"} if stats else set()) | \
        ({"masks", "crowd"} if masks else set())
    return protocol, inputs, images


def plain(images, protocol, inputs) -> Accumulator:
    acc = Accumulator()
    for hits in images:
        acc.update(image_result(hits, Context(KS), protocol, inputs))
    return acc


def fast(images, protocol, inputs, families=None) -> Accumulator:
    acc = Accumulator()
    acc.add_blocks(batch_blocks(images, Context(KS), protocol, inputs, families))
    diagnostics = {"images": len(images), "images_missing": sum(h.missing for h in images)}
    for hits in images:
        for k, v in hits.diagnostics.items():
            diagnostics[k] = diagnostics.get(k, 0) + v
    acc.add_counts(np.concatenate([h.predicates for h in images]), diagnostics)
    return acc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_vectorized_terms_equal_each_familys_plain_function(data):
    protocol, inputs, images = data
    assert snapshot(fast(images, protocol, inputs)) == snapshot(plain(images, protocol, inputs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_generic_path_equals_the_vectorized_one(data):
    """Every family run through its plain function inside the batch path (as a family
    without ``batch_terms`` is) gives the vectorized numbers."""
    protocol, inputs, images = data
    generic = [Family(f.name, f.metrics, f.image_terms, None, f.derive, states=f.states)
               for f in FAMILIES]
    assert snapshot(fast(images, protocol, inputs, generic)) == \
        snapshot(fast(images, protocol, inputs))


# --------------------------------------------------------------------------- a toy metric


def toy_terms(hits: ImageHits, ctx: Context) -> Terms:
    """Toy@k: GT triplets whose first graph hit is at an even position below k."""
    terms = Terms()
    for k in ctx.ks:
        first = hits.graph_first
        even = (first < k.resolve(hits.n_gt_triplets)) & (first % 2 == 0)
        terms.image[f"Toy@{k.label}"] = (int(even.sum()), hits.n_gt_triplets)
    return terms


TOY = Family("toy", (Metric("Toy", IMAGE, "a toy metric", board=("50",)),), toy_terms)


def geometric_mean(finals: Finals, ctx: Context) -> dict[str, float]:
    """Gm@k, a toy derived metric: the geometric mean of the dataset values R@k and mR@k."""
    out = {}
    for k in ctx.ks:
        r, m = finals.value(f"R@{k.label}"), finals.value(f"mR@{k.label}")
        if r is not None and m is not None:
            out[f"Gm@{k.label}"] = math.sqrt(r * m)
    return out


TOY_DERIVED = Family("toy_derived", (Metric("Gm", DERIVED, "geometric mean of R@k and mR@k"),),
                     None, derive=geometric_mean)


@pytest.fixture
def toy_registered():
    register(TOY)
    register(TOY_DERIVED)
    yield
    unregister("toy")
    unregister("toy_derived")


def test_toy_metric_reaches_every_output(toy_registered, dataset, stores, client, tmp_path):
    from sgdask.batch.registry import submit
    from sgdask.batch.rerank import rerank
    from sgdask.cli.console import print_report
    from sgdask.pipeline import evaluate_protocols
    from sgdask.report.html import render_html
    from sgdask.report.writers import write_reports

    reports = evaluate_protocols(stores.gt, stores.pred, "singlempo", client=client,
                                 ci=0.9, resamples=200, seed=3)
    report = reports["singlempo"]
    assert 0 < report.metrics["Toy@50"] <= report.metrics["R@50"]
    r, m = report.metrics["R@50"], report.metrics["mR@50"]
    assert report.metrics["F@50"] == pytest.approx(2 * r * m / (r + m), rel=1e-15)
    assert report.metrics["Gm@50"] == pytest.approx(math.sqrt(r * m), rel=1e-15)
    write_reports(reports, str(tmp_path / "out"))
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())["metrics"]
    assert "Toy@50" in written and written["F@50"] == report.metrics["F@50"]
    assert written["Gm@50"] == report.metrics["Gm@50"]
    console = Console(file=io.StringIO(), width=200)
    print_report(report, console)
    table = console.file.getvalue()
    for name in ("Toy@50", "F@50"):
        assert name.partition("@")[0] in table
        assert f"{100 * report.metrics[name]:.2f}" in table
    page = render_html(reports)
    assert "<td>Toy</td>" in page and f"{100 * report.metrics['Toy@50']:.2f}" in page
    assert "<td>F</td>" in page and f"{100 * report.metrics['F@50']:.2f}" in page
    registry = str(tmp_path / "registry")
    submit(str(dataset.submission_zip), registry, stores.gt, "toy-model", cluster=client)
    rerank(registry, stores.gt, str(tmp_path / "board"), client=client, log=lambda _: None)
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert board[0]["metrics"]["Toy@50"] == report.metrics["Toy@50"]
    assert board[0]["metrics"]["F@50"] == report.metrics["F@50"]
    html = (tmp_path / "board" / "leaderboard.html").read_text()
    assert "Toy@50" in html and "F@50" in html
    derived_metric_gets_interval_and_paired_test(report)


def derived_metric_gets_interval_and_paired_test(report) -> None:
    """Without training statistics, F@50's interval is the percentile interval of F@50
    derived on every resample from that resample's R@50 and mR@50; comparing the model
    with itself gives F@50 a difference 0 and p = 1."""
    from sgdask.report.intervals import scoring_of
    from sgdask.stats.bootstrap import (
        Scoring,
        bootstrap_samples,
        percentile_interval,
        plan_for,
    )
    from sgdask.stats.paired import Model, compare

    ci = report.ci
    terms = report.terms
    plan = plan_for([terms], ["R@50", "mR@50"], Scoring(report.aggregation))
    samples = bootstrap_samples([terms], plan, ci["resamples"], ci["seed"])[0].metrics
    r, m = samples["R@50"], samples["mR@50"]
    literal = percentile_interval(2 * r * m / (r + m), ci["level"])
    assert report.intervals["F@50"] == list(literal)
    toy = percentile_interval(np.sqrt(r * m), ci["level"])  # the toy derived metric too
    assert report.intervals["Gm@50"] == list(toy)
    low, high = report.intervals["F@50"]
    assert low < report.metrics["F@50"] < high
    found = compare([Model("a", [terms]), Model("b", [terms])], [(0, 1)],
                    scoring_of(report, None), resamples=50, permutations=50)
    row = next(row for row in found.rows if row["metric"] == "F@50")
    assert row["delta"] == 0 and row["p_value"] == 1


def test_kernels_and_codecs_import_without_dask_pyarrow_zarr():
    code = ("import sys, sgdask.kernels, sgdask.metrics.terms, sgdask.io.codecs.inflate, "
            "sgdask.io.codecs.words, sgdask.io.codecs.png; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'dask', 'distributed', 'pyarrow', 'zarr', 's3fs'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
