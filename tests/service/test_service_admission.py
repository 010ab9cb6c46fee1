"""The challenge service under attack (issue 36): deadlines judged when an upload completes,
bounded upload, header and body times, exact admission at the limits, in-flight markers
judged by this server's own clock, registration that reads only the uploading team's
entries, and paged listings. The app runs on a real uvicorn on 127.0.0.1 (in a thread, or
as `sgdask serve` for the load test); uploads are streamed over raw sockets where a test
needs to hold one half-sent."""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import select
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from sgdask.batch.registry import STAMP_FORMAT, Entry, Registry, team_key
from sgdask.service.app import ServiceConfig
from sgdask.service.benchmark import load_benchmark
from sgdask.service.tokens import add_token
from sgdask.service.uploads import MarkerWatch
from tests.helpers.servicekit import Proc, app_in_thread, auth, entry_ids, upload, wait_for
from tests.service.test_challenge import Clock, at

ONE_PHASE = """\
title: admission
phases:
  - name: main
    gt: {gt}
    start: 2030-01-01T00:00:00Z
    end: 2030-02-01T00:00:00Z
    limits: {limits}
"""


@dataclass
class App:
    base: str
    clock: Clock
    registry: Path  # the phase's registry
    tokens: dict[str, str]
    log: list[str] = field(default_factory=list)

    def markers(self) -> list[Path]:
        folder = self.registry / "uploads" / ".inflight"
        return sorted(folder.glob("*.json")) if folder.is_dir() else []


@contextmanager
def app_on_uvicorn(tmp_path: Path, gt: str, limits: str, teams: tuple[str, ...] = ("team-a",),
                   now: str = "2030-01-10T00:00:00Z", header_timeout: float = 10,
                   **config: float) -> Iterator[App]:
    """A one-phase benchmark's app (no worker) on uvicorn in a thread, with its header
    timeout; what it logs is kept."""
    bench = tmp_path / "challenge.yaml"
    bench.write_text(ONE_PHASE.format(gt=gt, limits=limits))
    tokens_file = tmp_path / "tokens.json"
    tokens = {t: add_token(tokens_file, t, "participant") for t in teams}
    tokens["lab"] = add_token(tokens_file, "lab", "maintainer")
    registry, out = str(tmp_path / "registry"), str(tmp_path / "board")
    clock = Clock(at(now))
    app = App("", clock, tmp_path / "registry" / "phases" / "main", tokens)
    service = ServiceConfig(registry, out, tokens=str(tokens_file),
                            benchmark=load_benchmark(str(bench), registry, out), clock=clock,
                            **config)
    with app_in_thread(service, app.log.append, header_timeout) as base:
        app.base = base
        yield app


class RawUpload:
    """A multipart upload over a socket, sent in steps: the fields and the file's first
    ``first`` bytes at once, the rest when the test says; the answer read at the end."""

    def __init__(self, base: str, token: str, data: bytes, name: str = "raw",
                 first: int = 1024) -> None:
        host, port = base.removeprefix("http://").split(":")
        boundary = "r4wb0undary"
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n'
                f'{name}\r\n--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                'filename="raw.zip"\r\nContent-Type: application/zip\r\n\r\n').encode()
        body = head + data + f"\r\n--{boundary}--\r\n".encode()
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          f"Authorization: Bearer {token}\r\n"
                          f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode()
                          + body[:len(head) + first])
        self.rest = body[len(head) + first:]

    def send(self, size: int) -> None:
        chunk, self.rest = self.rest[:size], self.rest[size:]
        self.sock.sendall(chunk)

    def finish(self) -> tuple[int, dict]:
        """Send the rest (the server may have answered and closed already), then read the
        answer: (status, JSON body)."""
        with suppress(OSError):
            self.sock.sendall(self.rest)
        answer = http.client.HTTPResponse(self.sock)
        answer.begin()
        status, body = answer.status, json.loads(answer.read() or b"{}")
        self.sock.close()
        return status, body


def zip_bytes(tiny, pad: int = 0) -> bytes:
    """A valid submission ZIP's bytes (what the upload sniffer takes), ``pad`` bytes more."""
    return tiny.paths.submission_zip.read_bytes() + os.urandom(pad)


def status_of(app: App, token: str, submission_id: str) -> dict:
    answer = httpx.get(f"{app.base}/api/submissions/{submission_id}", headers=auth(token),
                       timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


# --- 2. deadlines by completion -------------------------------------------------------------

@pytest.mark.timeout(60)
def test_an_upload_that_completes_after_the_phase_ended_is_refused(tiny, tmp_path):
    """An upload started 3 s before the phase's end whose last bytes arrive 151 s after it
    is refused (403, the dates and the time it completed), nothing stored, its slot given
    back; one that completes in time is stamped with the moment it completed."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 5}") as app:
        token = app.tokens["team-a"]
        app.clock.now = at("2030-01-31T23:59:57Z")
        late = RawUpload(app.base, token, zip_bytes(tiny, 4096))
        wait_for(lambda: len(app.markers()) == 1, 30, "the upload to be admitted")
        app.clock.now = at("2030-02-01T00:02:31Z")
        status, body = late.finish()
        assert status == 403, body
        assert body["detail"] == (
            "phase main: has ended; it takes uploads from 2030-01-01T00:00:00Z to "
            "2030-02-01T00:00:00Z (UTC), it is 2030-02-01T00:02:31Z")
        assert not entry_ids(app.registry) and not app.markers()
        assert not list((app.registry / "uploads").glob("*.upload"))

        app.clock.now = at("2030-01-31T23:50:00Z")
        timely = RawUpload(app.base, token, zip_bytes(tiny, 4096))
        wait_for(lambda: len(app.markers()) == 1, 30, "the upload to be admitted")
        app.clock.now = at("2030-01-31T23:58:30.250000Z")
        status, body = timely.finish()
        assert status == 202, body
        assert status_of(app, token, body["id"])["submitted_at"] == \
            "2030-01-31T23:58:30.250000Z"


@pytest.mark.timeout(60)
def test_an_upload_past_its_upload_seconds_is_dropped_and_logged(tiny, tmp_path):
    """``limits.upload_seconds: 2``: an upload that keeps sending (never idle long enough
    for the body timeout) but is not complete after 2 s is answered 408, its connection
    closed, its slot given back, nothing stored; the log counts it."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 5, upload_seconds: 2}",
                        body_timeout=30) as app:
        started = time.monotonic()
        slow = RawUpload(app.base, app.tokens["team-a"], zip_bytes(tiny, 64 << 10))
        wait_for(lambda: len(app.markers()) == 1, 30, "the upload to be admitted")
        with suppress(OSError):  # until the server answers (then the rest is not sent)
            while time.monotonic() - started < 4 and slow.rest and \
                    not select.select([slow.sock], [], [], 0.2)[0]:
                slow.send(512)
        status, body = slow.finish()
        assert status == 408 and body["detail"] == (
            "file: the upload did not complete within 2 s (the phase's upload_seconds)")
        assert time.monotonic() - started < 10
        assert not entry_ids(app.registry) and not app.markers()
        assert not list((app.registry / "uploads" / ".partial").glob("*"))
        assert any("dropped a slow client: 127.0.0.1: file: the upload did not complete "
                   "within 2 s" in line and "(1 since the server started)" in line
                   for line in app.log), app.log
        fast = upload(app.base, app.tokens["team-a"], tiny.variant(1), "in time")
        assert fast.status_code == 202, fast.text


@pytest.mark.timeout(60)
def test_stalled_bodies_and_slow_headers_are_dropped_and_counted(tiny, tmp_path):
    """A body that sends nothing for the body timeout is answered 408 and closed; a
    connection whose request headers never complete is closed after the header timeout
    (slowloris); an idle keep-alive connection is not counted; the log counts both."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 5}", header_timeout=1,
                        body_timeout=1) as app:
        stalled = RawUpload(app.base, app.tokens["team-a"], zip_bytes(tiny, 4096))
        status, body = stalled_answer(stalled)
        assert status == 408 and body["detail"] == "file: the upload stalled (no bytes for 1 s)"
        assert not app.markers() and not entry_ids(app.registry)

        host, port = app.base.removeprefix("http://").split(":")
        loris = socket.create_connection((host, int(port)), timeout=30)
        loris.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: {host}\r\nX-A: ".encode())
        started = time.monotonic()
        assert loris.recv(1024) == b""                 # closed by the server
        assert 0.5 < time.monotonic() - started < 10
        loris.close()
        with httpx.Client() as client:                 # a keep-alive connection, idle
            assert client.get(f"{app.base}/healthz").status_code == 200
            time.sleep(1.5)
        drops = [line for line in app.log if line.startswith("dropped a slow client")]
        assert len(drops) == 2, app.log
        assert "request headers not complete within 1 s (2 since the server started)" in \
            drops[1]


def stalled_answer(stalled: RawUpload) -> tuple[int, dict]:
    """The answer to an upload that stops sending (the rest never sent)."""
    stalled.rest = b""
    return stalled.finish()


# --- 3. move keeps visibility and limits right ----------------------------------------------

TWO_PHASES = """\
title: move
phases:
  - name: validation
    gt: {gt}
    start: 2030-01-01T00:00:00Z
    end: 2030-02-01T00:00:00Z
  - name: test
    gt: {gt}
    start: 2030-02-01T00:00:00Z
    end: 2030-03-01T00:00:00Z
    limits: {{per_day: 2, total: 2}}
"""


@pytest.mark.timeout(90)
def test_move_keeps_hidden_flags_and_copies_do_not_count(tiny, tmp_path):
    """A team hides one of its submissions, a maintainer hides another: their copies in
    the next phase are hidden by the same hands (the team cannot undo the maintainer's) and
    stay off the board; a baseline stays a baseline; the copies do not count against the
    next phase's limits (the team's first two uploads there are accepted)."""
    bench = tmp_path / "challenge.yaml"
    bench.write_text(TWO_PHASES.format(gt=tiny.gt))
    tokens_file = tmp_path / "tokens.json"
    team, lab = add_token(tokens_file, "team-a", "participant"), \
        add_token(tokens_file, "lab", "maintainer")
    registry, out = str(tmp_path / "registry"), str(tmp_path / "board")
    clock = Clock(at("2030-01-10T00:00:00Z"))
    config = ServiceConfig(registry, out, tokens=str(tokens_file),
                           benchmark=load_benchmark(str(bench), registry, out), clock=clock)
    with app_in_thread(config) as base:
        ids = []
        for i in range(4):
            clock.now = at(f"2030-01-1{i}T00:00:00Z")
            sent = upload(base, team, tiny.variant(i), f"model {i}")
            assert sent.status_code == 202, sent.text
            ids.append(sent.json()["id"])

        def post(path: str, token: str, doc: dict) -> httpx.Response:
            return httpx.post(f"{base}/api/submissions/{path}", json=doc,
                              headers=auth(token), timeout=30)

        assert post(f"{ids[0]}/visibility", team, {"hidden": True}).status_code == 200
        assert post(f"{ids[1]}/visibility", lab, {"hidden": True}).status_code == 200
        assert post(f"{ids[2]}/baseline", lab, {"baseline": True}).status_code == 200
        clock.now = at("2030-02-02T00:00:00Z")
        moved = httpx.post(f"{base}/api/phases/validation/move", headers=auth(lab), timeout=30)
        assert moved.status_code == 200 and moved.json()["note"].startswith("moved 4 ")

        test = Registry(str(tmp_path / "registry" / "phases" / "test"))
        copies = {e.moved_from.split("/")[1]: e.submission_id for e in test.written_entries()}
        assert sorted(copies) == sorted(ids)
        assert test.hidden() == {copies[ids[0]]: True, copies[ids[1]]: True}
        assert test.visibility(copies[ids[0]])["by"] == "team:team-a"
        assert test.visibility(copies[ids[1]])["by"] == "maintainer:lab"
        assert test.baselines() == {copies[ids[2]]}
        undo = post(f"{copies[ids[1]]}/visibility", team, {"hidden": False})
        assert undo.status_code == 403
        assert post(f"{copies[ids[0]]}/visibility", team, {"hidden": False}).status_code == 200
        listed = httpx.get(f"{base}/api/submissions", headers=auth(team), timeout=30).json()
        assert {d["id"]: d["hidden"] for d in listed if d["phase"] == "test"} == {
            copies[ids[0]]: False, copies[ids[1]]: True, copies[ids[2]]: False,
            copies[ids[3]]: False}

        own = [upload(base, team, tiny.variant(10 + i), f"test {i}") for i in range(3)]
        assert [o.status_code for o in own] == [202, 202, 429], [o.text for o in own]
        assert "the limit of 2 submissions in total" in own[2].json()["detail"]


# --- 6. exact admission ---------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_twenty_concurrent_uploads_at_per_day_3_admit_exactly_3(tiny, tmp_path):
    """20 uploads of one team at once (2 MiB each, so refused bodies are still draining
    while the admitted ones complete): exactly 3 × 202 and 17 × 429, 3 entries, nothing
    lost, no marker left."""
    data = zip_bytes(tiny, 2 << 20)
    path = tmp_path / "big.zip"
    path.write_bytes(data)
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 3, concurrent: 0}") as app:
        barrier = threading.Barrier(20)

        def send(i: int) -> httpx.Response:
            barrier.wait()
            return upload(app.base, app.tokens["team-a"], path, f"model {i}")

        with ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(send, range(20)))
        codes = Counter(a.status_code for a in answers)
        assert codes == Counter({202: 3, 429: 17}), [a.text for a in answers]
        assert all("3 submissions per 24 hours" in a.json()["detail"]
                   for a in answers if a.status_code == 429)
        assert entry_ids(app.registry) == {a.json()["id"] for a in answers
                                           if a.status_code == 202}
        assert not app.markers()


@pytest.mark.timeout(120)
def test_a_concurrency_limit_of_5_admits_5(tiny, tmp_path):
    """10 uploads of one team streaming at once under ``concurrent: 5``: 5 hold a slot
    while they stream, the other 5 are refused and give their slot back at once; when all
    bodies have been sent, 5 × 202 and 5 × 429."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 20, concurrent: 5}") as app:
        held = []
        for i in range(10):
            held.append(RawUpload(app.base, app.tokens["team-a"], zip_bytes(tiny, 1 << 20),
                                  f"held {i}"))
            if i < 5:
                wait_for(lambda i=i: len(app.markers()) == i + 1, 30, f"upload {i} admitted")
        time.sleep(0.5)                                # the refused ones are refused by now
        assert len(app.markers()) == 5
        answers = [h.finish() for h in held]
        assert [s for s, _ in answers] == [202] * 5 + [429] * 5, answers
        assert "the limit of 5 at a time is reached" in answers[5][1]["detail"]
        assert len(entry_ids(app.registry)) == 5 and not app.markers()


@pytest.mark.timeout(60)
def test_a_refused_upload_gives_its_slot_back_before_its_body_ends(tiny, tmp_path):
    """``per_day: 1``: upload A streams; upload B of the same team is refused at once and
    gives its slot back while its body is still being sent; A then completes and is
    accepted (not "next upload allowed at +24 h"); B reads its 429."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 1}") as app:
        token = app.tokens["team-a"]
        first = RawUpload(app.base, token, zip_bytes(tiny, 1 << 20), "first")
        wait_for(lambda: len(app.markers()) == 1, 30, "the first upload admitted")
        second = RawUpload(app.base, token, zip_bytes(tiny, 1 << 20), "second")
        second.send(64 << 10)
        time.sleep(0.5)
        assert len(app.markers()) == 1                 # only the first's
        assert json.loads(app.markers()[0].read_text())["team"] == "team-a"
        status, body = first.finish()
        assert status == 202, body
        status, body = second.finish()
        assert status == 429 and "the limit of 1 submissions per 24 hours" in body["detail"]
        assert len(entry_ids(app.registry)) == 1


@pytest.mark.timeout(60)
def test_a_marker_from_a_host_an_hour_ahead_does_not_block_the_team(tiny, tmp_path):
    """A dead server's in-flight marker stamped an hour in the future (its clock was
    ahead) holds the team's one concurrent slot only until this server has seen it
    unchanged for a lease (1 s), not for the hour."""
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 5, concurrent: 1}", lease=1) as app:
        folder = app.registry / "uploads" / ".inflight"
        folder.mkdir(parents=True)
        ahead = (datetime.now(UTC) + timedelta(hours=1)).strftime(STAMP_FORMAT)
        sid = "20300110T000000000000-0123456789ab"
        (folder / f"{sid}.{team_key('team-a')}.json").write_text(json.dumps(
            {"submission_id": sid, "team": "team-a", "at": ahead, "server": "elsewhere-1",
             "beat": "b1"}))
        started = time.monotonic()
        sent = wait_for(lambda: (lambda r: r if r.status_code == 202 else None)(
            upload(app.base, app.tokens["team-a"], tiny.variant(1), "after the lease")),
            10, "the team's slot to be free", 0.3)
        assert time.monotonic() - started < 6
        assert sent.json()["id"] in entry_ids(app.registry)


def test_marker_watch_judges_beats_by_its_own_clock():
    """First seen: as old as the storage's modification time says; a changed beat counts
    for one lease from when it was seen; an unchanged one stops counting after a lease."""
    now = [100.0]
    watch = MarkerWatch(lambda: now[0])
    fresh, stale = datetime.now(UTC), datetime.now(UTC) - timedelta(seconds=90)
    assert watch.beating("m1", "b1", 60, fresh)
    assert not watch.beating("m2", "b1", 60, stale)
    now[0] = 159.0
    assert watch.beating("m1", "b1", 60)
    now[0] = 161.0
    assert not watch.beating("m1", "b1", 60)
    assert watch.beating("m1", "b2", 60)              # it beat again
    now[0] = 222.0
    assert not watch.beating("m1", "b2", 60)
    watch.forget({"m2"}, "m")
    assert set(watch.seen) == {"m2"}


# --- 4. registration in O(team), paged listings ---------------------------------------------

def write_entries(registry: Registry, count: int, teams: list[str], when: datetime,
                  prefix: str = "0") -> list[str]:
    """``count`` entries written through the registry's API (round robin over ``teams``,
    a few threads at once), submitted a second apart before ``when``; their ids."""
    def entry(i: int) -> Entry:
        at_ = when - timedelta(seconds=count - i)
        sid = f"{at_.strftime('%Y%m%dT%H%M%S%f')}-{prefix}{i:011x}"
        return Entry(sid, f"m{i}", registry.store_url(sid), "u", at_.strftime(STAMP_FORMAT),
                     False, None, "received", "", teams[i % len(teams)], "m.zip")

    entries = [entry(i) for i in range(count)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(registry.add, entries))
    return [e.submission_id for e in entries]


@pytest.mark.timeout(60)
def test_listings_page_and_old_registries_are_indexed_at_start(tiny, tmp_path):
    """``GET /api/submissions`` pages (``limit``, ``after``, a ``Link`` to the next page):
    a team's 250 submissions in pages of 100, 100 and 50, in order, none of another team;
    a maintainer pages through all; a bad limit is 400. Entries written before the team
    index existed are indexed when the server starts."""
    phase = tmp_path / "registry" / "phases" / "main"
    registry = Registry(str(phase))
    ids = write_entries(registry, 300, ["team-a"] * 5 + ["team-b"], at("2030-01-09T00:00:00Z"))
    old = ids[:6]
    for sid in old:  # as a registry written before the index: no index record
        entry = registry.entry(sid)
        (phase / "teams" / team_key(entry.team) / f"{sid}.json").unlink()
    with app_on_uvicorn(tmp_path, tiny.gt, "{per_day: 5}", teams=("team-a", "team-b")) as app:
        assert any(line == "indexed 6 entries of phase main by team" for line in app.log)
        team = auth(app.tokens["team-a"])
        url, pages = f"{app.base}/api/submissions", []
        while url:
            answer = httpx.get(url, headers=team, timeout=30)
            assert answer.status_code == 200, answer.text
            pages.append([d["id"] for d in answer.json()])
            url = answer.links.get("next", {}).get("url")
        assert [len(p) for p in pages] == [100, 100, 50]
        assert [sid for page in pages for sid in page] == \
            [sid for i, sid in enumerate(ids) if i % 6 != 5]
        everything = httpx.get(f"{app.base}/api/submissions?limit=1000",
                               headers=auth(app.tokens["lab"]), timeout=30)
        assert [d["id"] for d in everything.json()] == ids and "link" not in everything.headers
        for bad in ("limit=0", "limit=1001", "limit=x", "after=x",
                    f"after={ids[5]}"):                  # team-b's
            refused = httpx.get(f"{app.base}/api/submissions?{bad}", headers=team, timeout=30)
            assert refused.status_code == 400, bad


LOAD_BENCH = """\
title: load
phases:
  - name: main
    gt: {gt}
    limits: {{per_day: 3, concurrent: 0}}
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_one_team_flooding_does_not_slow_another(tiny, tmp_path):
    """5,000 registry entries of 100 teams; `sgdask serve` (a real uvicorn process). A
    team at its daily limit floods refused uploads from 4 connections; meanwhile other
    teams' uploads take at most twice their quiet time (medians of 5), and a team's
    `GET /api/submissions` stays quick. (Before the team index, with the global lock: 7.4 s
    quiet, 22 s flooded, the listing 3.4 s, on a loaded 2-core machine.)"""
    bench = tmp_path / "challenge.yaml"
    bench.write_text(LOAD_BENCH.format(gt=tiny.gt))
    tokens_file = tmp_path / "tokens.json"
    quiet = [add_token(tokens_file, f"quiet-{i}", "participant") for i in range(10)]
    flood = add_token(tokens_file, "flood", "participant")
    registry = Registry(str(tmp_path / "registry" / "phases" / "main"))
    now = datetime.now(UTC)
    started = time.monotonic()
    write_entries(registry, 4997, [f"team-{i}" for i in range(90)]
                  + [f"quiet-{i}" for i in range(10)], now - timedelta(days=2))
    write_entries(registry, 3, ["flood"], now, prefix="f")       # at its limit today
    built = time.monotonic() - started
    proc = Proc(["serve", "--registry", str(tmp_path / "registry"), "--out",
                 str(tmp_path / "board"), "--benchmark", str(bench), "--tokens",
                 str(tokens_file), "--port", "0", "--no-worker"], tmp_path / "serve.log")
    path = tiny.variant(1)
    client = httpx.Client(timeout=60)  # one connection: the server's time, not the client's
    try:
        base = proc.url()

        def timed_upload(token: str) -> float:
            start = time.monotonic()
            with path.open("rb") as f:
                answer = client.post(f"{base}/api/submissions", headers=auth(token),
                                     data={"name": "timed"},
                                     files={"file": (path.name, f, "application/zip")})
            assert answer.status_code == 202, answer.text
            return time.monotonic() - start

        timed_upload(quiet[9])                                   # warm up
        quiet_times = [timed_upload(quiet[i]) for i in range(5)]
        start = time.monotonic()
        listed = client.get(f"{base}/api/submissions", headers=auth(quiet[0]))
        listing = time.monotonic() - start
        assert listed.status_code == 200 and len(listed.json()) == 51

        ctx = multiprocessing.get_context("spawn")
        stop, results = ctx.Event(), ctx.Queue()
        flooder = ctx.Process(target=flood_refused, args=(base, flood, str(path), stop, results))
        flooder.start()
        try:
            first = results.get(timeout=60)                      # the flood is under way
            assert first == 429, first
            flooded_times = [timed_upload(quiet[i]) for i in range(5, 9)] + \
                [timed_upload(quiet[0])]
        finally:
            stop.set()
            refused = results.get(timeout=60)
            flooder.join(60)
        assert set(refused) == {429}, refused
        quiet_median, flooded_median = (statistics.median(quiet_times),
                                        statistics.median(flooded_times))
        print(f"5,000 entries built in {built:.1f} s; upload quiet {quiet_median * 1000:.0f} "
              f"ms, flooded {flooded_median * 1000:.0f} ms ({sum(refused.values())} refused "
              f"uploads); GET /api/submissions {listing * 1000:.0f} ms")
        assert flooded_median <= 2 * quiet_median, (quiet_times, flooded_times)
        assert listing < 1.0
    finally:
        client.close()
        proc.stop()


def flood_refused(base: str, token: str, path: str, stop, results) -> None:
    """In a process of its own (the test's client keeps its own CPU): 4 connections sending
    uploads the server refuses, 150 each at most, until ``stop``; puts the first answer's
    status as soon as there is one, then the count of each status."""
    statuses: Counter = Counter()
    lock = threading.Lock()

    def one_connection() -> None:
        with httpx.Client(timeout=30) as client:
            for _ in range(150):
                if stop.is_set():
                    return
                with open(path, "rb") as f:
                    answer = client.post(f"{base}/api/submissions", headers=auth(token),
                                         data={"name": "flood"},
                                         files={"file": ("f.zip", f, "application/zip")})
                with lock:
                    if not statuses:
                        results.put(answer.status_code)
                    statuses[answer.status_code] += 1

    threads = [threading.Thread(target=one_connection) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(statuses)
