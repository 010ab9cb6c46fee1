"""``sgdask rerank``: evaluate what the registry lacks under the current protocol versions
and publish the leaderboard, safely under cron.

Layout of ``--out URL``::

    URL/current.json                 the truth: which dated board is published (atomic swap)
    URL/history/<stamp>/             leaderboard.{json,parquet,html} + reports/<id>.html, and
                                     top.html (the board page as linked from URL/)
    URL/leaderboard.{json,parquet,html}   convenience copies of the current board
    URL/lock.json                    held while a rerank runs (``sgdask.store.lock``: holder,
                                     heartbeat; taken over when its holder is gone)

The copies are written after the swap, so a crash between the two leaves them stale for a
moment; every rerank (also one that finds the board up to date) checks them against the
board ``current.json`` names and rewrites them when they differ.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client

from sgdask.batch.cache import ResultCache
from sgdask.batch.leaderboard_html import (
    DEFAULT_MATCHING,
    MATCHING_MODES,
    BoardLook,
    by_matching,
    matching_boards,
    render_leaderboard,
)
from sgdask.batch.many import Log, ManyJob, ManyOutcome, run_many
from sgdask.batch.pages import report_pages, write_atomic
from sgdask.batch.registry import Entry, Registry
from sgdask.batch.video import board_protocols_of, column_value, is_video_board, video_columns
from sgdask.cluster import Local
from sgdask.core.settings import Settings
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.metrics import RANK_BY, TIE_BREAK, board_columns, metric_of
from sgdask.protocols import BOARD_PROTOCOLS, DEFAULT_PROTOCOL
from sgdask.report import Report
from sgdask.report.intervals import scoring_of
from sgdask.stats.bootstrap import Scoring
from sgdask.stats.paired import rank_ranges
from sgdask.stats.table import TermTable
from sgdask.store.lock import DEFAULT_LEASE, exclusive_lock
from sgdask.store.store import StoreReader, check_output_outside_stores
from sgdask.store.training_stats import gt_training_stats

#: what a published board holds beyond its inputs: a new layout republishes once
BOARD_LAYOUT = 2
EXIT_LOCKED = 3


def read_json(fs: Any, path: str) -> Any:
    try:
        with fs.open(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


DIRECTIONS = ("higher", "lower")


def lower_is_better(name: str, direction: dict[str, str] | None = None) -> bool:
    """Whether lower values of metric ``name`` rank first: as ``direction`` (a board's
    ``higher``/``lower`` per metric) says, else as the metric registry says."""
    if direction and name in direction:
        return direction[name] == "lower"
    metric = metric_of(name)
    return metric is not None and metric.lower_is_better


def rank_key(row: dict[str, Any], rank_by: str = RANK_BY,
             direction: dict[str, str] | None = None) -> tuple:
    """The ranking metric best first (descending; ascending for a metric where lower is
    better, ``lower_is_better``), then the tie-break metric likewise, then earlier
    submission first."""
    def neg(name: str) -> float:
        value = row["metrics"].get(name)
        sign = 1 if lower_is_better(name, direction) else -1
        return float("inf") if value is None else sign * value
    return (neg(rank_by), neg(TIE_BREAK), row["submitted_at"])


SELECTIONS = ("all", "best", "last", "chosen")


@dataclass(frozen=True)
class BoardRule:
    """Which rows a board shows: every submission (``all``), or one per team and matching
    mode: its ``best`` by the ranking metric, its ``last``, or the one it ``chosen`` (its
    last until it chooses); ``baselines`` (submission ids) are shown outside the ranking.
    An entry without a team (``sgdask submit --registry``) is a team of its own."""

    selection: str = "all"
    chosen: tuple[tuple[str, str], ...] = ()  # (team, submission id)
    baselines: tuple[str, ...] = ()
    #: how often maintainers asked to re-rank the phase: each request publishes again
    reruns: int = 0
    #: the ranking metric (a board column; a phase's ``headline``)
    rank_by: str = RANK_BY
    #: the protocols evaluated: the first one's numbers fill the board and rank it, a
    #: second one's ``RANK_BY`` gives the delta column (a phase's ``protocols``)
    protocols: tuple[str, ...] = BOARD_PROTOCOLS
    #: (metric, ``higher`` or ``lower``): a direction other than the metric registry's
    direction: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, registry: Registry, selection: str = "all", rank_by: str = RANK_BY,
           protocols: tuple[str, ...] = BOARD_PROTOCOLS,
           direction: tuple[tuple[str, str], ...] = ()) -> BoardRule:
        """The rule with the registry's choices, baselines and re-run requests."""
        chosen = tuple(sorted(registry.chosen().items())) if selection == "chosen" else ()
        reruns = sum(a["action"] == "rerun" for a in registry.host_actions())
        return cls(selection, chosen, tuple(sorted(registry.baselines())), reruns, rank_by,
                   tuple(protocols), tuple(direction))

    @property
    def primary(self) -> str:
        """The protocol whose numbers the board shows and ranks by."""
        return self.protocols[0]

    @property
    def delta_protocol(self) -> str | None:
        """The protocol the delta column compares with, if the board has one (a board of
        video protocols shows each protocol's own columns instead)."""
        if len(self.protocols) < 2 or is_video_board(self.protocols):
            return None
        return self.protocols[1]

    def lower_is_better(self, name: str) -> bool:
        return lower_is_better(name, dict(self.direction))


def _selected(rows: list[dict[str, Any]], rule: BoardRule) -> list[dict[str, Any]]:
    """The rows the rule keeps, order kept (``rows`` in rank order: best first)."""
    if rule.selection == "all":
        return rows
    chosen = dict(rule.chosen)
    teams: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if not row["baseline"]:
            key = (row.get("team") or row["submission_id"], row["matching"])
            teams.setdefault(key, []).append(row)
    keep = set()
    for (team, _), group in teams.items():
        pick = group[0]
        if rule.selection != "best":
            pick = max(group, key=lambda r: r["submitted_at"])
            pick = next((r for r in group if r["submission_id"] == chosen.get(team)), pick) \
                if rule.selection == "chosen" else pick
        keep.add(pick["submission_id"])
    return [r for r in rows if r["baseline"] or r["submission_id"] in keep]


def row_columns(rank_by: str = RANK_BY, protocols: tuple[str, ...] = BOARD_PROTOCOLS
                ) -> list[str]:
    """The metrics a board row holds: every board column (a board of video protocols:
    theirs, ``sgdask.batch.video.video_columns``), and the ranking metric."""
    columns = video_columns(protocols) if is_video_board(protocols) else board_columns()
    return columns if rank_by in columns else [*columns, rank_by]


def board_rows(entries: list[Entry], reports: dict[str, dict[str, Report]],
               previous: list[dict[str, Any]] | None,
               matching: dict[str, str] | None = None,
               rule: BoardRule | None = None) -> list[dict[str, Any]]:
    """The rows ``rule`` keeps, with the metrics of its first protocol, the delta to its
    second one, matching mode, the entry's metadata and rank change, ranked within their
    matching mode (``MATCHING_MODES`` order: the mask board's rows first); baselines follow
    their mode's ranked rows, unranked."""
    rule = rule or BoardRule()
    before = {r["submission_id"]: (r.get("matching", DEFAULT_MATCHING), r["rank"])
              for r in previous or []}
    rows = []
    for e in entries:
        by_protocol = reports.get(e.submission_id, {})
        single = by_protocol.get(rule.primary)
        multi = by_protocol.get(rule.delta_protocol or "")
        video = is_video_board(rule.protocols)
        metrics = {c: (column_value(by_protocol, rule.primary, c) if video
                       else single.metrics.get(c) if single else None)
                   for c in row_columns(rule.rank_by, rule.protocols)}
        delta = {}
        if single and multi and RANK_BY in single.metrics and RANK_BY in multi.metrics:
            delta[RANK_BY] = multi.metrics[RANK_BY] - single.metrics[RANK_BY]
        baseline = e.submission_id in rule.baselines
        rows.append({"submission_id": e.submission_id, "name": e.name,
                     "approved": e.approved and not baseline, "submitted_at": e.submitted_at,
                     "paper": e.paper, "report": f"reports/{e.submission_id}.html",
                     "matching": (matching or {}).get(e.submission_id, DEFAULT_MATCHING),
                     "team": e.team, "method": e.method, "description": e.description,
                     "code": e.code, "external_data": e.external_data, "baseline": baseline,
                     "metrics": metrics, "delta": delta})
    rows.sort(key=lambda r: (MATCHING_MODES.index(r["matching"]), r["baseline"],
                             rank_key(r, rule.rank_by, dict(rule.direction))))
    rows = _selected(rows, rule)
    for mode_rows in by_matching(rows).values():
        ranked = [r for r in mode_rows if not r["baseline"]]
        for rank, row in enumerate(ranked, start=1):
            row["rank"] = rank
            old = before.get(row["submission_id"])
            row["rank_change"] = None if old is None or old[0] != row["matching"] \
                or old[1] is None else old[1] - rank
    for row in rows:
        if row["baseline"]:
            row["rank"], row["rank_change"] = None, None
    return rows


def approved_board(rows: list[dict[str, Any]], previous: list[dict[str, Any]] | None,
                   ranges: dict[str, list[int] | None] | None = None
                   ) -> list[dict[str, Any]]:
    """The approved entries ranked among themselves within their matching mode
    (``ranges``: their rank ranges among themselves, by submission id)."""
    before = {r["submission_id"]: (r.get("matching", DEFAULT_MATCHING), r.get("approved_rank"))
              for r in previous or []}
    board = []
    for mode_rows in by_matching([r for r in rows if r["approved"]]).values():
        for rank, row in enumerate(mode_rows, start=1):
            old = before.get(row["submission_id"])
            change = None if old is None or old[1] is None or old[0] != row["matching"] \
                else old[1] - rank
            entry = {**row, "rank": rank, "rank_change": change}
            if ranges is not None:
                entry["rank_range"] = ranges.get(row["submission_id"])
                row["approved_rank_range"] = entry["rank_range"]
            board.append(entry)
            row["approved_rank"], row["approved_rank_change"] = rank, change
    return board


@dataclass(frozen=True)
class BoardCI:
    """How the board's intervals and rank ranges are computed (``sgdask.stats.paired``)."""

    level: float = 0.95
    resamples: int = 1000
    seed: int = 0


def ranking_terms(row: dict[str, Any], reports: dict[str, dict[str, Report]],
                  rank_by: str = RANK_BY, protocol: str = DEFAULT_PROTOCOL) -> TermTable | None:
    """The per-image terms a row is ranked by (its ``protocol`` report's), if any."""
    report = reports.get(row["submission_id"], {}).get(protocol)
    if report is None or row["metrics"].get(rank_by) is None:
        return None
    return report.terms


def board_ranges(rows: list[dict[str, Any]], reports: dict[str, dict[str, Report]],
                 scoring: Scoring, ci: BoardCI, rule: BoardRule
                 ) -> dict[str, dict[str, Any]]:
    """Per submission id: the ranking metric's interval and the rank range among ``rows``,
    from the cached per-image terms (no evaluation); rows without terms get none."""
    rank_by, protocol = rule.rank_by, rule.primary
    usable = [r for r in rows if ranking_terms(r, reports, rank_by, protocol) is not None]
    if not usable:
        return {}
    found = rank_ranges([ranking_terms(r, reports, rank_by, protocol)  # type: ignore[misc]
                         for r in usable],
                        rank_by, scoring, ci.level, ci.resamples, ci.seed,
                        rule.lower_is_better(rank_by))
    return {r["submission_id"]: {"interval": list(interval) if interval else None,
                                 "range": [lo, hi]}
            for r, (interval, (lo, hi)) in zip(usable, found, strict=True)}


def with_ranges(board: list[dict[str, Any]], reports: dict[str, dict[str, Report]],
                composition: dict[int, int] | None, ci: BoardCI, rule: BoardRule
                ) -> dict[str, list[int] | None]:
    """Put the ranking metric's interval (``intervals``) and the rank range among its
    matching mode's rows (``rank_range``) into every row; returns the rank ranges among the
    approved rows of each mode, by submission id."""
    rank_by = rule.rank_by
    first = next((reports[r["submission_id"]][rule.primary] for r in board
                  if ranking_terms(r, reports, rank_by, rule.primary) is not None), None)
    if first is None:
        return {}
    scoring = scoring_of(first, composition)
    approved: dict[str, list[int] | None] = {}
    for mode_rows in by_matching([r for r in board if not r.get("baseline")]).values():
        public = board_ranges(mode_rows, reports, scoring, ci, rule)
        for row in mode_rows:
            found = public.get(row["submission_id"], {})
            row["intervals"] = {rank_by: found.get("interval")}
            row["rank_range"] = found.get("range")
        ranked = board_ranges([r for r in mode_rows if r["approved"]], reports, scoring, ci,
                              rule)
        approved.update({sid: found["range"] for sid, found in ranked.items()})
    return approved


def _primary_keys(outcome: ManyOutcome, protocol: str) -> dict[str, str]:
    """Submission id -> the result cache key of its report under ``protocol`` (the one a
    board ranks by)."""
    return {sid: outcome.keys[(sid, protocol)] for sid, by_protocol in outcome.reports.items()
            if protocol in by_protocol and (sid, protocol) in outcome.keys}


def _ranged_board(board: list[dict[str, Any]], cache: str, keys: dict[str, str],
                  composition: dict[int, int] | None, ci: BoardCI, rule: BoardRule,
                  storage_options: StorageOptions | None
                  ) -> tuple[list[dict[str, Any]], dict[str, list[int] | None]]:
    """``board`` with its intervals and rank ranges, and the approved rows' rank ranges
    (``with_ranges``), from the ranking protocol's terms read here from the result cache
    (``keys``: submission id -> entry key): run as a task, so no terms reach the driver."""
    entries = ResultCache(cache, storage_options)
    reports = {sid: {rule.primary: report} for sid, key in keys.items()
               if (report := entries.checked(key)) is not None}
    return board, with_ranges(board, reports, composition, ci, rule)


@dataclass
class RerankOutcome:
    published: str | None
    evaluated: list[tuple[str, str]]
    cached: list[tuple[str, str]]
    board: list[dict[str, Any]]


def inputs_digest(entries: list[Entry], options: Settings, ci: BoardCI | None = None,
                  rule: BoardRule | None = None) -> str:
    """What a board depends on: the entries, the evaluation and interval settings, the
    selection rule with the teams' choices and the baselines."""
    rule = rule or BoardRule()
    payload = [(e.submission_id, e.content_hash, e.approved) for e in entries]
    text = json.dumps([payload, rule.protocols, options.__dict__,
                       protocol_versions(rule.protocols), asdict(ci or BoardCI()),
                       BOARD_LAYOUT, asdict(rule)])
    return hashlib.sha256(text.encode()).hexdigest()


def protocol_versions(protocols: tuple[str, ...] = BOARD_PROTOCOLS) -> dict[str, str]:
    from sgdask.protocols import METRICS_VERSION, PROTOCOLS

    return {**{p: PROTOCOLS[p].version for p in protocols}, "metrics": METRICS_VERSION}


def board_job(registry_url: str, gt: str, entries: list[Entry], options: Settings,
              storage_options: StorageOptions | None,
              protocols: tuple[str, ...] = BOARD_PROTOCOLS) -> ManyJob:
    """The evaluation a board needs, through the registry's result cache (the service's
    worker scores new entries with the same job, so rerank finds them cached); a store
    without a cached result is verified completely before it is first ranked, and its
    report page is rendered and kept by its finalizing task."""
    return ManyJob(gt, [(e.submission_id, e.url, ",".join(protocols)) for e in entries],
                   options, cache=join(registry_url, "cache"), storage_options=storage_options,
                   verify=True, pages=True,
                   methods={e.submission_id: e.output_method for e in entries
                            if e.output_method})


def rerank(registry_url: str, gt: str, out: str, options: Settings | None = None,
           storage_options: StorageOptions | None = None, client: Client | None = None,
           scheduler: str | Local | None = None, dry_run: bool = False, progress: bool = False,
           log: Log = print, lease: float = DEFAULT_LEASE,
           ci: BoardCI | None = None, selection: str = "all", rank_by: str = RANK_BY,
           board_protocols: tuple[str, ...] = BOARD_PROTOCOLS,
           direction: tuple[tuple[str, str], ...] = ()) -> RerankOutcome:
    """Evaluate missing results and publish a new leaderboard if anything changed (each
    model's ranking metric with its bootstrap interval and rank range, ``ci``; the board's
    numbers under the first of ``board_protocols``, ``direction`` per metric), holding
    ``OUT/lock.json`` meanwhile (``sgdask.store.lock``: taken over from a dead holder at once,
    from a silent one after ``lease`` seconds)."""
    options = options or Settings()
    check_output_outside_stores(out, storage_options, "the leaderboard")
    registry = Registry(registry_url, storage_options)
    entries = registry.rankable()
    board_protocols = board_protocols_of(StoreReader(gt, storage_options, "gt").manifest,
                                         board_protocols)
    rule = BoardRule.of(registry, selection, rank_by, board_protocols, direction)
    job = board_job(registry_url, gt, entries, options, storage_options, rule.protocols)
    fs, root = filesystem(out, storage_options)
    if not entries and read_json(fs, join(root, "current.json")) is None:
        # (with a board published, an empty registry, every entry hidden, is published)
        log("registry is empty: nothing to rank")
        return RerankOutcome(None, [], [], [])
    if dry_run:
        outcome = run_many(job, dry_run=True, log=log)
        return RerankOutcome(None, [], outcome.cached, [])
    with exclusive_lock(join(out, "lock.json"), storage_options, lease, log,
                        holder="another rerank"):
        outcome = run_many(job, client, scheduler, progress, log=log, slim=True)
        current = read_json(fs, join(root, "current.json"))
        digest = inputs_digest(entries, options, ci, rule)
        if current and current.get("inputs") == digest:
            if publish_copies(fs, root, current["board"]):
                log(f"top-level copies did not match {current['board']}: rewritten")
            log(f"leaderboard up to date ({current['board']}): nothing published")
            return RerankOutcome(None, outcome.evaluated, outcome.cached, [])
        previous = read_json(fs, join(root, current["board"], "leaderboard.json")) \
            if current else None
        board = board_rows(entries, outcome.reports, previous, outcome.matching, rule)
        _, composition = gt_training_stats(StoreReader(gt, storage_options, "gt"), options.stats,
                                        storage_options)
        ranged = (job.cache, _primary_keys(outcome, rule.primary), composition,
                  ci or BoardCI(), rule, storage_options)
        board, ranges = (client.submit(_ranged_board, board, *ranged, pure=False).result()
                         if client is not None else _ranged_board(board, *ranged))
        approved = approved_board(board, previous, ranges)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        board_dir = f"history/{stamp}"
        pages = report_pages(outcome, join(registry_url, "cache"), storage_options, client, log)
        files = board_files(board, approved, pages, current, stamp, rule)
        files[TOP_PAGE] = leaderboard_page(board, approved, current, stamp,
                                           report_prefix=f"{board_dir}/", rule=rule)
        for name, data in files.items():
            fs.makedirs(fs._parent(join(root, board_dir, name)), exist_ok=True)
            with fs.open(join(root, board_dir, name), "wb") as f:
                f.write(data)
        pointer = {"board": board_dir, "published_at": stamp, "inputs": digest,
                   "previous": current["board"] if current else None}
        write_atomic(fs, join(root, "current.json"), json.dumps(pointer, indent=1).encode())
        publish_copies(fs, root, board_dir)
        log(f"published {join(out, board_dir)} ({len(board)} submissions)")
        return RerankOutcome(join(out, board_dir), outcome.evaluated, outcome.cached, board)


TOP_PAGE = "top.html"
COPIES = {"leaderboard.json": "leaderboard.json", "leaderboard.parquet": "leaderboard.parquet",
          "leaderboard.html": TOP_PAGE}


def publish_copies(fs: Any, root: str, board_dir: str) -> bool:
    """Make the top-level copies equal the files of the published board ``board_dir``;
    True when any copy had to be (re)written."""
    wrote = False
    for name, source in COPIES.items():
        try:
            wanted = fs.cat_file(join(root, board_dir, source))
        except FileNotFoundError:  # a board published before top.html existed
            continue
        try:
            same = fs.cat_file(join(root, name)) == wanted
        except FileNotFoundError:
            same = False
        if not same:
            write_atomic(fs, join(root, name), wanted)
            wrote = True
    return wrote


def leaderboard_page(board: list[dict[str, Any]], approved: list[dict[str, Any]],
                     current: dict[str, Any] | None, stamp: str, report_prefix: str = "",
                     rule: BoardRule | None = None) -> bytes:
    """The HTML page; ``report_prefix`` makes report links work from another folder."""
    def linked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "report": report_prefix + r["report"]} for r in rows]

    rule = rule or BoardRule()
    boards, titles = matching_boards(linked(board), linked(approved))
    return render_leaderboard(
        boards, row_columns(rule.rank_by, rule.protocols), generated_at=stamp,
        previous_generated_at=current["published_at"] if current else None,
        titles=titles, look=board_look(rule)).encode()


def board_look(rule: BoardRule) -> BoardLook:
    """How a board under ``rule`` labels its protocols and which way its metrics point."""
    better = {c: "lower" if rule.lower_is_better(c) else "higher"
              for c in row_columns(rule.rank_by, rule.protocols)}
    return BoardLook(rule.primary, rule.delta_protocol, better, rule.rank_by)


def interval_columns(row: dict[str, Any], rank_by: str = RANK_BY,
                     protocol: str = DEFAULT_PROTOCOL) -> dict[str, Any]:
    """The ranking metric's interval and the rank range as flat Parquet columns."""
    interval = (row.get("intervals") or {}).get(rank_by) or [None, None]
    ranks = row.get("rank_range") or [None, None]
    return {f"{protocol} {rank_by} ci_low": interval[0],
            f"{protocol} {rank_by} ci_high": interval[1],
            "rank_range_low": ranks[0], "rank_range_high": ranks[1]}


def _parquet_column(primary: str, column: str) -> str:
    """A metric's Parquet column: ``PROTOCOL METRIC`` (a video board's columns of other
    protocols name theirs already)."""
    return column if " " in column else f"{primary} {column}"


def board_files(board: list[dict[str, Any]], approved: list[dict[str, Any]],
                pages: dict[str, bytes], current: dict[str, Any] | None,
                stamp: str, rule: BoardRule | None = None) -> dict[str, bytes]:
    """Every file of one dated board, by relative path (the Parquet columns named by the
    rule's protocols)."""
    rule = rule or BoardRule()
    primary, other = rule.primary, rule.delta_protocol
    delta = {} if other is None else {f"{other} - {primary} {RANK_BY}": None}
    table = pa.Table.from_pylist([
        {"rank": r["rank"], "approved_rank": r.get("approved_rank"),
         "matching": r.get("matching", DEFAULT_MATCHING), "name": r["name"],
         "submission_id": r["submission_id"], "approved": r["approved"],
         "submitted_at": r["submitted_at"], "paper": r["paper"],
         "rank_change": r["rank_change"],
         **{_parquet_column(primary, c): r["metrics"].get(c)
            for c in row_columns(rule.rank_by, rule.protocols)},
         **interval_columns(r, rule.rank_by, primary),
         **{name: r["delta"].get(RANK_BY) for name in delta}} for r in board])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    files = {"leaderboard.json": json.dumps(board, indent=1).encode(),
             "leaderboard.parquet": sink.getvalue().to_pybytes(),
             "leaderboard.html": leaderboard_page(board, approved, current, stamp, rule=rule)}
    for submission_id, page in pages.items():
        files[f"reports/{submission_id}.html"] = page
    return files
