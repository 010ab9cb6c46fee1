"""What an evaluation of box stores never imports: zarr (masks only), scipy.sparse (intervals
and comparisons only), h5py (Visual Genome), PIL (PSG's PNGs), tifffile (layered TIFFs),
dask_jobqueue and dask_gateway (``--cluster``/``--gateway`` only).
Each costs 5 to 90 ms of every process start. (numba itself imports the top-level ``scipy``
package and, when it compiles or loads a function, ``scipy.linalg``: those are not ours.)"""

from __future__ import annotations

import re
import subprocess
import sys

LAZY = ("zarr", "scipy.sparse", "h5py", "PIL", "tifffile", "dask_jobqueue", "dask_gateway")


def _lazy_among(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == lazy or m.startswith(lazy + ".")
                                            for lazy in LAZY))


def test_pipeline_and_cli_import_no_mask_interval_or_reader_libraries():
    code = ("import sys, sgdask.pipeline, sgdask.cluster, sgdask.cli.evaluation; "
            "print('\\n'.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    modules = out.split()
    assert "sgdask.store.store" in modules and "sgdask.stats.bootstrap" in modules
    assert _lazy_among(modules) == []


def test_box_evaluation_imports_none_of_them(stores, tmp_path):
    """The whole ``sgdask evaluate`` of box stores (its workers are threads of the process,
    so every import of the run is in ``-X importtime``'s list)."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "sgdask", "evaluate",
                          "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "out" / "metrics.json").exists()
    imported = re.findall(r"^import time:\s+\d+ \|\s+\d+ \| *(\S+)$", run.stderr, re.M)
    assert "sgdask.store.store" in imported
    assert _lazy_among(imported) == []


def test_reading_masks_imports_and_configures_zarr(stores):
    """zarr comes with the first mask read, configured (one thread of its own) before the
    array is opened, in a process that had not imported it."""
    code = ("import sys; from sgdask.store.store import StoreReader; "
            "assert 'zarr' not in sys.modules; "
            f"r = StoreReader({stores.gt!r}); "
            "array = r.images().column('mask_array')[0].as_py(); "
            "assert len(r.read_masks(array)) > 0; "
            "import zarr; print(zarr.config.get('threading.max_workers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.split() == ["1"]
