"""The in-process default (``sgdask.thread_client``): the graph's futures on a thread pool
of this process give the numbers a real LocalCluster gives, whatever the thread count, and
a one-off evaluation neither starts nor imports ``distributed``."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from sgdask.cluster import Local, dask_client, map_tasks
from sgdask.pipeline import evaluate_protocols
from sgdask.thread_client import ThreadClient, as_completed
from tests.helpers import cli_env

pytestmark = pytest.mark.timeout(120)


def _add(a: int, b: int) -> int:
    return a + b


def _fail(message: str) -> None:
    raise ValueError(message)


def test_futures_among_the_arguments_are_passed_as_their_results():
    with ThreadClient(2) as client:
        [shared] = client.scatter([10], hash=False, broadcast=True)
        first = client.submit(_add, 1, 2, pure=False)
        second = client.submit(_add, first, shared)
        third = client.submit(_add, second, b=first)
        assert client.gather([first, second, third]) == [3, 13, 16]
        assert client.nthreads() == {"in-process": 2}
        assert [f.result() for f in client.map(_add, [1, 2], b=5)] == [6, 7]


def test_a_failed_task_fails_the_tasks_that_take_its_result():
    with ThreadClient(2) as client:
        bad = client.submit(_fail, "no")
        after = client.submit(_add, bad, 1)
        with pytest.raises(ValueError, match="no"):
            after.result(timeout=10)


def test_one_thread_never_waits_on_another_task():
    """A chain and a fan-in deeper than the pool: tasks start only once their inputs are
    done, so one thread runs them all."""
    with ThreadClient(1) as client:
        chain = client.submit(_add, 0, 1)
        for _ in range(50):
            chain = client.submit(_add, chain, 1)
        fan = [client.submit(_add, i, 0) for i in range(20)]
        total = client.submit(lambda *xs: sum(xs), *fan)
        assert chain.result(timeout=20) == 51
        assert total.result(timeout=20) == sum(range(20))


def test_cancelled_tasks_never_run_and_leaving_waits_for_running_ones():
    started, release, ran = threading.Event(), threading.Event(), []

    def slow() -> int:
        started.set()
        release.wait(10)
        ran.append("slow")
        return 1

    with ThreadClient(1) as client:
        busy = client.submit(slow)
        queued = client.submit(ran.append, "queued")
        waiting = client.submit(_add, busy, 1)
        started.wait(10)
        client.cancel([queued, waiting])
        release.set()
    assert ran == ["slow"] and busy.result() == 1
    assert queued.cancelled() and waiting.cancelled()


def test_as_completed_yields_each_future_once():
    with ThreadClient(2) as client:
        futures = [client.submit(time.sleep, 0.01 * (5 - i)) for i in range(5)]
        assert sorted(map(id, as_completed(futures))) == sorted(map(id, futures))


def test_map_tasks_on_threads_keeps_the_order_of_its_arguments():
    seen = []
    assert map_tasks(_add, [(i, i) for i in range(8)], Local(3), seen.append) == \
        [2 * i for i in range(8)]
    assert sorted(seen) == [2 * i for i in range(8)]


def test_the_default_local_choice_is_threads_and_processes_a_local_cluster():
    with dask_client(None, Local(3)) as threads:
        assert isinstance(threads, ThreadClient) and threads.nthreads() == {"in-process": 3}


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_give_the_local_cluster_s_numbers(stores, client, threads):
    """Every protocol's numbers and per-image rows on 1, 2 or 5 threads equal a real
    LocalCluster's of two worker processes."""
    protocols = "singlempo,multimpo,sgbpytorch"
    on_cluster = evaluate_protocols(stores.gt, stores.pred, protocols, client=client)
    with ThreadClient(threads) as pool:
        on_threads = evaluate_protocols(stores.gt, stores.pred, protocols, client=pool,
                                        partition_size=7)
    for name, report in on_cluster.items():
        assert on_threads[name].metrics == report.metrics
        assert on_threads[name].per_predicate == report.per_predicate
        assert on_threads[name].per_image == report.per_image


def test_an_evaluation_imports_no_distributed(stores, tmp_path):
    """`sgdask evaluate` on this machine runs on threads: neither dask nor distributed is
    imported (0.6-1 s of a small evaluation's start)."""
    probe = ("import sys\n"
             "from sgdask.cli import main\n"
             "try:\n"
             "    main(['evaluate', '--gt', sys.argv[1], '--pred', sys.argv[2], '--out',"
             " sys.argv[3]])\n"
             "finally:\n"
             "    print('IMPORTED', sorted(m for m in ('dask', 'distributed')"
             " if m in sys.modules))\n")
    env = cli_env()
    for name in [n for n in env if n.upper() in ("DASK_SCHEDULER_ADDRESS",)]:
        env.pop(name)
    done = subprocess.run([sys.executable, "-c", probe, stores.gt, stores.pred,
                           str(tmp_path / "report")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IMPORTED []" in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "report" / "metrics.json").is_file()
