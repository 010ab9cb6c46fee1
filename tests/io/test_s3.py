"""Object store end to end: a real moto S3 server on 127.0.0.1, no mocks.

Ground truth is ingested, the submission converted and both evaluated entirely from and to
``s3://`` URLs, by the Python API and by the CLI; the numbers must be bit-identical to the
local stores' evaluation. Unreachable endpoints and missing buckets give one-line errors.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from sgdask.errors import SgdaskError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate
from tests.helpers import AWS_ENV, BUCKET, S3, run_cli


@pytest.fixture(scope="module")
def s3_stores(s3: S3, dataset) -> tuple[str, str]:
    """The synthetic dataset uploaded to S3, then ingested and converted from S3 to S3."""
    s3.fs.put_file(str(dataset.psg_json), f"{BUCKET}/raw/psg.json")
    s3.fs.put_file(str(dataset.submission_zip), f"{BUCKET}/raw/submission.zip")
    for png in sorted(dataset.masks_dir.iterdir()):
        s3.fs.put_file(str(png), f"{BUCKET}/raw/panoptic/{png.name}")
    gt, pred = s3.url("gt"), s3.url("pred")
    ingest_gt(s3.url("raw", "psg.json"), gt, masks_dir=s3.url("raw", "panoptic"),
              storage_options=s3.options)
    convert_submission(s3.url("raw", "submission.zip"), pred, gt=gt,
                       storage_options=s3.options)
    return gt, pred


@pytest.fixture(scope="module")
def local_report(stores, client):
    """The reference: the same dataset from local stores on the LocalCluster."""
    return evaluate(stores.gt, stores.pred, client=client)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("sgdask: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_s3_stores_match_local_stores(s3, s3_stores, stores):
    """Same source bytes, same content hash; every part and the manifest are on S3."""
    import sgdask.store.store as store

    for s3_url, local_url in zip(s3_stores, (stores.gt, stores.pred), strict=True):
        remote = store.StoreReader(s3_url, s3.options)
        local = store.StoreReader(local_url)
        assert remote.manifest["content_hash"] == local.manifest["content_hash"]
        assert remote.manifest["n_images"] == local.manifest["n_images"]
        assert remote.images()["image_id"].to_pylist() == local.images()["image_id"].to_pylist()
        assert s3.fs.exists(f"{s3_url[len('s3://'):]}/manifest.json")


def test_evaluate_from_s3_equals_local(s3, s3_stores, local_report, client):
    gt, pred = s3_stores
    report = evaluate(gt, pred, client=client, storage_options=s3.options)
    assert report.metrics == local_report.metrics
    assert report.per_predicate == local_report.per_predicate
    assert report.per_image == local_report.per_image
    assert report.diagnostics == local_report.diagnostics


def test_report_written_to_s3(s3, s3_stores, local_report, client):
    gt, pred = s3_stores
    report = evaluate(gt, pred, client=client, storage_options=s3.options, partition_size=7)
    written = report.write(s3.url("api-results"), s3.options)
    assert s3.url("api-results", "metrics.json") in written
    back = json.loads(s3.fs.cat_file(f"{BUCKET}/api-results/metrics.json"))
    assert back["metrics"] == local_report.metrics


@pytest.mark.slow
def test_cli_evaluate_s3_to_s3(s3, s3_stores, local_report, client):
    """The CLI on the session's worker processes (``--scheduler``), S3 in and S3 out."""
    gt, pred = s3_stores
    out = s3.url("results")
    proc = run_cli("evaluate", "--gt", gt, "--pred", pred, *s3.cli_options(), "--out", out,
                   "--partition-size", "5", "--scheduler", client.scheduler.address, env=AWS_ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    metrics = json.loads(s3.fs.cat_file(f"{BUCKET}/results/metrics.json"))
    assert metrics["metrics"] == local_report.metrics
    assert metrics["diagnostics"] == local_report.diagnostics
    assert s3.fs.exists(f"{BUCKET}/results/per_predicate.parquet")


@pytest.mark.slow
def test_cli_unreachable_endpoint_is_one_line():
    """Nothing listens on 127.0.0.1:1: one line naming the store URL, exit code 2."""
    gt = f"s3://{BUCKET}/gt"
    proc = run_cli("evaluate", "--gt", gt, "--pred", f"s3://{BUCKET}/pred",
                   "--storage-option", "endpoint_url=http://127.0.0.1:1",
                   "--storage-option", "key=testing", "--storage-option", "secret=testing",
                   timeout=120, env=AWS_ENV)
    line = one_error_line(proc)
    assert proc.returncode == 2, proc.stderr
    assert gt in line, line
    assert "http://127.0.0.1:1" in line, line


def test_unreachable_endpoint_python_api():
    """Same through the API; nested botocore options make the failure fast."""
    options = {"endpoint_url": "http://127.0.0.1:1", "key": "testing", "secret": "testing",
               "config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 1}}}
    with pytest.raises(SgdaskError, match=f"s3://{BUCKET}/gt: cannot access the object store"):
        evaluate(f"s3://{BUCKET}/gt", f"s3://{BUCKET}/pred", storage_options=options)
    with pytest.raises(SgdaskError, match=f"s3://{BUCKET}/nowhere/submission.zip: cannot access"):
        convert_submission(f"s3://{BUCKET}/nowhere/submission.zip", f"s3://{BUCKET}/x",
                           storage_options=options)


def test_unreachable_source_file_python_api(tmp_path):
    options = {"endpoint_url": "http://127.0.0.1:1", "key": "testing", "secret": "testing",
               "config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 1}}}
    with pytest.raises(SgdaskError, match=f"s3://{BUCKET}/raw/psg.json"):
        ingest_gt(f"s3://{BUCKET}/raw/psg.json", str(tmp_path / "gt"),
                  storage_options=options)


def test_cli_missing_bucket_is_one_line(s3):
    gt = "s3://no-such-bucket/gt"
    proc = run_cli("evaluate", "--gt", gt, "--pred", "s3://no-such-bucket/pred",
                   *s3.cli_options(), timeout=120, env=AWS_ENV)
    line = one_error_line(proc)
    assert proc.returncode == 2, proc.stderr
    assert gt in line, line


def test_cli_missing_psg_json_in_bucket_is_not_found_before_any_ingest(s3, s3_stores,
                                                                       tmp_path):
    gt, _ = s3_stores
    missing = s3.url("raw", "no-such-psg.json")
    proc = run_cli("evaluate", "--gt", missing, "--gt-masks", s3.url("raw", "panoptic"),
                   "--pred", gt.replace("/gt", "/pred"), *s3.cli_options(), "--cache-dir",
                   str(tmp_path / "cache"), timeout=120, env=AWS_ENV)
    line = one_error_line(proc)
    assert line == f"sgdask: error: {missing}: not found (no file or directory at this " \
        "path)", line
    assert "ingesting" not in proc.stderr and not (tmp_path / "cache").exists()


def test_cli_missing_store_in_bucket_is_one_line(s3, s3_stores):
    gt, _ = s3_stores
    proc = run_cli("evaluate", "--gt", gt, "--pred", s3.url("no-such-store"),
                   *s3.cli_options(), timeout=120, env=AWS_ENV)
    line = one_error_line(proc)
    assert s3.url("no-such-store") in line, line
    assert "not found (no file or directory at this path)" in line, line
