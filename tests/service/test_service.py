"""The benchmarking service over HTTP: real `sgdask serve` processes on 127.0.0.1, the queue
worker on the session's LocalCluster, the registry on local disk (S3: test_service_s3.py,
browser: test_service_browser.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from sgdask.cli import main
from sgdask.service.tokens import add_token, read_tokens, token_hash
from tests.helpers.servicekit import (
    Proc,
    auth,
    entry_ids,
    history,
    status,
    stored_uploads,
    upload,
    wait_final,
    wait_for,
)

TEAMS = ("team-a", "team-b", "team-c", "team-d")
DAILY = 5


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A tokens file: four participant teams, a team for the limit test, a maintainer."""
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    teams = {t: add_token(path, t, "participant") for t in (*TEAMS, "limited", "xss", "hider")}
    teams["lab"] = add_token(path, "lab", "maintainer")
    return path, teams


@pytest.fixture(scope="module")
def server(tiny, tokens, client, tmp_path_factory):
    """`sgdask serve` with its worker on the session cluster; registry and board on disk."""
    root = tmp_path_factory.mktemp("service")
    proc = Proc(["serve", "--registry", str(root / "registry"), "--gt", tiny.gt,
                 "--out", str(root / "board"), "--tokens", str(tokens[0]), "--port", "0",
                 "--scheduler", client.scheduler.address, "--max-upload-mb", "1",
                 "--daily-limit", str(DAILY), "--poll", "0.2", "--lease", "10"],
                root / "serve.log")
    try:
        yield proc.url(), root, tokens[1]
    finally:
        proc.stop()
        print(proc.text()[-4000:])


# --- tokens ------------------------------------------------------------------------------

def cli_exit(*args: str) -> int:
    """Run the sgdask command in this process; its exit code."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code


def test_tokens_cli(tmp_path, capsys):
    path = tmp_path / "tokens.json"
    assert cli_exit("tokens", "add", str(path), "--team", "vision-lab", "--role",
                    "maintainer") == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    assert token.startswith("sgd_") and len(token) > 40
    assert token not in path.read_text()                  # only the hash is stored
    [record] = read_tokens(path)
    assert (record["team"], record["role"], record["sha256"]) == \
        ("vision-lab", "maintainer", token_hash(token))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert cli_exit("tokens", "add", str(path), "--team", "other") == 0
    assert cli_exit("tokens", "revoke", str(path), "vision-lab") == 0
    assert [r["team"] for r in read_tokens(path)] == ["other"]
    capsys.readouterr()
    assert cli_exit("tokens", "add", str(path), "--team", "x", "--role", "admin") == 2
    assert "--role 'admin'" in capsys.readouterr().err


# --- refusals: nothing is stored ------------------------------------------------------------

def test_missing_wrong_and_insufficient_tokens(server, tiny):
    base, root, teams = server
    before = entry_ids(root / "registry")
    zip_path = tiny.variant(0)
    missing = upload(base, None, zip_path, "no-token")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "token: missing" in missing.json()["detail"]
    wrong = upload(base, "sgd_not-a-token", zip_path, "wrong-token")
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.json()["detail"]
    approved = upload(base, teams["team-a"], zip_path, "not-a-maintainer", board="approved")
    assert approved.status_code == 403 and "maintainers only" in approved.json()["detail"]
    bad_link = upload(base, teams["team-a"], zip_path, "bad-link", paper="javascript:alert(1)")
    assert bad_link.status_code == 400 and "paper" in bad_link.json()["detail"]
    assert entry_ids(root / "registry") == before
    assert httpx.get(f"{base}/api/submissions", timeout=10).status_code == 401


def test_a_misspelt_board_or_field_is_refused_with_the_nearest_name(server, tiny):
    base, root, teams = server
    before, uploads = entry_ids(root / "registry"), stored_uploads(root / "registry")
    zip_path = tiny.variant(0)
    board = upload(base, teams["team-a"], zip_path, "typo", board="publc")
    assert board.status_code == 400
    assert board.json()["detail"].startswith("board: 'publc' is not a board (did you mean "
                                             "'public'?)")
    field = upload(base, teams["team-a"], zip_path, "typo", papr="https://example.org")
    assert field.status_code == 400
    assert field.json()["detail"].startswith("unexpected form field 'papr' (did you mean "
                                             "'paper'?)")
    assert entry_ids(root / "registry") == before
    assert stored_uploads(root / "registry") == uploads


def test_upload_over_the_limit_is_413_and_stores_nothing(server):
    base, root, teams = server
    before, uploads = entry_ids(root / "registry"), stored_uploads(root / "registry")
    big = os.urandom(3 << 19)  # 1.5 MiB, over --max-upload-mb 1
    declared = httpx.post(f"{base}/api/submissions", headers=auth(teams["team-a"]),
                          data={"name": "too-big"}, files={"file": ("big.zip", big)},
                          timeout=60)
    assert declared.status_code == 413, declared.text
    assert "upload limit of 1 MiB" in declared.json()["detail"]

    def chunks():  # no Content-Length: the limit is found while streaming
        boundary = b"sgdasktestboundary"
        yield (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="name"\r\n\r\n'
               b"too-big-streamed\r\n--" + boundary +
               b'\r\nContent-Disposition: form-data; name="file"; filename="big.zip"\r\n'
               b"Content-Type: application/zip\r\n\r\n")
        for start in range(0, len(big), 1 << 16):
            yield big[start:start + (1 << 16)]
        yield b"\r\n--" + boundary + b"--\r\n"

    streamed = httpx.post(f"{base}/api/submissions", content=chunks(), timeout=60, headers={
        **auth(teams["team-a"]),
        "Content-Type": "multipart/form-data; boundary=sgdasktestboundary"})
    assert streamed.status_code == 413, streamed.text
    assert entry_ids(root / "registry") == before
    assert stored_uploads(root / "registry") == uploads
    partial = root / "registry" / "uploads" / ".partial"
    assert not partial.exists() or not any(partial.iterdir())


def test_a_file_it_can_never_score_is_415_at_upload(server, tiny, tmp_path):
    """A PNG or a psg.json is refused at upload time (not 202, then rejected later)."""
    base, root, teams = server
    before, uploads = entry_ids(root / "registry"), stored_uploads(root / "registry")
    png = tmp_path / "model.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    answer = upload(base, teams["team-b"], png, "a png")
    assert answer.status_code == 415, answer.text
    assert answer.json()["detail"] == ("model.png: a PNG image, not a submission (expected "
                                       "an SGBench ZIP or JSON)")
    answer = upload(base, teams["team-b"], tiny.paths.psg_json, "ground truth")
    assert answer.status_code == 415, answer.text
    assert answer.json()["detail"].startswith("psg.json: a ground-truth file (psg.json), not")
    assert str(tmp_path) not in answer.text
    assert entry_ids(root / "registry") == before
    assert stored_uploads(root / "registry") == uploads


def test_form_needs_the_csrf_token(server, tiny):
    base, root, teams = server
    before = entry_ids(root / "registry")
    with httpx.Client(base_url=base, timeout=30) as browser:
        form = browser.get("/submit")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        assert browser.cookies["sgdask_csrf"] == csrf
        assert "httponly" in form.headers["set-cookie"].lower()
        assert "samesite=strict" in form.headers["set-cookie"].lower()
        with tiny.variant(0).open("rb") as f:
            forged = browser.post("/submit", data={"csrf": "forged-value-from-elsewhere",
                                                   "token": teams["team-a"], "name": "forged"},
                                  files={"file": ("x.zip", f)})
        assert forged.status_code == 403 and "csrf" in forged.text
        cross_site = browser.post("/login", data={"csrf": csrf, "token": teams["team-a"]},
                                  headers={"Sec-Fetch-Site": "cross-site"})
        assert cross_site.status_code == 403
        assert "sgdask_token" not in browser.cookies
    assert entry_ids(root / "registry") == before


# --- the queue -------------------------------------------------------------------------------

@pytest.mark.slow
def test_twenty_concurrent_uploads_from_four_teams(server, tiny):
    """20 uploads at once, five per team: 20 entries, none lost, each evaluated once and
    ranked once; the board holds all 20; a sixth upload of a team is over the daily limit."""
    base, root, teams = server
    registry = root / "registry"
    jobs = [(TEAMS[i % 4], i) for i in range(20)]
    paths = {i: tiny.variant(i) for _, i in jobs}

    def send(job: tuple[str, int]) -> httpx.Response:
        team, i = job
        return upload(base, teams[team], paths[i], f"{team} model {i}",
                      paper=f"https://example.org/{team}/{i}")

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(send, jobs))
    assert [a.status_code for a in answers] == [202] * 20, [a.text for a in answers]
    ids = [a.json()["id"] for a in answers]
    assert len(set(ids)) == 20 and set(ids) <= entry_ids(registry)
    assert all(a.json()["status"] == "received" for a in answers)
    assert [a.json()["url"] for a in answers] == [f"{base}/submissions/{i}" for i in ids]

    docs = [wait_final(base, teams[team], sid, 150)
            for (team, _), sid in zip(jobs, ids, strict=True)]
    assert [d["status"] for d in docs] == ["ranked"] * 20, docs
    for doc, (team, _) in zip(docs, jobs, strict=True):
        assert doc["team"] == team and doc["rank"] is not None and "mR@50" in doc["metrics"]
        assert "test-subset" in [w["code"] for w in doc["lint"]]  # 10 of PSG's test images
    for sid in ids:                                    # one claim, one evaluation, one rank
        records = history(registry, sid)
        assert [r["status"] for r in records] == [
            "validating", "converting", "evaluating", "evaluated", "ranked"], records
        assert sorted(map(tuple, records[3]["evaluated"])) == [(sid, "multimpo"),
                                                               (sid, "singlempo")]
    assert len(list((registry / "cache").glob("*/entry.json"))) == 40
    page = httpx.get(f"{base}/submissions/{ids[0]}", timeout=30).text
    assert '<ul class="lint" id="lint"><li>' in page
    assert "<li>test-subset: the GT has 10 images; the PSG test set" in page
    board = httpx.get(f"{base}/api/leaderboard", timeout=30).json()
    assert Counter(r["submission_id"] for r in board if r["submission_id"] in ids) == \
        Counter(ids)
    published = json.loads((root / "board" / "leaderboard.json").read_text())
    assert board == published

    mine = httpx.get(f"{base}/api/submissions", headers=auth(teams["team-b"]), timeout=30)
    assert {d["id"] for d in mine.json()} == {sid for (t, _), sid in zip(jobs, ids, strict=True)
                                              if t == "team-b"}
    over = upload(base, teams["team-a"], paths[0], "one too many")
    assert over.status_code == 429, over.text
    assert "per 24 hours" in over.json()["detail"] and int(over.headers["retry-after"]) > 0


def test_daily_limit_gives_the_next_allowed_time(server, tiny):
    base, _, teams = server
    garbage = tiny.root / "garbage.json"
    garbage.write_text("{not json")
    first = upload(base, teams["limited"], garbage, "attempt 0")
    assert first.status_code == 202
    for i in range(1, DAILY):
        assert upload(base, teams["limited"], garbage, f"attempt {i}").status_code == 202
    refused = upload(base, teams["limited"], garbage, "attempt 5")
    assert refused.status_code == 429
    body = refused.json()
    first_at = datetime.strptime(status(base, teams["limited"], first.json()["id"])
                                 ["submitted_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    next_at = datetime.strptime(body["next_allowed_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC)
    assert abs(next_at - (first_at + timedelta(hours=24))) < timedelta(seconds=1)
    assert body["next_allowed_at"] in body["detail"]
    assert 23 * 3600 < int(refused.headers["retry-after"]) <= 24 * 3600
    # rejected uploads count; the reason is the validation message
    doc = wait_final(base, teams["limited"], first.json()["id"], 60)
    assert doc["status"] == "rejected"
    assert doc["errors"] and doc["errors"][0].startswith("error: garbage.json: not valid JSON")


def test_html_payload_is_shown_as_text(server, tiny):
    base, _, teams = server
    name = '<script>alert("name")</script><img src=x onerror=alert(1)>'
    paper = 'https://example.org/?q="><script>alert("paper")</script>'
    answer = upload(base, teams["xss"], tiny.variant(0), name, paper=paper)
    assert answer.status_code == 202, answer.text
    sid = answer.json()["id"]
    assert status(base, teams["xss"], sid)["name"] == name       # JSON keeps the raw text
    page = httpx.get(f"{base}/submissions/{sid}", timeout=30).text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;name&quot;)&lt;/script&gt;&lt;img src=x" in page
    assert 'href="https://example.org/?q=&quot;&gt;&lt;script&gt;' in page


@pytest.mark.slow
def test_hidden_results_leave_the_board(server, tiny):
    """A team hides its ranked result: others get 404 and the board drops it; a maintainer
    hides another team's result, which that team then cannot show again."""
    base, _, teams = server
    answer = upload(base, teams["hider"], tiny.variant(0), "to be hidden")
    assert answer.status_code == 202, answer.text
    sid = answer.json()["id"]
    assert wait_final(base, teams["hider"], sid, 120)["status"] == "ranked"

    def on_board() -> bool:
        rows = httpx.get(f"{base}/api/leaderboard", timeout=30).json()
        return sid in [r["submission_id"] for r in rows]

    def set_hidden(token: str, hidden: bool) -> httpx.Response:
        return httpx.post(f"{base}/api/submissions/{sid}/visibility", headers=auth(token),
                          json={"hidden": hidden}, timeout=30)

    assert on_board()
    assert set_hidden(teams["team-a"], True).status_code == 403   # not theirs
    assert set_hidden(teams["hider"], True).json()["hidden"] is True
    assert httpx.get(f"{base}/api/submissions/{sid}", timeout=30).status_code == 404
    assert httpx.get(f"{base}/api/submissions/{sid}", headers=auth(teams["team-a"]),
                     timeout=30).status_code == 404
    assert status(base, teams["hider"], sid)["hidden"] is True    # the team still sees it
    wait_for(lambda: not on_board(), 60, "the board to drop the hidden result", 0.3)
    assert set_hidden(teams["hider"], False).json()["hidden"] is False
    wait_for(on_board, 60, "the board to show the result again", 0.3)
    assert set_hidden(teams["lab"], True).json()["hidden"] is True  # a maintainer
    refused = set_hidden(teams["hider"], False)
    assert refused.status_code == 403 and "may not change" in refused.json()["detail"]


@pytest.mark.slow
def test_submit_cli_waits_for_the_result(server, tiny, tmp_path):
    base, _, teams = server
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sgdask", "submit", *args],
                              capture_output=True, text=True, timeout=180,
                              env={**os.environ, "SGDASK_TOKEN": teams["lab"]})

    done = cli(str(tiny.variant(0)), "--server", base, "--name", "cli model", "--approved",
               "--wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"ranked #\d+, mR@50 \d+\.\d\d", done.stdout), done.stdout
    assert "evaluating" in done.stderr
    uploaded = re.match(r"uploaded (\S+): received -> ", done.stdout).group(1)
    steps = [line.split(": ", 1)[1] for line in done.stderr.splitlines()
             if line.startswith(f"{uploaded}: ")]
    assert steps[0] == "received" and steps[-1] == "ranked", steps  # every step, as the docs say
    both = cli(str(tiny.variant(0)), "--server", base, "--registry", str(tmp_path),
               "--name", "x")
    assert both.returncode == 2
    assert both.stderr.strip() == ("sgdask: error: submit: give exactly one of --registry "
                                   "URL or --server URL")
    rejected = cli(str(tiny.broken()), "--server", base, "--name", "broken cli model",
                   "--wait")
    assert rejected.returncode == 2, rejected.stdout + rejected.stderr
    submission_id = re.match(r"uploaded (\S+): ", rejected.stdout).group(1)
    *before, verdict = rejected.stderr.strip().splitlines()
    assert verdict == f"sgdask: error: {submission_id}: rejected"
    assert "error: broken.zip:" in before[-1]  # the submission's errors, before the verdict


# --- crashes -----------------------------------------------------------------------------------

def multipart_head(boundary: str, name: str) -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="big.zip"\r\nContent-Type: application/zip\r\n\r\n').encode()


@pytest.mark.slow
def test_server_killed_mid_upload_leaves_nothing(tiny, tokens, tmp_path):
    """SIGKILL while the file streams in: no entry, no upload, no store; a restarted
    server (and worker) on the same registry sees nothing."""
    registry = tmp_path / "registry"
    args = ["serve", "--registry", str(registry), "--gt", tiny.gt, "--out",
            str(tmp_path / "board"), "--tokens", str(tokens[0]), "--port", "0", "--no-worker"]
    proc = Proc(args, tmp_path / "serve.log")
    try:
        host, port = proc.url().removeprefix("http://").split(":")
        head = multipart_head("b0undary", "killed mid-upload")
        body_size = len(head) + (4 << 20)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                         f"Authorization: Bearer {tokens[1]['team-a']}\r\n"
                         "Content-Type: multipart/form-data; boundary=b0undary\r\n"
                         f"Content-Length: {body_size}\r\n\r\n".encode() + head)
            sock.sendall(os.urandom(1 << 20))
            partial = registry / "uploads" / ".partial"
            wait_for(lambda: partial.is_dir() and any(
                p.stat().st_size > 0 for p in partial.iterdir()), 30,
                "the upload to reach the registry")
            proc.signal(signal.SIGKILL)
            proc.proc.wait(timeout=30)
        assert entry_ids(registry) == set()
        assert stored_uploads(registry) == []
        assert not (registry / "stores").exists()
    finally:
        proc.kill()
    again = Proc(args, tmp_path / "serve-again.log")
    try:
        listing = httpx.get(f"{again.url()}/api/submissions",
                            headers=auth(tokens[1]["team-a"]), timeout=30)
        assert listing.status_code == 200 and listing.json() == []
    finally:
        again.stop()


@pytest.mark.slow
def test_worker_killed_mid_evaluation_is_retried_and_ranked_once(tiny, tokens, client,
                                                                 tmp_path):
    """An inbox submission; the first worker is SIGKILLed while the entry is `evaluating`;
    a second worker takes it over once the first one's lease has expired, and it is ranked
    exactly once."""
    registry, board = tmp_path / "registry", tmp_path / "board"
    args = ["worker", "--registry", str(registry), "--gt", tiny.gt, "--out", str(board),
            "--tokens", str(tokens[0]), "--scheduler", client.scheduler.address,
            "--poll", "0.2", "--lease", "2"]
    inbox = registry / "inbox"
    inbox.mkdir(parents=True)
    done: set[str] = set()
    for attempt in range(3):  # scoring finished before the kill landed: try a new entry
        (inbox / f"m{attempt}.zip").write_bytes(tiny.variant(30 + attempt).read_bytes())
        (inbox / f"m{attempt}.meta.json").write_text(json.dumps(
            {"name": f"resilient {attempt}", "token": tokens[1]["team-c"]}))
        first = Proc(args, tmp_path / f"worker-{attempt}.log")
        try:
            sid = wait_for(lambda: next(iter(entry_ids(registry) - done), None), 90,
                           "the inbox to be picked up")
            wait_for(lambda sid=sid: "evaluating" in [r["status"] for r in
                                                      history(registry, sid)],
                     90, "evaluation to start", interval=0.005)
            first.signal(signal.SIGKILL)
        finally:
            first.kill()
        done.add(sid)
        if [r["status"] for r in history(registry, sid)][-1] == "evaluating":
            break
    else:
        pytest.fail("scoring always finished before the worker could be killed")
    second = Proc(args, tmp_path / "worker-retry.log")
    try:
        records = wait_for(lambda: (h := history(registry, sid)) and h[-1]["status"] in (
            "ranked", "failed") and h, 120, "the retried entry to be ranked")
    finally:
        second.stop()
    assert second.proc.returncode == 0, second.text()  # SIGTERM: a clean stop
    statuses = [r["status"] for r in records]
    assert statuses[-1] == "ranked" and statuses.count("ranked") == 1, statuses
    claims = [r for r in records if r["status"] == "validating"]
    assert [c["attempt"] for c in claims] == [1, 2]
    assert claims[0]["worker"] != claims[1]["worker"]
    # the killed worker's heartbeat stays (it ages out); the stopped one removed its own, so
    # anything it held would be taken over at once instead of after the lease
    assert (registry / "workers" / f"{claims[0]['worker']}.json").exists()
    assert not (registry / "workers" / f"{claims[1]['worker']}.json").exists()
    rows = json.loads((board / "leaderboard.json").read_text())
    assert [r["submission_id"] for r in rows].count(sid) == 1
    assert not list(inbox.iterdir())


def test_retry_limit_ends_in_failed(tiny, client, tmp_path):
    """An entry that keeps failing for a reason that is not the submission's (here: the GT
    store is missing) is queued again, then `failed` after --max-attempts claims; an entry
    whose worker died at the last attempt is `failed` without another try."""
    from sgdask.batch.registry import Entry, Registry, utc_now
    from sgdask.service.queue import new_id, upload_url
    from sgdask.service.worker import Worker, WorkerConfig

    registry = Registry(str(tmp_path / "registry"))

    def queued(name: str) -> str:
        sid = new_id(utc_now())
        target = Path(upload_url(registry, sid))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tiny.variant(0).read_bytes())
        registry.add(Entry(sid, name, registry.store_url(sid), str(target), utc_now(), False,
                           None, "received", "", "team-a", "model.zip"))
        return sid

    config = WorkerConfig(registry.url, str(tmp_path / "no-gt"), str(tmp_path / "board"),
                          max_attempts=2, lease=1)
    worker = Worker(config, client, log=lambda _: None)
    sid = queued("unlucky")
    worker.cycle()
    assert [r["status"] for r in history(tmp_path / "registry", sid)] == [
        "validating", "received"]
    assert "no-gt" in history(tmp_path / "registry", sid)[-1]["retry_reason"]
    worker.cycle()
    records = history(tmp_path / "registry", sid)
    assert [r["status"] for r in records] == ["validating", "received", "validating", "failed"]
    assert records[-1]["errors"][0].startswith("gave up after 2 attempts: StoreError: ")

    dead = queued("abandoned")
    for seq, state in enumerate(["validating", "evaluating", "validating", "evaluating"], 1):
        assert registry.advance(dead, seq, state, worker="gone-worker",
                                **({"attempt": seq // 2 + 1} if state == "validating" else {}))
    worker.cycle()
    records = history(tmp_path / "registry", dead)
    assert records[-1]["status"] == "failed"
    assert records[-1]["errors"] == [
        "gave up after 2 attempts: worker gone-worker stopped while evaluating"]


def test_total_limit_and_what_counts():
    """Total limit: no next time; failed submissions do not count, rejected ones do;
    maintainers are not limited; the daily window is rolling."""
    from sgdask.batch.registry import Entry
    from sgdask.service.limits import LimitReached, Limits, check_limits
    from sgdask.service.queue import Submission
    from sgdask.service.tokens import Account

    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)

    def sub(hours_ago: float, state: str) -> Submission:
        at = (now - timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        entry = Entry("x", "m", "u", "s", at, False, None, "received", "", "lab", None)
        return Submission(entry, [{"status": state}])

    team, boss = Account("lab", "participant"), Account("lab", "maintainer")
    subs = [sub(30, "ranked"), sub(20, "rejected"), sub(1, "failed")]
    check_limits(team, subs, Limits(daily=2, total=3), now)      # 2 count, 1 in 24 h
    with pytest.raises(LimitReached) as total:
        check_limits(team, subs, Limits(daily=None, total=2), now)
    assert total.value.next_allowed is None and "2 submissions in total" in str(total.value)
    with pytest.raises(LimitReached) as daily:
        check_limits(team, [*subs, sub(2, "ranked")], Limits(daily=2, total=None), now)
    assert daily.value.next_allowed == now + timedelta(hours=4)  # the 20-hour-old one ages out
    check_limits(boss, [*subs, sub(2, "ranked")], Limits(daily=1, total=1), now)


def test_steps_list_every_shown_status_once_in_order():
    """A poller that misses statuses between two polls still reports each from `steps`."""
    from sgdask.batch.registry import Entry
    from sgdask.service.queue import Submission

    entry = Entry("s1", "m", "u", "upload", "2026-01-01T00:00:00Z", True, None, "received", "h")
    records = ["received", "validating", "converting", "evaluating", "evaluated", "ready",
               "ranked"]
    sub = Submission(entry, [{"status": s} for s in records])
    assert sub.steps == ["received", "validating", "converting", "evaluating", "ranked"]
    assert Submission(entry, []).steps == ["received"]
    as_stored = [{"status": s} for s in ("validating", "converting", "evaluating", "ranked")]
    assert Submission(entry, as_stored).steps == ["received", "validating", "converting",
                                                  "evaluating", "ranked"]
