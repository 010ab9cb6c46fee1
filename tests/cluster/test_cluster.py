"""A real multi-process cluster started by hand: ``dask scheduler`` + ``dask worker`` processes
on 127.0.0.1, used through ``sgdask evaluate --scheduler`` and through the Python API.

Worker loss: a worker process group is SIGKILLed while it is scoring partitions; Dask
recomputes what it held and the numbers are bit-identical to the undisturbed run.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from distributed import Client

from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate
from sgdask.testing.psg import write_dataset
from tests.helpers import run_cli, stop_group

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DASK = str(Path(sys.executable).with_name("dask"))
WORKER_ARGS = ("--nworkers", "1", "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard")


@dataclass
class HandCluster:
    """``dask scheduler`` and ``dask worker`` processes, each in its own process group."""

    root: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def scheduler_file(self) -> str:
        return str(self.root / "scheduler.json")

    @property
    def address(self) -> str:
        return json.loads(Path(self.scheduler_file).read_text())["address"]

    @property
    def workers_dir(self) -> Path:
        """Where the workers run: not the directory of the tests' driver processes."""
        path = self.root / "workers-cwd"
        path.mkdir(exist_ok=True)
        return path

    def spawn(self, name: str, *args: str, cwd: Path | None = None) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen([DASK, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        log.close()
        self.procs.append(proc)
        return proc

    def start_scheduler(self) -> None:
        proc = self.spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0",
                          "--no-dashboard", "--scheduler-file", self.scheduler_file)
        deadline = time.monotonic() + 60
        # the scheduler writes its file in place: wait until it holds the whole address
        while not (Path(self.scheduler_file).exists()
                   and Path(self.scheduler_file).read_text().rstrip().endswith("}")):
            assert proc.poll() is None, self.logs()
            assert time.monotonic() < deadline, "scheduler did not start\n" + self.logs()
            time.sleep(0.1)
        assert self.address.startswith("tcp://127.0.0.1:"), self.address

    def start_worker(self, name: str) -> subprocess.Popen:
        return self.spawn(name, "worker", "--scheduler-file", self.scheduler_file,
                          "--name", name, *WORKER_ARGS, cwd=self.workers_dir)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_group(proc)


@pytest.fixture(scope="module")
def hand_cluster(tmp_path_factory) -> Iterator[HandCluster]:
    """``dask scheduler`` + two ``dask worker`` processes on 127.0.0.1; always torn down."""
    cluster = HandCluster(tmp_path_factory.mktemp("dask-cluster"))
    try:
        cluster.start_scheduler()
        for i in range(2):
            cluster.start_worker(f"w{i}")
        with Client(scheduler_file=cluster.scheduler_file, timeout="30s") as c:
            try:
                c.wait_for_workers(2, timeout=60)
            except TimeoutError:
                pytest.fail("workers did not connect\n" + cluster.logs())
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def observer(hand_cluster: HandCluster) -> Iterator[Client]:
    with Client(scheduler_file=hand_cluster.scheduler_file, timeout="30s") as c:
        yield c


@pytest.fixture(scope="module")
def local_report(stores, client):
    """The reference: the LocalCluster numbers."""
    return evaluate(stores.gt, stores.pred, client=client)


@pytest.fixture(scope="module")
def big_stores(tmp_path_factory) -> tuple[str, str]:
    """120 larger images, ingested and converted locally: a few seconds of scoring with
    one image per task, long enough to kill a worker mid-run (60 were scored before the
    victim held a result in one run of three once scoring got faster)."""
    root = tmp_path_factory.mktemp("big")
    paths = write_dataset(root / "raw", n_images=120, seed=3, height=240, width=320)
    gt, pred = str(root / "gt"), str(root / "pred")
    ingest_gt(str(paths.psg_json), gt, str(paths.masks_dir))
    convert_submission(str(paths.submission_zip), pred, gt)
    return gt, pred


def comparable(report) -> tuple[Any, ...]:
    return report.metrics, report.per_predicate, report.per_image, report.diagnostics


def test_cli_on_hand_started_cluster_equals_local_cluster(hand_cluster, stores, local_report,
                                                          tmp_path):
    out = tmp_path / "results"
    proc = run_cli("evaluate", "--gt", stores.gt, "--pred", stores.pred,
                   "--scheduler", hand_cluster.address, "--partition-size", "3",
                   "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr + hand_cluster.logs()
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["metrics"] == local_report.metrics
    assert summary["diagnostics"] == local_report.diagnostics
    rows = pq.read_table(out / "per_predicate.parquet").to_pylist()
    assert rows == local_report.per_predicate


def test_relative_paths_on_workers_started_elsewhere(hand_cluster, stores, local_report):
    """The workers run in another directory: relative paths mean the driver's files."""
    here = Path(stores.gt).parent
    assert Path(stores.pred).parent == here and hand_cluster.workers_dir != here
    proc = run_cli("evaluate", "--gt", Path(stores.gt).name, "--pred", Path(stores.pred).name,
                   "--scheduler", hand_cluster.address, "--partition-size", "3",
                   "--out", "results-relative",
                   cwd=str(here), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr + hand_cluster.logs()
    summary = json.loads((here / "results-relative" / "metrics.json").read_text())
    assert summary["metrics"] == local_report.metrics
    assert summary["diagnostics"] == local_report.diagnostics


def test_workers_that_cannot_see_the_store_are_named(hand_cluster, stores):
    """``/proc/self/cwd`` is each process's own directory: the driver reads the store there,
    the workers (started elsewhere) do not; that is said, not "corrupt"."""
    here = Path(stores.gt).parent
    proc = run_cli("evaluate", "--gt", f"/proc/self/cwd/{Path(stores.gt).name}", "--pred",
                   Path(stores.pred).name, "--scheduler", hand_cluster.address,
                   cwd=str(here), timeout=240)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("sgdask:")]
    assert line.startswith(f"sgdask: error: workers cannot see /proc/self/cwd/"
                           f"{Path(stores.gt).name} (their "), line
    assert line.endswith("use a shared file system or an s3:// URL"), line
    assert "corrupt" not in line and "Traceback" not in proc.stderr


def test_python_api_on_hand_started_cluster(hand_cluster, observer, stores, local_report):
    report = evaluate(stores.gt, stores.pred, client=observer, partition_size=1)
    assert comparable(report) == comparable(local_report)
    # both hand-started workers took part
    assert len(observer.scheduler_info()["workers"]) == 2


def test_many_models_on_hand_started_workers_equal_one_evaluation(hand_cluster, observer,
                                                                   stores, local_report,
                                                                   tmp_path):
    """Nine submissions: two groups of tasks (at most ``MODELS_PER_TASK`` each), every
    check, report and cache entry a task on the hand-started workers; a missing store fails
    alone. Every report equals the one evaluation's, and what the workers wrote reads back
    the same."""
    from sgdask.batch.many import ManyJob, run_many
    from sgdask.core.settings import Settings
    from sgdask.pipeline import MODELS_PER_TASK, model_groups
    from sgdask.report import Report

    assert [len(g) for g in model_groups(9)] == [5, 4] and MODELS_PER_TASK == 8
    names = [f"m{i}" for i in range(9)]
    subs = [(n, stores.pred, "singlempo") for n in names]
    job = ManyJob(stores.gt, [*subs, ("gone", str(tmp_path / "absent"), "singlempo")],
                  Settings(), out=str(tmp_path / "out"))
    outcome = run_many(job, observer, log=lambda _: None, isolate=True, slim=True)
    assert list(outcome.failed) == ["gone"] and "absent" in str(outcome.failed["gone"])
    assert list(outcome.reports) == names
    for name in names:
        report = outcome.reports[name]["singlempo"]
        assert (report.metrics, report.per_predicate) == (local_report.metrics,
                                                          local_report.per_predicate)
        assert report.per_image == [] and report.terms is None  # slim: nothing per image
        written = Report.read(str(tmp_path / "out" / name))
        assert comparable(written) == comparable(local_report)
    assert not (tmp_path / "out" / "gone").exists()


#: the keys of partition-scoring tasks
_SCORING = "score_partition"


def test_worker_loss_mid_evaluation(hand_cluster, observer, big_stores):
    """A third worker joins, scores partitions, and is SIGKILLed (nanny and worker process)
    while it both holds finished partition results and processes more; the evaluation
    completes on the two survivors with identical numbers."""
    gt, pred = big_stores
    undisturbed = evaluate(gt, pred, client=observer, partition_size=1)

    victim = hand_cluster.start_worker("victim")
    observer.wait_for_workers(3, timeout=60)
    workers = observer.scheduler_info(n_workers=-1)["workers"]
    victim_address = next(a for a, w in workers.items() if w["name"] == "victim")
    # import sgdask on the victim now, so it gets partitions from the start of the run
    observer.run(importlib.import_module, "sgdask.pipeline", workers=[victim_address])

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with Client(scheduler_file=hand_cluster.scheduler_file, timeout="30s") as c:
                outcome["report"] = evaluate(gt, pred, client=c, partition_size=1)
        except BaseException as err:
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    deadline = started + 60
    while True:
        busy = observer.processing(workers=[victim_address]).get(victim_address) or []
        held = [key for key in observer.has_what(workers=[victim_address]).get(victim_address)
                or [] if str(key).startswith(_SCORING)]  # not data every worker holds
        if busy and held:
            break
        assert thread.is_alive(), f"finished before the victim held results: {outcome}"
        assert time.monotonic() < deadline, "the victim never held a partition result"
        time.sleep(0.002)
    os.killpg(victim.pid, signal.SIGKILL)
    killed_at = time.monotonic() - started
    assert thread.is_alive(), "the evaluation finished before the kill"
    victim.wait(30)

    thread.join(240)
    assert not thread.is_alive(), "the evaluation did not finish after the worker loss"
    if "error" in outcome:
        raise AssertionError(f"evaluation failed after the worker loss: "
                             f"{type(outcome['error']).__name__}: {outcome['error']}")
    report = outcome["report"]
    survivors = observer.scheduler_info(n_workers=-1)["workers"]
    assert victim_address not in survivors
    assert len(survivors) == 2

    print(f"\nworker loss: killed {victim_address} at {killed_at:.2f} s while it processed "
          f"{len(busy)} and held {len(held)} partition result(s); total "
          f"{time.monotonic() - started:.2f} s\n"
          f"  undisturbed  mR@50 {undisturbed.metrics['mR@50']!r}  "
          f"R@50 {undisturbed.metrics['R@50']!r}\n"
          f"  worker loss  mR@50 {report.metrics['mR@50']!r}  R@50 {report.metrics['R@50']!r}")
    assert comparable(report) == comparable(undisturbed)


def test_few_parts_on_many_threads_are_spread_and_change_nothing(stores, local_report):
    """One task per GT part leaves threads idle when there are more threads than parts: the
    plan is cut finer then, with the same numbers."""
    from distributed import LocalCluster

    from sgdask.pipeline import spread_size

    with LocalCluster(n_workers=1, threads_per_worker=8, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as many:
        parts = len(json.loads(Path(stores.gt, "manifest.json").read_text())["parts"])
        assert parts < 8
        assert spread_size(40, parts, many, None) == 8          # 5 tasks of 8 images
        assert spread_size(40, parts, many, 16) is None         # --partition-size wins
        assert spread_size(4000, 64, many, None) is None        # enough parts already
        report = evaluate(stores.gt, stores.pred, protocol="singlempo", client=many)
    assert report.metrics == local_report.metrics
    assert report.per_predicate == local_report.per_predicate


def test_default_plan_groups_parts_into_a_multiple_of_the_threads():
    """35 GT parts of 64 images (PSG's test split): about 256 images per task, as many
    tasks as a multiple of the threads (10 on 2 threads: 9 left one thread idle for the
    last), the larger groups first, every part in exactly one task in order."""
    import pyarrow as pa
    from distributed import LocalCluster

    from sgdask.pipeline import evaluation_chunks, task_count

    for threads, expected in ((1, 9), (2, 10), (4, 12), (64, 35)):
        with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            assert task_count(35, 2177, client, None) == expected
            assert task_count(35, 2177, client, 16) == 35  # --partition-size: as planned
    ids = [f"{i:05d}" for i in range(2177)]
    table = pa.table({"image_id": ids, "part": [f"p{i // 64:03d}" for i in range(2177)],
                      "n_graph": [1] * 2177})
    chunks = evaluation_chunks(table, None, 10)
    parts = [sorted({int(i) // 64 for i in chunk}) for chunk in chunks]
    assert [len(p) for p in parts] == [4] * 5 + [3] * 5
    assert [i for chunk in chunks for i in chunk] == ids
    assert len(evaluation_chunks(table, None)) == 35


def test_local_worker_processes_keep_glibc_s_own_trim_threshold(monkeypatch):
    """Local worker processes start without Dask's MALLOC_TRIM_THRESHOLD_ (64 KiB made
    every task fault its arrays' pages in again), with Dask's other settings. (An earlier
    Dask process cluster of the test process leaves the variable in its environment,
    which children inherit: a fresh process, as the CLI is, has none.)"""
    import os

    from sgdask.cluster import Local, dask_client

    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)

    def environ() -> tuple[str | None, str | None]:
        return os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("OMP_NUM_THREADS")

    with dask_client(scheduler=Local(1, processes=True)) as client:
        found = list(client.run(environ).values())
    assert found == [(None, "1")]
