"""``sgdask serve`` (uvicorn + the worker in a thread) and ``sgdask worker`` (the worker alone).

uvicorn bounds how long a connection may sit idle between requests (its keep-alive
timeout) but not how long a request's headers may take to arrive: ``guarded_protocol``
closes a connection whose request line and headers are not complete ``header_timeout``
seconds after it opened (or after its previous answer), one line in the log each (a
slowloris client holds no connection for long). Bodies are bounded by the application
(``uploads.Body``: an idle timeout and the phase's ``upload_seconds``).
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from sgdask.cluster import Local, dask_client
from sgdask.service.app import ServiceConfig, create_app
from sgdask.service.uploads import SlowClients
from sgdask.service.worker import Worker, WorkerConfig

Log = Callable[[str], None]
HEADER_TIMEOUT = 10.0  # seconds a request's line and headers may take to arrive


def log_stderr(line: str) -> None:
    print(f"sgdask: {line}", file=sys.stderr, flush=True)


def run_workers(configs: list[WorkerConfig], scheduler: str | Local | None,
                stop: threading.Event, log: Log = log_stderr) -> None:
    """Work the queues (one per phase) on one cluster (``scheduler``, or a LocalCluster)
    until ``stop``, each in its own thread."""
    with dask_client(None, scheduler) as client:
        threads = [threading.Thread(target=Worker(config, client, log).run, args=(stop,),
                                    name=f"sgdask-worker-{i}", daemon=True)
                   for i, config in enumerate(configs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def worker_thread(configs: list[WorkerConfig], scheduler: str | Local | None,
                  stop: threading.Event, log: Log) -> threading.Thread:
    def main() -> None:
        try:
            run_workers(configs, scheduler, stop, log)
        except Exception as err:  # the server keeps taking uploads; say why none is processed
            log(f"error: the worker stopped: {type(err).__name__}: {err}")
    thread = threading.Thread(target=main, name="sgdask-workers", daemon=True)
    thread.start()
    return thread


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket (``port`` 0: a free one), so the URL is known before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def guarded_protocol(header_timeout: float, slow: SlowClients) -> type:
    """uvicorn's HTTP protocol, closing a connection whose request headers are not complete
    within ``header_timeout`` seconds of its opening or of its previous answer."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class Guarded(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        header_timer: Any = None
        idle_after_answer = False  # armed after an answer, no byte of a request since

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.arm_header_timer(False)

        def data_received(self, data: bytes) -> None:
            self.idle_after_answer = False
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self.arm_header_timer(True)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
            super().connection_lost(exc)

        def arm_header_timer(self, after_answer: bool) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
            self.idle_after_answer = after_answer
            self.header_timer = self.loop.call_later(header_timeout, self.headers_late,
                                                     self.cycle)

        def headers_late(self, cycle: Any) -> None:
            """No request began since the timer was armed (``cycle`` is still the one
            then): drop the connection, unless it is closing or idle between requests
            (uvicorn's keep-alive timeout closes those)."""
            self.header_timer = None
            if self.cycle is cycle and not self.transport.is_closing() and \
                    not self.idle_after_answer:
                client = self.client[0] if self.client else "a client"
                slow.drop(f"{client}: request headers not complete within "
                          f"{header_timeout:g} s")
                self.transport.close()

    return Guarded


def uvicorn_config(app: Any, slow: SlowClients, header_timeout: float = HEADER_TIMEOUT,
                   **options: Any) -> Any:
    """uvicorn's configuration for the service: its HTTP protocol with the header timeout."""
    import uvicorn

    return uvicorn.Config(app, http=guarded_protocol(header_timeout, slow), **options)


def serve(service: ServiceConfig, workers: list[WorkerConfig], scheduler: str | Local | None,
          host: str = "127.0.0.1", port: int = 8000, log: Log = log_stderr,
          header_timeout: float = HEADER_TIMEOUT) -> None:
    """Serve until interrupted; the workers (one per phase, or none) run in threads
    meanwhile."""
    import uvicorn

    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        thread = worker_thread(workers, scheduler, stop, log) if workers else None
        yield
        stop.set()
        if thread is not None:
            thread.join(timeout=30)

    if not service.tokens and not service.open_uploads:
        log("warning: no --tokens file and no --open-uploads: every upload will be refused")
    sock = bound_socket(host, port)
    shown = f"[{host}]" if ":" in host else host
    log(f"serving http://{shown}:{sock.getsockname()[1]}/ (registry {service.registry}, "
        f"board {service.out}; {len(workers) or 'no'} worker(s) in this process)")
    slow = SlowClients(log)
    config = uvicorn_config(create_app(service, lifespan, log, slow), slow, header_timeout,
                            log_level="warning", proxy_headers=True,
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


def work(configs: list[WorkerConfig], scheduler: str | Local | None,
         log: Log = log_stderr) -> None:
    """``sgdask worker`` (one queue, or one per phase): until SIGINT or SIGTERM (finishing
    the current step first)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    run_workers(configs, scheduler, stop, log)
