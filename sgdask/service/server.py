"""``sgdask serve`` (uvicorn + the worker in a thread) and ``sgdask worker`` (the worker alone)."""

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
from sgdask.service.worker import Worker, WorkerConfig

Log = Callable[[str], None]


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


def serve(service: ServiceConfig, workers: list[WorkerConfig], scheduler: str | Local | None,
          host: str = "127.0.0.1", port: int = 8000, log: Log = log_stderr) -> None:
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
    config = uvicorn.Config(create_app(service, lifespan), log_level="warning",
                            proxy_headers=True, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


def work(configs: list[WorkerConfig], scheduler: str | Local | None,
         log: Log = log_stderr) -> None:
    """``sgdask worker`` (one queue, or one per phase): until SIGINT or SIGTERM (finishing
    the current step first)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    run_workers(configs, scheduler, stop, log)
