"""Measured subprocess of the interval cost row: what ``evaluate --ci`` adds to an evaluation.

``python -m benchmarks._ci_cost --gt G --pred P [--workers 2] [--resamples 1000]`` starts a
LocalCluster of W worker processes, evaluates once without intervals (timed), then times the
bootstrap of every metric of that evaluation (``sgdask.report.intervals.add_intervals``, as
``evaluate --ci`` runs it on the client) and of ``--ci-metrics`` only; prints one JSON line.
``measure_ci_cost`` is the same as a function.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from distributed import Client, LocalCluster

from sgdask.pipeline import cluster_mapper, evaluate
from sgdask.report.intervals import CISettings, add_intervals
from sgdask.store.store import StoreReader
from sgdask.store.training_stats import gt_training_stats


def timed_intervals(report: Any, settings: CISettings, composition: dict[int, int] | None,
                    mapper: Any = None) -> float:
    start = time.perf_counter()
    add_intervals(report, settings, composition, mapper)
    return time.perf_counter() - start


def measure_ci_cost(gt: str, pred: str, client: Client, protocol: str = "singlempo",
                    resamples: int = 1000, seed: int = 0, ci_metrics: str = "mR@50"
                    ) -> dict[str, Any]:
    """Seconds of one evaluation and of its bootstrap intervals (every metric, in this
    process and as ``evaluate --ci`` runs them: blocks of resamples on the cluster; only
    ``ci_metrics``), and how large the per-image terms are."""
    start = time.perf_counter()
    report = evaluate(gt, pred, protocol=protocol, client=client)
    evaluate_s = time.perf_counter() - start
    _, composition = gt_training_stats(StoreReader(gt), None, None)
    here = timed_intervals(report, CISettings(0.95, resamples, seed), composition)
    every = timed_intervals(report, CISettings(0.95, resamples, seed), composition,
                            cluster_mapper(client))
    some = timed_intervals(report, CISettings(0.95, resamples, seed, ci_metrics), composition)
    assert report.terms is not None
    return {"evaluate_s": evaluate_s, "intervals_all_s": every, "intervals_all_here_s": here,
            "intervals_some_s": some, "ratio_all": every / evaluate_s,
            "ci_metrics": ci_metrics, "resamples": resamples,
            "metrics": len(report.metrics), "images": report.terms.n_images,
            "term_rows": len(report.terms)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._ci_cost")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--protocol", default="singlempo")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--ci-metrics", default="mR@50")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.wait_for_workers(args.workers)
        result = measure_ci_cost(args.gt, args.pred, client, args.protocol, args.resamples,
                                 ci_metrics=args.ci_metrics)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
