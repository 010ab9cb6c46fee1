"""Measured driver of the scale benchmark: one ``evaluate-many`` job against a running cluster.

``python -m benchmarks._scale_driver --scheduler ADDR --gt G --pred P1 ... --out DIR`` runs
``sgdask.batch.many.run_many`` (what ``sgdask evaluate-many`` runs: cache entries and
reports written under ``--out``) and prints one JSON line: wall seconds of the job, this
process's CPU seconds for it (the driver's, every thread of it), its peak RSS and each
model's mR@50.
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import time

from distributed import Client

from sgdask.batch.many import ManyJob, run_many
from sgdask.core.settings import Settings


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _slim_if_known() -> dict[str, bool]:
    """``isolate`` and ``slim``, as ``sgdask evaluate-many`` runs, where the sgdask measured
    knows them (an older one, for a baseline, does not)."""
    known = inspect.signature(run_many).parameters
    return {k: True for k in ("isolate", "slim") if k in known}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._scale_driver")
    parser.add_argument("--scheduler", required=True)
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", action="append", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--protocol", default="singlempo")
    args = parser.parse_args(argv)
    subs = [(f"model-{i:03d}", url, args.protocol) for i, url in enumerate(args.pred)]
    job = ManyJob(args.gt, subs, Settings(), out=args.out)
    with Client(args.scheduler, timeout="30s") as client:
        cpu, start = _cpu_s(), time.perf_counter()
        outcome = run_many(job, client, log=lambda _: None, **_slim_if_known())
        wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"models": len(subs), "wall_s": wall, "driver_cpu_s": cpu,
                      "driver_peak_rss": rss, "failed": sorted(getattr(outcome, "failed", {})),
                      "mR@50": {name: reports[args.protocol].metrics.get("mR@50")
                                for name, reports in outcome.reports.items()}}))


if __name__ == "__main__":
    main()
