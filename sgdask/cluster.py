"""Where Dask work runs: a given client, an existing scheduler, a cluster started for the
command, a LocalCluster of worker processes, or (the default) threads of this process.

The local choices use the cores this process may use (CPU affinity and the cgroup CPU
quota, not the host's count), or ``--workers N``. By default they are threads of this
process (``sgdask.thread_client``: no ``distributed`` cluster, nor its import): the kernels
are compiled with numba and release the GIL, as do the decompressors, pyarrow and zarr, so
threads run in parallel without starting (and importing sgdask into) worker processes
(``README``: Speed, start-up).
"""

from __future__ import annotations

import math
import os
import site
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from sgdask.errors import SettingError, SgdaskError

if TYPE_CHECKING:  # dask and distributed load where a cluster is used: not for `--help`
    from distributed import Client

    from sgdask.thread_client import ThreadClient

    AnyClient = Client | ThreadClient  # what the evaluation submits its tasks to

LOCAL = "local"
LOCAL_PROCESSES = False  # threads (see the module docstring); processes=True for isolation
DEFAULT_WAIT = 600.0  # seconds a started cluster's first worker may take to join


@dataclass(frozen=True)
class Local:
    """An in-process LocalCluster: ``workers`` (default: the usable cores) threads or
    processes."""

    workers: int | None = None
    processes: bool = LOCAL_PROCESSES


@dataclass(frozen=True)
class Described:
    """A cluster started for the command: ``--cluster FILE`` (``source``) or ``--gateway``.
    ``kind`` is its class (``sgdask.cluster_file.KINDS``), ``arguments`` the class's,
    ``workers`` how many to scale to (None: one job's worth), ``wait`` how long to wait for
    the first, ``config`` the Dask settings to start it under (Dask's ``jobqueue`` form)."""

    source: str
    kind: str
    arguments: dict[str, Any]
    workers: int | None = None
    wait: float = DEFAULT_WAIT
    config: dict[str, Any] = field(default_factory=dict)


ClusterSpec = Union["Client", "ThreadClient", str, Local, Described, None]  # named, not imported


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (v2 ``cpu.max`` or v1 CFS), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by the cgroup quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


def configured_scheduler() -> str | None:
    """Dask's own ``scheduler-address`` setting (``DASK_SCHEDULER_ADDRESS`` or a Dask config
    file), which ``distributed.Client()`` also connects to when given no address. Dask
    (0.3 s to import) is asked only where it could hold a setting (``_dask_configurable``)."""
    if not _dask_configurable():
        return None
    import dask.config

    return dask.config.get("scheduler-address", None) or None


def _dask_configurable() -> bool:
    """Whether Dask could hold a ``scheduler-address``: it is imported already
    (``dask.config.set``), a variable that can carry it is set (``DASK_SCHEDULER_ADDRESS``,
    or the configuration a Dask process hands its children), or a file where Dask reads its
    configuration (``dask.config.paths``) has a line that is not a comment (the files
    dask-jobqueue and dask-gateway write to ``~/.config/dask`` are all comments)."""
    if "dask" in sys.modules or any(name.upper() in _CARRIERS for name in os.environ):
        return True
    roots = [os.environ.get("DASK_ROOT_CONFIG", "/etc/dask"),
             os.path.join(sys.prefix, "etc", "dask"),
             *(os.path.join(prefix, "etc", "dask") for prefix in site.PREFIXES),
             os.path.join(os.path.expanduser("~"), ".config", "dask"),
             *([os.environ["DASK_CONFIG"]] if "DASK_CONFIG" in os.environ else [])]
    return any(_holds_setting(path) for root in roots for path in _config_files(Path(root)))


_CARRIERS = ("DASK_SCHEDULER_ADDRESS", "DASK_INTERNAL_INHERIT_CONFIG")


def _config_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    try:
        return [p for p in root.iterdir() if p.suffix.lower() in (".yaml", ".yml", ".json")]
    except OSError:
        return []


def _holds_setting(path: Path) -> bool:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return False
    return any(line.strip() and not line.lstrip().startswith("#") for line in lines)


def worker_environ() -> dict[str, Any]:
    """Dask's environment for worker processes without ``MALLOC_TRIM_THRESHOLD_``: its
    64 KiB makes glibc hand freed memory back at once, and each task's next arrays fault
    their pages in again: 0.7 s of a 2.5 s evaluation on one worker process (glibc's own,
    adaptive threshold is what the threads of the client process run with). A value in
    this process's environment still reaches the workers, as Dask passes the environment
    on: one the user set, or one an earlier Dask process cluster of this process left
    there (Dask sets its variables in the parent before spawning)."""
    import dask.config

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    return environ


@contextmanager
def local_cluster(spec: Local) -> Iterator[AnyClient]:
    """A LocalCluster of worker processes (``spec.processes``), else a thread pool of this
    process answering as a client (``ThreadClient``)."""
    workers = spec.workers or usable_cores()
    if workers < 1:
        raise SettingError("workers", f"{workers} must be at least 1")
    if not spec.processes:
        from sgdask.thread_client import ThreadClient

        with ThreadClient(workers) as threads:
            yield threads
        return
    import dask.config
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environ()}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
    with cluster, Client(cluster) as client:
        yield client


@contextmanager
def dask_client(client: AnyClient | None = None,
                scheduler: str | Local | Described | None = None
                ) -> Iterator[AnyClient]:
    """The given client, a client of ``scheduler`` (an address; when none is named, Dask's
    configured ``scheduler-address``, if set), of a cluster started as ``Described``
    (released at the end), or a local one (``Local(...)``, default: threads of this
    process on the usable cores)."""
    if client is None and isinstance(scheduler, Described):
        from sgdask.cluster_file import described_client

        with described_client(scheduler) as started:
            yield started
        return
    named = scheduler if isinstance(scheduler, str) and scheduler != LOCAL else None
    address = named or (None if isinstance(scheduler, Local) else configured_scheduler())
    if client is not None:
        yield client
    elif address:
        from distributed import Client

        try:
            connected = Client(address, timeout="20s")
        except OSError as err:
            origin = "--scheduler" if named else "scheduler-address (DASK_SCHEDULER_ADDRESS)"
            raise SgdaskError(f"{origin} {address}: cannot connect ({err})") from err
        with connected:
            yield connected
    else:
        with local_cluster(scheduler if isinstance(scheduler, Local) else Local()) as local:
            yield local


def map_tasks(func: Callable[..., Any], args: Sequence[tuple], cluster: ClusterSpec,
              progress: Callable[[Any], None] | None = None) -> list[Any]:
    """``[func(*a) for a in args]``, on the cluster when one is given (one task per item).

    ``cluster``: None runs in this process; a Client, a scheduler address, ``"local"``,
    ``Local(...)`` or ``Described(...)`` runs one Dask task per item. ``progress`` is called
    with each result as it arrives. Results come back in the order of ``args``.
    """
    if cluster is None:
        results = []
        for a in args:
            results.append(func(*a))
            if progress:
                progress(results[-1])
        return results
    from sgdask.thread_client import as_completed

    named = isinstance(cluster, (str, Local, Described))
    given, address = (None, cluster) if named else (cluster, None)
    with dask_client(given, address) as client:
        futures = [client.submit(func, *a, pure=False) for a in args]
        index = {f: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        try:
            for future in as_completed(futures):
                results[index[future]] = future.result()
                if progress:
                    progress(results[index[future]])
        finally:
            client.cancel(futures)
        return results
