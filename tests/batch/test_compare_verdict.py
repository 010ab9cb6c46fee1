"""`compare` answers the question (issue 27, item 7): a verdict line per pair and headline
metric, `--ci LEVEL` (`--level` still works), submission files taken as `evaluate` takes
them, and a layout that fits 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgdask.cli import main
from sgdask.formats.psg import ingest_gt
from sgdask.formats.results import ResultsMethod
from sgdask.metrics import board_columns
from sgdask.pipeline import evaluate_protocols
from sgdask.report.compare_html import verdicts
from sgdask.stats.paired import Comparison
from sgdask.testing.psg import write_dataset
from tests.helpers import rewrite_zip
from tests.io.test_results import Lab, make_family


def cut_lists(doc):
    for image in doc["images"]:
        image["triplets"], image["scores"] = image["triplets"][:5], image["scores"][:5]


@pytest.fixture(scope="module")
def weak_zip(dataset, tmp_path_factory) -> str:
    """The synthetic submission as a second ZIP, every graph list cut to 5 triplets."""
    root = tmp_path_factory.mktemp("weak-zip")
    return str(rewrite_zip(dataset.submission_zip, root / "weak.zip", cut_lists))


def row(metric: str, delta: float, low: float, high: float, p: float) -> dict:
    return {"metric": metric, "a": "A", "b": "B", "delta": delta, "ci_low": low,
            "ci_high": high, "p_value": p, "p_holm": p}


def test_a_verdict_per_metric_says_who_wins_by_the_holm_p():
    comparison = Comparison({"level": 0.95}, [], [
        row("mR@50", 0.031, 0.012, 0.050, 0.004),
        row("R@50", -0.02, -0.04, -0.001, 0.004),
        row("mR@20", -0.0759, -0.1313, -0.0250, 0.0746),  # interval excludes 0, p does not
        row("PRank", -0.5, -0.8, -0.2, 0.001),  # lower is better: B wins
        row("ngR@50", 0.1, 0.05, 0.2, 0.001)], [], [])
    assert verdicts(comparison, ["mR@50", "R@50", "mR@20", "PRank"]) == [
        "B is better on mR@50: +3.10 points [+1.20, +5.00], p = 0.0040 (Holm)",
        "A is better on R@50: +2.00 points [+0.10, +4.00], p = 0.0040 (Holm)",
        "no significant difference on mR@20: B − A = -7.59 points [-13.13, -2.50], "
        "p = 0.0746 (Holm)",
        "B is better on PRank: -0.50 ranks [-0.80, -0.20], p = 0.0010 (Holm)"]


def test_compare_takes_zips_and_fits_80_columns(dataset, stores, weak_zip, client, tmp_path):
    out = tmp_path / "cmp"
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "sgdask", "compare", str(dataset.submission_zip), weak_zip,
         "--gt", stores.gt, "--ci", "0.9", "--resamples", "100", "--permutations", "100",
         "--scheduler", client.scheduler.address, "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = json.loads((out / "comparison.json").read_text())
    shown = [c for c in board_columns() if any(r["metric"] == c for r in rows)]
    cells = {cell.strip() for line in lines for cell in line.split("│")}
    assert set(shown) <= cells  # every metric name whole in its cell, never cut
    details = json.loads((out / "comparison_details.json").read_text())
    assert details["settings"]["level"] == 0.9
    comparison = Comparison(details["settings"], details["models"], rows, [], [])
    expected = verdicts(comparison, shown)
    assert len(expected) == len(shown)
    text = " ".join(proc.stdout.split())
    for verdict in expected:
        assert " ".join(verdict.split()) in text
    assert "submission.zip is better on mR@50" in text


def test_level_is_the_former_name_of_ci(dataset, stores, weak_zip, capsys):
    for flag in ("--ci", "--level"):
        with pytest.raises(SystemExit) as done:
            main(["compare", str(dataset.submission_zip), weak_zip, "--gt", stores.gt, flag,
                  "1.5"])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("sgdask: error: --ci: 1.5 is not a level between 0 and 1"), err
        assert err.count("\n") == 1
    assert Path(weak_zip).is_file()


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    """A small dataset for model result files (as tests/io/test_results.py builds it)."""
    root = tmp_path_factory.mktemp("compare-lab")
    data = write_dataset(root / "data", n_images=12, seed=11, height=64, width=96,
                         no_relation_fraction=0.1)
    ingest_gt(str(data.psg_json), str(root / "gt"), str(data.masks_dir), partition_size=4)
    return Lab(data, json.loads(data.psg_json.read_text()), str(root / "gt"))


def test_compare_takes_result_files_with_method(lab, client, tmp_path, capsys):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = make_family("psgtr", lab, tmp_path / "one", seed=1).pickle
    second = make_family("psgtr", lab, tmp_path / "two", seed=2).pickle
    out = tmp_path / "cmp"
    with pytest.raises(SystemExit) as done:
        main(["compare", str(first), str(second), "--method", "psgtr", "--gt", lab.gt,
              "--metrics", "mR@50,R@50", "--resamples", "50", "--permutations", "50",
              "--scheduler", client.scheduler.address, "--out", str(out)])
    assert done.value.code in (0, None), capsys.readouterr().err
    rows = {r["metric"]: r for r in json.loads((out / "comparison.json").read_text())}
    for path, side in ((first, "a_value"), (second, "b_value")):
        [report] = evaluate_protocols(lab.gt, str(path), "singlempo", client=client,
                                      method=ResultsMethod("psgtr")).values()
        for name in ("mR@50", "R@50"):  # compare's value: the terms summed in floats
            assert rows[name][side] == pytest.approx(report.metrics[name], rel=1e-12)
