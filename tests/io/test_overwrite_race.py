"""``--overwrite`` is atomic (issue 24): concurrent overwrites end with one complete store
(never an internal error, no store, or a mix of both), a failing overwrite leaves the old
store in place, and on object stores a concurrent overwrite is refused at once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sgdask.errors import SgdaskError
from sgdask.formats.sgbench import convert_submission
from sgdask.store.lock import LockHeld, exclusive_lock
from sgdask.store.store import StoreReader
from tests.helpers import run_cli

pytestmark = pytest.mark.slow


def sgdask(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sgdask", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def convert_args(tiny, submission: Path, out: Path) -> list[str]:
    return ["convert", str(submission), "--out", str(out), "--gt", tiny.gt, "--in-process",
            "--overwrite"]


def content_hash(store: Path) -> str:
    return json.loads((store / "manifest.json").read_text())["content_hash"]


def siblings(out: Path) -> list[str]:
    """What an overwrite may leave beside the store (temporary or replaced copies)."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f"{out.name}."))


@pytest.mark.timeout(240)
def test_concurrent_overwrites_leave_one_complete_store(tiny, tmp_path):
    out = tmp_path / "pred"
    subs = [tiny.variant(1), tiny.variant(2)]
    hashes = set()
    for sub in subs:  # each submission's content hash, converted alone
        alone = tmp_path / f"alone-{sub.stem}"
        convert_submission(str(sub), str(alone), tiny.gt)
        hashes.add(content_hash(alone))
    assert len(hashes) == 2
    convert_submission(str(tiny.paths.submission_zip), str(out), tiny.gt)
    for _ in range(3):
        procs = [sgdask(*convert_args(tiny, sub, out)) for sub in subs]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert "internal error" not in err and "Traceback" not in err, err
            if proc.returncode != 0:
                lines = [line for line in err.splitlines() if line.startswith("sgdask:")]
                assert proc.returncode == 2 and len(lines) == 1, err
                assert "another process replaced it while this one wrote it" in lines[0]
        assert any(p.returncode == 0 for p in procs)
        verify = run_cli("verify", str(out), timeout=120)
        assert verify.returncode == 0 and "intact" in verify.stdout, verify.stderr
        assert content_hash(out) in hashes
        assert siblings(out) == []


def test_failing_overwrite_keeps_the_old_store(tiny, tmp_path):
    """The new GT store fails while its parts are written (a PNG that does not decode, read
    by a part's task): the old store stays as it was."""
    out = tmp_path / "gt"
    masks = tmp_path / "masks"
    shutil.copytree(tiny.paths.masks_dir, masks)
    ingest = ["ingest-gt", str(tiny.paths.psg_json), "--masks", str(masks), "--out", str(out),
              "--in-process", "--overwrite"]
    assert run_cli(*ingest, timeout=120).returncode == 0
    manifest = (out / "manifest.json").read_bytes()
    sorted(masks.glob("*.png"))[-1].write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    proc = sgdask(*ingest)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.startswith("sgdask:")]
    assert proc.returncode == 2 and len(lines) == 1, err
    assert lines[0].startswith("sgdask: error: ") and ".png" in lines[0]
    assert "internal error" not in err and "Traceback" not in err
    assert (out / "manifest.json").read_bytes() == manifest
    StoreReader(str(out), kind="gt")
    assert siblings(out) == []


def test_overwrite_replaces_what_is_there(tiny, tmp_path):
    """Also a file or a directory that is not a store (as before: --overwrite means it)."""
    for what in ("file", "dir"):
        out = tmp_path / f"pred-{what}"
        if what == "file":
            out.write_text("not a store")
        else:
            (out / "junk").mkdir(parents=True)
        convert_submission(str(tiny.paths.submission_zip), str(out), tiny.gt, overwrite=True)
        StoreReader(str(out), kind="submission")
        assert siblings(out) == [] and not (out / "junk").exists()


def test_overwrite_on_s3_is_refused_while_another_holds_the_store(
        tiny, s3):
    out = s3.url(f"overwrite-{uuid.uuid4().hex}")  # the moto server is shared by the session
    convert_submission(str(tiny.paths.submission_zip), out, tiny.gt, s3.options)
    with exclusive_lock(f"{out}.lock", s3.options), pytest.raises(LockHeld) as refused:
        convert_submission(str(tiny.variant(1)), out, tiny.gt, s3.options, overwrite=True)
    assert "\n" not in str(refused.value)
    assert "another run writing this store is running" in str(refused.value)
    assert isinstance(refused.value, SgdaskError)
    StoreReader(out, s3.options, "submission")  # untouched
    manifest = convert_submission(str(tiny.variant(1)), out, tiny.gt, s3.options,
                                  overwrite=True)
    assert StoreReader(out, s3.options).manifest["content_hash"] == manifest["content_hash"]
    assert not s3.fs.exists(f"{out}.lock")


def test_gt_directory_without_manifest_is_one_clear_line(tiny, tmp_path):
    """``evaluate --gt DIR``: a directory is not taken for a psg.json ("Is a directory")."""
    gt = tmp_path / "half-copied-gt"
    (gt / "images").mkdir(parents=True)
    proc = sgdask("evaluate", "--gt", str(gt), "--pred", str(tiny.variant(0)))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert err.strip().splitlines() == [
        f"sgdask: error: {gt}: not a complete sgdask store (no manifest.json: wrong path, or a "
        "conversion that did not finish)"]
