"""What the commands that compute nothing import: ``sgdask --help``, a command's ``--help``,
a mistyped option, ``validate`` without its arguments and ``--version`` load no numba, no
Dask cluster layer, no pyarrow and no zarr (each is 0.1 to 0.6 s of every start-up), and
neither does declaring the settings and the protocols; the kernels load on first use.
Commands on stores (``evaluate``, ``verify``) import no format's module: the registry
imports them the first time it is read, which a store never needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgdask.formats import BUILT_IN_MODULES

HEAVY = ("numba", "distributed", "dask.dataframe", "pyarrow", "zarr")
#: every built-in format's module (its reader, and what it imports: image codecs, PyArrow's
#: compute functions, JSON schemas)
FORMAT_MODULES = tuple(f"sgdask.formats.{module}" for module in BUILT_IN_MODULES)
#: the process runs the command as ``sgdask`` does, then prints what it imported
_RUN = ("import sys\nfrom sgdask.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\nprint('\\n'.join(sys.modules), file=sys.stderr)")


def _imported_by(args: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    run = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True,
                         text=True, timeout=60)
    return set(run.stderr.split()), run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [["--help"], ["evaluate", "--help"], ["evaluate", "--gtt"],
                                  ["validate"], ["--version"]], ids=" ".join)
def test_commands_that_compute_nothing_import_no_heavy_library(args):
    modules, run = _imported_by(args)
    assert "typer" in modules and "sgdask.cli.evaluation" in modules
    assert sorted(m for m in HEAVY if m in modules) == []
    assert sorted(m for m in FORMAT_MODULES if m in modules) == []
    if args == ["evaluate", "--gtt"]:
        assert "sgdask: error:" in run.stderr and "--gt" in run.stderr
    if args == ["--help"]:
        assert "evaluate" in run.stdout


@pytest.mark.timeout(60)
def test_settings_and_protocols_declare_without_the_kernels():
    """Every protocol registered and the default settings built, yet no numba: the kernels
    (and numba) load when an image is scored."""
    code = ("import sys\nfrom sgdask.core.settings import DEFAULTS\n"
            "from sgdask.protocols import PROTOCOLS\nimport sgdask.metrics, sgdask.kernels\n"
            "assert 'numba' not in sys.modules, 'declarations'\n"
            "assert len(PROTOCOLS) > 5 and DEFAULTS.protocols in PROTOCOLS\n"
            "assert PROTOCOLS['singlempo'].rules.matching\n"
            "assert sgdask.kernels.image_hits.__name__ == 'image_hits'\n"
            "assert 'numba' in sys.modules\nprint('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert run.stdout.split() == ["ok"], run.stderr[-2000:]


@pytest.mark.timeout(180)
def test_commands_on_stores_import_no_format(stores, tmp_path):
    """``evaluate`` and ``verify`` on stores score and check them without importing any
    format's module, nor the Dask cluster layer (the in-process threads run the graph)."""
    report = tmp_path / "report"
    for args in (["evaluate", "--gt", stores.gt, "--pred", stores.pred, "--out", str(report)],
                 ["verify", stores.pred]):
        modules, run = _imported_by(args)
        assert "sgdask: error" not in run.stderr, run.stderr[-2000:]
        assert "sgdask.formats.registry" in modules and "sgdask.store.store" in modules
        assert sorted(m for m in FORMAT_MODULES if m in modules) == [], args[0]
        assert "distributed" not in modules
    assert (report / "metrics.json").is_file()
