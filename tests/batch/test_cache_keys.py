"""What keys the result cache of `evaluate-many`: the score files of a submission (part of
its content hash), the training statistics' content (not their URL) and --match-labels.
Each test runs the `sgdask` command on real files, its evaluations on the session's cluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import run_cli as sgdask


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


def test_score_files_are_part_of_the_submission_hash(dataset, stores, client, tmp_path):
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
    assert sgdask("evaluate-many", str(manifest), "--scheduler",
                  client.scheduler.address).returncode == 0
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\ncache: {tmp_path / 'cache'}\n"
                        f"submissions:\n  - {{name: a, url: {urls[1]}}}\n")
    second = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert second.returncode == 0, second.stderr
    assert "cached:" not in second.stderr and "to evaluate: a / singlempo" in second.stderr


def test_stats_rewritten_in_place_misses_the_cache(dataset, stores, client, tmp_path):
    """Item 2: the cache key holds the statistics' content, not their URL."""
    stats = tmp_path / "stats.parquet"
    assert sgdask("stats", str(dataset.psg_json), "--out", str(stats)).returncode == 0
    manifest = tmp_path / "many.yaml"
    out = tmp_path / "out"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\nstats: {stats}\n"
                        f"submissions:\n  - {{name: m, url: {stores.pred}}}\n")
    first = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert first.returncode == 0, first.stderr
    before = json.loads((out / "m" / "metrics.json").read_text())["metrics"]
    table = pq.read_table(stats)
    pq.write_table(table.slice(0, len(table) // 3), stats)  # fewer seen types: more zero-shot
    second = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert second.returncode == 0, second.stderr
    assert "cached:" not in second.stderr
    after = json.loads((out / "m" / "metrics.json").read_text())["metrics"]
    assert after["zR@50"] != before["zR@50"]
    assert after["R@50"] == before["R@50"]


def test_match_labels_is_reachable_and_recorded(stores, client, tmp_path):
    """Item 6: --no-match-labels changes matching, is recorded, and keys the cache."""
    runs = {}
    for flag in ("--match-labels", "--no-match-labels"):
        out = tmp_path / flag.strip("-")
        proc = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, flag,
                      "--out", str(out), "--scheduler", client.scheduler.address)
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
    assert sgdask("evaluate-many", str(manifest), "--scheduler",
                  client.scheduler.address).returncode == 0
    manifest.write_text("match_labels: false\n" + body)
    second = sgdask("evaluate-many", str(manifest), "--scheduler", client.scheduler.address)
    assert second.returncode == 0 and "cached:" not in second.stderr
