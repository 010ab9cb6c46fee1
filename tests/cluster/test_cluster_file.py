"""``--cluster FILE``: what a cluster file may say, the one-line errors of a bad one (before
any cluster starts), and a cluster a file describes started, used and released (a
LocalCluster here; SLURM in test_slurm.py, Dask-Gateway in test_gateway.py)."""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from sgdask.cli import main
from sgdask.cli.options import cluster_choice
from sgdask.cli.process import EXIT_ERROR
from sgdask.cluster import Described, dask_client
from sgdask.cluster_file import gateway, known_arguments, read_cluster_file
from sgdask.pipeline import evaluate
from tests.helpers import ROOT

BAD_FILES = [
    ("class: slurmm\ncores: 1\n", "class: unknown class 'slurmm' (did you mean 'slurm'?) "
     "(expected one of: slurm, pbs, sge, lsf, htcondor, oar, moab, local, gateway)"),
    ("cores: 1\n", "class: missing (expected one of: slurm, pbs, sge, lsf, htcondor, oar, "
     "moab, local, gateway)"),
    ("class: slurm\ncores: 1\nmemroy: 2GiB\n",
     "memroy: unknown argument of SLURMCluster (did you mean 'memory'?)"),
    ("class: local\nthreads_per_workr: 2\n",
     "threads_per_workr: unknown argument of LocalCluster (did you mean 'threads_per_worker'?)"),
    ("class: gateway\naddres: http://127.0.0.1:1\n",
     "addres: unknown argument of GatewayCluster (did you mean 'address'?)"),
    ("- class: slurm\n", "list is not a mapping (expected a mapping: class (slurm, pbs, sge, "
     "local or gateway) and its arguments)"),
    ("just text\n", "str is not a mapping"),
    ("class: [slurm\n", "not valid YAML (while parsing a flow sequence"),
    ("class: local\nworkers: 0\n", "workers: 0 is not a number of workers (expected an "
     "integer, at least 1)"),
    ("class: slurm\nwait: soon\n", "wait: 'soon' is not a time"),
    ("jobqueue:\n  slurm:\n    cores: 1\n    memroy: 2GiB\n",
     "jobqueue.slurm.memroy: unknown argument of jobqueue.slurm (did you mean 'memory'?)"),
    ("jobqueue:\n  slurm: {cores: 1}\n  pbs: {cores: 1}\n",
     "jobqueue: 2 batch systems and no class"),
    ("jobqueue: {slurm: {cores: 1}}\nqueue: long\n", "queue: unknown key beside jobqueue"),
]


def one_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    assert done.value.code == EXIT_ERROR, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("text", "message"), BAD_FILES, ids=[m.split(":")[0] + str(i)
                                                               for i, (_, m) in
                                                               enumerate(BAD_FILES)])
def test_a_bad_cluster_file_is_one_line_naming_file_and_key(stores, tmp_path, capsys, text,
                                                            message):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    line = one_error(["evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                      "--cluster", str(path), "--out", str(tmp_path / "out")], capsys)
    assert line.startswith(f"sgdask: error: {path}: {message}"), line
    assert not (tmp_path / "out").exists()


def test_a_missing_cluster_file_is_named(stores, tmp_path, capsys):
    line = one_error(["evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                      "--cluster", str(tmp_path / "nowhere.yaml")], capsys)
    assert line == f"sgdask: error: {tmp_path / 'nowhere.yaml'}: not found (expected a " \
        "cluster file (YAML))"


@pytest.mark.parametrize(("extra", "message"), [
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler: not with --cluster"),
    (["--processes"], "--processes/--threads: not with --cluster"),
    (["--gateway", "http://127.0.0.1:1"], "--gateway: not with --cluster"),
])
def test_cluster_is_not_combined_with_another_cluster_option(stores, tmp_path, capsys, extra,
                                                             message):
    path = tmp_path / "local.yaml"
    path.write_text("class: local\n")
    line = one_error(["evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                      "--cluster", str(path), *extra], capsys)
    assert line.startswith(f"sgdask: error: {message}"), line


def test_what_a_cluster_file_says(tmp_path):
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump({"class": "slurm", "workers": 4, "wait": 30, "cores": 2,
                                    "memory": "4GiB", "queue": "gpu",
                                    "job_script_prologue": ["module load cuda"]}))
    assert read_cluster_file(str(path)) == Described(
        str(path), "slurm", {"cores": 2, "memory": "4GiB", "queue": "gpu",
                             "job_script_prologue": ["module load cuda"]}, 4, 30.0)
    # --workers scales the file's cluster to another size
    assert cluster_choice(None, workers=8, cluster=str(path)).workers == 8
    assert cluster_choice(None, gateway="http://127.0.0.1:8000") == gateway(
        "http://127.0.0.1:8000")
    # arguments of the cluster class, of its jobs and of dask-jobqueue's Job
    assert {"n_workers", "scheduler_options", "account", "walltime", "cores", "python",
            "job_script_prologue"} - {"n_workers"} <= known_arguments("slurm")


def test_the_documented_example_parses():
    """jobs/cluster/slurm.yaml, the recipe's example, is a valid cluster file."""
    spec = read_cluster_file(str(ROOT / "jobs" / "cluster" / "slurm.yaml"))
    assert (spec.kind, spec.workers, spec.wait) == ("slurm", 8, 1800.0)
    assert spec.arguments["job_script_prologue"] == ["source /shared/envs/sgdask/bin/activate"]


def test_dask_jobqueue_config_form(tmp_path):
    """Dask's own ``jobqueue:`` configuration, keys as Dask writes them: the cluster starts
    under it."""
    path = tmp_path / "jobqueue.yaml"
    path.write_text("jobqueue:\n  pbs:\n    cores: 8\n    memory: 16GB\n"
                    "    job-extra-directives: ['-l select=1']\nworkers: 2\n")
    spec = read_cluster_file(str(path))
    assert (spec.kind, spec.arguments, spec.workers) == ("pbs", {}, 2)
    assert spec.config == {"jobqueue.pbs.cores": 8, "jobqueue.pbs.memory": "16GB",
                           "jobqueue.pbs.job-extra-directives": ["-l select=1"]}


def test_a_local_cluster_file_is_started_scaled_and_released(stores, tmp_path, capsys):
    path = tmp_path / "local.yaml"
    path.write_text("class: local\nprocesses: false\nthreads_per_worker: 1\nworkers: 2\n")
    spec = read_cluster_file(str(path))
    with dask_client(None, spec) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        cluster = client.cluster
    assert cluster.status.name == "closed"
    local = evaluate(stores.gt_boxes, stores.pred_boxes, partition_size=4)
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
              "--partition-size", "4", "--cluster", str(path), "--out", str(tmp_path / "out")])
    assert done.value.code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert summary["metrics"] == local.metrics


def test_a_gateway_that_does_not_answer_is_one_line(stores, tmp_path, capsys):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = one_error(["evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                      "--gateway", f"http://127.0.0.1:{port}"], capsys)
    assert line.startswith("sgdask: error: --gateway: cannot start the GatewayCluster "
                           f"(Cannot connect to host 127.0.0.1:{port}"), line
