"""Many models at once, the result cache, the registry and scheduled re-ranking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from sgdask.batch.many import ManyJob, load_manifest, run_many
from sgdask.batch.registry import submit
from sgdask.batch.rerank import rerank
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate
from sgdask.protocols import PROTOCOLS
from tests.helpers import BUCKET, rewrite_zip


@pytest.fixture(scope="module")
def three_submissions(dataset, stores, tmp_path_factory) -> list[tuple[str, str, str]]:
    """The synthetic submission plus two weaker variants (short lists, fewer images)."""
    root = tmp_path_factory.mktemp("three")

    def shorten(doc):
        for img in doc["images"]:
            img["triplets"], img["scores"] = img["triplets"][:10], img["scores"][:10]

    def drop_half(doc):
        doc["images"] = doc["images"][::2]

    subs = [("full", stores.pred, "singlempo,multimpo")]
    for name, edit in (("short", shorten), ("half", drop_half)):
        zip_path = rewrite_zip(dataset.submission_zip, root / f"{name}.zip", edit)
        convert_submission(str(zip_path), str(root / name), stores.gt)
        subs.append((name, str(root / name), "singlempo"))
    return subs


def test_many_equals_separate_runs_and_reads_gt_once(stores, client, three_submissions):
    job = ManyJob(stores.gt, three_submissions)
    outcome = run_many(job, client=client, log=lambda _: None)
    for name, url, protocols in three_submissions:
        for protocol in protocols.split(","):
            alone = evaluate(stores.gt, url, protocol=protocol, client=client)
            assert outcome.reports[name][protocol].metrics == alone.metrics
            assert outcome.reports[name][protocol].per_predicate == alone.per_predicate
    reads = Counter(outcome.gt_parts_read)
    manifest = json.loads(Path(stores.gt, "manifest.json").read_text())
    gt_parts = {p["name"] for p in manifest["parts"]}
    assert set(reads) == gt_parts and set(reads.values()) == {1}
    assert outcome.reports["full"]["singlempo"].metrics["mR@50"] > \
        outcome.reports["short"]["singlempo"].metrics["mR@50"]


def test_manifest_cache_skips_done_work(stores, client, three_submissions, tmp_path):
    manifest = tmp_path / "many.yaml"
    subs = "\n".join(f"  - {{name: {n}, url: {u}, protocols: [{p}]}}"
                     for n, u, p in three_submissions)
    manifest.write_text(f"gt: {stores.gt}\nout: {tmp_path / 'out'}\nsubmissions:\n{subs}\n")
    job = load_manifest(str(manifest))
    first = run_many(job, client=client, log=lambda _: None)
    assert len(first.evaluated) == 4 and not first.cached
    lines: list[str] = []
    second = run_many(job, client=client, log=lines.append)
    assert not second.evaluated and len(second.cached) == 4
    assert all(line.startswith("cached: ") for line in lines)
    for name in first.reports:
        for protocol, report in first.reports[name].items():
            assert second.reports[name][protocol].metrics == report.metrics
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {(r["submission"], r["protocol"]) for r in summary} == \
        {(n, p) for n, _, ps in three_submissions for p in ps.split(",")}


@pytest.fixture
def registry(dataset, stores, tmp_path, client):
    """A registry with two submissions, the better one not approved."""
    url = str(tmp_path / "registry")
    submit(str(dataset.submission_zip), url, stores.gt, "strong-model", approved=False,
           paper="https://example.org/paper", cluster=client)

    def shorten(doc):
        for img in doc["images"]:
            img["triplets"], img["scores"] = img["triplets"][:5], img["scores"][:5]

    weak = rewrite_zip(dataset.submission_zip, tmp_path / "weak.zip", shorten)
    submit(str(weak), url, stores.gt, "weak-model", approved=True, cluster=client)
    return url


def test_rerank_publishes_then_skips(registry, stores, tmp_path, client):
    out = str(tmp_path / "board")
    first = rerank(registry, stores.gt, out, client=client, log=lambda _: None)
    assert first.published and len(first.evaluated) == 4
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert [e["name"] for e in board] == ["strong-model", "weak-model"]
    assert [e["rank"] for e in board] == [1, 2]
    assert [e["approved"] for e in board] == [False, True]
    assert board[0]["metrics"]["mR@50"] > board[1]["metrics"]["mR@50"]
    assert "mR@50" in board[0]["delta"]
    assert [e["rank_range"] for e in board] == [[1, 1], [2, 2]]  # clearly apart
    assert [e.get("approved_rank_range") for e in board] == [None, [1, 1]]
    for e in board:
        low, high = e["intervals"]["mR@50"]
        assert low <= e["metrics"]["mR@50"] <= high
    html = (tmp_path / "board" / "leaderboard.html").read_text()
    assert "strong-model" in html and "board-approved" in html
    pointer = json.loads((tmp_path / "board" / "current.json").read_text())
    assert (tmp_path / "board" / pointer["board"] / "reports").is_dir()

    lines: list[str] = []
    second = rerank(registry, stores.gt, out, client=client, log=lines.append)
    assert second.published is None and not second.evaluated and len(second.cached) == 4
    assert any("up to date" in line for line in lines)
    assert json.loads((tmp_path / "board" / "current.json").read_text()) == pointer

    (tmp_path / "board" / "current.json").unlink()  # publish again: all from the cache
    third = rerank(registry, stores.gt, out, client=client, log=lambda _: None)
    assert third.published and not third.evaluated
    again = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert [(e["rank_range"], e["intervals"]) for e in again] == \
        [(e["rank_range"], e["intervals"]) for e in board]


def test_protocol_version_bump_reevaluates(registry, stores, tmp_path, client, monkeypatch):
    out = str(tmp_path / "board")
    rerank(registry, stores.gt, out, client=client, log=lambda _: None)
    for name in ("singlempo", "multimpo"):
        monkeypatch.setitem(PROTOCOLS, name, replace(PROTOCOLS[name], version="99.0"))
    bumped = rerank(registry, stores.gt, out, client=client, log=lambda _: None)
    assert len(bumped.evaluated) == 4 and not bumped.cached
    assert bumped.published
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert [e["rank_change"] for e in board] == [0, 0]


def test_dry_run_lists_without_evaluating(registry, stores, tmp_path):
    lines: list[str] = []
    outcome = rerank(registry, stores.gt, str(tmp_path / "board"), dry_run=True,
                     log=lines.append)
    assert outcome.published is None and not outcome.evaluated
    assert sum(line.startswith("would evaluate") for line in lines) == 4
    assert not (tmp_path / "board").exists()


def run_rerank_cli(registry: str, gt: str, out: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sgdask", "rerank", "--registry", registry, "--gt", gt,
         "--out", out, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


@pytest.mark.slow
def test_killed_rerank_keeps_previous_leaderboard(registry, dataset, stores, tmp_path,
                                                  client):
    out = tmp_path / "board"
    rerank(registry, stores.gt, str(out), client=client, log=lambda _: None)
    published = (out / "current.json").read_text()
    board = (out / "leaderboard.json").read_text()
    submit(str(dataset.submission_zip), registry, stores.gt, "third-model", cluster=client)
    proc = run_rerank_cli(registry, stores.gt, str(out))
    deadline = time.time() + 60
    while not (out / "lock.json").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert (out / "lock.json").exists(), "the rerank never took the lock"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (out / "current.json").read_text() == published
    assert (out / "leaderboard.json").read_text() == board
    # its lock.json is left behind; its process is gone, so the next rerank takes it over
    # at once (issue 24; before, it answered "another rerank is running" for hours)
    after = run_rerank_cli(registry, stores.gt, str(out))
    _, err = after.communicate(timeout=120)
    assert after.returncode == 0 and "(process gone)" in err, err


@pytest.mark.slow
def test_two_reranks_on_s3_publish_once(s3, dataset, stores, client):
    opts = s3.options
    registry = s3.url("registry")
    s3.fs.put(str(dataset.submission_zip), s3.url("raw", "submission.zip"))
    gt = s3.url("gt-for-board")
    s3.fs.put(stores.gt, gt, recursive=True)
    submit(s3.url("raw", "submission.zip"), registry, gt, "model-s3", storage_options=opts,
           cluster=client)
    args = [a for pair in (("--storage-option", f"endpoint_url={s3.endpoint}"),
                           ("--storage-option", "key=testing"),
                           ("--storage-option", "secret=testing"),
                           ("--scheduler", client.scheduler.address)) for a in pair]
    procs = [run_rerank_cli(registry, gt, s3.url("board"), *args) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    published = [err for _, err in results if "published" in err]
    assert len(published) == 1, results
    assert codes in ([0, 0], [0, 3]), results
    history = s3.fs.ls(f"{BUCKET}/board/history")
    assert len(history) == 1
