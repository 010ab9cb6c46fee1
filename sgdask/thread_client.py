"""The in-process default: the evaluation's futures on a thread pool of this process.

A one-off command on one machine ran its graph on a ``distributed`` LocalCluster of threads,
which costs the import of ``distributed`` (0.6-1 s of a 3.6 s ``sgdask evaluate`` on a small
store) and buys nothing a thread pool does not give it: the kernels release the GIL, and
nothing leaves the process. ``ThreadClient`` answers the part of ``distributed.Client``
the evaluation uses (``submit`` with futures among the arguments, ``map``, ``gather``,
``scatter``, ``cancel``, ``nthreads``), so the pipeline runs the same graph on either; a
scheduler, a cluster file, a gateway or ``--processes`` still start a ``distributed``
cluster (``sgdask.cluster.dask_client``).

A task is handed to the pool only once the futures among its arguments are done, so no
pool thread ever waits on another task: the pool cannot deadlock, whatever its size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import as_completed as _as_completed
from typing import Any

THREADS_NAME = "in-process"  # the one "worker" nthreads() names


class ThreadClient:
    """``distributed.Client``'s submit/map/gather/scatter/cancel/nthreads on ``threads``
    threads of this process (a context manager: leaving it cancels what has not started
    and waits for what has)."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sgdask-task")
        self._closed = threading.Event()

    def __enter__(self) -> ThreadClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def nthreads(self) -> dict[str, int]:
        return {THREADS_NAME: self._threads}

    def submit(self, func: Callable[..., Any], *args: Any, pure: bool = True,
               **kwargs: Any) -> Future:
        """``func(*args, **kwargs)`` once every future among them is done (their results
        passed in their place); a failed one fails this one with its exception."""
        del pure  # every call runs: results are never shared by key here
        out: Future = Future()
        waiting = [a for a in (*args, *kwargs.values()) if isinstance(a, Future)]
        if not waiting:
            self._start(out, func, args, kwargs)
            return out
        left = [len(waiting)]
        lock = threading.Lock()

        def one_done(_: Future) -> None:
            with lock:
                left[0] -= 1
                ready = left[0] == 0
            if ready:
                self._start(out, func, args, kwargs)

        for dependency in waiting:
            dependency.add_done_callback(one_done)
        return out

    def map(self, func: Callable[..., Any], items: Iterable[Any], pure: bool = True,
            **kwargs: Any) -> list[Future]:
        return [self.submit(func, item, pure=pure, **kwargs) for item in items]

    def gather(self, futures: list[Future]) -> list[Any]:
        return [f.result() for f in futures]

    def scatter(self, data: list[Any], hash: bool = True, broadcast: bool = False
                ) -> list[Future]:
        """Each item as a done future (nothing to send: the tasks share this memory)."""
        del hash, broadcast
        return [_done(item) for item in data]

    def cancel(self, futures: list[Future]) -> None:
        for future in futures:
            future.cancel()

    def _start(self, out: Future, func: Callable[..., Any], args: tuple,
               kwargs: dict[str, Any]) -> None:
        if out.cancelled():
            return
        failed = next((a for a in (*args, *kwargs.values())
                       if isinstance(a, Future) and (a.cancelled() or a.exception())), None)
        if failed is not None:
            _fail(out, failed)
            return
        if self._closed.is_set():
            out.cancel()
            return
        try:
            self._pool.submit(_run, out, func, args, kwargs)
        except RuntimeError:  # the pool shut down between the check and the submit
            out.cancel()


def _run(out: Future, func: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    if not out.set_running_or_notify_cancel():
        return
    try:
        result = func(*(_value(a) for a in args),
                      **{k: _value(v) for k, v in kwargs.items()})
    except BaseException as err:  # handed to whoever waits on the future, as Dask does
        out.set_exception(err)
    else:
        out.set_result(result)


def _value(arg: Any) -> Any:
    return arg.result() if isinstance(arg, Future) else arg


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _fail(out: Future, failed: Future) -> None:
    """``out`` failed as the dependency ``failed`` did (cancelled: cancelled too)."""
    if failed.cancelled():
        out.cancel()
    elif out.set_running_or_notify_cancel():
        out.set_exception(failed.exception())


def as_completed(futures: list[Any]) -> Iterator[Any]:
    """The futures as they finish: a ``ThreadClient``'s or a ``distributed`` client's."""
    if all(isinstance(f, Future) for f in futures):
        return _as_completed(futures)
    from distributed import as_completed as distributed_completed

    return iter(distributed_completed(futures))
