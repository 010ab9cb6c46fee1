"""Action Genome on the evaluation pipeline: ``--protocol ag`` (``ag-with``, ``ag-semi``,
``ag-no``) against the numbers STTran's and TEMPURA's code printed
(``fixtures/ag_golden.json``), for PredCls, SGCls and SGDet read from the same generated
files as ``test_ag.py``; partitioning and workers change nothing; intervals and ``compare``
resample videos."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from sgdask.errors import SgdaskError
from sgdask.formats.actiongenome import ingest_ag
from sgdask.formats.results import ResultsMethod
from sgdask.report.intervals import scoring_of
from sgdask.stats.bootstrap import bootstrap
from sgdask.testing.ag import write_ag

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "ag_golden.json"
SETTINGS = ("predcls", "sgcls", "sgdet")
TEMPURA = ResultsMethod("tempura")


@pytest.fixture(scope="module")
def ag(tmp_path_factory) -> tuple[dict, Path, str]:
    golden = json.loads(GOLDEN.read_text())
    root = write_ag(tmp_path_factory.mktemp("ag"), **golden["generator_args"])
    a = root / "annotations"
    gt = str(root / "gt.store")
    ingest_ag(str(a / "object_bbox_and_relationship.pkl"), gt, str(a / "person_bbox.pkl"),
              str(a / "frame_list.txt"), partition_size=64)
    return golden, root, gt


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _reports(gt: str, pred: str, client, **fields) -> dict:
    from sgdask.pipeline import evaluate_protocols

    return evaluate_protocols(gt, pred, "ag", client=client, method=TEMPURA, **fields)


def test_the_store_holds_the_loaders_frames_by_video(ag):
    golden, _, gt = ag
    manifest = json.loads(Path(gt, "manifest.json").read_text())
    assert manifest["units"] == ["video"] and manifest["gt_format"] == "action-genome"
    assert manifest["n_images"] == golden["frames"]
    assert len(manifest["predicate_classes"]) == 26
    assert manifest["thing_classes"][0] == "person"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("setting", SETTINGS)
def test_pipeline_equals_the_reference(ag, client, setting):
    """R@10/20/50/100 and mR@k of the three modes in one pass, to 1e-9 (the reference's
    mR divides by count + 1e-10: 1.3e-12 apart at most)."""
    golden, root, gt = ag
    reports = _reports(gt, str(root / f"predictions_{setting}.pkl"), client)
    assert list(reports) == ["ag-with", "ag-semi", "ag-no"]
    for name, report in reports.items():
        expected = golden["metrics"][f"{setting}/{name.split('-')[1]}"]
        assert max(abs(report.metrics[m] - v) for m, v in expected.items()) < 1e-9, name
        assert report.aggregation == "pooled" and report.protocol["unit"] == "video"
        assert "R@inf" not in report.metrics and "InstR" in report.left_out


@pytest.mark.timeout(180)
def test_npz_directory_and_partitioning_change_nothing(ag, client, tmp_path):
    """The same output as a directory of VIDEO.npz with the GT cut into chunks of 7 frames
    (videos of 10 frames split across tasks), and on a cluster of another shape with
    chunks of 25: the same numbers, to the bit."""
    from distributed import Client, LocalCluster

    _, root, gt = ag
    arrays = pickle.loads((root / "predictions_sgdet.pkl").read_bytes())
    for name, fields in arrays.items():
        np.savez(tmp_path / f"{name}.npz", **fields)
    pkl = str(root / "predictions_sgdet.pkl")
    found = [{n: r.metrics for n, r in _reports(gt, pkl, client).items()}]
    found.append({n: r.metrics for n, r in
                  _reports(gt, str(tmp_path), client, partition_size=7).items()})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as other:
        found.append({n: r.metrics for n, r in
                      _reports(gt, pkl, other, partition_size=25).items()})
    assert all(f == found[0] for f in found[1:])


@pytest.mark.timeout(180)
def test_intervals_and_compare_resample_videos(ag, client):
    from sgdask.batch.compare import CompareJob, run_compare

    golden, root, gt = ag
    reports = _reports(gt, str(root / "predictions_sgcls.pkl"), client, ci=0.9,
                       resamples=200, seed=1)
    report = reports["ag-semi"]
    assert report.ci["unit"] == "video"
    low, high = report.intervals["R@20"]
    assert low < report.metrics["R@20"] < high
    # the same terms resampled frame by frame give other intervals (and the same ones
    # again when the table resamples its videos)
    scoring = scoring_of(report, None)
    by_video = bootstrap(report.terms, scoring, 0.9, 200, 1, ["R@20", "mR@20"])
    frames = copy.copy(report.terms)
    frames.units, frames.unit = None, "image"
    by_frame = bootstrap(frames, scoring, 0.9, 200, 1, ["R@20", "mR@20"])
    assert by_video.metrics["R@20"] == pytest.approx(report.intervals["R@20"], abs=1e-12)
    assert by_frame.metrics["R@20"] != by_video.metrics["R@20"]
    assert by_frame.unit == "image" and by_video.unit == "video"
    job = CompareJob(gt, [("sgcls", [str(root / "predictions_sgcls.pkl")]),
                          ("sgdet", [str(root / "predictions_sgdet.pkl")])],
                     protocol="ag-with", resamples=200, permutations=200, metrics="R@20",
                     method="tempura")
    comparison = run_compare(job, client)
    assert comparison.settings["unit"] == "video"
    assert comparison.settings["units"] == golden["videos"]
    [row] = [r for r in comparison.rows if r["metric"] == "R@20"]
    assert row["ci_low"] <= row["delta"] <= row["ci_high"] and 0 < row["p_value"] <= 1


def test_an_output_needs_an_action_genome_store(ag, client, tmp_path):
    from sgdask.formats.psg import ingest_gt
    from sgdask.pipeline import evaluate_protocols
    from sgdask.testing.psg import write_dataset

    _, root, _ = ag
    paths = write_dataset(tmp_path / "psg", 4, 0)
    ingest_gt(str(paths.psg_json), str(tmp_path / "psg.store"), None)
    with pytest.raises(SgdaskError, match="needs an Action Genome GT store"):
        evaluate_protocols(str(tmp_path / "psg.store"), str(root / "predictions_sgcls.pkl"),
                           "ag", client=client, method=TEMPURA)


@pytest.mark.timeout(180)
def test_sttran_reads_attention_logits(ag, client, tmp_path):
    """STTran's model returns attention logits, which its evaluator softmaxes: the golden
    numbers from the log of the probabilities (softmax in float32 may move the last bit of
    a score, never a hit here)."""
    from sgdask.pipeline import evaluate_protocols

    golden, root, gt = ag
    arrays = pickle.loads((root / "predictions_sgcls.pkl").read_bytes())
    for video in arrays.values():
        video["attention_distribution"] = np.log(video["attention_distribution"])
    path = tmp_path / "logits.pkl"
    path.write_bytes(pickle.dumps(arrays))
    reports = evaluate_protocols(gt, str(path), "ag-with", client=client,
                                 method=ResultsMethod("sttran"))
    expected = golden["metrics"]["sgcls/with"]
    got = reports["ag-with"].metrics
    assert max(abs(got[m] - v) for m, v in expected.items()) < 1e-9
    assert reports["ag-with"].provenance["submission"]["method"] == "sttran"
