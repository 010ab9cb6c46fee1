"""``sgdask.worker_preload``: worker processes load what their tasks need (the evaluation
modules, zarr, numba's filled CPU target) when they start, before their first task: in a
LocalCluster through Dask's configuration, and in ``dask scheduler``/``dask worker``
processes started by hand with ``--preload``."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from distributed import Client, LocalCluster

from sgdask.cluster import Local, dask_client
from tests.helpers import cli_env, stop_group

DASK = str(Path(sys.executable).with_name("dask"))
WORKER_PRELOAD = "sgdask.worker_preload"


def _loaded() -> dict[str, Any]:
    """What this process holds of what a task needs (run in a worker, before any task)."""
    from numba.core.runtime import nrt

    return {"modules": sorted(m for m in ("sgdask.pipeline", "sgdask.batch.many", "zarr",
                                          "numba.np.arraymath", "numba.typed.dictimpl")
                              if m in sys.modules),
            "numba_runtime": bool(nrt.rtsys._init)}


LOADED = {"modules": ["numba.np.arraymath", "numba.typed.dictimpl", "sgdask.batch.many",
                      "sgdask.pipeline", "zarr"], "numba_runtime": True}


def _configured_preload_ran() -> bool:
    return bool(getattr(sys, "_sgdask_test_preloaded", False))


@pytest.mark.timeout(120)
def test_a_configured_preload_readies_local_workers_before_their_first_task(tmp_path):
    """Given in Dask's configuration beside another preload, each worker holds the
    evaluation modules and numba's filled target before any task (a first task used to
    fill it under numba's compiler lock), and the other preload still runs; Dask's own
    LocalCluster without it holds none of it, so the preload is what loads them."""
    import dask.config

    configured = tmp_path / "configured_preload.py"
    configured.write_text("import sys\n\n\ndef dask_setup(worker):\n"
                          "    sys._sgdask_test_preloaded = True\n")
    with dask.config.set({"distributed.worker.preload": [str(configured), WORKER_PRELOAD]}), \
            dask_client(scheduler=Local(1, processes=True)) as client:
        assert list(client.run(_loaded).values()) == [LOADED]
        assert list(client.run(_configured_preload_ran).values()) == [True]
        from sgdask.kernels.bits import areas  # a cached kernel runs in a task

        boxes = np.array([[0, 0, 2, 70]], dtype=np.int64)  # 2 rows of 2 words
        starts, words = np.array([0], dtype=np.int64), np.array([7, 3, 1, 0], dtype=np.uint64)
        assert client.submit(areas, boxes, starts, words).result().tolist() == [3 + 2 + 1]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as bare, Client(bare) as client:
        assert list(client.run(_loaded).values()) == [{"modules": [], "numba_runtime": False}]


def _wait_for_address(path: Path, scheduler: subprocess.Popen) -> None:
    """Until the scheduler has written its whole file (it writes it in place)."""
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().rstrip().endswith("}")):
        assert scheduler.poll() is None and time.monotonic() < deadline, "no scheduler"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_hand_started_scheduler_and_workers_preload(tmp_path):
    """``dask scheduler --preload sgdask.worker_preload`` imports the evaluation modules
    (it unpickles the first graph) but fills no numba target; ``dask worker --nworkers 2
    --preload sgdask.worker_preload``: both workers are ready before their first task."""
    scheduler_file = str(tmp_path / "scheduler.json")
    procs = []
    try:
        for args in (["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                      "--scheduler-file", scheduler_file],
                     ["worker", "--scheduler-file", scheduler_file, "--nworkers", "2",
                      "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"]):
            procs.append(subprocess.Popen([DASK, *args, "--preload", WORKER_PRELOAD],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True,
                                          cwd=tmp_path, env=cli_env()))
            _wait_for_address(Path(scheduler_file), procs[0])
        with Client(scheduler_file=scheduler_file, timeout="30s") as client:
            client.wait_for_workers(2, timeout=90)
            assert list(client.run(_loaded).values()) == [LOADED, LOADED]
            on_scheduler = client.run_on_scheduler(_loaded)
        assert on_scheduler["modules"] == ["sgdask.batch.many", "sgdask.pipeline"]
    finally:
        for proc in reversed(procs):
            stop_group(proc)
