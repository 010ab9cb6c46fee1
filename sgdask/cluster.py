"""Where Dask work runs: a given client, an existing scheduler, or an in-process LocalCluster."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dask.config
from distributed import Client, LocalCluster, as_completed

from sgdask.errors import SgdaskError

LOCAL = "local"
ClusterSpec = Client | str | None


def configured_scheduler() -> str | None:
    """Dask's own ``scheduler-address`` setting (``DASK_SCHEDULER_ADDRESS`` or a Dask config
    file), which ``distributed.Client()`` also connects to when given no address."""
    return dask.config.get("scheduler-address", None) or None


@contextmanager
def dask_client(client: Client | None = None, scheduler: str | None = None
                ) -> Iterator[Client]:
    """The given client, a client of ``scheduler`` (when none is named: of Dask's configured
    ``scheduler-address``, if set), or an in-process LocalCluster."""
    named = scheduler if scheduler != LOCAL else None
    address = named or configured_scheduler()
    if client is not None:
        yield client
    elif address:
        try:
            connected = Client(address, timeout="20s")
        except OSError as err:
            origin = "--scheduler" if named else "scheduler-address (DASK_SCHEDULER_ADDRESS)"
            raise SgdaskError(f"{origin} {address}: cannot connect ({err})") from err
        with connected:
            yield connected
    else:
        workers = max(1, min(2, os.cpu_count() or 1))
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as local:
            yield local


def map_tasks(func: Callable[..., Any], args: Sequence[tuple], cluster: ClusterSpec,
              progress: Callable[[Any], None] | None = None) -> list[Any]:
    """``[func(*a) for a in args]``, on the cluster when one is given (one task per item).

    ``cluster``: None runs in this process; a Client, a scheduler address or ``"local"``
    runs one Dask task per item. ``progress`` is called with each result as it arrives.
    Results come back in the order of ``args``.
    """
    if cluster is None:
        results = []
        for a in args:
            results.append(func(*a))
            if progress:
                progress(results[-1])
        return results
    given = cluster if isinstance(cluster, Client) else None
    address = cluster if isinstance(cluster, str) else None
    with dask_client(given, address) as client:
        futures = [client.submit(func, *a, pure=False) for a in args]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        try:
            for future in as_completed(futures):
                results[index[future.key]] = future.result()
                if progress:
                    progress(results[index[future.key]])
        finally:
            client.cancel(futures)
        return results
