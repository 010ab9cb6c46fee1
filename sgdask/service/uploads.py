"""Streaming multipart uploads straight into the registry's storage.

The request body is parsed as it arrives (``python_multipart``'s push parser); the file
part's bytes go to ``REGISTRY/uploads/<id>.upload`` chunk by chunk, never whole in memory
and never through a local temporary file when the registry is on an object store. The
upload becomes visible only when complete: on local disk it is written under
``uploads/.partial/`` and renamed, on an object store the (multipart) upload is completed
on commit and aborted otherwise. Past the size limit the request is answered 413.

A refused request's body is read to its end (up to ``DRAIN_LIMIT`` bytes) and dropped
before the answer, so the client reads the 401/413 instead of a connection reset; beyond
that the answer goes out at once and the connection is closed. A refused upload gives its
slot back (``refused``) before its body is drained.

A body must keep arriving: no bytes for ``body_timeout`` seconds, or not complete within
its phase's ``upload_seconds``, and the upload is dropped (408, the connection closed, one
line in the log, counted by ``SlowClients``).

While a file streams in, ``uploads/.inflight/<id>.<team key>.json`` names its team and is
rewritten every quarter lease (the server's heartbeat for it): every replica sharing the
registry counts it against the team's limits (reading only that team's markers). Whether a
marker still beats is judged by this server's own clock (``MarkerWatch``), never by the
time another host wrote into it, and ``sweep_orphans`` deletes only what a dead upload
left (older than ``SWEEP_LEASES`` leases, no live marker), and the temporary stores a worker
killed while converting left beside ``stores/<id>`` once that submission has moved on.

Fields must precede the file part (browsers send them in form order; ``sgdask submit``,
``requests`` and ``httpx`` put fields first), so authorization and limits are checked
before a single byte of the file is stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from sgdask.batch.registry import Registry, team_key, utc_now
from sgdask.batch.rerank import read_json, write_atomic
from sgdask.errors import Choose
from sgdask.formats.sniff import UPLOAD_HEAD, unscorable
from sgdask.io.archive import printable
from sgdask.io.fs import is_local, join
from sgdask.service.access import Refusal
from sgdask.service.queue import IN_PROGRESS, UPLOAD_SUFFIX

FIELD_CAPS = {"name": 1000, "paper": 4000, "board": 32, "phase": 64, "token": 512, "csrf": 256,
              "method": 1000, "description": 8000, "code": 4000, "external_data": 16}
ENVELOPE = 64 << 10  # what the multipart envelope and the fields may add to the file size
FILE_FIELD = "file"
DRAIN_LIMIT = 64 << 20  # a refused body is read up to this many bytes before the answer
BODY_TIMEOUT = 60.0  # seconds a body may send nothing before the upload is dropped
PARTIAL, IN_FLIGHT = ".partial", ".inflight"
SWEEP_LEASES = 3  # what a dead upload left is swept once this many leases old
#: a store being replaced (``--overwrite``) is written beside it, and the old one moved aside
LEFTOVER_STORE = re.compile(r"([0-9A-Za-z-]+)\.(?:tmp|trash)-[0-9a-f]{32}")


class UploadSink:
    """Where one upload's bytes go; nothing is visible before ``commit``. ``refusal``:
    why a file of these first bytes can never be scored by the phase (None: it may be)."""

    def __init__(self, registry: Registry, submission_id: str,
                 refusal: Callable[[bytes, str], str | None] = unscorable) -> None:
        self.refusal = refusal
        self.fs = registry.fs
        self.final = join(registry.path, "uploads", submission_id + UPLOAD_SUFFIX)
        self.local = is_local(self.fs)
        self.temp = join(registry.path, "uploads", PARTIAL,
                         f"{submission_id}-{uuid.uuid4().hex[:8]}")
        self.file: Any = None

    def open(self) -> None:
        target = self.temp if self.local else self.final
        self.fs.makedirs(self.fs._parent(target), exist_ok=True)
        # closed by commit or abort, possibly in another request step
        self.file = open(target, "wb") if self.local else self.fs.open(target, "wb")  # noqa: SIM115

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def commit(self) -> None:
        self.fs.makedirs(self.fs._parent(self.final), exist_ok=True)
        self.file.close()
        if self.local:
            os.replace(self.temp, self.final)

    def abort(self) -> None:
        if self.file is None:
            return
        if self.local:
            self.file.close()
            if os.path.exists(self.temp):
                os.unlink(self.temp)
        else:  # abort the multipart upload; never let __del__ commit a partial object
            self.file.discard()
            self.file.closed = True


@dataclass
class Upload:
    """What the request held: its fields, the uploaded file's name and size, the sink."""

    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0
    sink: UploadSink | None = None


StartFile = Callable[[dict[str, str]], Awaitable[UploadSink]]


class PartEvents:
    """The push parser's callbacks, queued so they can be handled asynchronously."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.header: list[bytes] = [b"", b""]
        self.done = False

    def callbacks(self) -> dict[str, Callable[..., None]]:
        def header_field(data: bytes, start: int, end: int) -> None:
            self.header[0] += data[start:end]

        def header_value(data: bytes, start: int, end: int) -> None:
            self.header[1] += data[start:end]

        def header_end() -> None:
            self.events.append(("header", (self.header[0].decode("latin-1").lower(),
                                           self.header[1])))
            self.header = [b"", b""]

        def data(data: bytes, start: int, end: int) -> None:
            self.events.append(("data", bytes(data[start:end])))

        def finished() -> None:
            self.done = True

        return {"on_part_begin": lambda: self.events.append(("begin", None)),
                "on_header_field": header_field, "on_header_value": header_value,
                "on_header_end": header_end,
                "on_headers_finished": lambda: self.events.append(("headers", None)),
                "on_part_data": data,
                "on_part_end": lambda: self.events.append(("end", None)),
                "on_end": finished}

    def take(self) -> list[tuple[str, Any]]:
        events, self.events = self.events, []
        return events


def boundary_of(request: Request) -> bytes:
    ctype, params = parse_options_header(request.headers.get("content-type"))
    if ctype != b"multipart/form-data" or not params.get(b"boundary"):
        raise Refusal(415, "expected a multipart/form-data upload")
    return params[b"boundary"]


def check_length(request: Request, limit: int) -> None:
    """413 before reading anything when the declared body is larger than the limit allows."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit + ENVELOPE:
        raise Refusal(413, too_large(limit))


def too_large(limit: int) -> str:
    return f"file: larger than the upload limit of {limit / 2**20:g} MiB"


class TooSlow(Refusal):
    """The body stalled or did not complete in time: answered 408, connection closed."""

    def __init__(self, message: str) -> None:
        super().__init__(408, message)


class SlowClients:
    """Clients dropped for being too slow (headers, a stalled body, an upload past its
    time): one log line each, with the count since the server started."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log, self.count = log, 0

    def drop(self, what: str) -> None:
        self.count += 1
        self.log(f"dropped a slow client: {what} ({self.count} since the server started)")


class Body:
    """The request body as it arrives, counted; knows whether it has ended, so the rest of
    a refused request can be read and dropped. Each read waits ``idle`` seconds at most,
    and none goes past ``deadline`` (``time.monotonic``; set once the phase is known)."""

    def __init__(self, request: Request, idle: float = BODY_TIMEOUT) -> None:
        self.receive = request.receive
        self.declared = request.headers.get("content-length")
        self.read, self.ended = 0, False
        self.idle, self.started = idle, anyio.current_time()
        self.deadline: float | None = None
        self.seconds: float | None = None  # the upload's time limit, for the message

    def limit_to(self, seconds: float | None) -> None:
        """The whole body must have arrived ``seconds`` after the request started."""
        self.seconds = seconds
        self.deadline = None if seconds is None else self.started + seconds

    async def next_message(self) -> dict[str, Any]:
        wait = self.idle
        if self.deadline is not None:
            wait = min(wait, self.deadline - anyio.current_time())
        with anyio.move_on_after(max(wait, 0)):
            return await self.receive()
        if self.deadline is not None and anyio.current_time() >= self.deadline:
            raise TooSlow(f"file: the upload did not complete within {self.seconds:g} s "
                          "(the phase's upload_seconds)")
        raise TooSlow(f"file: the upload stalled (no bytes for {self.idle:g} s)")

    async def chunks(self) -> AsyncIterator[bytes]:
        while not self.ended:
            message = await self.next_message()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            self.ended = not message.get("more_body", False)
            data = message.get("body", b"")
            self.read += len(data)
            if data:
                yield data

    async def drain(self, budget: int = DRAIN_LIMIT) -> bool:
        """Read and drop the rest, ``budget`` bytes in all at most; True when the body
        ended (the connection can answer and stay open), False when it is too long."""
        if self.declared is not None and self.declared.isdigit() and \
                int(self.declared) > budget:
            return self.ended
        async for _ in self.chunks():
            if self.read > budget:
                return False
        return True


async def receive(request: Request, body: Body, limit: int, start_file: StartFile,
                  refused: Callable[[], Awaitable[None]]) -> Upload:
    """Read the whole multipart body; the file goes to the sink ``start_file`` returns
    (called with the fields read so far; it may refuse). The caller commits or aborts.

    Refused (any error but a disconnect): ``refused`` is awaited (the upload gives its slot
    back), then the rest of the body is drained; when it is too long to drain or too slow,
    ``request.state.close`` is set (answer with Connection: close)."""
    upload = Upload()
    try:
        return await read_upload(request, body, upload, limit, start_file)
    except BaseException as err:
        if upload.sink is not None:
            await anyio.to_thread.run_sync(upload.sink.abort)
        with anyio.CancelScope(shield=True):
            await refused()
        if isinstance(err, TooSlow):
            request.state.close = True
        elif isinstance(err, Exception) and not isinstance(err, ClientDisconnect):
            try:
                request.state.close = not await body.drain()
            except (ClientDisconnect, TooSlow):
                request.state.close = True
        raise


async def read_upload(request: Request, body: Body, upload: Upload, limit: int,
                      start_file: StartFile) -> Upload:
    check_length(request, limit)
    events = PartEvents()
    parser = MultipartParser(boundary_of(request), events.callbacks())
    part = PartState()
    async for chunk in body.chunks():
        try:
            parser.write(chunk)
        except MultipartParseError as err:
            raise Refusal(400, f"malformed multipart body ({err})") from None
        for kind, value in events.take():
            await handle(kind, value, part, upload, limit, start_file)
    if not events.done:
        raise Refusal(400, "incomplete upload (the body ended early)")
    if upload.sink is None:
        raise Refusal(400, f"{FILE_FIELD}: missing")
    return upload


@dataclass
class PartState:
    name: str | None = None
    filename: str | None = None
    buffer: bytearray = field(default_factory=bytearray)
    head: bytearray = field(default_factory=bytearray)  # the file's first bytes


async def handle(kind: str, value: Any, part: PartState, upload: Upload, limit: int,
                 start_file: StartFile) -> None:
    if kind == "begin":
        part.name, part.filename, part.buffer, part.head = None, None, bytearray(), bytearray()
    elif kind == "header" and value[0] == "content-disposition":
        _, params = parse_options_header(value[1])
        part.name = params.get(b"name", b"").decode("utf-8", "replace")
        filename = params.get(b"filename")
        part.filename = None if filename is None else filename.decode("utf-8", "replace")
    elif kind == "headers":
        await start_part(part, upload, start_file)
    elif kind == "data" and part.name == FILE_FIELD:
        upload.size += len(value)
        if upload.size > limit:
            raise Refusal(413, too_large(limit))
        part.head += value[:UPLOAD_HEAD - len(part.head)]
        await anyio.to_thread.run_sync(upload.sink.write, value)
    elif kind == "data":
        part.buffer += value
        if len(part.buffer) > FIELD_CAPS[part.name]:
            raise Refusal(400, f"{part.name}: too long")
    elif kind == "end" and part.name == FILE_FIELD:
        refused = upload.sink.refusal(bytes(part.head), upload.filename or "upload")
        if refused is not None:  # answered now, not 202 and a failed conversion later
            raise Refusal(415, refused)
    elif kind == "end":
        try:
            upload.fields[part.name] = part.buffer.decode("utf-8")
        except UnicodeDecodeError:
            raise Refusal(400, f"{part.name}: not UTF-8 text") from None


async def start_part(part: PartState, upload: Upload, start_file: StartFile) -> None:
    if part.name == FILE_FIELD:
        if upload.sink is not None:
            raise Refusal(400, f"{FILE_FIELD}: only one file per upload")
        sink = await start_file(dict(upload.fields))
        await anyio.to_thread.run_sync(sink.open)
        upload.sink = sink
        upload.filename = printable(os_basename(part.filename or "upload"))[:200]
    elif part.name not in FIELD_CAPS:
        name = printable(part.name or "")[:40]
        raise Refusal(400, f"unexpected form field {name!r} "
                      f"{Choose(name, (*FIELD_CAPS, FILE_FIELD)).render('http')}")
    elif part.name in upload.fields:
        raise Refusal(400, f"{part.name}: given twice")


def os_basename(name: str) -> str:
    """The last component of a client's file name, for display only (never a path)."""
    return name.replace("\\", "/").rsplit("/", 1)[-1] or "upload"


# --- in-flight markers and orphans ---------------------------------------------------------

class MarkerWatch:
    """When this server saw each in-flight marker change: a marker beats while it changed
    within the lease by this server's monotonic clock, whatever time the host that wrote
    it put in it. A marker first seen is as old as the storage says it last changed (its
    modification time: none, new); one seen changed counts as beating for a lease more."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seen: dict[str, tuple[str, float]] = {}  # path -> (last beat, seen changing at)
        self.lock = threading.Lock()

    def beating(self, path: str, beat: str, within: float,
                modified: datetime | None = None) -> bool:
        """Whether the marker at ``path``, now carrying ``beat`` (``modified`` by the
        storage's listing), changed within ``within`` seconds of this server's clock."""
        now = self.clock()
        with self.lock:
            last = self.seen.get(path)
            if last is None:
                age = 0.0 if modified is None else \
                    max((datetime.now(UTC) - modified).total_seconds(), 0.0)
                last = self.seen[path] = (beat, now - age)
            elif last[0] != beat:
                last = self.seen[path] = (beat, now)
            return now - last[1] < within

    def forget(self, present: set[str], folder: str) -> None:
        """Drop what this server remembers of ``folder``'s markers that are gone."""
        with self.lock:
            for path in [p for p in self.seen if p.startswith(folder) and p not in present]:
                del self.seen[path]


def mark_in_flight(registry: Registry, submission_id: str, team: str) -> None:
    """Write (or rewrite: the heartbeat) the marker of an upload streaming in."""
    registry.fs.makedirs(join(registry.path, "uploads", IN_FLIGHT), exist_ok=True)
    record = {"submission_id": submission_id, "team": team, "at": utc_now(),
              "server": f"{socket.gethostname()}-{os.getpid()}", "beat": uuid.uuid4().hex}
    write_atomic(registry.fs, _in_flight_path(registry, submission_id, team),
                 json.dumps(record).encode())


def unmark_in_flight(registry: Registry, submission_id: str, team: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        registry.fs.rm(_in_flight_path(registry, submission_id, team))


def uploads_in_flight(registry: Registry, lease: float, watch: MarkerWatch,
                      team: str | None = None) -> dict[str, str]:
    """Submission id -> team of every upload (of ``team``; None: of every team) whose
    marker beat within ``lease`` seconds (in any server sharing the registry)."""
    return _beating(registry, lease, watch, team)


def sweep_orphans(registry: Registry, lease: float, watch: MarkerWatch) -> list[str]:
    """Delete what dead uploads left (partial files, complete uploads never registered,
    their markers): only files older than ``SWEEP_LEASES`` leases whose upload has no
    marker that beat within that time, so with several servers on one registry nothing
    alive is touched; and the stores dead conversions left. Returns the names deleted."""
    cutoff = datetime.now(UTC) - timedelta(seconds=SWEEP_LEASES * lease)
    alive = _beating(registry, SWEEP_LEASES * lease, watch, None)
    swept = []
    for folder, id_of in ((PARTIAL, _partial_id), (IN_FLIGHT, _stem_id), ("", _stem_id)):
        for info in _files(registry, folder):
            name = info["name"].rsplit("/", 1)[-1]
            changed = _modified(info)
            if changed is None or changed > cutoff or id_of(name) in alive:
                continue
            if not folder and (not name.endswith(UPLOAD_SUFFIX)
                               or registry.entry(id_of(name)) is not None):
                continue  # a registered upload, or not an upload at all
            try:
                registry.fs.rm(info["name"])
            except FileNotFoundError:
                continue  # another server swept it first
            swept.append(f"{folder}/{name}" if folder else name)
    return swept + _swept_stores(registry, cutoff)


def _swept_stores(registry: Registry, cutoff: datetime) -> list[str]:
    """Delete ``stores/<id>.tmp-*`` and ``stores/<id>.trash-*`` (what ``--overwrite`` writes
    beside a store, left by a worker killed while converting) older than ``cutoff`` whose
    submission is past converting: no process writes them any more (a reclaimed
    submission is converted into a temporary store of its own)."""
    path = join(registry.path, "stores")
    registry.fs.invalidate_cache(path)
    try:
        found = [(info, LEFTOVER_STORE.fullmatch(info["name"].rsplit("/", 1)[-1]))
                 for info in registry.fs.ls(path, detail=True) if info["type"] == "directory"]
    except FileNotFoundError:
        return []
    found = [(info, m) for info, m in found if m and (_modified(info) or cutoff) < cutoff]
    if not found:
        return []
    states = {e.submission_id: e.status for e in registry.entries()}
    swept = []
    for info, match in found:
        if states.get(match.group(1)) in (None, "received", *IN_PROGRESS):
            continue  # unknown (being registered) or still being converted
        with contextlib.suppress(FileNotFoundError):
            registry.fs.rm(info["name"], recursive=True)
            swept.append(f"stores/{match.group(0)}")
    return swept


def _in_flight_path(registry: Registry, submission_id: str, team: str) -> str:
    return join(registry.path, "uploads", IN_FLIGHT,
                f"{submission_id}.{team_key(team)}.json")


def _beating(registry: Registry, within: float, watch: MarkerWatch, team: str | None
             ) -> dict[str, str]:
    """Submission id -> team of the markers (of ``team``, or all) that beat within
    ``within`` seconds, as ``watch`` saw them."""
    folder = join(registry.path, "uploads", IN_FLIGHT)
    infos = [i for i in _files(registry, IN_FLIGHT) if i["name"].endswith(".json")]
    watch.forget({i["name"] for i in infos}, folder)
    suffix = None if team is None else f".{team_key(team)}.json"
    found = {}
    for info in infos:
        if suffix is not None and not info["name"].endswith(suffix):
            continue
        try:
            record = read_json(registry.fs, info["name"])
        except (ValueError, OSError):
            continue  # a marker being replaced
        if not isinstance(record, dict) or not isinstance(record.get("submission_id"), str):
            continue
        if watch.beating(info["name"], str(record.get("beat", record.get("at"))), within,
                         _modified(info)):
            found[record["submission_id"]] = str(record.get("team"))
    return found


def _files(registry: Registry, folder: str) -> list[dict[str, Any]]:
    path = join(registry.path, "uploads", folder) if folder else join(registry.path, "uploads")
    registry.fs.invalidate_cache(path)
    try:
        return [i for i in registry.fs.ls(path, detail=True) if i["type"] == "file"]
    except FileNotFoundError:
        return []


def _modified(info: dict[str, Any]) -> datetime | None:
    """When a listed file last changed (local ``mtime``, object store ``LastModified``)."""
    value = info.get("mtime", info.get("LastModified"))
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return None


def _partial_id(name: str) -> str:
    return name.rsplit("-", 1)[0]


def _stem_id(name: str) -> str:
    return name.partition(".")[0]
