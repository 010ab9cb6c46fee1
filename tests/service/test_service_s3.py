"""The benchmarking service on a moto S3 server (127.0.0.1): an HTTP upload streamed into an
``s3://`` registry, and a ZIP + sidecar dropped into ``REGISTRY/inbox/``, both ranked exactly
once while two `sgdask worker` processes poll the same registry."""

from __future__ import annotations

import json

import httpx
import pytest

from sgdask.service.tokens import add_token
from tests.helpers import AWS_ENV, BUCKET
from tests.helpers.servicekit import Proc, auth, upload, wait_final, wait_for

pytestmark = pytest.mark.slow


def records(s3, submission_id: str) -> list[dict]:
    folder = f"{BUCKET}/service-registry/status/{submission_id}"
    s3.fs.invalidate_cache()
    if not s3.fs.exists(folder):
        return []
    return [json.loads(s3.fs.cat_file(p)) for p in sorted(s3.fs.find(folder))]


def test_upload_and_inbox_on_s3_with_two_workers(s3, tiny, client, tmp_path):
    # own prefixes: moto keeps one state per process, shared with the other S3 tests
    gt = s3.url("service-gt")
    s3.fs.put(tiny.gt, gt, recursive=True)
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "s3-team", "participant")
    common = ["--registry", s3.url("service-registry"), "--gt", gt,
              "--out", s3.url("service-board"), "--tokens", str(tokens), *s3.cli_options()]
    server = Proc(["serve", *common, "--port", "0", "--no-worker"], tmp_path / "serve.log",
                  AWS_ENV)
    workers = [Proc(["worker", *common, "--scheduler", client.scheduler.address, "--poll",
                     "0.2"], tmp_path / f"worker-{i}.log", AWS_ENV) for i in range(2)]
    try:
        base = server.url()
        answer = upload(base, token, tiny.variant(2), "uploaded to s3")
        assert answer.status_code == 202, answer.text
        uploaded = answer.json()["id"]
        s3.fs.pipe_file(f"{BUCKET}/service-registry/inbox/dropped.zip",
                        tiny.variant(3).read_bytes())
        s3.fs.pipe_file(f"{BUCKET}/service-registry/inbox/dropped.meta.json", json.dumps(
            {"name": "dropped in the inbox", "paper": "https://example.org/inbox",
             "token": token}).encode())

        def listed() -> list[dict] | None:
            mine = httpx.get(f"{base}/api/submissions", headers=auth(token), timeout=30)
            docs = mine.json()
            return docs if len(docs) == 2 else None
        docs = wait_for(listed, 90, "the inbox submission to be registered", 0.3)
        dropped = next(d["id"] for d in docs if d["id"] != uploaded)
        for sid in (uploaded, dropped):
            assert wait_final(base, token, sid, 150)["status"] == "ranked"
    finally:
        for proc in (*workers, server):
            proc.stop()
    assert {d["name"] for d in docs} == {"uploaded to s3", "dropped in the inbox"}
    assert next(d for d in docs if d["id"] == dropped)["file"] == "dropped.zip"
    for sid in (uploaded, dropped):
        statuses = [r["status"] for r in records(s3, sid)]
        assert statuses == ["validating", "converting", "evaluating", "evaluated", "ranked"]
    s3.fs.invalidate_cache()
    assert s3.fs.find(f"{BUCKET}/service-registry/inbox") == []
    assert len(s3.fs.ls(f"{BUCKET}/service-registry/inbox-claims")) == 1
    assert len(s3.fs.ls(f"{BUCKET}/service-registry/entries")) == 2
    board = json.loads(s3.fs.cat_file(f"{BUCKET}/service-board/leaderboard.json"))
    assert sorted(r["submission_id"] for r in board) == sorted([uploaded, dropped])
    claimed_by = {json.loads(s3.fs.cat_file(p))["worker"]
                  for p in s3.fs.find(f"{BUCKET}/service-registry/inbox-claims")}
    assert len(claimed_by) == 1


def test_exclusive_create_has_one_winner_on_s3_and_disk(s3, tmp_path):
    """The primitive under claims and status records: 8 threads create the same object at
    once; exactly one succeeds and its bytes are the object's."""
    from concurrent.futures import ThreadPoolExecutor

    from sgdask.batch.registry import create_exclusive
    from sgdask.io.fs import filesystem

    for url in (s3.url("exclusive", "claim.json"), str(tmp_path / "exclusive" / "claim.json")):
        fs, path = filesystem(url, s3.options if url.startswith("s3://") else None)
        with ThreadPoolExecutor(8) as pool:
            won = list(pool.map(lambda i, fs=fs, path=path: create_exclusive(
                fs, path, f"writer {i}".encode()), range(8)))
        assert won.count(True) == 1, (url, won)
        assert fs.cat_file(path).decode() == f"writer {won.index(True)}"
