"""`sgdask rerank` publishing: current.json is the truth; stale top-level copies of the
board are repaired on the next rerank."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from sgdask.batch.registry import submit
from sgdask.batch.rerank import rerank
from tests.helpers import run_cli as sgdask


@pytest.mark.slow
def test_stale_top_level_copies_are_repaired(dataset, stores, client, tmp_path):
    """Item 7: current.json is the truth. A crash after the pointer swap and before the
    top-level copies leaves them stale; the next rerank rewrites them."""
    registry, out = str(tmp_path / "registry"), tmp_path / "board"
    for name in ("first", "second"):
        proc = sgdask("submit", str(dataset.submission_zip), "--registry", registry,
                      "--gt", stores.gt, "--name", name, "--in-process")
        assert proc.returncode == 0, proc.stderr
        proc = sgdask("rerank", "--registry", registry, "--gt", stores.gt, "--out", str(out),
                      "--scheduler", client.scheduler.address)
        assert proc.returncode == 0, proc.stderr
    pointer = json.loads((out / "current.json").read_text())
    published = out / pointer["board"]
    old = out / pointer["previous"]
    # the state a crash between the swap and the copies leaves behind
    (out / "leaderboard.json").write_bytes((old / "leaderboard.json").read_bytes())
    (out / "leaderboard.html").unlink()
    proc = sgdask("rerank", "--registry", registry, "--gt", stores.gt, "--out", str(out),
                  "--scheduler", client.scheduler.address)
    assert proc.returncode == 0, proc.stderr
    assert "rewritten" in proc.stderr and "up to date" in proc.stderr
    assert (out / "leaderboard.json").read_bytes() == \
        (published / "leaderboard.json").read_bytes()
    assert len(json.loads((out / "leaderboard.json").read_text())) == 2
    html = (out / "leaderboard.html").read_text()
    assert f"{pointer['board']}/reports/" in html
    assert json.loads((out / "current.json").read_text()) == pointer


def test_mask_and_box_submissions_are_ranked_on_separate_boards(tiny, client, tmp_path):
    """Issue 27 item 5: the same model as masks and as boxes gets rank 1 on two boards, each
    titled with its matching mode; the box model's better box numbers never outrank masks."""
    registry, out = str(tmp_path / "registry"), tmp_path / "board"
    for path, name in ((tiny.variant(2), "model (masks)"), (tiny.variant(5), "weaker (masks)"),
                       (tiny.paths.submission_boxes, "model (boxes)")):
        submit(str(path), registry, tiny.gt, name, approved=True, cluster=client)
    rerank(registry, tiny.gt, str(out), client=client, log=lambda _: None)
    board = json.loads((out / "leaderboard.json").read_text())
    assert [(r["matching"], r["rank"], r["approved_rank"]) for r in board] == \
        [("masks", 1, 1), ("masks", 2, 2), ("boxes", 1, 1)]
    assert [r["name"] for r in board] == ["model (masks)", "weaker (masks)", "model (boxes)"]
    assert board[0]["rank_range"][0] == 1 and board[2]["rank_range"] == [1, 1]  # alone
    table = pq.read_table(out / "leaderboard.parquet").to_pylist()
    assert [(r["matching"], r["rank"]) for r in table] == [("masks", 1), ("masks", 2),
                                                            ("boxes", 1)]
    html = (out / "leaderboard.html").read_text()
    for heading in ("public: mask matching", "approved: box matching"):
        assert f"<h2>{heading}</h2>" in html
    assert 'id="board-public-boxes"' in html and 'id="board-public"' in html
