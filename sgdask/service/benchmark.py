"""The benchmark file (``sgdask serve --benchmark FILE``): a challenge's phases.

Each phase has its own ground truth, dates, limits and boards, and its own registry and board
folders (``REGISTRY/phases/NAME``, ``OUT/NAME``), so a phase's submissions, limits and
results never mix with another's. The flags of ``sgdask serve`` without a file describe a
one-phase benchmark that keeps the registry and board at ``REGISTRY`` and ``OUT`` themselves
(what a service started before phases existed wrote).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sgdask.batch.rerank import BOARD_PROTOCOLS
from sgdask.batch.video import video_columns
from sgdask.errors import InputError, Option, SgdaskError
from sgdask.formats.methods import VIDEO_METHODS
from sgdask.formats.video_upload import VIDEO_UPLOADS, video_upload, video_upload_of_gt
from sgdask.io.documents import strict_yaml
from sgdask.io.fs import StorageOptions, join
from sgdask.metrics import RANK_BY, board_columns, metrics
from sgdask.protocols import FORMAT_BOARDS, PROTOCOLS, get_protocol, get_protocols
from sgdask.service.access import BOARDS, Refusal
from sgdask.service.limits import DEFAULT_UPLOAD_SECONDS, Limits
from sgdask.store.schemas import BENCHMARK, schema_problem
from sgdask.store.store import StoreReader

DATE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Phase:
    """One phase: where its GT, registry and board live, when it takes uploads."""

    name: str
    gt: str | None  # None: a service config without a worker, which never reads it
    registry: str
    out: str
    start: datetime | None = None
    end: datetime | None = None
    limits: Limits = field(default_factory=Limits)
    boards: tuple[str, ...] = BOARDS
    visibility: str = "public"  # or private (scores hidden until revealed), unlisted
    selection: str = "all"  # which of a team's submissions the board shows (BoardRule)
    headline: str = RANK_BY  # the ranking metric
    #: the protocols evaluated: the first one's numbers on the board, a second one's delta
    protocols: tuple[str, ...] = BOARD_PROTOCOLS
    #: (metric, ``higher``/``lower``) where the board overrides the registry's direction
    direction: tuple[tuple[str, str], ...] = ()
    columns: tuple[str, ...] = ()  # the boards' metric columns (empty: every board column)
    meta_columns: tuple[str, ...] = ()  # entry metadata shown as columns
    intervals: bool = True
    rank_ranges: bool = True
    #: what an upload is: ``submission`` (an SGBench ZIP or JSON), ``submission+scores``
    #: (a ZIP of one and its score file, converted like ``sgdask convert --from-scores``)
    #: or ``psg-challenge`` (a ZIP of relation.json and panseg/, ``sgdask.io.psg_challenge``);
    #: a video output format's name (``sgdask.formats.video_upload``): a video phase
    upload: str = "submission"
    scores_rank_by: str = "predicate"  # ``--rank-by`` of a submission+scores upload
    ng_limit: int | None = None  # ``--ng-limit`` of a submission+scores upload
    #: how a video phase's model outputs are read (``sttran``, ``tempura``; its
    #: ``Entry.output_method``); None: their format says
    method: str | None = None

    def ended(self, now: datetime) -> bool:
        return self.end is not None and now >= self.end

    def is_open(self, now: datetime) -> bool:
        return (self.start is None or self.start <= now) and (self.end is None or now < self.end)

    def dates(self) -> str:
        """The phase's dates as the answers show them."""
        start = self.start.strftime(DATE_FORMAT) if self.start else "always"
        end = self.end.strftime(DATE_FORMAT) if self.end else "no end"
        return f"{start} to {end} (UTC)"


@dataclass(frozen=True)
class Benchmark:
    title: str
    phases: tuple[Phase, ...]
    path: str | None = None  # the benchmark file (None: ``sgdask serve``'s flags)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)


def check_phase(phase: Phase, board: str, now: datetime, closed: bool = False) -> None:
    """Refuse an upload outside the phase's dates (or to a phase ``closed`` early) or to a
    board the phase does not feed."""
    if closed:
        raise Refusal(403, f"phase {phase.name}: closed early by the maintainers; it took "
                      f"uploads from {phase.dates()}")
    if not phase.is_open(now):
        when = "has not started" if phase.start and now < phase.start else "has ended"
        raise Refusal(403, f"phase {phase.name}: {when}; it takes uploads from "
                      f"{phase.dates()}, it is {now.strftime(DATE_FORMAT)}")
    if board not in phase.boards:
        raise Refusal(400, f"board: phase {phase.name} feeds only the "
                      f"{' and '.join(phase.boards)} board(s)")


def one_phase(registry: str, out: str, gt: str | None, limits: Limits, title: str
              ) -> Benchmark:
    """The benchmark ``sgdask serve``'s flags describe: one phase, always open, at
    ``registry`` and ``out`` themselves."""
    return Benchmark(title, (Phase("main", gt, registry, out, limits=limits),))


def load_benchmark(path: str, registry: str, out: str) -> Benchmark:
    """The benchmark file at ``path`` (YAML or JSON), checked against its schema; the
    phases' registries and boards under ``registry`` and ``out``."""
    try:
        doc = strict_yaml(Path(path).read_text(encoding="utf-8"), path)
    except FileNotFoundError:
        raise InputError(path, "not found", expected="a benchmark file (YAML)") from None
    except UnicodeDecodeError as err:
        raise InputError(path, f"not valid YAML ({' '.join(str(err).split())})") from None
    doc = _dates_as_text(doc)
    problem = schema_problem(BENCHMARK, doc)
    if problem is not None:
        field_name, _, what = problem.partition(": ")
        raise InputError(path, what, field=field_name,
                         expected="the benchmark file's schema, schemas/benchmark.schema.json")
    base = Path(path).resolve().parent
    phases = tuple(_phase(path, i, p, base, registry, out)
                   for i, p in enumerate(doc["phases"]))
    names = [p.name for p in phases]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InputError(path, f"{name!r} names two phases", field=f"phases[{i}].name",
                             expected="a name per phase")
    return Benchmark(doc.get("title", "sgdask leaderboard"), phases, path)


def check_gts(benchmark: Benchmark, options: StorageOptions | None) -> None:
    """Refuse a phase whose GT store does not fit its uploads (a video GT in a phase
    taking image submissions, an Action Genome output against a PVSG GT...), in one line
    naming the benchmark file (or ``--gt``) and the phase's field. A GT that cannot be
    read now is left to the worker, which says so per submission."""
    for i, phase in enumerate(benchmark.phases):
        if phase.gt is None:
            continue
        try:
            gt_format = StoreReader(phase.gt, options, "gt").manifest.get("gt_format")
        except SgdaskError:
            continue
        problem = gt_problem(phase.upload, gt_format)
        if problem is None:
            continue
        field_name, what, expected = problem
        if benchmark.path is None:
            raise InputError(phase.gt, what, expected=(
                "a benchmark file (", Option("benchmark"), f") whose phase has {expected}"))
        raise InputError(benchmark.path, what, field=f"phases[{i}].{field_name}",
                         expected=expected)


def gt_problem(upload: str, gt_format: str | None) -> tuple[str, str, str] | None:
    """(field, what is wrong, what is expected) when a phase taking ``upload`` cannot be
    scored against a GT store of ``gt_format``; None when it can."""
    have, want = video_upload_of_gt(gt_format), video_upload(upload)
    if have is not None and want is None:
        return ("upload", f"the GT store holds {have.dataset} ground truth, scored only on "
                f"its model outputs, not on {upload} uploads", f"upload: {have.format}")
    if want is not None and have is not want:
        return ("gt", f"{upload} uploads are scored against {want.dataset} ground truth; "
                f"this GT store holds {gt_format or 'image'} ground truth",
                f"a GT store ingested from {want.dataset}'s annotations")
    return None


def _dates_as_text(doc: Any) -> Any:
    """YAML reads an unquoted timestamp as a datetime: the phases' dates as text again."""
    if isinstance(doc, dict) and isinstance(doc.get("phases"), list):
        for phase in doc["phases"]:
            if isinstance(phase, dict):
                for key in ("start", "end"):
                    if isinstance(phase.get(key), datetime):
                        when = phase[key]
                        when = when if when.tzinfo else when.replace(tzinfo=UTC)
                        phase[key] = when.astimezone(UTC).strftime(DATE_FORMAT)
    return doc


def _phase(path: str, i: int, doc: dict[str, Any], base: Path, registry: str, out: str
           ) -> Phase:
    start, end = (_date(path, f"phases[{i}].{k}", doc.get(k)) for k in ("start", "end"))
    if start is not None and end is not None and end <= start:
        raise InputError(path, f"{doc['end']} is not after start {doc['start']}",
                         field=f"phases[{i}].end")
    limits, board = doc.get("limits", {}), doc.get("board", {})
    gt = doc["gt"] if "://" in doc["gt"] or Path(doc["gt"]).is_absolute() \
        else str(base / doc["gt"])
    upload = doc.get("upload", "submission")
    protocols = _protocols(path, i, doc.get("protocols"), upload)
    method = _method(path, i, doc.get("method"), upload)
    video = video_upload(upload) is not None
    headline = _columns(path, f"phases[{i}].headline", [doc.get("headline", RANK_BY)],
                        video_columns(protocols) if video else _headlines())[0]
    known = video_columns(protocols) if video else [*board_columns(), headline]
    direction, scores = board.get("direction", {}), doc.get("scores", {})
    _columns(path, f"phases[{i}].board.direction", list(direction), known)
    return Phase(doc["name"], gt, join(registry, "phases", doc["name"]), join(out, doc["name"]),
                 start, end,
                 Limits(limits.get("per_day", 5) or None, limits.get("total") or None,
                        limits.get("concurrent", 5) or None, limits.get("per_month") or None,
                        limits.get("upload_seconds", DEFAULT_UPLOAD_SECONDS) or None),
                 tuple(doc.get("boards", BOARDS)), doc.get("visibility", "public"),
                 doc.get("selection", "all"), headline, protocols, tuple(direction.items()),
                 _columns(path, f"phases[{i}].board.columns", board.get("columns", []), known),
                 tuple(board.get("meta", [])), board.get("intervals", True),
                 board.get("rank_ranges", True), upload,
                 scores.get("rank_by", "predicate"), scores.get("ng_limit"), method)


def _protocols(path: str, i: int, names: list[str] | None, upload: str) -> tuple[str, ...]:
    """A phase's protocols (a group's name standing for its members): image protocols
    for image submissions (two at most: a ranking one and a delta one), those of the
    output's dataset for a video phase (by default its GT format's board protocols)."""
    video, field_name = video_upload(upload), f"phases[{i}].protocols"
    if names is None:
        return FORMAT_BOARDS[video.gt_format] if video else BOARD_PROTOCOLS
    given = tuple(p.name for p in get_protocols(",".join(names)))
    if video is None:
        bad = next((n for n in given if get_protocol(n).unit == "video"), None)
        if bad is not None:
            raise InputError(path, f"{bad!r} is a video protocol, and this phase takes "
                             f"{upload} uploads", field=field_name, expected="upload: "
                             f"{' or '.join(VIDEO_UPLOADS)} (a video GT)")
        if len(given) > 2:
            raise InputError(path, f"{len(given)} image protocols", field=field_name,
                             expected="at most 2: the first ranks, the second gives the "
                             "delta column")
        return given
    family = {type(get_protocol(n)) for n in FORMAT_BOARDS[video.gt_format]}
    allowed = [n for n, p in PROTOCOLS.items() if type(p) in family]
    bad = next((n for n in given if n not in allowed), None)
    if bad is not None:
        raise InputError(path, f"{bad!r} does not score {video.dataset} outputs (upload: "
                         f"{upload})", field=field_name, expected=f"one of {', '.join(allowed)}")
    return given


def _method(path: str, i: int, method: str | None, upload: str) -> str | None:
    """A video phase's method: named where its outputs need one, nowhere else."""
    video, field_name = video_upload(upload), f"phases[{i}].method"
    needs = video is not None and video.method
    if needs and method is None:
        raise InputError(path, f"{upload} uploads need the method that reads them",
                         field=field_name, expected=f"one of {', '.join(VIDEO_METHODS)}")
    if method is not None and not needs:
        takes = [v.format for v in VIDEO_UPLOADS.values() if v.method]
        raise InputError(path, f"{upload} uploads are read without a method",
                         field=field_name, expected=f"a method only with upload: "
                         f"{' or '.join(takes)}")
    return method


def _headlines() -> list[str]:
    """What a phase may rank by: a board column or a metric without k (``score_wtd``)."""
    return [*board_columns(), *(m.prefix for m in metrics() if not m.per_k and not m.grouped
                                and m.prefix not in board_columns())]


def _columns(path: str, field_name: str, columns: list[str], known: list[str]
             ) -> tuple[str, ...]:
    """Metric names of a board (its ``columns``, ``direction`` or ``headline``), each one
    in ``known``."""
    for j, column in enumerate(columns):
        if column not in known:
            near = difflib.get_close_matches(column, known, 1)
            raise InputError(path, f"{column!r} is not a board column"
                             + (f" (did you mean {near[0]!r}?)" if near else ""),
                             field=field_name if field_name.endswith("headline")
                             else f"{field_name}.{column}" if field_name.endswith("direction")
                             else f"{field_name}[{j}]",
                             expected=f"one of {', '.join(known)}")
    return tuple(columns)


def _date(path: str, field_name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        when.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InputError(path, f"{text!r} is not a date", field=field_name,
                         expected="UTC, e.g. 2026-01-01T00:00:00Z") from None
    if when.tzinfo is None:
        raise InputError(path, f"{text!r} has no time zone", field=field_name,
                         expected="UTC, e.g. 2026-01-01T00:00:00Z")
    return when.astimezone(UTC)
