"""The clusters a file describes (``--cluster FILE``) or a Dask-Gateway gives (``--gateway
URL``): a batch system's workers through dask-jobqueue (SLURM, PBS, SGE, ...), a
LocalCluster, or a Dask-Gateway cluster; started for the command, scaled to its workers and
released when it ends.

The file is YAML: ``class`` (``KINDS``), ``workers`` (how many to scale to; default one
job's worth), ``wait`` (seconds to wait for the first worker) and the class's own arguments,
checked here against its signature; or Dask's own ``jobqueue:`` configuration of one batch
system. dask-jobqueue and dask-gateway are the optional ``clusters`` extra: imported only
here, when a file names their class (docs/decisions.md).
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask.config
from distributed import Client
from distributed.core import Status

from sgdask.cluster import DEFAULT_WAIT, Described
from sgdask.errors import Choose, InputError, Option, SgdaskError
from sgdask.io.documents import strict_yaml

#: the batch systems of dask-jobqueue, by the name a cluster file gives them
JOBQUEUE = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "sge": "SGECluster",
            "lsf": "LSFCluster", "htcondor": "HTCondorCluster", "oar": "OARCluster",
            "moab": "MoabCluster"}
LOCAL, GATEWAY = "local", "gateway"
KINDS = (*JOBQUEUE, LOCAL, GATEWAY)
#: sgdask's own keys of a cluster file; every other key is an argument of its class
OWN = ("class", "workers", "wait")
#: a Dask-Gateway cluster's arguments (``options``: the gateway's cluster options)
GATEWAY_ARGUMENTS = ("address", "proxy_address", "public_address", "auth", "options")
#: parameters sgdask sets itself, or that are no settings
_NOT_ARGUMENTS = frozenset({"self", "scheduler", "job_cls", "loop", "asynchronous", "start",
                            "config_name", "n_workers", "scheduler_file"})
_EXPECTED = "a mapping: class (slurm, pbs, sge, local or gateway) and its arguments"


def read_cluster_file(path: str) -> Described:
    """The cluster ``path`` describes, its class and arguments checked."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(path, "not found", expected="a cluster file (YAML)") from None
    except UnicodeDecodeError as err:
        raise InputError(path, f"not valid YAML ({err})") from None
    doc = strict_yaml(text, path)
    if not isinstance(doc, dict):
        raise InputError(path, f"{type(doc).__name__} is not a mapping", expected=_EXPECTED)
    if "jobqueue" in doc:
        return _jobqueue_config(path, doc)
    kind = _kind(path, doc.get("class"))
    arguments = {k: v for k, v in doc.items() if k not in OWN}
    _check_arguments(path, kind, arguments)
    return Described(path, kind, arguments, _workers(path, doc), _wait(path, doc))


def gateway(url: str) -> Described:
    """``--gateway URL``: a cluster of the Dask-Gateway at ``url``, with its default options."""
    return Described("--gateway", GATEWAY, {"address": url})


def _kind(path: str, kind: Any) -> str:
    if kind is None:
        raise InputError(path, "missing", field="class", expected=Choose("", KINDS))
    if kind not in KINDS:
        raise InputError(path, f"unknown class {kind!r}", field="class",
                         expected=Choose(str(kind), KINDS))
    return kind


def _workers(path: str, doc: dict[str, Any]) -> int | None:
    workers = doc.get("workers")
    if workers is not None and (type(workers) is not int or workers < 1):
        raise InputError(path, f"{workers!r} is not a number of workers", field="workers",
                         expected="an integer, at least 1")
    return workers


def _wait(path: str, doc: dict[str, Any]) -> float:
    wait = doc.get("wait", DEFAULT_WAIT)
    if type(wait) not in (int, float) or wait <= 0:
        raise InputError(path, f"{wait!r} is not a time", field="wait",
                         expected="seconds to wait for the first worker, above 0")
    return float(wait)


def _unknown(path: str, name: Any, known: set[str], owner: str, field: str | None = None
             ) -> InputError:
    near = difflib.get_close_matches(str(name), sorted(known), n=1)
    mean = f" (did you mean {near[0]!r}?)" if near else ""
    return InputError(path, f"unknown argument of {owner}{mean}", field=field or str(name))


def _check_arguments(path: str, kind: str, arguments: dict[str, Any]) -> None:
    known = known_arguments(kind)
    for name in arguments:
        if name not in known:
            raise _unknown(path, name, known, _owner(kind))
    if kind == GATEWAY and not isinstance(arguments.get("options", {}), dict):
        raise InputError(path, "not a mapping", field="options",
                         expected="the gateway's cluster options")


def _jobqueue_config(path: str, doc: dict[str, Any]) -> Described:
    """Dask's own ``jobqueue: {slurm: {...}}`` configuration of one batch system (keys as
    Dask writes them, ``job-extra-directives``), and sgdask's ``class``/``workers``/``wait``."""
    for key in doc:
        if key not in (*OWN, "jobqueue"):
            raise InputError(path, "unknown key beside jobqueue", field=str(key),
                             expected="class, workers, wait and jobqueue")
    systems = doc["jobqueue"]
    if not isinstance(systems, dict) or not systems:
        raise InputError(path, "not a mapping of batch systems", field="jobqueue",
                         expected="jobqueue: {slurm: {cores: ..., memory: ...}}")
    if "class" not in doc and len(systems) != 1:
        raise InputError(path, f"{len(systems)} batch systems and no class",
                         field="jobqueue", expected="one, or class: naming the one to use")
    kind = _kind(path, doc.get("class", next(iter(systems))))
    if kind not in JOBQUEUE or not isinstance(systems.get(kind), dict):
        raise InputError(path, f"no configuration of {kind}", field=f"jobqueue.{kind}",
                         expected="a mapping of dask-jobqueue settings")
    _import_jobqueue()  # its defaults, the settings there are
    known = {k.replace("_", "-") for k in dask.config.get(f"jobqueue.{kind}")}
    for key in systems[kind]:
        if str(key).replace("_", "-") not in known:
            raise _unknown(path, str(key).replace("_", "-"), known, f"jobqueue.{kind}",
                           f"jobqueue.{kind}.{key}")
    config = {f"jobqueue.{kind}.{key}": value for key, value in systems[kind].items()}
    return Described(path, kind, {}, _workers(path, doc), _wait(path, doc), config)


def _import_jobqueue() -> Any:
    try:
        import dask_jobqueue
    except ImportError:
        raise SgdaskError(Option("cluster"), ": a batch system's cluster needs dask-jobqueue: "
                          "pip install 'sgdask[clusters]'") from None
    return dask_jobqueue


def _import_gateway() -> Any:
    try:
        import dask_gateway
    except ImportError:
        raise SgdaskError(Option("gateway"), ": a Dask-Gateway cluster needs dask-gateway: "
                          "pip install 'sgdask[clusters]'") from None
    return dask_gateway


def _owner(kind: str) -> str:
    return {LOCAL: "LocalCluster", GATEWAY: "GatewayCluster"}.get(kind, JOBQUEUE.get(kind, kind))


def _cluster_class(kind: str) -> Any:
    if kind == LOCAL:
        from distributed import LocalCluster
        return LocalCluster
    if kind == GATEWAY:
        return _import_gateway().GatewayCluster
    return getattr(_import_jobqueue(), JOBQUEUE[kind])


def _parameters(*functions: Any) -> set[str]:
    names = set()
    for func in functions:
        for p in inspect.signature(func).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                names.add(p.name)
    return names - _NOT_ARGUMENTS


def known_arguments(kind: str) -> set[str]:
    """The arguments a cluster file may give a ``kind`` of cluster: its class's, and for a
    batch system its job's (dask-jobqueue passes them on), for a LocalCluster its workers'."""
    if kind == GATEWAY:
        return set(GATEWAY_ARGUMENTS)
    cls = _cluster_class(kind)
    if kind == LOCAL:
        from distributed import Worker
        return _parameters(cls.__init__, Worker.__init__)
    from dask_jobqueue.core import Job, JobQueueCluster
    return _parameters(cls.__init__, JobQueueCluster.__init__, cls.job_cls.__init__,
                       Job.__init__)


@contextmanager
def described_client(spec: Described) -> Iterator[Client]:
    """A client of the cluster ``spec`` describes, started and scaled to its workers;
    the cluster (its jobs, its gateway cluster) is released when the block ends."""
    refused = _RefusedSubmissions()
    tornado_log = logging.getLogger("tornado.application")
    tornado_log.addFilter(refused)
    try:
        with _started(spec) as cluster:
            if spec.workers is not None:
                cluster.scale(spec.workers)
            elif spec.kind in JOBQUEUE:
                cluster.scale(jobs=1)
            elif spec.kind == GATEWAY:
                cluster.scale(1)
            with _client(spec, cluster) as client:
                try:
                    client.wait_for_workers(1, timeout=spec.wait)
                except TimeoutError:
                    why = f"the job submission failed: {refused.last}" if refused.last \
                        else _why_no_worker(spec.kind)
                    raise SgdaskError(f"{_named(spec)}: no worker joined within "
                                      f"{spec.wait:g} s ({why})") from None
                yield client
    finally:
        tornado_log.removeFilter(refused)


class _RefusedSubmissions(logging.Filter):
    """dask-jobqueue submits jobs in the background; a refused submission (``sbatch``
    exiting non-zero) is logged with its traceback on tornado's logger. Kept here (its
    command's stderr, for the one-line error) instead of printed."""

    def __init__(self) -> None:
        super().__init__()
        self.last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if isinstance(err, RuntimeError) and "Command exited with non-zero exit code" in str(err):
            self.last = " ".join(str(err).partition("stderr:")[2].split())[:300] or None
            return False
        return True


def _named(spec: Described) -> str:
    return spec.source if spec.source.startswith("--") else f"--cluster {spec.source}"


def _why_no_worker(kind: str) -> str:
    if kind in JOBQUEUE:
        return "are its jobs still queued, or did they fail? see the batch system's queue " \
            "and the jobs' logs; raise `wait:` for a busy queue"
    return "see the gateway's logs" if kind == GATEWAY else "see the workers' logs"


@contextmanager
def _client(spec: Described, cluster: Any) -> Iterator[Client]:
    client = cluster.get_client() if spec.kind == GATEWAY else Client(cluster)
    with client:
        yield client


@contextmanager
def _started(spec: Described) -> Iterator[Any]:
    cls = _cluster_class(spec.kind)
    arguments = dict(spec.arguments)
    if spec.kind == GATEWAY:
        options = arguments.pop("options", None) or {}
        arguments = {**arguments, **options, "shutdown_on_close": True}
    elif spec.kind == LOCAL:
        arguments.setdefault("dashboard_address", ":0")
    elif "dashboard_address" not in (arguments.get("scheduler_options") or {}):
        arguments["scheduler_options"] = {**(arguments.get("scheduler_options") or {}),
                                          "dashboard_address": ":0"}
    if spec.kind == LOCAL and spec.workers is not None:
        arguments["n_workers"] = spec.workers
    try:
        with dask.config.set(spec.config):
            cluster = cls(**arguments)
    except (ValueError, TypeError, RuntimeError, OSError) as err:
        raise SgdaskError(f"{_named(spec)}: cannot start the {_owner(spec.kind)} "
                          f"({' '.join(str(err).split())[:300]})") from None
    with cluster:
        try:
            yield cluster
        finally:
            _unstarted_failed(cluster)


def _unstarted_failed(cluster: Any) -> None:
    """Jobs whose submission the batch system refused never ran: marked failed, as
    distributed's ``SpecCluster`` checks every job it created is closed or failed when it
    closes (a refused one would stay created, and the close would hide the one-line error
    with an assertion)."""
    for job in list(getattr(cluster, "_created", ())):
        if job.status == Status.created:
            job.status = Status.failed
