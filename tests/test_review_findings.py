"""Review findings (issue 13): each test runs the `sgdask` command on real files and fails on
the code the review found (per-image columns lost, cache keys that collide, kernel bugs
reported as bad input, stale top-level leaderboard copies, match_labels unreachable)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgdask.pipeline import evaluate
from sgdask.report import Report
from tests.conftest import rewrite_zip

DIAGNOSTICS = ("masks_merged", "masks_dropped", "graph_triplets_removed", "ng_triplets_removed",
               "pred_instances", "pred_unmatched", "gt_instances", "gt_unmatched")


def sgdask(*args: str, env: dict[str, str] | None = None, timeout: float = 300
           ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sgdask", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


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
    image_metrics = {m for m in metrics["metrics"] if not m.startswith(("m", "IMR", "wIMR",
                                                                         "PRank"))}
    assert image_metrics <= set(table.column_names)


def test_cached_report_reads_back_equal(first_images_missing, stores, tmp_path, client):
    """Item 1: a report read back from its files equals the report written."""
    out = tmp_path / "many"
    manifest = tmp_path / "many.yaml"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\nsubmissions:\n"
                        f"  - {{name: m, url: {first_images_missing}}}\n")
    fresh = sgdask("evaluate-many", str(manifest))
    assert fresh.returncode == 0, fresh.stderr
    fresh_table = pq.read_table(out / "m" / "per_image.parquet")
    cached = sgdask("evaluate-many", str(manifest))
    assert cached.returncode == 0 and "cached: m / singlempo" in cached.stderr
    assert pq.read_table(out / "m" / "per_image.parquet").equals(fresh_table)
    entry = next(p for p in (out / "cache").iterdir() if p.is_dir())
    report = Report.read(str(entry))
    assert [list(r) for r in report.per_image] == [fresh_table.column_names] * len(
        report.per_image)
    in_memory = evaluate(stores.gt, first_images_missing, client=client)
    assert report.per_image == in_memory.per_image


def score_file(dataset, path: Path, seed: int) -> Path:
    """Random per-pair scores for every submitted image (different seeds: different lists)."""
    import zipfile

    with zipfile.ZipFile(dataset.submission_zip) as z:
        doc = json.loads(z.read("triplets.json"))
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"image_id": [], "subject": [], "object": [], "scores": []}
    for img in doc["images"]:
        n = len(img["annotation"])
        for s in range(min(n, 6)):
            for o in range(min(n, 6)):
                if s != o:
                    rows["image_id"].append(str(img["id"]))
                    rows["subject"].append(s)
                    rows["object"].append(o)
                    rows["scores"].append(rng.random(56).tolist())
    pq.write_table(pa.table(rows), path)
    return path


def test_score_files_are_part_of_the_submission_hash(dataset, stores, tmp_path):
    """Item 2: one ZIP, two score files -> two content hashes -> two evaluations."""
    urls = []
    for seed in (1, 2):
        store = str(tmp_path / f"store{seed}")
        scores = score_file(dataset, tmp_path / f"scores{seed}.parquet", seed)
        proc = sgdask("convert", str(dataset.submission_zip), "--out", store, "--gt",
                      stores.gt, "--in-process", "--from-scores", str(scores))
        assert proc.returncode == 0, proc.stderr
        urls.append(store)
    hashes = [json.loads(Path(u, "manifest.json").read_text())["content_hash"] for u in urls]
    assert hashes[0] != hashes[1]
    manifest = tmp_path / "many.yaml"
    out = tmp_path / "out"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\ncache: {tmp_path / 'cache'}\n"
                        f"submissions:\n  - {{name: a, url: {urls[0]}}}\n")
    assert sgdask("evaluate-many", str(manifest)).returncode == 0
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\ncache: {tmp_path / 'cache'}\n"
                        f"submissions:\n  - {{name: a, url: {urls[1]}}}\n")
    second = sgdask("evaluate-many", str(manifest))
    assert second.returncode == 0, second.stderr
    assert "cached:" not in second.stderr and "to evaluate: a / singlempo" in second.stderr


def test_stats_rewritten_in_place_misses_the_cache(dataset, stores, tmp_path):
    """Item 2: the cache key holds the statistics' content, not their URL."""
    stats = tmp_path / "stats.parquet"
    assert sgdask("stats", str(dataset.psg_json), "--out", str(stats)).returncode == 0
    manifest = tmp_path / "many.yaml"
    out = tmp_path / "out"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\nstats: {stats}\n"
                        f"submissions:\n  - {{name: m, url: {stores.pred}}}\n")
    first = sgdask("evaluate-many", str(manifest))
    assert first.returncode == 0, first.stderr
    before = json.loads((out / "m" / "metrics.json").read_text())["metrics"]
    table = pq.read_table(stats)
    pq.write_table(table.slice(0, len(table) // 3), stats)  # fewer seen types: more zero-shot
    second = sgdask("evaluate-many", str(manifest))
    assert second.returncode == 0, second.stderr
    assert "cached:" not in second.stderr
    after = json.loads((out / "m" / "metrics.json").read_text())["metrics"]
    assert after["zR@50"] != before["zR@50"]
    assert after["R@50"] == before["R@50"]


BUG = '''
import sgdask.kernels.image as image

def broken(*args, **kwargs):
    raise ValueError("simulated kernel bug")

image.instance_iou = broken
'''


def test_kernel_bug_is_an_internal_error(stores, tmp_path):
    """Item 3: a ValueError inside a kernel is a bug: exit 1, 'internal error', and the
    traceback (with the kernel's frame) under --debug. The bug is injected into the real
    worker processes with Dask's own preload mechanism."""
    plugin = tmp_path / "inject_bug.py"
    plugin.write_text(BUG)
    env = {**__import__("os").environ,
           "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(plugin)])}
    proc = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, env=env)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("sgdask: internal error: ValueError: simulated kernel bug"), \
        proc.stderr
    assert "--debug" in line
    debug = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--debug", env=env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "in broken" in debug.stderr and "simulated kernel bug" in debug.stderr


def test_match_labels_is_reachable_and_recorded(stores, tmp_path):
    """Item 6: --no-match-labels changes matching, is recorded, and keys the cache."""
    runs = {}
    for flag in ("--match-labels", "--no-match-labels"):
        out = tmp_path / flag.strip("-")
        proc = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, flag,
                      "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        runs[flag] = json.loads((out / "metrics.json").read_text())
    on, off = runs["--match-labels"], runs["--no-match-labels"]
    assert on["options"]["match_labels"] is True and off["options"]["match_labels"] is False
    assert off["metrics"]["InstR"] >= on["metrics"]["InstR"]
    assert off["metrics"]["InstR"] != on["metrics"]["InstR"]
    assert any("match-labels" in n for n in off["notes"])
    manifest = tmp_path / "many.yaml"
    body = f"gt: {stores.gt}\nout: {tmp_path / 'many'}\nsubmissions:\n" \
           f"  - {{name: m, url: {stores.pred}}}\n"
    manifest.write_text(body)
    assert sgdask("evaluate-many", str(manifest)).returncode == 0
    manifest.write_text("match_labels: false\n" + body)
    second = sgdask("evaluate-many", str(manifest))
    assert second.returncode == 0 and "cached:" not in second.stderr


def test_stale_top_level_copies_are_repaired(dataset, stores, tmp_path):
    """Item 7: current.json is the truth. A crash after the pointer swap and before the
    top-level copies leaves them stale; the next rerank rewrites them."""
    registry, out = str(tmp_path / "registry"), tmp_path / "board"
    for name in ("first", "second"):
        proc = sgdask("submit", str(dataset.submission_zip), "--registry", registry,
                      "--gt", stores.gt, "--name", name, "--in-process")
        assert proc.returncode == 0, proc.stderr
        proc = sgdask("rerank", "--registry", registry, "--gt", stores.gt, "--out", str(out))
        assert proc.returncode == 0, proc.stderr
    pointer = json.loads((out / "current.json").read_text())
    published = out / pointer["board"]
    old = out / pointer["previous"]
    # the state a crash between the swap and the copies leaves behind
    (out / "leaderboard.json").write_bytes((old / "leaderboard.json").read_bytes())
    (out / "leaderboard.html").unlink()
    proc = sgdask("rerank", "--registry", registry, "--gt", stores.gt, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "rewritten" in proc.stderr and "up to date" in proc.stderr
    assert (out / "leaderboard.json").read_bytes() == \
        (published / "leaderboard.json").read_bytes()
    assert len(json.loads((out / "leaderboard.json").read_text())) == 2
    html = (out / "leaderboard.html").read_text()
    assert f"{pointer['board']}/reports/" in html
    assert json.loads((out / "current.json").read_text()) == pointer
