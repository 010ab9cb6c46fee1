"""Exclusive locks on any fsspec URL that notice their owner's death.

A lock is a small JSON file, created exclusively (on local disk written aside and hard-linked
into place, so a reader never sees half of it; on object stores a conditional PUT). It
records its holder (host, pid, the process's start time, a random token) and a heartbeat
(``since``, ``beat``) that a daemon thread refreshes every ``lease / 4`` seconds while the
lock is held.

A contender takes a lock over at once when its holder is a process of this host that is
gone (its pid dead, or reused by a process started at another time), and after ``lease``
seconds without a heartbeat otherwise (a holder on another host: the hosts' clocks must agree
to well within the lease). Breaking the lock of token T first needs the exclusive creation of
``<lock>.takeover-T``, which only one contender wins, so two contenders that both find a lock
dead never both take it. A lock is released only while it still carries its holder's token.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any

import psutil

from sgdask.errors import SgdaskError
from sgdask.io.fs import StorageOptions, fault_detail, filesystem, is_local, is_storage_fault

#: seconds without a heartbeat after which a lock's holder is presumed dead (``--lease``)
DEFAULT_LEASE = 60.0
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
#: a recorded start time further than this from the running process's: the pid was reused
START_TOLERANCE = 1.0
ATTEMPTS = 3

Log = Callable[[str], None]


class LockHeld(SgdaskError):
    """Another live process holds the lock."""


@contextmanager
def exclusive_lock(url: str, options: StorageOptions | None, lease: float = DEFAULT_LEASE,
                   log: Log | None = None, holder: str = "another process") -> Iterator[None]:
    """Hold the lock file ``url`` for the duration, its heartbeat refreshed meanwhile; a
    lock whose holder is gone is taken over (with a line to ``log``), a live one raises
    ``LockHeld`` naming ``holder`` (who else takes this lock, e.g. "another rerank")."""
    fs, path = filesystem(url, options)
    mine = _holder_record()
    _acquire(fs, path, url, mine, lease, log or (lambda _: None), holder)
    stop = threading.Event()
    beating = threading.Thread(target=_beat_until, args=(fs, path, mine, lease, stop, log),
                               daemon=True, name=f"sgdask-lock-{mine['token'][:8]}")
    beating.start()
    try:
        yield
    finally:
        stop.set()
        beating.join(timeout=10)
        _release(fs, path, mine["token"], log)


def create_exclusive(fs: Any, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists (then False); all or nothing:
    on local disk written under a temporary name and hard-linked into place (``link``
    fails if the name exists), on object stores a conditional PUT (``If-None-Match``)."""
    fs.makedirs(fs._parent(path), exist_ok=True)
    if is_local(fs):
        tmp = f"{path}.new-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True
    try:
        with fs.open(path, "xb") as f:
            f.write(data)
    except FileExistsError:
        return False
    return True


def _stamp() -> str:
    return datetime.now(UTC).strftime(STAMP_FORMAT)


def _age(stamp: Any) -> float | None:
    """Seconds since a recorded stamp (None: none, or not one)."""
    try:
        then = datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None
    return (datetime.now(UTC) - then).total_seconds()


def _holder_record() -> dict[str, Any]:
    """What a lock of this process records."""
    now = _stamp()
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": psutil.Process().create_time(), "token": uuid.uuid4().hex,
            "since": now, "beat": now}


def _read(fs: Any, path: str) -> tuple[bytes, dict[str, Any]] | None:
    """A lock file's bytes and record (empty when unreadable); None when there is none."""
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        record = None
    return raw, record if isinstance(record, dict) else {}


def _key(raw: bytes, record: dict[str, Any]) -> str:
    """What identifies one holding of a lock: its token (a hash of the bytes of a lock
    written without one)."""
    token = record.get("token")
    return token if isinstance(token, str) and token.isalnum() \
        else hashlib.sha256(raw).hexdigest()[:32]


def _owner_gone(record: dict[str, Any]) -> bool:
    """Whether the holder is a process of this host that no longer runs."""
    pid, started = record.get("pid"), record.get("started")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        return isinstance(started, (int, float)) and \
            abs(process.create_time() - started) > START_TOLERANCE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:  # someone else's live process
        return False


def _silence(fs: Any, path: str, record: dict[str, Any]) -> float | None:
    """Seconds since the holder's last heartbeat (the file's age when it records none)."""
    age = _age(record.get("beat") or record.get("since"))
    if age is not None:
        return age
    try:
        modified = fs.modified(path)
    except Exception:  # a storage without modification times: no age known
        return None
    if modified.tzinfo is None:
        modified = modified.astimezone(UTC)
    return (datetime.now(UTC) - modified).total_seconds()


def _takeover_reason(fs: Any, path: str, record: dict[str, Any], lease: float) -> str | None:
    """Why the lock ``record`` may be taken over now (None: its holder is alive)."""
    if _owner_gone(record):
        return "process gone"
    silence = _silence(fs, path, record)
    if silence is not None and silence > lease:
        return f"no heartbeat for {silence:.0f} s"
    return None


def _acquire(fs: Any, path: str, url: str, mine: dict[str, Any], lease: float, log: Log,
             holder: str) -> None:
    data = json.dumps(mine).encode()
    record: dict[str, Any] = {}
    for _ in range(ATTEMPTS):
        if create_exclusive(fs, path, data):
            found = _read(fs, path)
            if found is not None and found[1].get("token") == mine["token"]:
                return
            continue
        found = _read(fs, path)
        if found is None:  # released meanwhile
            continue
        raw, record = found
        reason = _takeover_reason(fs, path, record, lease)
        if reason is None:
            break
        if _broken(fs, path, _key(raw, record), mine, lease):
            log(f"{url}: taking over the lock of host {record.get('host')} pid "
                f"{record.get('pid')} ({reason})")
    held = (f"held by {record.get('host')} pid {record.get('pid')} since "
            f"{record.get('since')}" if record else "its lock file is being written")
    raise LockHeld(f"{url}: {holder} is running ({held}); try again later")


def _broken(fs: Any, path: str, key: str, mine: dict[str, Any], lease: float) -> bool:
    """Remove the lock holding ``key`` if this contender is the one to break it (the one
    that creates ``<lock>.takeover-<key>``); True when it did. A takeover file left by a
    contender that died while breaking is removed once older than the lease."""
    takeover = f"{path}.takeover-{key}"
    if not create_exclusive(fs, takeover, json.dumps(mine).encode()):
        found = _read(fs, takeover)
        if found is not None and (_owner_gone(found[1])
                                  or (_silence(fs, takeover, found[1]) or 0) > lease):
            with suppress(FileNotFoundError):
                fs.rm(takeover)
        return False
    try:
        found = _read(fs, path)
        if found is None or _key(*found) != key:  # released, or broken by someone else
            return False
        with suppress(FileNotFoundError):
            fs.rm(path)
        return True
    finally:
        with suppress(FileNotFoundError):
            fs.rm(takeover)


def _beat_until(fs: Any, path: str, mine: dict[str, Any], lease: float,
                stop: threading.Event, log: Log | None) -> None:
    """Refresh the heartbeat every ``lease / 4`` seconds until ``stop``; a lock that is no
    longer this holder's (taken over after a stall longer than the lease) is left alone."""
    while not stop.wait(max(0.05, lease / 4)):
        try:
            found = _read(fs, path)
            if found is None or found[1].get("token") != mine["token"]:
                if log is not None:
                    log(f"{path}: the lock was taken over by another process")
                return
            _replace(fs, path, json.dumps({**mine, "beat": _stamp()}).encode())
        except Exception as err:  # an unreachable store: the next beat may succeed
            if log is not None:
                log(f"{path}: heartbeat failed: {type(err).__name__}: {err}")


def _replace(fs: Any, path: str, data: bytes) -> None:
    """Rewrite a file in one step: a rename on local disk, a single PUT on object stores."""
    if is_local(fs):
        tmp = f"{path}.beat-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def _release(fs: Any, path: str, token: str, log: Log | None) -> None:
    """Remove the lock if it is still this holder's. A storage that fails here leaves it
    to be taken over (this process gone, or its heartbeat silent): the error that may be
    on its way out (the same storage failing the work) is the one to report."""
    try:
        found = _read(fs, path)
        if found is not None and found[1].get("token") == token:
            with suppress(FileNotFoundError):
                fs.rm(path)
    except Exception as err:
        if not is_storage_fault(err):
            raise
        if log is not None:
            log(f"{path}: could not release the lock ({fault_detail(err)})")
