"""Measured subprocess of the many-models row: one evaluate-many graph over N stores.

``python -m benchmarks._many --gt G --pred P1 --pred P2 ... --workers 2`` scores every store
under ``--protocol`` in one Dask graph (each GT part read once, every submission's part
scored in the same task) and prints one JSON line: evaluate-only seconds and each model's
ranking metric.
"""

from __future__ import annotations

import argparse
import json
import time

from sgdask.cluster import Local, dask_client
from sgdask.core.settings import Settings
from sgdask.pipeline import evaluate_many


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._many")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", action="append", required=True)
    parser.add_argument("--protocol", default="sgbench")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with dask_client(scheduler=Local(args.workers)) as client:
        start = time.perf_counter()
        subs = [(f"model-{i}", url, args.protocol) for i, url in enumerate(args.pred)]
        result = evaluate_many(args.gt, subs, Settings(), client=client)
        done = time.perf_counter()
    print(json.dumps({"evaluate_s": done - start, "models": len(subs),
                      "mR@50": {name: reports[args.protocol].metrics.get("mR@50")
                                for name, reports in result.reports.items()}}))


if __name__ == "__main__":
    main()
