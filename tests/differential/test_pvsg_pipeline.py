"""PVSG on the evaluation pipeline: ``--protocol pvsg`` (and ``pvsg-oneweak``) against the
numbers OpenPVSG's own code printed (``fixtures/pvsg_golden.json``) and the literal twin's
one-weak-hit reading, read from the same generated files as ``test_pvsg.py``; partitioning,
chunking and workers change nothing; intervals and ``compare`` resample videos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgdask.errors import SgdaskError
from sgdask.formats.pvsg import ingest_pvsg
from sgdask.testing.pvsg import write_pvsg
from tests.literal import pvsg as literal_pvsg

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "pvsg_golden.json"
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def pvsg(tmp_path_factory):
    raw = write_pvsg(tmp_path_factory.mktemp("pvsg"), n_videos=8, seed=1)
    gt = str(raw.annotation.parent.parent / "gt.store")
    ingest_pvsg(str(raw.annotation), gt, str(raw.data_dir), partition_size=3)
    return raw, gt


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _reports(gt: str, pred: str, client, protocols: str = "pvsg,pvsg-oneweak", **fields):
    from sgdask.pipeline import evaluate_protocols

    return evaluate_protocols(gt, pred, protocols, client=client, **fields)


def test_the_store_holds_videos_and_their_tubes(pvsg):
    raw, gt = pvsg
    manifest = json.loads(Path(gt, "manifest.json").read_text())
    assert manifest["units"] == ["video"] and manifest["gt_format"] == "pvsg"
    assert manifest["n_images"] == len(raw.videos)
    assert json.loads(Path(gt, "tubes", "manifest.json").read_text())["kind"] == "gt"


def test_pipeline_equals_the_reference_and_the_one_weak_reading(pvsg, client):
    raw, gt = pvsg
    golden = json.loads(GOLDEN.read_text())["metrics"]
    reports = _reports(gt, str(raw.results), client)
    assert list(reports) == ["pvsg", "pvsg-oneweak"]
    ref = reports["pvsg"]
    assert ref.metrics.keys() >= golden.keys()
    assert max(abs(ref.metrics[m] - v) for m, v in golden.items()) < 1e-9
    assert ref.aggregation == "pooled" and ref.protocol["unit"] == "video"
    once = literal_pvsg.evaluate(raw.annotation, raw.data_dir, raw.results, "once")["metrics"]
    got = reports["pvsg-oneweak"].metrics
    assert max(abs(got[m] - v) for m, v in once.items()) < 1e-9
    assert got["wR@50"] < ref.metrics["wR@50"]  # the reference's extra weak hits
    counts = json.loads(GOLDEN.read_text())["counts"]
    table = {row["predicate"]: row for row in ref.per_predicate}
    for k, rows in counts.items():
        for p, c in rows.items():
            if c["total"]:
                assert table[int(p)][f"R@{k}"] == c["hit"] / c["total"]
                assert table[int(p)][f"wR@{k}"] == c["weak_hit"] / c["total"]


def test_partitioning_chunking_and_workers_change_nothing(pvsg, client, tmp_path):
    """Another GT store (one video per part, chunks of 5 frames) on a cluster of another
    shape: the same numbers, to the bit."""
    from distributed import Client, LocalCluster

    raw, gt = pvsg
    first = {n: r.metrics for n, r in _reports(gt, str(raw.results), client).items()}
    other_gt = str(tmp_path / "gt5.store")
    ingest_pvsg(str(raw.annotation), other_gt, str(raw.data_dir), partition_size=1,
                frames_per_chunk=5)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as other:
        second = {n: r.metrics for n, r in
                  _reports(other_gt, str(raw.results), other, partition_size=1).items()}
    assert first == second


def test_intervals_and_compare_resample_videos(pvsg, client, tmp_path):
    from sgdask.batch.compare import CompareJob, run_compare

    raw, gt = pvsg
    report = _reports(gt, str(raw.results), client, "pvsg", ci=0.9, resamples=200,
                      seed=1)["pvsg"]
    assert report.ci["unit"] == "video"
    low, high = report.intervals["wR@50"]
    assert low < report.metrics["wR@50"] < high
    job = CompareJob(gt, [("a", [str(raw.results)]), ("b", [str(raw.results)])],
                     protocol="pvsg", resamples=200, permutations=200, metrics="R@50")
    comparison = run_compare(job, client)
    assert comparison.settings["unit"] == "video"
    assert comparison.settings["units"] == len(raw.videos)


def test_results_need_a_pvsg_store(pvsg, client, tmp_path):
    from sgdask.formats.psg import ingest_gt
    from sgdask.testing.psg import write_dataset

    raw, _ = pvsg
    paths = write_dataset(tmp_path / "psg", 4, 0)
    ingest_gt(str(paths.psg_json), str(tmp_path / "psg.store"), None)
    with pytest.raises(SgdaskError, match="need a PVSG GT store"):
        _reports(str(tmp_path / "psg.store"), str(raw.results), client, "pvsg")


def test_the_weak_hit_hand_case_on_the_pipeline(client, tmp_path):
    """One GT relation, weak hits at ranks 0 and 2, a strong one at rank 3: the reference
    printed weak R@20 = 300.00; one weak hit per GT relation gives 100.00."""
    from tests.helpers.pvsg_cases import write_weak_hit_case

    golden = json.loads(GOLDEN.read_text())["weak_hit_case"]
    root = write_weak_hit_case(tmp_path)
    gt = str(tmp_path / "gt.store")
    ingest_pvsg(str(root / "data" / "pvsg.json"), gt, str(root / "data"))
    reports = _reports(gt, str(root / "results"), client)
    for name, value in golden["metrics"].items():
        assert reports["pvsg"].metrics[name] == pytest.approx(value, abs=1e-12), name
    assert reports["pvsg"].metrics["wR@20"] == 3.0
    assert reports["pvsg-oneweak"].metrics["wR@20"] == 1.0
    assert reports["pvsg-oneweak"].metrics["R@20"] == reports["pvsg"].metrics["R@20"] == 1.0


@pytest.mark.timeout(120)
def test_on_s3_the_same_numbers(client, s3, tmp_path):
    """The annotation, frame masks and results on S3 (moto on 127.0.0.1), the GT store and
    its tubes written there: the literal twin's numbers on the local files."""
    raw = write_pvsg(tmp_path, n_videos=2, n_frames=6, seed=5)
    for part in ("data", "results"):
        s3.fs.put(str(tmp_path / part), s3.url("pvsg", part)[len("s3://"):], recursive=True)
    gt = s3.url("pvsg", "gt.store")
    ingest_pvsg(s3.url("pvsg", "data", "pvsg.json"), gt, s3.url("pvsg", "data"),
                storage_options=s3.options)
    expected = literal_pvsg.evaluate(raw.annotation, raw.data_dir, raw.results)["metrics"]
    report = _reports(gt, s3.url("pvsg", "results"), client, "pvsg",
                      storage_options=s3.options)["pvsg"]
    assert max(abs(report.metrics[m] - v) for m, v in expected.items()) < 1e-9
