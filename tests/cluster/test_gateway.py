"""A real Dask-Gateway: ``dask-gateway-server`` with its local backend (schedulers and workers
as processes of this machine, on 127.0.0.1), started by the fixture. ``sgdask evaluate
--gateway URL`` starts a cluster on it, scales it to two workers, and shuts it down at the end;
the numbers equal the local evaluation's bit for bit."""

from __future__ import annotations

import base64
import getpass
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sgdask.pipeline import evaluate
from tests.helpers import ROOT, run_cli, stop_group

pytestmark = pytest.mark.timeout(180)  # in make test: issue 39 asks for it there

SERVER = Path(sys.executable).with_name("dask-gateway-server")

CONFIG = """\
from dask_gateway_server.backends.local import UnsafeLocalBackend


class Loopback(UnsafeLocalBackend):
    '''The local backend, its schedulers and workers listening on 127.0.0.1 only.'''

    default_host = "127.0.0.1"


c.DaskGateway.address = "127.0.0.1:0"
c.Proxy.address = "127.0.0.1:{port}"
c.DaskGateway.backend_class = Loopback
c.LocalBackend.clusters_directory = {clusters!r}
c.LocalClusterConfig.scheduler_cmd = [{python!r}, "-m", "distributed.cli.dask_scheduler"]
c.LocalClusterConfig.worker_cmd = [{python!r}, "-m", "distributed.cli.dask_worker"]
c.ClusterConfig.worker_cores = 1
c.ClusterConfig.worker_memory = "1 G"
c.LocalBackend.sigint_timeout = 2  # the workers of a shut-down cluster stop sooner
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _clusters(url: str) -> dict:
    """The gateway's running clusters, through its API (as this user; the simple
    authenticator takes any name)."""
    user = base64.b64encode(f"{getpass.getuser()}:".encode()).decode()
    request = urllib.request.Request(f"{url}/api/v1/clusters/",
                                     headers={"Authorization": f"Basic {user}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[str]:
    """The gateway's URL; the server (and what it started) is stopped at the end."""
    root = tmp_path_factory.mktemp("gateway")
    port = _free_port()
    config = root / "dask_gateway_config.py"
    config.write_text(CONFIG.format(port=port, clusters=str(root / "clusters"),
                                    python=sys.executable))
    log = open(root / "server.log", "wb")  # noqa: SIM115 (closed with the process)
    server = subprocess.Popen([str(SERVER), "-f", str(config)], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True, cwd=root,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    log.close()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90  # a loaded machine starts it slowly
        while not _answers(url):
            assert server.poll() is None and time.monotonic() < deadline, \
                (root / "server.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        stop_group(server, 20, 10)


def test_evaluation_through_the_gateway_equals_the_local_one(gateway, stores, tmp_path):
    local = evaluate(stores.gt, stores.pred, partition_size=3)
    out = tmp_path / "results"
    proc = run_cli("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--partition-size",
                   "3", "--gateway", gateway, "--workers", "2", "--out", str(out), timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["metrics"] == local.metrics
    assert summary["diagnostics"] == local.diagnostics
    assert pq.read_table(out / "per_predicate.parquet").to_pylist() == local.per_predicate
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert _clusters(gateway) == {}  # the cluster it started is gone
