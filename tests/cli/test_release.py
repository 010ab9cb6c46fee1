"""What a release promises beyond the numbers: ``sgdask --version [--verbose]``, the package
versions every report records, the constraints file the Makefile installs from, and Dask's
configured scheduler being used when no ``--scheduler`` is given."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import dask.config
import fastjsonschema
import pytest

import sgdask
from sgdask.cluster import dask_client
from sgdask.protocols import METRICS_VERSION, PROTOCOLS
from sgdask.store.store import FORMAT_VERSION, READABLE_VERSIONS, SEGMENTS_VERSION, UNITS_VERSION
from sgdask.versions import PACKAGES, dependency_versions
from tests.helpers import ROOT, run_main


def test_version(capsys):
    code, out, _ = run_main(capsys, "--version")
    assert (code, out) == (0, f"sgdask {sgdask.__version__}\n")
    assert sgdask.__version__ == version("sgdask")  # pyproject reads it from the package


def test_version_verbose_lists_the_libraries_that_decide_the_numbers(capsys):
    code, out, _ = run_main(capsys, "--version", "--verbose")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"sgdask {sgdask.__version__}"
    assert lines[1:4] == [
        "protocols " + ", ".join(f"{p.name} {p.version}" for p in PROTOCOLS.values()),
        f"metrics {METRICS_VERSION}",
        f"store format {FORMAT_VERSION} ({UNITS_VERSION} with evaluation units, "
        f"{SEGMENTS_VERSION} with segments tables; reads 1-{READABLE_VERSIONS[-1]})"]
    listed = dict(line.split(" ", 1) for line in lines[4:])
    assert listed == dependency_versions()
    assert list(listed)[-1] == "python"
    for name in ("numpy", "dask", "distributed", "zarr", "pyarrow"):
        assert listed[name] == version(name)
    _, short, _ = run_main(capsys, "--version", "-v")
    assert short == out


def test_verbose_without_version_is_an_error(capsys):
    code, out, err = run_main(capsys, "--verbose")
    assert (code, out) == (2, "")
    assert err == "sgdask: error: --verbose applies to --version\n"


def test_packages_not_installed_are_left_out(monkeypatch):
    monkeypatch.setattr("sgdask.versions.PACKAGES", (*PACKAGES, "no-such-distribution-x"))
    found = dependency_versions()
    assert "no-such-distribution-x" not in found and "numpy" in found


def test_report_provenance_records_the_package_versions(stores, client):
    report = sgdask.evaluate(stores.gt, stores.pred, client=client)
    assert report.provenance["packages"] == dependency_versions()
    schema = json.loads((ROOT / "schemas" / "metrics.schema.json").read_text())
    fastjsonschema.compile(schema)(json.loads(report.to_json()))
    broken = json.loads(report.to_json())
    broken["provenance"]["packages"]["numpy"] = 1
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        fastjsonschema.compile(schema)(broken)


def test_configured_scheduler_is_used_without_scheduler_option(client):
    with dask.config.set({"scheduler-address": client.scheduler.address}):
        with dask_client() as used:
            assert used.scheduler.address == client.scheduler.address
        with dask_client(scheduler="local") as used:  # what convert passes by default
            assert used.scheduler.address == client.scheduler.address


def test_constraints_pin_every_installed_dependency_exactly():
    """``constraints.txt`` is a lock: exact pins, no sgdask itself, and it covers every
    runtime and dev requirement of pyproject.toml."""
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    pins = dict(line.split("==") for line in lines)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[^=\s]+", line) for line in lines)
    assert "sgdask" not in {name.lower() for name in pins}
    names = {re.sub(r"[-_.]+", "-", name).lower() for name in pins}
    pyproject = (ROOT / "pyproject.toml").read_text()
    required = re.findall(r'^\s+"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?[<>=!~ ]', pyproject, re.M)
    assert len(required) > 20
    for name in required:
        assert re.sub(r"[-_.]+", "-", name).lower() in names, f"{name} is not pinned"
    assert {"numba", "llvmlite"} <= names  # locked ahead of the speed work's dependency


@pytest.mark.slow
def test_schemas_ship_in_the_wheel_and_have_one_source(tmp_path):
    """The readers' schemas are package data: the sdist and the wheel built from it (as
    ``.ci/wheel-smoke`` builds them) hold every file of ``sgdask/schemas/``, and the
    documentation's ``schemas/`` links to those files instead of holding copies that could
    drift."""
    import subprocess
    import sys
    import tarfile
    import zipfile

    shipped = sorted(p.name for p in (ROOT / "sgdask" / "schemas").glob("*.json"))
    assert "store-manifest.schema.json" in shipped
    for name in shipped:
        link = ROOT / "schemas" / name
        assert link.is_symlink() and link.resolve() == (ROOT / "sgdask/schemas" / name), name
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,), (sdist,) = tmp_path.glob("*.whl"), tmp_path.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        for name in shipped:
            assert z.read(f"sgdask/schemas/{name}") == (ROOT / "sgdask/schemas" / name
                                                        ).read_bytes()
    with tarfile.open(sdist) as t:
        members = {m.name.split("/", 1)[1] for m in t.getmembers() if "/" in m.name}
    assert {f"sgdask/schemas/{name}" for name in shipped} <= members
