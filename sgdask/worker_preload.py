"""What a Dask scheduler or worker process of sgdask's evaluations needs before its first
task, done when it starts: ``dask worker --preload sgdask.worker_preload`` and
``dask scheduler --preload sgdask.worker_preload``, or Dask's configuration
(``distributed.worker.preload``) for a LocalCluster. sgdask's own LocalCluster of processes
does not preload it: its workers run one thread each, so no task waits on another's
numba lock, and the preparation would only move from the first tasks to the start (about
2 CPU-s a worker, paid even by a cluster that never runs a kernel).

Without it, each fresh worker process paid at its first tasks what no task should wait on:
importing sgdask's evaluation modules (to unpickle the task) and zarr (at the first read),
and at the first kernel call numba filling its CPU target under its compiler lock (its
typing and lowering registries and its runtime: 1.5 of the 1.9 s of first kernel calls of a
worker process; loading the cached kernels themselves is the rest); and a scheduler
imported the evaluation modules to unpickle the first graph before any task could start.
Here they happen once per process, before the worker registers with the scheduler: a fresh
cluster's first task started 5.3 s after the job, now 0.4 s (``docs/performance.md``,
*Many models on a cluster*).
"""

from __future__ import annotations

import importlib
from typing import Any

#: what the evaluation's tasks are unpickled from (the scheduler unpickles the graph too)
MODULES = ("sgdask.pipeline", "sgdask.batch.many")
#: what a worker's first read imports
WORKER_MODULES = ("zarr", "zarr.codecs", "zarr.storage")


def dask_setup(server: Any) -> None:
    """Dask's preload hook: import the evaluation modules; on a worker, also zarr and
    numba's CPU target filled (a scheduler runs no task)."""
    from distributed import Worker

    worker = isinstance(server, Worker)
    for name in (*MODULES, *(WORKER_MODULES if worker else ())):
        importlib.import_module(name)
    if worker:
        fill_numba_target()


def fill_numba_target() -> None:
    """Numba's CPU target filled (its registries and runtime), as the first call of a
    cached kernel would fill it, holding numba's compiler lock."""
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()
    cpu_target.typing_context.refresh()
