"""The report's files: per_image.parquet keeps every column even when its first rows are
missing images, and a report read back from its files (the result cache) equals the report
written. Each test runs the `sgdask` command on real files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sgdask import __version__ as sgdask_version
from sgdask.pipeline import evaluate
from sgdask.protocols import METRICS_VERSION, PROTOCOLS
from sgdask.report import Report
from tests.helpers import rewrite_zip
from tests.helpers import run_cli as sgdask

DIAGNOSTICS = ("masks_merged", "masks_dropped", "graph_triplets_removed", "ng_triplets_removed",
               "pred_instances", "pred_unmatched", "gt_instances", "gt_unmatched")

def evaluated_ids(psg_json: Path) -> list[str]:
    """Test images with relations, sorted as the report sorts them."""
    doc = json.loads(psg_json.read_text())
    test = {str(i) for i in doc["test_image_ids"]}
    return sorted(str(e["image_id"]) for e in doc["data"]
                  if str(e["image_id"]) in test and e.get("relations"))


@pytest.fixture(scope="module")
def first_images_missing(dataset, stores, tmp_path_factory) -> str:
    """A submission store without predictions for the first three evaluated images."""
    root = tmp_path_factory.mktemp("first-missing")
    dropped = set(evaluated_ids(dataset.psg_json)[:3])

    def drop_first(doc):
        doc["images"] = [img for img in doc["images"] if str(img["id"]) not in dropped]

    zip_path = rewrite_zip(dataset.submission_zip, root / "sub.zip", drop_first)
    store = str(root / "store")
    proc = sgdask("convert", str(zip_path), "--out", store, "--gt", stores.gt, "--in-process")
    assert proc.returncode == 0, proc.stderr
    return store


def test_per_image_parquet_keeps_every_column(first_images_missing, stores, tmp_path):
    """Item 1: the first rows (missing images) have no diagnostics; the file still has them."""
    out = tmp_path / "out"
    proc = sgdask("evaluate", "--gt", stores.gt, "--pred", first_images_missing,
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out / "per_image.parquet")
    rows = table.to_pylist()
    assert rows[0]["missing"] and not rows[-1]["missing"]
    for column in (*DIAGNOSTICS, "R@50", "ngR@x10", "InstR"):
        assert column in table.column_names, column
        assert any(r[column] is not None for r in rows), column
    for column in DIAGNOSTICS[:6]:  # about the prediction: a missing image has none
        assert rows[0][column] is None, column
    zero_shot = [c for c in table.column_names if c.startswith("zR@")]
    assert zero_shot, "the synthetic GT has zero-shot triplets on some images"
    metrics = json.loads((out / "metrics.json").read_text())
    dataset_level = ("m", "IMR", "wIMR", "PRank", "F@", "ngF@", "PQ", "SQ", "RQ")
    image_metrics = {m for m in metrics["metrics"] if not m.startswith(dataset_level)}
    assert {"R@50", "ngR@x10", "PR@20", "InstR", "R@inf"} <= image_metrics
    assert image_metrics <= set(table.column_names)
    assert metrics["provenance"]["metrics_version"] == METRICS_VERSION


def test_report_md_says_where_its_numbers_come_from(first_images_missing, stores, tmp_path):
    out = tmp_path / "out"
    proc = sgdask("evaluate", "--gt", stores.gt, "--pred", first_images_missing,
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    markdown = (out / "report.md").read_text()
    prov = json.loads((out / "metrics.json").read_text())["provenance"]
    # the files the stores were made from
    assert prov["gt"]["source"].endswith("psg.json")
    assert prov["submission"]["source"].endswith("sub.zip")
    tail = markdown.split("\n## Provenance\n\n", 1)[1].splitlines()
    assert tail[:3] == [
        f"- sgdask {sgdask_version}, protocol singlempo v{PROTOCOLS['singlempo'].version}, "
        f"metrics version {METRICS_VERSION}",
        f"- ground truth: {prov['gt']['source']} (content hash {prov['gt']['content_hash']})",
        f"- submission: {prov['submission']['source']} (content hash "
        f"{prov['submission']['content_hash']})"]
    assert re.fullmatch(r"- written \d{4}-\d\d-\d\d \d\d:\d\d UTC", tail[3])


def test_cached_report_reads_back_equal(first_images_missing, stores, tmp_path, client):
    """Item 1: a report read back from its files equals the report written."""
    out = tmp_path / "many"
    manifest = tmp_path / "many.yaml"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\nsubmissions:\n"
                        f"  - {{name: m, url: {first_images_missing}}}\n")
    fresh = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert fresh.returncode == 0, fresh.stderr
    fresh_table = pq.read_table(out / "m" / "per_image.parquet")
    cached = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert cached.returncode == 0 and "cached: m / singlempo" in cached.stderr
    assert pq.read_table(out / "m" / "per_image.parquet").equals(fresh_table)
    entry = next(p for p in (out / "cache").iterdir() if p.is_dir())
    report = Report.read(str(entry))
    assert [list(r) for r in report.per_image] == [fresh_table.column_names] * len(
        report.per_image)
    in_memory = evaluate(stores.gt, first_images_missing, client=client)
    assert report.per_image == in_memory.per_image
