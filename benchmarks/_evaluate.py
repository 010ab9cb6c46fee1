"""Measured subprocess of run B: start sgdask's LocalCluster, evaluate, exit.

``python -m benchmarks._evaluate --gt G --pred P --protocol sgbench --workers 2`` prints one
JSON line: cluster start, evaluate-only and shutdown seconds, the worker pids, the metrics.
With ``--processes``, ``worker_peak_rss_mb``: each worker's peak RSS (``ru_maxrss``).
``--repeats N`` evaluates N times on the same cluster (``evaluate_runs_s``: every run's
seconds; the first is ``evaluate_s``): the later runs are a warm cluster's throughput, without
the process's one-time costs (numba's first call, first imports).
The cluster is the one ``sgdask evaluate`` starts (``sgdask.cluster.Local``: threads of this
process, no ``distributed`` cluster, unless ``--processes``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from sgdask.cluster import Local, dask_client
from sgdask.core.settings import DEFAULT_PARTITION_SIZE
from sgdask.pipeline import evaluate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._evaluate")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--protocol", default="singlempo")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--processes", action="store_true")
    parser.add_argument("--partition-size", type=int, default=DEFAULT_PARTITION_SIZE)
    parser.add_argument("--repeats", type=int, default=1)
    return parser.parse_args(argv)


def _peak_rss_mb() -> float:
    """This process's peak resident memory as the kernel counts it (every peak, not
    only those a sampler catches)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    with dask_client(scheduler=Local(args.workers, args.processes)) as client:
        if args.processes:
            client.wait_for_workers(1)
        worker_pids = sorted(set(client.run(os.getpid).values())) if args.processes else \
            [os.getpid()]
        ready = time.perf_counter()
        runs = []
        for _ in range(args.repeats):
            start_run = time.perf_counter()
            report = evaluate(args.gt, args.pred, protocol=args.protocol,
                              partition_size=args.partition_size, client=client,
                              states=False)  # as sgdask evaluate (no --ci) asks
            runs.append(time.perf_counter() - start_run)
        done = time.perf_counter()
        worker_peaks = sorted(client.run(_peak_rss_mb).values()) if args.processes else []
    print(json.dumps({
        "cluster_start_s": ready - start,
        "evaluate_s": runs[0],
        "evaluate_runs_s": runs,
        "shutdown_s": time.perf_counter() - done,
        "worker_pids": worker_pids,
        "worker_peak_rss_mb": worker_peaks,
        "metrics": report.metrics,
        "diagnostics": report.diagnostics,
    }))


if __name__ == "__main__":
    main()
