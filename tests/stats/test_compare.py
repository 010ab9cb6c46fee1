"""Intervals and comparisons through the pipeline: the per-image terms a run keeps, their
files, ``evaluate --ci``, ``sgdask compare`` and the result cache."""

from __future__ import annotations

import json

import fastjsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster

from sgdask.batch.cache import ResultCache
from sgdask.batch.many import ManyJob, run_many
from sgdask.cli import main
from sgdask.core.settings import Settings
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import cluster_mapper, evaluate, evaluate_protocols
from sgdask.report import TERMS_FILE, Report
from sgdask.report.intervals import CISettings, scoring_of
from sgdask.stats.bootstrap import bootstrap, point_values, resample_indices
from sgdask.stats.paired import Model, compare
from sgdask.store.store import StoreReader
from sgdask.store.training_stats import gt_training_stats
from tests.helpers import ROOT, rewrite_zip
from tests.stats.test_bootstrap import literal_interval, literal_value

CI = CISettings(0.95, 100, 0)
CI_FIELDS = {"ci": CI.level, "resamples": CI.resamples, "seed": CI.seed}  # as settings


def schema(name: str):
    return fastjsonschema.compile(json.loads((ROOT / "schemas" / name).read_text()))


@pytest.fixture(scope="module")
def weak_store(dataset, stores, tmp_path_factory) -> str:
    """The synthetic submission with every graph list cut to its first 5 triplets."""
    root = tmp_path_factory.mktemp("weak")

    def shorten(doc):
        for img in doc["images"]:
            img["triplets"], img["scores"] = img["triplets"][:5], img["scores"][:5]

    convert_submission(str(rewrite_zip(dataset.submission_zip, root / "weak.zip", shorten)),
                       str(root / "weak"), stores.gt)
    return str(root / "weak")


@pytest.fixture(scope="module")
def reports(stores, client) -> dict[str, Report]:
    return evaluate_protocols(stores.gt, stores.pred, "singlempo,sgbench", partition_size=7,
                              client=client, **CI_FIELDS)


def test_terms_reproduce_every_reported_metric(reports, stores):
    """The kept terms give back the accumulator's numbers (wIMR through its family)."""
    _, composition = gt_training_stats(StoreReader(stores.gt), None, None)
    for report in reports.values():
        values = point_values(report.terms, scoring_of(report, composition))
        assert set(values) == set(report.metrics)
        for name, value in report.metrics.items():
            assert values[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


def test_intervals_of_real_terms_equal_a_literal_loop(reports):
    report = reports["sgbench"]  # PRank over all cells, missing images left out of means
    draws = [d.tolist() for d in resample_indices(report.terms.n_images, CI.resamples,
                                                  CI.seed)]
    for name in ("R@50", "mR@50", "PRank", "zR@20", "InstR", "mNgR@x1"):
        samples = [literal_value(report.terms, name, d, "per_predicate", name == "PRank")
                   for d in draws]
        assert report.intervals[name] == pytest.approx(literal_interval(samples, 0.95),
                                                       rel=1e-12), name
        assert report.intervals[name][0] <= report.metrics[name] <= report.intervals[name][1]
    assert report.ci == {"level": 0.95, "resamples": 100, "method": "percentile",
                         "unit": "image", "seed": 0}


def test_intervals_do_not_depend_on_partitioning_or_workers(reports, stores, client):
    def comparable(report: Report):
        return report.intervals, report.per_predicate

    other = evaluate(stores.gt, stores.pred, partition_size=64, client=client, **CI_FIELDS)
    assert comparable(other) == comparable(reports["singlempo"])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as one_worker:
        alone = evaluate(stores.gt, stores.pred, partition_size=3, client=one_worker,
                         **CI_FIELDS)
    assert comparable(alone) == comparable(reports["singlempo"])


def test_resamples_on_the_cluster_give_the_same_intervals(reports, client, monkeypatch):
    import sgdask.stats.bootstrap as bootstrap_module

    report = reports["singlempo"]
    scoring = scoring_of(report, None)
    here = bootstrap(report.terms, scoring, 0.95, 60, 2)
    monkeypatch.setattr(bootstrap_module, "BLOCK_WORK", 12 * len(report.terms))
    spread = bootstrap(report.terms, scoring, 0.95, 60, 2, mapper=cluster_mapper(client))
    assert spread.metrics == here.metrics and spread.predicates == here.predicates


def test_report_files_keep_terms_and_intervals(reports, tmp_path):
    report = reports["singlempo"]
    report.write(str(tmp_path / "r"))
    schema("metrics.schema.json")(json.loads((tmp_path / "r" / "metrics.json").read_text()))
    back = Report.read(str(tmp_path / "r"))
    assert back.intervals == report.intervals and back.ci == report.ci
    for column in ("image_ids", "image", "metric", "predicate", "num", "den"):
        assert np.array_equal(getattr(back.terms, column), getattr(report.terms, column))
    table = pq.read_table(tmp_path / "r" / "per_predicate.parquet")
    assert {"mR@50_lo", "mR@50_hi", "PRank_lo"} <= set(table.column_names)
    terms = pq.read_table(tmp_path / "r" / TERMS_FILE)
    assert terms.column_names == ["image_id", "metric", "kind", "predicate", "num", "den"]
    (tmp_path / "r" / TERMS_FILE).unlink()  # a report directory of an older sgdask
    old = Report.read(str(tmp_path / "r"))
    assert old.terms is None and old.metrics == report.metrics


def test_cache_entry_without_terms_is_a_miss(reports, tmp_path):
    cache = ResultCache(str(tmp_path / "cache"))
    cache.put("k", reports["singlempo"], {})
    assert cache.get("k") is not None
    (tmp_path / "cache" / "k" / TERMS_FILE).unlink()
    assert cache.get("k") is None


def test_model_against_itself_and_a_weaker_one(reports, stores, weak_store, client):
    weak = evaluate(stores.gt, weak_store, client=client)
    own = reports["singlempo"]
    found = compare([Model("full", [own.terms]), Model("again", [own.terms]),
                     Model("weak", [weak.terms])], [(0, 1), (0, 2)],
                    scoring_of(own, None), 0.95, 200, 200, 0)
    rows = {(r["b"], r["metric"]): r for r in found.rows}
    for name in own.metrics:
        if (("again", name)) in rows:
            row = rows[("again", name)]
            assert row["delta"] == 0 and row["p_value"] == 1 and row["p_holm"] == 1
    for name in ("R@50", "mR@50", "PR@50"):
        row = rows[("weak", name)]
        assert row["delta"] == pytest.approx(weak.metrics[name] - own.metrics[name])
        assert row["p_value"] < 0.01 and row["ci_high"] < 0 and row["losses"] > 0


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_evaluate_cli_with_intervals(stores, client, tmp_path, capsys):
    out = tmp_path / "ev"
    code, text, err = run(capsys, "evaluate", "--gt", stores.gt, "--pred", stores.pred,
                          "--ci", "0.9", "--resamples", "50", "--ci-metrics", "mR@50,R",
                          "--scheduler", client.scheduler.address, "--out", str(out))
    assert code == 0, err
    assert "intervals: 90% percentile bootstrap over images, 50 resamples, seed 0" in text
    summary = json.loads((out / "metrics.json").read_text())
    assert set(summary["intervals"]) == {"mR@50", *(n for n in summary["metrics"]
                                                    if n.partition("@")[0] == "R")}
    assert summary["ci"]["level"] == 0.9
    assert "Intervals: 90% percentile bootstrap" in (out / "report.html").read_text()
    code, _, err = run(capsys, "evaluate", "--gt", stores.gt, "--pred", stores.pred,
                       "--ci", "0.9", "--ci-metrics", "bogus")
    assert code == 2 and err.startswith("sgdask: error: --ci-metrics: 'bogus'")
    code, _, err = run(capsys, "evaluate", "--gt", stores.gt, "--pred", stores.pred,
                       "--ci", "1.5")
    assert code == 2 and "--ci: 1.5" in err


def test_compare_cli(stores, weak_store, reports, client, tmp_path, capsys):
    reports["singlempo"].write(str(tmp_path / "full-report"))
    out = tmp_path / "cmp"
    code, text, err = run(
        capsys, "compare", stores.pred, weak_store, str(tmp_path / "full-report"),
        "--group", f"seeds={weak_store},{stores.pred}", "--gt", stores.gt, "--out", str(out),
        "--resamples", "200", "--permutations", "200", "--scheduler",
        client.scheduler.address)
    assert code == 0, err
    assert "mR@50" in text and "p Holm" in text
    rows = json.loads((out / "comparison.json").read_text())
    schema("comparison.schema.json")(rows)
    by = {(r["b"], r["metric"]): r for r in rows}
    assert {r["a"] for r in rows} == {"pred"}
    assert by[("weak", "mR@50")]["p_value"] < 0.01
    assert by[("full-report", "mR@50")]["delta"] == 0
    assert by[("full-report", "mR@50")]["p_value"] == 1
    group = by[("seeds", "mR@50")]
    assert group["b_runs"] == 2 and group["b_sd"] > 0
    assert group["b_value"] == pytest.approx((by[("weak", "mR@50")]["b_value"]
                                              + reports["singlempo"].metrics["mR@50"]) / 2)
    details = json.loads((out / "comparison_details.json").read_text())
    assert {m["name"] for m in details["models"]} == {"pred", "weak", "full-report", "seeds"}
    assert any(r["metric"] == "mR@50" and r["b"] == "weak" for r in details["per_predicate"])
    page = (out / "comparison.html").read_text()
    assert page.count("<img") == 6 and "Differences" in page


def test_compare_cli_needs_terms(stores, reports, client, tmp_path, capsys):
    reports["singlempo"].write(str(tmp_path / "old"))
    (tmp_path / "old" / TERMS_FILE).unlink()
    code, _, err = run(capsys, "compare", stores.pred, str(tmp_path / "old"), "--gt",
                       stores.gt, "--scheduler", client.scheduler.address)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"sgdask: error: {tmp_path / 'old'}: was written before")
    assert "evaluate it again" in err


def test_evaluate_many_intervals_from_cached_terms(stores, client, tmp_path):
    job = ManyJob(stores.gt, [("a", stores.pred, "singlempo")],
                  Settings(ci=0.9, resamples=30, seed=3), cache=str(tmp_path / "cache"))
    first = run_many(job, client=client, log=lambda _: None)
    second = run_many(job, client=client, log=lambda _: None)
    assert first.evaluated and not second.evaluated
    a, b = first.reports["a"]["singlempo"], second.reports["a"]["singlempo"]
    assert a.intervals and a.intervals == b.intervals and a.ci == b.ci
    cached = json.loads(next((tmp_path / "cache").glob("*/metrics.json")).read_text())
    assert "intervals" not in cached  # the cache keeps terms, not one run's intervals
