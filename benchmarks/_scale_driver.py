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
from collections import defaultdict
from pathlib import Path
from typing import Any

from dask.utils import key_split
from distributed import Client, get_task_stream

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


def task_costs(stream: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """The tasks of a job from the scheduler's task stream: how many, compute seconds per
    kind of task (its key's prefix), and per worker its busy seconds, the start of its
    first task and the end of its last one, in seconds from the job's ``start``."""
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    workers: dict[str, dict[str, float]] = {}
    for task in stream:
        computed = [s for s in task.get("startstops", ()) if s["action"] == "compute"]
        seconds = sum(s["stop"] - s["start"] for s in computed)
        kind = kinds[key_split(task["key"])]
        kind[0] += 1
        kind[1] += seconds
        if not computed:
            continue
        w = workers.setdefault(task["worker"], {"busy_s": 0.0, "first_s": float("inf"),
                                                "last_s": 0.0})
        w["busy_s"] += seconds
        w["first_s"] = min(w["first_s"], min(s["start"] for s in computed) - start)
        w["last_s"] = max(w["last_s"], max(s["stop"] for s in computed) - start)
    return {"n": len(stream), "end_s": end - start,
            "kinds": {k: {"n": n, "compute_s": c} for k, (n, c) in sorted(kinds.items())},
            "workers": [workers[w] for w in sorted(workers)]}


def _timeline(stream: list[dict[str, Any]], start: float) -> list[dict[str, Any]]:
    return sorted(({"key": str(t["key"]), "worker": t["worker"],
                    "start": s["start"] - start, "stop": s["stop"] - start}
                   for t in stream for s in t.get("startstops", ())
                   if s["action"] == "compute"), key=lambda t: t["start"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._scale_driver")
    parser.add_argument("--scheduler", required=True)
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", action="append", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--protocol", default="singlempo")
    parser.add_argument("--stream", help="also write the job's task stream here (JSON: "
                        "per task its key, worker and compute start and stop, from the "
                        "job's start)")
    args = parser.parse_args(argv)
    subs = [(f"model-{i:03d}", url, args.protocol) for i, url in enumerate(args.pred)]
    job = ManyJob(args.gt, subs, Settings(), out=args.out)
    with Client(args.scheduler, timeout="30s") as client, get_task_stream(client) as stream:
        cpu, start, epoch = _cpu_s(), time.perf_counter(), time.time()
        outcome = run_many(job, client, log=lambda _: None, **_slim_if_known())
        wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
        end = time.time()
    if args.stream:
        Path(args.stream).write_text(json.dumps(_timeline(stream.data, epoch)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"models": len(subs), "wall_s": wall, "driver_cpu_s": cpu,
                      "driver_peak_rss": rss, "failed": sorted(getattr(outcome, "failed", {})),
                      "tasks": task_costs(stream.data, epoch, end),
                      "mR@50": {name: reports[args.protocol].metrics.get("mR@50")
                                for name, reports in outcome.reports.items()}}))


if __name__ == "__main__":
    main()
