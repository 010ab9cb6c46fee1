"""Differential test: sgdask --protocol sgbench against the real sgbench==1.0.0 package."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import sgbench.file

from sgdask.pipeline import evaluate

COMPARED = ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "InstR", "PRank")
KS = "20,50,100"


def reference(dataset, masks: bool) -> dict[str, float]:
    """sgbench 1.0.0's own numbers on the raw files."""
    out = sgbench.file.evaluate(
        anno_path=str(dataset.psg_json),
        pred_path=str(dataset.submission_zip if masks else dataset.submission_boxes),
        gt_seg_dir=str(dataset.masks_dir) if masks else None,
        workers=0,
    )
    return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("masks", [True, False], ids=["masks", "boxes"])
def test_sgbench_protocol_matches_reference(dataset, stores, client, masks):
    ref = reference(dataset, masks)
    assert all(math.isfinite(ref[m]) for m in COMPARED), ref
    gt, pred = (stores.gt, stores.pred) if masks else (stores.gt_boxes, stores.pred_boxes)
    report = evaluate(gt, pred, protocol="sgbench", ks=KS, client=client)
    assert report.diagnostics["images_missing"] > 0  # the data has images without prediction
    for metric in COMPARED:
        assert report.metrics[metric] == pytest.approx(ref[metric], abs=1e-9), metric


def test_sgbench_protocol_through_the_cli(dataset, stores, tmp_path):
    """The `sgdask evaluate` command (own LocalCluster) writes the same numbers to metrics.json."""
    ref = reference(dataset, masks=True)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "sgdask", "evaluate", "--gt", stores.gt, "--pred", stores.pred,
         "--protocol", "sgbench", "--k", KS, "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["protocol"]["name"] == "sgbench"
    for metric in COMPARED:
        assert metrics["metrics"][metric] == pytest.approx(ref[metric], abs=1e-9), metric
    assert (out / "per_predicate.parquet").exists() and (out / "per_image.parquet").exists()
    assert f"{100 * ref['R@50']:.2f}" in proc.stdout  # the printed table, in percent
