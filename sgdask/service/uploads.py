"""Streaming multipart uploads straight into the registry's storage.

The request body is parsed as it arrives (``python_multipart``'s push parser); the file
part's bytes go to ``REGISTRY/uploads/<id>.upload`` chunk by chunk, never whole in memory
and never through a local temporary file when the registry is on an object store. The
upload becomes visible only when complete: on local disk it is written under
``uploads/.partial/`` and renamed, on an object store the (multipart) upload is completed
on commit and aborted otherwise. Past the size limit the request is answered 413 at once.

Fields must precede the file part (browsers send them in form order; ``sgdask submit``,
``requests`` and ``httpx`` put fields first), so authorization and limits are checked
before a single byte of the file is stored.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from sgdask.batch.registry import Registry
from sgdask.io.archive import printable
from sgdask.io.fs import is_local, join
from sgdask.service.access import Refusal
from sgdask.service.queue import UPLOAD_SUFFIX

FIELD_CAPS = {"name": 1000, "paper": 4000, "board": 32, "token": 512, "csrf": 256}
ENVELOPE = 64 << 10  # what the multipart envelope and the fields may add to the file size
FILE_FIELD = "file"


class UploadSink:
    """Where one upload's bytes go; nothing is visible before ``commit``."""

    def __init__(self, registry: Registry, submission_id: str) -> None:
        self.fs = registry.fs
        self.final = join(registry.path, "uploads", submission_id + UPLOAD_SUFFIX)
        self.local = is_local(self.fs)
        self.temp = join(registry.path, "uploads", ".partial",
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


async def receive(request: Request, limit: int, start_file: StartFile) -> Upload:
    """Read the whole multipart body; the file goes to the sink ``start_file`` returns
    (called with the fields read so far; it may refuse). The caller commits or aborts."""
    check_length(request, limit)
    events = PartEvents()
    parser = MultipartParser(boundary_of(request), events.callbacks())
    upload, part = Upload(), PartState()
    try:
        async for chunk in request.stream():
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
    except BaseException:
        if upload.sink is not None:
            await anyio.to_thread.run_sync(upload.sink.abort)
        raise


@dataclass
class PartState:
    name: str | None = None
    filename: str | None = None
    buffer: bytearray = field(default_factory=bytearray)


async def handle(kind: str, value: Any, part: PartState, upload: Upload, limit: int,
                 start_file: StartFile) -> None:
    if kind == "begin":
        part.name, part.filename, part.buffer = None, None, bytearray()
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
        await anyio.to_thread.run_sync(upload.sink.write, value)
    elif kind == "data":
        part.buffer += value
        if len(part.buffer) > FIELD_CAPS[part.name]:
            raise Refusal(400, f"{part.name}: too long")
    elif kind == "end" and part.name != FILE_FIELD:
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
        raise Refusal(400, f"unexpected form field {printable(part.name or '')[:40]!r}")
    elif part.name in upload.fields:
        raise Refusal(400, f"{part.name}: given twice")


def os_basename(name: str) -> str:
    """The last component of a client's file name, for display only (never a path)."""
    return name.replace("\\", "/").rsplit("/", 1)[-1] or "upload"
