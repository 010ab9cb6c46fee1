"""`sgdask rerank` publishing: current.json is the truth; stale top-level copies of the
board are repaired on the next rerank."""

from __future__ import annotations

import json

from tests.processes import run_sgdask as sgdask


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
