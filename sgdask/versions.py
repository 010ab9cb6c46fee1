"""Versions of the libraries that decide sgdask's numbers and file formats.

One list, read from the installed distributions' metadata (nothing is imported), shared by
``sgdask --version --verbose`` and the provenance of every report.
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

#: distributions whose versions a report records; numba only when installed
PACKAGES = ("numpy", "dask", "distributed", "zarr", "pyarrow", "numba")


def dependency_versions() -> dict[str, str]:
    """``{"numpy": ..., ..., "python": ...}``: every installed package of ``PACKAGES`` (one
    that is not installed is left out), then Python."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return {**found, "python": platform.python_version()}
