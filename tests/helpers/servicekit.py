"""Helpers for the benchmarking service tests: real `sgdask serve` / `sgdask worker`
processes on 127.0.0.1, bounded waits, reading a registry's state from its files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
SERVING = re.compile(r"serving (http://\S+?)/ ")
_POLLERS = threading.local()


def _poller() -> httpx.Client:
    """This thread's client for the polling helpers: a new ``httpx.get`` builds a TLS context
    each call (about 20 ms of CPU), and ``wait_final`` polls every 0.3 s."""
    client = getattr(_POLLERS, "client", None)
    if client is None:
        client = _POLLERS.client = httpx.Client()
    return client


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """``check()``'s first truthy value, polling; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Proc:
    """A `python -m sgdask ...` process in its own session, output in a log file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "sgdask", *args],
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         env={**os.environ, **(env or {})})

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, timeout: float = 90) -> str:
        """The server's base URL, from its first log line."""
        def found() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.text()}")
            match = SERVING.search(self.text())
            return match.group(1) if match else None
        base = wait_for(found, timeout, "the server to listen")
        wait_for(lambda: healthy(base), timeout, "the server to answer")
        return base

    def signal(self, sig: signal.Signals) -> None:
        """``sig`` to the process group (the process may have exited meanwhile)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, no clean-up: the process and anything it started."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL if it does not stop in time."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def healthy(base: str) -> bool:
    try:
        return _poller().get(f"{base}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def upload(base: str, token: str | None, path: Path, name: str, **fields: str
           ) -> httpx.Response:
    with path.open("rb") as f:
        return httpx.post(f"{base}/api/submissions", headers=auth(token),
                          data={"name": name, **fields},
                          files={"file": (path.name, f, "application/zip")}, timeout=60)


def status(base: str, token: str | None, submission_id: str) -> dict[str, Any]:
    response = _poller().get(f"{base}/api/submissions/{submission_id}", headers=auth(token),
                             timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def wait_final(base: str, token: str | None, submission_id: str, timeout: float
               ) -> dict[str, Any]:
    """The submission's JSON once ranked, rejected or failed."""
    def final() -> dict[str, Any] | None:
        doc = status(base, token, submission_id)
        return doc if doc["status"] in ("ranked", "rejected", "failed") else None
    return wait_for(final, timeout, f"{submission_id} to be ranked or rejected", 0.3)


def history(registry: Path, submission_id: str) -> list[dict[str, Any]]:
    """The entry's status records, read from the files."""
    folder = registry / "status" / submission_id
    if not folder.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def entry_ids(registry: Path) -> set[str]:
    folder = registry / "entries"
    return {p.stem for p in folder.glob("*.json")} if folder.is_dir() else set()


def stored_uploads(registry: Path) -> list[Path]:
    """Complete uploads (``.partial`` ones are invisible by design)."""
    folder = registry / "uploads"
    return sorted(folder.glob("*.upload")) if folder.is_dir() else []


@contextlib.contextmanager
def app_in_thread(config: Any, log: Callable[[str], None] = lambda _: None,
                  header_timeout: float | None = None) -> Iterator[str]:
    """The service's app (no worker) for ``config`` on uvicorn in a thread on 127.0.0.1,
    configured as ``sgdask serve`` configures it (slow-client guard, header timeout): its
    base URL; ``log`` receives what the app logs."""
    import uvicorn

    from sgdask.service.app import create_app
    from sgdask.service.server import bound_socket, uvicorn_config
    from sgdask.service.uploads import SlowClients

    slow = SlowClients(log)
    sock = bound_socket("127.0.0.1", 0)
    timeout = () if header_timeout is None else (header_timeout,)
    server = uvicorn.Server(uvicorn_config(create_app(config, log=log, slow=slow), slow,
                                           *timeout, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            thread.join(0.05)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
