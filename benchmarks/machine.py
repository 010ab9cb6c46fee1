"""A description of the machine a benchmark ran on."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

PACKAGES = ("sgdask", "sgbench", "dask", "distributed", "numpy", "zarr", "pyarrow", "numcodecs",
            "tifffile", "imagecodecs", "psutil")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cgroup_cpu_limit() -> str | None:
    """The cgroup v2 CPU quota, e.g. ``"2.0 CPUs"``, or None when unlimited or unknown."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else f"{int(quota) / int(period):.1f} CPUs"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def describe() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, Python and package versions."""
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "cgroup_cpu_limit": cgroup_cpu_limit(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": package_versions(),
    }


def one_line(machine: dict[str, Any]) -> str:
    limit = f", cgroup limit {machine['cgroup_cpu_limit']}" if machine["cgroup_cpu_limit"] else ""
    return (f"{machine['cpu']}, {machine['usable_cores']} usable cores "
            f"({machine['logical_cores']} logical{limit}), {machine['ram_gib']} GiB RAM, "
            f"{machine['os']}, Python {machine['python']}")
