"""The options several commands share, and the parsers of their values."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from sgdask.cluster import LOCAL, LOCAL_PROCESSES, Described, Local, configured_scheduler
from sgdask.errors import SgdaskError

#: the panels ``--help`` groups options into (the essential ones stay under "Options")
INPUT, PROTOCOL, INTERVALS, CLUSTER, STORAGE = (
    "Input", "Protocol and metrics", "Intervals", "Cluster", "Storage and limits")

StorageOpt = Annotated[list[str] | None, typer.Option(
    "--storage-option", "-S", metavar="KEY=VALUE", rich_help_panel=STORAGE,
    help="fsspec storage option, e.g. endpoint_url=http://127.0.0.1:5000 (repeatable)")]
Scheduler = Annotated[str | None, typer.Option(
    metavar="URL", rich_help_panel=CLUSTER,
    help="an existing Dask scheduler (default: Dask's scheduler-address setting, e.g. "
    "$DASK_SCHEDULER_ADDRESS, else a local cluster)")]
ClusterFile = Annotated[str | None, typer.Option(
    "--cluster", metavar="FILE", rich_help_panel=CLUSTER,
    help="start the cluster a YAML file describes (class: slurm, pbs, sge, local or gateway, "
    "and its arguments), scaled for the command and released when it ends")]
Gateway = Annotated[str | None, typer.Option(
    "--gateway", metavar="URL", rich_help_panel=CLUSTER,
    help="start a cluster on this Dask-Gateway for the command")]
InProcess = Annotated[bool, typer.Option(
    "--in-process", rich_help_panel=CLUSTER, help="work in this process, without Dask")]
Workers = Annotated[int | None, typer.Option(
    "--workers", min=1, metavar="N", rich_help_panel=CLUSTER,
    help="workers of the local cluster (default: the cores this process may use), or to "
    "scale the --cluster/--gateway one to")]
Limits = Annotated[list[str] | None, typer.Option(
    "--limit", metavar="NAME=VALUE", rich_help_panel=STORAGE,
    help="raise a limit on untrusted input, e.g. max_json_size=4GiB (repeatable; every "
    "limit and its default: the docs' File formats page)")]


Processes = Annotated[bool | None, typer.Option(
    "--processes/--threads", help="workers of the local Dask cluster: processes (one thread "
    "each) or threads of this process (default: processes for evaluate-many, rerank and the "
    "service worker, where their start is amortised; threads for the one-off commands)")]


def cluster_choice(scheduler: str | None, in_process: bool = False,
                   workers: int | None = None, processes: bool | None = None,
                   batch: bool = False, cluster: str | None = None,
                   gateway: str | None = None) -> str | Local | Described | None:
    """What work runs on: nothing (in process), a scheduler, a cluster started for the
    command (``cluster``: its file; ``gateway``: its URL; ``workers``: how many to scale
    to), or a LocalCluster (of worker processes when ``processes`` says so, or by default
    for a ``batch`` command)."""
    if cluster is not None or gateway is not None:
        return _described(cluster, gateway, scheduler, in_process, workers, processes)
    if in_process:
        return None
    if scheduler and workers:
        raise SgdaskError("--workers: only for the local cluster (not with --scheduler)")
    if scheduler and processes is not None:
        raise SgdaskError("--processes/--threads: only for the local cluster (not with "
                          "--scheduler)")
    if scheduler:
        return scheduler
    if processes is None and (workers is None and configured_scheduler()):
        return LOCAL  # Dask's configured scheduler-address, as without any option
    chosen = batch if processes is None else processes
    return Local(workers, chosen) if workers or chosen != LOCAL_PROCESSES else LOCAL


def _described(cluster: str | None, gateway: str | None, scheduler: str | None,
               in_process: bool, workers: int | None, processes: bool | None) -> Described:
    """The cluster ``--cluster FILE`` or ``--gateway URL`` starts (dask-jobqueue and
    dask-gateway are imported only then)."""
    from sgdask.cluster_file import gateway as gateway_cluster
    from sgdask.cluster_file import read_cluster_file

    given = "--cluster" if cluster is not None else "--gateway"
    others = {"--gateway": gateway is not None and cluster is not None,
              "--scheduler": bool(scheduler), "--in-process": in_process,
              "--processes/--threads": processes is not None}
    clash = next((name for name, used in others.items() if used), None)
    if clash:
        raise SgdaskError(f"{clash}: not with {given} (the cluster it starts is the one used)")
    described = read_cluster_file(cluster) if cluster is not None \
        else gateway_cluster(gateway or "")
    return described if workers is None else replace(described, workers=workers)


def _parse_value(text: str) -> Any:
    """'true'/'false' -> bool, integers -> int, anything else stays a string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


def storage_options(pairs: list[str] | None) -> dict[str, Any] | None:
    """``["key=value", "config_kwargs.connect_timeout=2", ...]`` -> fsspec storage options
    (dotted keys build nested dicts; None when empty)."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or "" in key.split("."):
            raise SgdaskError(f"--storage-option: {pair!r} is not KEY=VALUE")
        *parents, leaf = key.split(".")
        target = options
        for name in parents:
            target = target.setdefault(name, {})
            if not isinstance(target, dict):
                raise SgdaskError(f"--storage-option: {pair!r} conflicts with an earlier option")
        target[leaf] = _parse_value(value)
    return options or None
