"""A real single-node SLURM, started by the fixture: ``munged`` with its own key and socket,
``slurmctld`` and ``slurmd`` from a generated ``slurm.conf`` in a temporary directory (Debian's
``slurm-wlm`` and ``munge``, which ``.ci/run`` installs). ``sgdask evaluate --cluster
slurm.yaml`` has dask-jobqueue submit its workers with ``sbatch``; the numbers equal the local
evaluation's bit for bit, and the jobs are gone when the command ends.

The test skips, saying why, only where the daemons cannot start (not installed, not root, or
they do not come up); every daemon is killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from sgdask.pipeline import evaluate
from tests.helpers import ROOT, stop_group

pytestmark = pytest.mark.timeout(240)  # in make test: issue 39 asks for it there

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _skip(reason: str) -> None:
    print(f"\nSKIPPED the SLURM test: {reason}", file=sys.stderr)
    pytest.skip(reason)


def _node_line(host: str) -> str:
    """This machine as ``slurmd -C`` sees it (CPUs, sockets, cores, threads), with a
    RealMemory well below what it has, so the node is never drained for lacking memory."""
    seen = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", seen.splitlines()[0] if seen else ""))
    shape = " ".join(f"{k}={fields[k]}" for k in
                     ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
                     if k in fields)
    memory = max(512, int(fields.get("RealMemory", "2048")) // 2)
    return f"NodeName={host} NodeAddr=127.0.0.1 {shape} RealMemory={memory} State=UNKNOWN"


def slurm_conf(root: Path, host: str) -> str:
    """A single-node cluster: everything under ``root``, ports of its own, root runs it."""
    return "\n".join([
        "ClusterName=sgdasktest", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root}/munge.sock",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", f"SlurmdLogFile={root}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SwitchType=switch/none", "InactiveLimit=0", "MinJobAge=5", "KillWait=5",
        _node_line(host),
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""])


@dataclass
class Slurm:
    """The daemons (each in its own process group) and the environment of its clients."""

    root: Path
    env: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self, *argv: str) -> None:
        log = open(self.root / f"{Path(argv[0]).name}.out", "wb")  # noqa: SIM115
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env,
                                           start_new_session=True))
        log.close()

    def run(self, *argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              timeout=30).stdout

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i %T").split("\n")[:-1]

    def logs(self) -> str:
        return "".join(f"\n--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                       for p in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")))

    def stop(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.run("scancel", "--user", "root")
        for proc in reversed(self.procs):
            stop_group(proc, 10, 10)


def _wait_idle(slurm: Slurm, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if slurm.run("sinfo", "-h", "-o", "%T").strip() == "idle":
            return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[Slurm]:
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        _skip(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        _skip("slurmd runs jobs as their users: it needs root")
    root = tmp_path_factory.mktemp("slurm")
    root.chmod(0o755)
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, socket.gethostname().split(".")[0]))
    slurm = Slurm(root, {**os.environ, "SLURM_CONF": str(conf)})
    try:
        slurm.start("munged", "--foreground", "--force", f"--socket={root}/munge.sock",
                    f"--key-file={key}", f"--pid-file={root}/munged.pid",
                    f"--log-file={root}/munged.log", f"--seed-file={root}/munged.seed")
        slurm.start("slurmctld", "-D", "-f", str(conf))
        slurm.start("slurmd", "-D", "-f", str(conf))
        if not _wait_idle(slurm, 60):
            reason = "the SLURM daemons did not come up: " + " | ".join(
                line for line in slurm.logs().splitlines()
                if "error" in line.lower() or "fatal" in line.lower())[-600:]
            slurm.stop()
            _skip(reason)
        yield slurm
    finally:
        slurm.stop()


def cluster_file(slurm: Slurm) -> Path:
    """Two one-core workers, each a SLURM job, running this Python with this tree."""
    doc = {"class": "slurm", "workers": 2, "wait": 120,
           "cores": 1, "processes": 1, "memory": "1GiB", "walltime": "00:10:00",
           "interface": "lo", "python": sys.executable,
           "job_script_prologue": [f"export PYTHONPATH={ROOT}"],
           "log_directory": str(slurm.root / "jobs")}
    path = slurm.root / "slurm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_evaluation_on_slurm_workers_equals_the_local_one(slurm, stores, tmp_path):
    local = evaluate(stores.gt, stores.pred, partition_size=3)
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "sgdask", "evaluate", "--gt", stores.gt,
                           "--pred", stores.pred, "--partition-size", "3",
                           "--cluster", str(cluster_file(slurm)), "--out", str(out)],
                          capture_output=True, text=True, timeout=200,
                          env={**slurm.env, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:] + slurm.logs()
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["metrics"] == local.metrics
    assert summary["diagnostics"] == local.diagnostics
    assert pq.read_table(out / "per_predicate.parquet").to_pylist() == local.per_predicate
    # the work ran on two SLURM jobs (a jobqueue cluster has no other workers), which
    # were running until the command ended and cancelled them
    allocated = re.findall(r"sched: Allocate JobId=(\d+)",
                           (slurm.root / "slurmctld.log").read_text())
    assert allocated == ["1", "2"], slurm.logs()
    for job in allocated:
        err = (slurm.root / "jobs" / f"dask-worker-{job}.err").read_text()
        assert f"JOB {job} ON" in err and "CANCELLED" in err, err
    deadline = time.monotonic() + 30
    while slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.jobs() == []


def test_jobs_that_cannot_start_are_one_line_after_the_wait(slurm, stores, tmp_path):
    """More memory than the node has: SLURM refuses the jobs, no worker joins, and after
    ``wait`` seconds the command says so in one line, with sbatch's reason, and leaves no
    job behind."""
    path = slurm.root / "too-big.yaml"
    path.write_text(yaml.safe_dump({"class": "slurm", "wait": 5, "cores": 1,
                                    "memory": "100TiB", "interface": "lo"}))
    proc = subprocess.run([sys.executable, "-m", "sgdask", "evaluate", "--gt",
                           stores.gt_boxes, "--pred", stores.pred_boxes, "--cluster", str(path),
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=100,
                          env={**slurm.env, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    line = lines[0]
    assert line == (f"sgdask: error: --cluster {path}: no worker joined within 5 s (the job "
                    "submission failed: sbatch: error: Memory specification can not be "
                    "satisfied sbatch: error: Batch job submission failed: Requested node "
                    "configuration is not available)"), line
    assert not (tmp_path / "out").exists()
    assert slurm.jobs() == []
