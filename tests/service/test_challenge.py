"""Challenges (issue 29): a benchmark file's phases, their dates and per-phase limits, on a
real uvicorn on 127.0.0.1. The dates are tested through the clock the app reads (set by the
test, no sleeping); `sgdask serve --benchmark` runs as a real process with its workers on the
session's cluster."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgdask.batch.registry import Entry, Registry
from sgdask.batch.rerank import rerank
from sgdask.cli import main
from sgdask.errors import InputError
from sgdask.formats.sgbench import convert_submission
from sgdask.service.app import ServiceConfig
from sgdask.service.benchmark import Phase, load_benchmark
from sgdask.service.inbox import pick_inbox
from sgdask.service.limits import Limits
from sgdask.service.tokens import TokenBook, add_token
from tests.helpers import ROOT
from tests.helpers.servicekit import (
    Proc,
    app_in_thread,
    auth,
    entry_ids,
    upload,
    wait_final,
    wait_for,
)
from tests.service.test_service_hygiene import HeldUpload

TWO_PHASES = """\
title: PSG challenge
phases:
  - name: validation
    gt: {gt}
    start: 2030-01-01T00:00:00Z
    end: 2030-02-01T00:00:00Z
    limits: {{per_day: 1, per_month: 2}}
  - name: test
    gt: {gt}
    start: 2030-02-01T00:00:00Z
    end: 2030-02-15T00:00:00Z
    boards: [public]
    visibility: private
    limits: {{per_day: 5, total: 2, concurrent: 1}}
"""


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@dataclass
class Clock:
    """The time the app reads; the test moves it."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Site:
    base: str
    clock: Clock
    registry: Path
    token: str
    maintainer: str


@pytest.fixture
def site(tiny, tmp_path) -> Iterator[Site]:
    """The app of a two-phase benchmark file on uvicorn in a thread (uploads only)."""
    benchmark = tmp_path / "challenge.yaml"
    benchmark.write_text(TWO_PHASES.format(gt=tiny.gt))
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a", "participant")
    maintainer = add_token(tokens, "lab", "maintainer")
    registry, out = str(tmp_path / "registry"), str(tmp_path / "board")
    clock = Clock(at("2029-12-31T23:59:59Z"))
    config = ServiceConfig(registry, out, tokens=str(tokens),
                           benchmark=load_benchmark(str(benchmark), registry, out), clock=clock)
    with app_in_thread(config) as base:
        yield Site(base, clock, tmp_path / "registry", token, maintainer)


def test_uploads_follow_each_phases_dates_and_limits(site, tiny):
    def send(i: int, **fields: str) -> httpx.Response:
        return upload(site.base, site.token, tiny.variant(i), f"model {i}", **fields)

    early = send(1)                                  # before the first phase
    assert early.status_code == 403
    assert early.json()["detail"] == (
        "phase validation: has not started; it takes uploads from 2030-01-01T00:00:00Z to "
        "2030-02-01T00:00:00Z (UTC), it is 2029-12-31T23:59:59Z")
    site.clock.now = at("2030-01-10T12:00:00Z")
    assert send(1).status_code == 202                # during validation: the current phase
    assert send(2).status_code == 429                # validation's per_day of 1
    ahead = send(2, phase="test")                    # test has not started
    assert ahead.status_code == 403 and "2030-02-01T00:00:00Z" in ahead.json()["detail"]
    assert len(entry_ids(site.registry / "phases" / "validation")) == 1
    site.clock.now = at("2030-01-12T12:00:00Z")
    assert send(3, phase="validation").status_code == 202
    site.clock.now = at("2030-01-20T12:00:00Z")
    month = send(4, phase="validation")              # validation's per_month of 2
    assert month.status_code == 429 and "per 30 days" in month.json()["detail"]

    site.clock.now = at("2030-02-01T00:00:00Z")      # validation ended, test began
    approved = upload(site.base, site.maintainer, tiny.variant(5), "m", board="approved")
    assert approved.status_code == 400                       # test feeds the public board only
    assert approved.json()["detail"] == "board: phase test feeds only the public board(s)"
    held = HeldUpload(site.base, site.token, "held")   # streaming into test
    flight = site.registry / "phases" / "test" / "uploads" / ".inflight"
    wait_for(lambda: len(list(flight.glob("*.json"))) == 1, 30, "an upload in flight")
    capped = send(5)                                 # test's concurrent of 1
    assert capped.status_code == 429
    assert "the limit of 1 at a time is reached" in capped.json()["detail"]
    held.close()
    wait_for(lambda: not list(flight.glob("*.json")), 30, "the stalled upload to end")
    accepted = send(5)
    assert accepted.status_code == 202
    doc = httpx.get(accepted.json()["url"].replace("/submissions/", "/api/submissions/"),
                    headers={"Authorization": f"Bearer {site.token}"}, timeout=30).json()
    assert doc["phase"] == "test"
    assert send(6).status_code == 202
    total = send(7)                                  # test's total of 2
    assert total.status_code == 429 and "2 submissions in total" in total.json()["detail"]
    late = send(7, phase="validation")
    assert late.status_code == 403 and late.json()["detail"].startswith(
        "phase validation: has ended; it takes uploads from 2030-01-01T00:00:00Z to "
        "2030-02-01T00:00:00Z (UTC)")
    site.clock.now = at("2030-03-01T00:00:00Z")
    assert send(8).status_code == 403
    assert [len(entry_ids(site.registry / "phases" / p)) for p in ("validation", "test")] \
        == [2, 2]
    whoami = httpx.get(f"{site.base}/api/whoami",
                       headers={"Authorization": f"Bearer {site.token}"}, timeout=30).json()
    assert [(p["name"], p["open"]) for p in whoami["phases"]] == \
        [("validation", False), ("test", False)]
    assert whoami["phases"][0]["limits"]["monthly"] == 2


@pytest.mark.parametrize(("text", "fragment"), [
    ("phases: []", "phases: must contain at least 1 items"),
    ("phases:\n  - {name: Val, gt: g}", "phases[0].name"),
    ("phases:\n  - {name: a, gt: g, limits: {per_week: 3}}", "phases[0].limits"),
    ("phases:\n  - {name: a, gt: g, start: 2030-02-01T00:00:00Z, end: 2030-01-01T00:00:00Z}",
     "phases[0].end: 2030-01-01T00:00:00Z is not after start"),
    ("phases:\n  - {name: a, gt: g}\n  - {name: a, gt: h}", "phases[1].name: 'a' names two"),
    ("phases:\n  - {name: a, gt: g, start: 'next monday'}", "phases[0].start"),
    ("phases:\n  - {name: a, gt: g, headline: mR@55}",
     "phases[0].headline: 'mR@55' is not a board column (did you mean 'mR@50'?)"),
    ("phases:\n  - {name: a, gt: g, board: {columns: [R@50, AP]}}",
     "phases[0].board.columns[1]: 'AP' is not a board column"),
    ("phases:\n  - {name: a, gt: g, protocols: [singlemop]}", "phases[0].protocols[0]"),
    ("phases:\n  - {name: a, gt: g, board: {direction: {PRank: down}}}",
     "phases[0].board.direction.PRank"),
    ("phases:\n  - {name: a, gt: g, board: {direction: {mR@5: lower}}}",
     "phases[0].board.direction.mR@5: 'mR@5' is not a board column"),
    ("phases:\n  - {name: a, gt: g, upload: scores}", "phases[0].upload"),
])
def test_a_bad_benchmark_file_is_one_line_naming_file_and_field(tmp_path, text, fragment):
    path = tmp_path / "bench.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_benchmark(str(path), "registry", "board")
    line = err.value.render("cli")
    assert "\n" not in line and line.startswith(str(path)) and fragment in line, line


def test_serve_refuses_a_bad_benchmark_file_before_listening(tmp_path, capsys):
    path = tmp_path / "bench.yaml"
    path.write_text("phases:\n  - {name: a, gt: g, boards: [secret]}\n")
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--registry", str(tmp_path / "r"), "--out", str(tmp_path / "o"),
              "--benchmark", str(path), "--port", "0"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert str(path) in err and "phases[0].boards[0]" in err and "Traceback" not in err


@dataclass
class Served:
    base: str
    root: Path
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def served(tiny, client, tmp_path_factory) -> Iterator[Served]:
    """`sgdask serve --benchmark` as a real process, its workers on the session's cluster: a
    closed phase, an open one under sgbench2, an open one under sgbpytorch taking a
    submission with its score file, an open public one and an open private one (ending in
    2999)."""
    root = tmp_path_factory.mktemp("served")
    benchmark = root / "challenge.yaml"
    benchmark.write_text(f"""title: three phases
phases:
  - {{name: old, gt: {tiny.gt}, start: 2000-01-01T00:00:00Z, end: 2001-01-01T00:00:00Z}}
  - {{name: sgb, gt: {tiny.gt}, protocols: [sgbench2], board: {{direction: {{mR@50: lower}}}}}}
  - {{name: scored, gt: {tiny.gt}, protocols: [sgbpytorch], upload: submission+scores,
      scores: {{rank_by: triplet, ng_limit: 100}}}}
  - name: open
    gt: {tiny.gt}
    start: 2000-01-01T00:00:00Z
    board: {{columns: [R@50, mR@50, PRank], meta: [method, external_data], intervals: false}}
  - {{name: test, gt: {tiny.gt}, end: 2999-01-01T00:00:00Z, visibility: private,
      selection: chosen}}
""")
    path = root / "tokens.json"
    tokens = {team: add_token(path, team, "participant") for team in ("team-a", "team-b")}
    tokens["lab"] = add_token(path, "lab", "maintainer")
    proc = Proc(["serve", "--registry", str(root / "registry"), "--out",
                 str(root / "board"), "--benchmark", str(benchmark), "--tokens",
                 str(path), "--port", "0", "--scheduler", client.scheduler.address,
                 "--poll", "0.2"], root / "serve.log")
    try:
        yield Served(proc.url(), root, tokens)
    finally:
        proc.stop()
        print(proc.text()[-3000:])


@pytest.fixture(scope="module")
def open_model(served, tiny) -> str:
    """team-a's submission to the open phase, with metadata, ranked."""
    sent = upload(served.base, served.tokens["team-a"], tiny.variant(1), "phase model",
                  phase="open", method="Two-stage <b>", external_data="no")
    assert sent.status_code == 202
    return sent.json()["id"]


@pytest.mark.slow
def test_serve_benchmark_ranks_each_phase_on_its_own_board(served, tiny, open_model):
    """The open phase's upload is ranked on the phase's board (OUT/NAME), the page shows
    each phase under its name and dates; the closed phase refuses with its dates."""
    base, token, root = served.base, served.tokens["team-a"], served.root
    closed = upload(base, token, tiny.variant(1), "m", phase="old")
    assert closed.status_code == 403
    assert "2000-01-01T00:00:00Z to 2001-01-01T00:00:00Z" in closed.json()["detail"]
    doc = wait_final(base, token, open_model, 180)
    assert doc["status"] == "ranked" and doc["phase"] == "open" and doc["rank"] == 1
    assert (root / "board" / "open" / "leaderboard.json").is_file()
    assert not (root / "board" / "old" / "leaderboard.json").exists()
    rows = httpx.get(f"{base}/api/leaderboard?phase=open", timeout=30).json()
    assert [r["name"] for r in rows] == ["phase model"]
    page = httpx.get(base + "/", timeout=30).text
    assert 'id="phase-old"' in page and 'id="phase-open"' in page
    assert 'id="board-open-public"' in page and "phase model" in page
    assert httpx.get(f"{base}/api/leaderboard?phase=nope", timeout=30).status_code == 404


PRIVATE = "phase test: scores are private until the phase ends (2999-01-01T00:00:00Z)"


@pytest.fixture(scope="module")
def private_submission(served, tiny) -> str:
    """A submission of team-a to the private phase, ranked."""
    sent = upload(served.base, served.tokens["team-a"], tiny.variant(2), "hidden test model",
                  phase="test")
    assert sent.status_code == 202
    sid = sent.json()["id"]
    assert wait_final(served.base, served.tokens["team-a"], sid, 180)["status"] == "ranked"
    return sid


def test_a_private_phase_answers_carry_no_score_for_participants(served, private_submission):
    """Over HTTP: a ranked submission of the private phase shows its status and nothing
    scored (no metric, rank or report) to its team and to anyone; maintainers see it all."""
    base, team, lab = served.base, served.tokens["team-a"], served.tokens["lab"]
    sid = private_submission
    doc = wait_final(base, team, sid, 30)
    assert doc["status"] == "ranked" and doc["phase"] == "test"
    assert doc["rank"] is None and "metrics" not in doc and "report" not in doc
    for token in (None, team, served.tokens["team-b"]):
        board = httpx.get(f"{base}/api/leaderboard?phase=test", headers=auth(token), timeout=30)
        assert board.status_code == 403 and board.json()["detail"] == PRIVATE
    listed = httpx.get(f"{base}/api/submissions", headers=auth(team), timeout=30).json()
    assert all("metrics" not in d and d["rank"] is None for d in listed if d["phase"] == "test")
    assert httpx.get(f"{base}/reports/{sid}", timeout=30).status_code == 404
    assert httpx.get(f"{base}/boards/test/public.csv", timeout=30).status_code == 403
    status_html = httpx.get(f"{base}/submissions/{sid}", timeout=30).text
    assert 'id="metrics"' not in status_html and "mR@50" not in status_html
    assert PRIVATE in status_html and f"/reports/{sid}" not in status_html
    page = httpx.get(base + "/", timeout=30).text
    assert "hidden test model" not in page and 'id="note-test"' in page
    assert not (served.root / "registry" / "phases" / "test" / "actions").exists()

    seen = httpx.get(f"{base}/api/submissions/{sid}", headers=auth(lab), timeout=30).json()
    assert seen["rank"] == 1 and "mR@50" in seen["metrics"] and seen["report"]
    rows = httpx.get(f"{base}/api/leaderboard?phase=test", headers=auth(lab), timeout=30)
    assert [r["name"] for r in rows.json()] == ["hidden test model"]


@pytest.mark.slow
def test_a_private_phase_in_chromium_and_the_maintainers_reveal(
        served, private_submission, chromium_page, tmp_path):
    """In the browser: the team sees its status without scores; the maintainer sees the
    board and reveals it; then the team sees its scores. The reveal is logged."""
    base, page, sid = served.base, chromium_page, private_submission

    def sign_in(token: str) -> None:
        page.goto(f"{base}/login")
        page.fill("#token", token)
        page.click("form.upload button[type=submit]")
        page.wait_for_url(f"{base}/mine")

    sign_in(served.tokens["team-a"])
    page.goto(f"{base}/submissions/{sid}")
    assert page.locator("#status").get_attribute("data-status") == "ranked"
    assert page.locator("#metrics").count() == 0
    assert page.locator("#private").inner_text() == PRIVATE + "."
    assert page.locator("#baseline").count() == 0                  # maintainers only
    page.click("#choose")                                            # the `chosen` rule
    page.wait_for_url(f"{base}/submissions/{sid}")
    chosen = served.root / "registry" / "phases" / "test" / "chosen" / "team-a"
    assert [json.loads(p.read_text())["submission_id"] for p in chosen.glob("*.json")] == [sid]
    assert page.goto(f"{base}/reports/{sid}").status == 404
    page.goto(base + "/")
    assert page.locator("#note-test").count() == 1
    assert page.locator("#board-test-public").count() == 0
    assert page.locator("#reveal-test").count() == 0

    sign_in(served.tokens["lab"])
    page.goto(f"{base}/submissions/{sid}")
    assert page.locator("#baseline").count() == 1 and page.locator("#metrics").count() == 1
    page.goto(base + "/")
    assert page.locator("#board-test-public tbody tr", has_text="hidden test model").count() == 1
    page.click("#reveal-test")
    page.wait_for_url(f"{base}/")
    assert page.locator("#reveal-test").count() == 0
    log = sorted((served.root / "registry" / "phases" / "test" / "actions" / "host")
                 .glob("*.json"))
    assert [json.loads(p.read_text())["by"] for p in log] == ["maintainer:lab"]

    sign_in(served.tokens["team-a"])
    page.goto(f"{base}/submissions/{sid}")
    assert page.locator("#metrics").count() == 1 and page.locator("#private").count() == 0
    page.goto(base + "/")
    assert page.locator("#board-test-public tbody tr", has_text="hidden test model").count() == 1
    page.screenshot(path=str(tmp_path / "revealed.png"), full_page=True)


def test_a_private_phase_is_revealed_when_it_ends(site):
    """The clock passes the private phase's end: its board is no longer refused."""
    def board() -> httpx.Response:
        return httpx.get(f"{site.base}/api/leaderboard?phase=test", timeout=30)

    site.clock.now = at("2030-02-14T23:59:59Z")
    assert board().status_code == 403
    site.clock.now = at("2030-02-15T00:00:00Z")
    assert board().json() == {"detail": "no leaderboard has been published yet"}


def test_the_example_challenge_file_is_valid():
    example = ROOT / "jobs" / "examples" / "challenge.yaml"
    benchmark = load_benchmark(str(example), "registry", "board")
    assert [(p.name, p.visibility) for p in benchmark.phases] == \
        [("validation", "public"), ("test", "private")]


@pytest.mark.slow
def test_exports_equal_the_page_and_baselines_stand_outside(
        served, tiny, open_model, chromium_page, tmp_path):
    """The open phase's board (its columns from the benchmark file, metadata included) read
    in Chromium equals its CSV and JSON exports; a maintainer's baseline is shown unranked;
    choosing is refused where the phase selects every submission."""
    base, team, lab = served.base, served.tokens["team-b"], served.tokens["lab"]
    assert wait_final(base, team, open_model, 180)["status"] == "ranked"
    sent = upload(base, team, tiny.variant(3), "a baseline", phase="open")
    sid = sent.json()["id"]
    assert wait_final(base, team, sid, 180)["status"] == "ranked"
    baseline = f"{base}/api/submissions/{sid}/baseline"
    refused = httpx.post(baseline, json={"baseline": True}, headers=auth(team), timeout=30)
    assert refused.status_code == 403
    assert httpx.post(baseline, json={"baseline": True}, headers=auth(lab),
                      timeout=30).status_code == 200
    choose = httpx.post(f"{base}/api/submissions/{sid}/choose", headers=auth(team), timeout=30)
    assert choose.status_code == 409 and "all submission" in choose.json()["detail"]

    def board() -> list[dict] | None:
        rows = httpx.get(f"{base}/api/leaderboard?phase=open", timeout=30).json()
        return rows if any(r["baseline"] for r in rows) else None
    rows = wait_for(board, 60, "the baseline on the board")
    assert [(r["name"], r["rank"]) for r in rows] == [("phase model", 1), ("a baseline", None)]

    page = chromium_page
    page.goto(base + "/")
    table = page.locator("#board-open-public")
    labels = table.locator("thead th").all_inner_texts()
    assert labels == ["#", "rank range", "model", "method", "external data", "submitted",
                      "R@50", "mR@50", "PRank", "Δ multimpo"]
    shown = [[cell.get_attribute("data-value") for cell in row.locator("td").all()]
             for row in table.locator("tbody tr").all()]
    assert shown[0][:2] == ["1", "1"] and shown[0][3:5] == ["Two-stage <b>", "no"]
    assert shown[1][:2] == ["", ""]                                 # the baseline: unranked
    assert table.locator("tbody tr.baseline td").first.inner_text() == "baseline"
    assert table.locator(".ci").count() == 0                       # intervals: false
    exported = httpx.get(f"{base}/boards/open/public.csv", timeout=30)
    assert exported.headers["content-type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(exported.text))) == [labels, *shown]
    as_json = httpx.get(f"{base}/boards/open/public.json", timeout=30).json()
    assert [[str(v) for v in row.values()] for row in as_json] == shown
    assert [list(row) for row in as_json] == [labels] * len(shown)
    assert httpx.get(f"{base}/boards/open/nope.csv", timeout=30).status_code == 404
    page.screenshot(path=str(tmp_path / "export-board.png"), full_page=True)


def test_best_last_and_chosen_show_one_row_per_team(tiny, client, tmp_path):
    """rerank's selection rules: one row per team, its best, its last or the one it chose
    (its last until it chooses); a baseline stays outside the ranking under every rule."""
    registry_url, out = str(tmp_path / "registry"), str(tmp_path / "board")
    registry = Registry(registry_url)
    sent = {}
    for n, (team, variant) in enumerate((("a", 1), ("a", 6), ("a", 3), ("b", 2), (None, 8))):
        sid = f"2030010{n}T000000-{n:08x}"
        convert_submission(str(tiny.variant(variant)), registry.store_url(sid), tiny.gt,
                           cluster=client)
        manifest = json.loads(Path(registry.store_url(sid), "manifest.json").read_text())
        registry.add(Entry(sid, f"{team}{variant}", registry.store_url(sid), "upload",
                           f"2030-01-0{n + 1}T00:00:00.000000Z", False, None, "ready",
                           manifest["content_hash"], team))
        sent[f"{team}{variant}"] = sid
    registry.set_baseline(sent["None8"], True, "maintainer:lab")

    def board(selection: str, rank_by: str = "mR@50") -> list[tuple[str, int | None]]:
        rerank(registry_url, tiny.gt, out, client=client, log=lambda _: None,
               selection=selection, rank_by=rank_by)
        rows = json.loads(Path(out, "leaderboard.json").read_text())
        ranked = [r for r in rows if not r["baseline"]]
        assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
        assert [r["metrics"][rank_by] for r in ranked] == \
            sorted((r["metrics"][rank_by] for r in ranked), reverse=rank_by != "PRank")
        assert all(set(r["intervals"]) == {rank_by} for r in ranked)
        assert [(r["name"], r["rank"]) for r in rows if r["baseline"]] == [("None8", None)]
        return sorted(r["name"] for r in ranked)

    assert board("all") == ["a1", "a3", "a6", "b2"]
    assert board("best") == ["a1", "b2"]
    assert board("last") == ["a3", "b2"]
    assert board("chosen") == ["a3", "b2"]                  # nothing chosen yet: the last
    registry.choose("a", sent["a6"], "team:a")
    assert board("chosen") == ["a6", "b2"]
    assert len(board("all", "PRank")) == 4          # a phase's headline: lower is better


def test_host_actions_close_move_and_log_who_did_what(site, tiny):
    """A maintainer closes the validation phase early (uploads refused with its dates) and
    moves its submissions into the test phase (once); the host page lists who did what;
    participants may do neither."""
    lab, team = {"Authorization": f"Bearer {site.maintainer}"}, auth(site.token)
    site.clock.now = at("2030-01-10T12:00:00Z")
    ids = [upload(site.base, site.token, tiny.variant(1), "first").json()["id"]]
    site.clock.now = at("2030-01-12T12:00:00Z")
    ids.append(upload(site.base, site.token, tiny.variant(2), "second").json()["id"])

    def act(action: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(f"{site.base}/api/phases/validation/{action}", headers=headers,
                          timeout=30)

    assert act("close", team).status_code == 403
    closed = act("close", lab)
    assert closed.status_code == 200 and closed.json()["actions"][0]["by"] == "maintainer:lab"
    refused = upload(site.base, site.token, tiny.variant(3), "late", phase="validation")
    assert refused.status_code == 403 and refused.json()["detail"] == (
        "phase validation: closed early by the maintainers; it took uploads from "
        "2030-01-01T00:00:00Z to 2030-02-01T00:00:00Z (UTC)")
    whoami = httpx.get(f"{site.base}/api/whoami", headers=team, timeout=30).json()
    assert [p["open"] for p in whoami["phases"]] == [False, False]

    moved = act("move", lab)
    assert moved.json()["note"] == ("moved 2 submission(s) from phase validation to phase "
                                    "test (maintainer:lab)")
    assert act("move", lab).status_code == 409                      # once
    test_ids = entry_ids(site.registry / "phases" / "test")
    assert len(test_ids) == 2 and not test_ids & set(ids)
    listed = httpx.get(f"{site.base}/api/submissions", headers=team, timeout=30).json()
    assert sorted((d["phase"], d["name"]) for d in listed) == [
        ("test", "first"), ("test", "second"), ("validation", "first"),
        ("validation", "second")]
    assert act("launch", lab).status_code == 404

    host = httpx.get(f"{site.base}/host", cookies={"sgdask_token": site.maintainer},
                     timeout=30)
    assert host.status_code == 200
    assert host.text.count("<td class=\"text\">maintainer:lab</td>") == 2
    assert 'id="rerun-test"' in host.text and 'id="close-validation"' in host.text
    assert httpx.get(f"{site.base}/host", cookies={"sgdask_token": site.token},
                     timeout=30).status_code == 403


def test_a_rerun_publishes_the_phase_again_from_the_cache(served, open_model):
    """`rerun`: the worker publishes the phase's board again; every result comes from the
    result cache (a protocol version bump would miss it and evaluate each submission once:
    test_batch.py::test_protocol_version_bump_reevaluates)."""
    base, lab = served.base, {"Authorization": f"Bearer {served.tokens['lab']}"}
    assert wait_final(base, served.tokens["team-a"], open_model, 180)["status"] == "ranked"
    pointer = served.root / "board" / "open" / "current.json"
    wait_for(pointer.is_file, 60, "the open phase's board")
    before = json.loads(pointer.read_text())["published_at"]
    log_size = len(Path(served.root / "serve.log").read_text())
    assert httpx.post(f"{base}/api/phases/open/rerun", headers=lab, timeout=30).json()[
        "actions"][-1]["action"] == "rerun"
    wait_for(lambda: json.loads(pointer.read_text())["published_at"] != before, 60,
             "the board published again")
    since = Path(served.root / "serve.log").read_text()[log_size:]
    assert "cached: " in since and "to evaluate" not in since


def test_an_inbox_drop_outside_its_phase_is_rejected_with_the_dates(tiny, tmp_path):
    """The inbox of a phase that has ended: the drop is registered as rejected, the dates in
    its error; in an open phase the same drop is queued."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "team-a", "participant")
    ended = Phase("old", tiny.gt, str(tmp_path / "old"), str(tmp_path / "old-board"),
                  start=at("2000-01-01T00:00:00Z"), end=at("2001-01-01T00:00:00Z"))
    for phase, status in ((ended, "rejected"),
                          (replace(ended, name="open", registry=str(tmp_path / "open"),
                                   end=None), "received")):
        registry = Registry(phase.registry)
        inbox = Path(phase.registry, "inbox")
        inbox.mkdir(parents=True)
        (inbox / "m.zip").write_bytes(tiny.variant(1).read_bytes())
        (inbox / "m.meta.json").write_text(json.dumps({"name": "dropped", "token": token}))
        (picked,) = pick_inbox(registry, "w", TokenBook(str(tokens)), Limits(), False, 10,
                               lambda _: None, phase)
        history = registry.history(picked)
        assert (history[-1]["status"] if history else registry.entry(picked).status) == status
    assert history == [] and registry.entry(picked).status == "received"
    rejected = Registry(ended.registry).history(
        next(iter(entry_ids(Path(ended.registry)))))[-1]["errors"]
    assert len(rejected) == 1 and rejected[0].startswith(
        "error: m.zip: sidecar: phase old: has ended; it takes uploads from "
        "2000-01-01T00:00:00Z to 2001-01-01T00:00:00Z (UTC), it is ")


def test_rerank_refuses_an_unknown_selection_rule(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["rerank", "--registry", str(tmp_path / "r"), "--gt", str(tmp_path / "g"),
              "--out", str(tmp_path / "o"), "--selection", "worst"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err == (
        "sgdask: error: --selection: 'worst' is not one of all, best, last, chosen")
    assert not (tmp_path / "o").exists()


PROTOCOL_PHASES = """\
phases:
  - {{name: sgb, gt: {gt}, protocols: [sgbench2]}}
  - name: low
    gt: {gt}
    protocols: [sgbench2]
    board: {{direction: {{mR@50: lower}}, intervals: false}}
"""


def test_a_phase_ranks_by_its_protocol_and_its_directions(tiny, client, tmp_path, capsys):
    """A phase under sgbench2 shows and ranks by sgbench2's numbers (those of `sgdask
    evaluate --protocol sgbench2`), without a delta column, in its Parquet, page and
    exports; a phase whose board says `mR@50: lower` ranks the same models the other way
    round, its header's arrow pointing down."""
    benchmark_file = tmp_path / "protocols.yaml"
    benchmark_file.write_text(PROTOCOL_PHASES.format(gt=tiny.gt))
    registry_url, out = str(tmp_path / "registry"), str(tmp_path / "board")
    benchmark = load_benchmark(str(benchmark_file), registry_url, out)
    sgb, low = benchmark.phases
    assert (sgb.protocols, low.direction) == (("sgbench2",), (("mR@50", "lower"),))
    stores, expected = {}, {}
    for n in (50, 75, 95):                  # top-50 lists of 49, 24 and 4 triplets
        stores[n] = str(tmp_path / "stores" / f"m{n}")
        convert_submission(str(tiny.variant(n)), stores[n], tiny.gt, cluster=client)
        with pytest.raises(SystemExit) as done:
            main(["evaluate", "--gt", tiny.gt, "--pred", stores[n], "--protocol", "sgbench2",
                  "--scheduler", client.scheduler.address, "--out", str(tmp_path / f"ev{n}")])
        assert done.value.code in (0, None), capsys.readouterr().err
        expected[f"m{n}"] = json.loads((tmp_path / f"ev{n}" / "metrics.json").read_text())
    for phase in benchmark.phases:
        registry = Registry(phase.registry)
        for i, (n, url) in enumerate(stores.items()):
            manifest = json.loads(Path(url, "manifest.json").read_text())
            registry.add(Entry(f"2030010{i}T000000-{n:08x}", f"m{n}", url, "upload",
                               f"2030-01-0{i + 1}T00:00:00.000000Z", False, None, "ready",
                               manifest["content_hash"], f"team{n}"))
        rerank(phase.registry, tiny.gt, phase.out, client=client, log=lambda _: None,
               rank_by=phase.headline, board_protocols=phase.protocols,
               direction=phase.direction)

    rows = json.loads(Path(sgb.out, "leaderboard.json").read_text())
    for row in rows:
        assert row["metrics"] == {c: expected[row["name"]]["metrics"].get(c)
                                  for c in row["metrics"]}
        assert row["delta"] == {}
    order = sorted(expected, key=lambda name: -expected[name]["metrics"]["mR@50"])
    assert [r["name"] for r in rows] == order and [r["rank"] for r in rows] == [1, 2, 3]
    assert len({r["metrics"]["mR@50"] for r in rows}) == 3         # the order is strict
    low_rows = json.loads(Path(low.out, "leaderboard.json").read_text())
    assert [r["name"] for r in low_rows] == order[::-1]
    columns = pq.read_schema(Path(sgb.out, "leaderboard.parquet")).names
    assert "sgbench2 mR@50" in columns and "sgbench2 mR@50 ci_low" in columns
    assert not [c for c in columns if "singlempo" in c or "multimpo" in c]

    with app_in_thread(ServiceConfig(registry_url, out, benchmark=benchmark)) as base:
        page = httpx.get(base + "/", timeout=30).text
        assert "ranked by mR@50 under sgbench2" in page
        for phase, arrow in ((sgb, "higher"), (low, "lower")):
            head = page.split(f'id="board-{phase.name}-public"')[1].split("</thead>")[0]
            assert f'data-col="mR@50" data-better="{arrow}"' in head
            assert 'data-col="PRank" data-better="lower"' in head and "Δ" not in head
            exported = httpx.get(f"{base}/boards/{phase.name}/public.csv", timeout=30).text
            labels, *values = list(csv.reader(io.StringIO(exported)))
            assert labels == ["#", "rank range", "model", "submitted", "mR@50", "R@50",
                              "mR@20", "mR@100", "mNgR@50", "F@50", "PRank"]
            mine = json.loads(Path(phase.out, "leaderboard.json").read_text())
            assert [(v[2], float(v[4])) for v in values] == \
                [(r["name"], r["metrics"]["mR@50"]) for r in mine]
            as_json = httpx.get(f"{base}/boards/{phase.name}/public.json", timeout=30).json()
            assert [[str(v) for v in row.values()] for row in as_json] == values
            assert [list(row) for row in as_json] == [labels] * len(values)


def test_serve_evaluates_a_phase_under_its_protocols(served, tiny, client, tmp_path, capsys):
    """The worker of a phase under sgbench2 scores an upload under sgbench2 (the numbers
    of `sgdask evaluate --protocol sgbench2` on the converted store); its status page and
    board say so, and the board has no Δ column."""
    team = served.tokens["team-b"]
    sent = upload(served.base, team, tiny.variant(60), "sgb model", phase="sgb")
    assert sent.status_code == 202
    sid = sent.json()["id"]
    assert wait_final(served.base, team, sid, 180)["status"] == "ranked"
    store = served.root / "registry" / "phases" / "sgb" / "stores" / sid
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", tiny.gt, "--pred", str(store), "--protocol", "sgbench2",
              "--scheduler", client.scheduler.address, "--out", str(tmp_path / "ev")])
    assert done.value.code in (0, None), capsys.readouterr().err
    expected = json.loads((tmp_path / "ev" / "metrics.json").read_text())["metrics"]
    rows = httpx.get(f"{served.base}/api/leaderboard?phase=sgb", timeout=30).json()
    assert [r["name"] for r in rows] == ["sgb model"]
    assert rows[0]["metrics"] == {c: expected.get(c) for c in rows[0]["metrics"]}
    assert rows[0]["delta"] == {}
    mine = httpx.get(f"{served.base}/submissions/{sid}", headers=auth(team), timeout=30).text
    assert "<h2>Metrics (sgbench2)</h2>" in mine and "multimpo" not in mine
    labels = next(csv.reader(io.StringIO(
        httpx.get(f"{served.base}/boards/sgb/public.csv", timeout=30).text)))
    assert labels[-2:] == ["F@50", "PRank"]


def _pair_scores(submission_zip: Path, path: Path) -> Path:
    """A score file (``convert --from-scores``) for every image of the submission: three
    pairs of its instances, seeded scores over the 56 predicates."""
    with zipfile.ZipFile(submission_zip) as z:
        doc = json.loads(z.read("triplets.json"))
    rng, rows = np.random.default_rng(5), []
    for img in doc["images"]:
        n = len(img["annotation"])
        for s_, o in ((0, 1), (1, 2), (2, 0)):
            rows.append({"image_id": img["id"], "subject": s_ % n, "object": o % n,
                         "scores": rng.random(56).tolist()})
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_submission_with_its_score_file_is_one_upload(served, tiny, client, tmp_path,
                                                        capsys):
    """A phase taking `submission+scores` converts the ZIP's two files as `sgdask convert
    --from-scores --rank-by triplet --ng-limit 100` does and ranks them under sgbpytorch
    (the numbers of `sgdask evaluate` on that store); a ZIP without its score file is
    rejected in one line naming the upload, no host path."""
    team = served.tokens["team-b"]
    who = httpx.get(f"{served.base}/api/whoami", headers=auth(team), timeout=30).json()
    phase = next(p for p in who["phases"] if p["name"] == "scored")
    assert (phase["upload"], phase["protocols"]) == ("submission+scores", ["sgbpytorch"])
    scores = _pair_scores(tiny.paths.submission_zip, tmp_path / "scores.parquet")
    bundle = tmp_path / "bundle.zip"
    with zipfile.ZipFile(bundle, "w") as z:
        z.write(tiny.paths.submission_zip, "model/submission.zip")
        z.write(scores, "model/scores.parquet")
    sent = upload(served.base, team, bundle, "scored model", phase="scored")
    assert sent.status_code == 202
    sid = sent.json()["id"]
    assert wait_final(served.base, team, sid, 180)["status"] == "ranked"
    store = str(tmp_path / "by-hand")
    convert_submission(str(tiny.paths.submission_zip), store, tiny.gt, cluster=client,
                       from_scores=str(scores), rank_by="triplet", ng_limit=100)
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", tiny.gt, "--pred", store, "--protocol", "sgbpytorch",
              "--scheduler", client.scheduler.address, "--out", str(tmp_path / "ev")])
    assert done.value.code in (0, None), capsys.readouterr().err
    expected = json.loads((tmp_path / "ev" / "metrics.json").read_text())["metrics"]
    rows = httpx.get(f"{served.base}/api/leaderboard?phase=scored", timeout=30).json()
    assert [r["name"] for r in rows] == ["scored model"]
    assert rows[0]["metrics"] == {c: expected.get(c) for c in rows[0]["metrics"]}
    assert rows[0]["metrics"]["mR@50"] is not None

    alone = tmp_path / "alone.zip"
    with zipfile.ZipFile(alone, "w") as z:
        z.write(tiny.paths.submission_zip, "submission.zip")
    sid = upload(served.base, team, alone, "no scores", phase="scored").json()["id"]
    final = wait_final(served.base, team, sid, 180)
    assert final["status"] == "rejected"
    assert final["errors"] == [
        "error: alone.zip: holds 1 submission file(s) (.json, .zip) and 0 score file(s) "
        "(.npz, .parquet) (expected a ZIP of one SGBench JSON or ZIP and its score file)"]
