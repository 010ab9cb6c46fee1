"""Measured subprocess of the PQ cost row (issue 26): what panoptic quality adds to a
singlempo evaluation.

``python -m benchmarks._pq_cost --gt G --pred P [--workers 2] [--repeat 3]`` writes (once,
beside G) a copy of the GT store without its crowd flags: the instances tables without
``iscrowd``, format version 3, hashes brought up to date (a store an older sgdask wrote).
Against it sgdask leaves PQ out and skips its per-image work; everything else is the same
data. It then starts sgdask's LocalCluster (W worker threads in this process, as
``sgdask evaluate``) and evaluates singlempo against both GT stores in turn, one warm-up
each, then ``--repeat`` alternating rounds: ``with_pq_s`` and ``without_pq_s`` are the
fastest runs of each, ``with_pq_cpu_s`` and ``without_pq_cpu_s`` the least CPU seconds of
this process (every task runs in its threads), and ``pq_ratio`` the ratio of the CPU
seconds minus 1: what PQ adds, the least disturbed by other processes on a shared machine
(``pq_wall_ratio``: the same of the wall times). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq

from sgdask.cluster import Local, dask_client
from sgdask.pipeline import evaluate
from sgdask.store.store import MANIFEST, SELF_HASH, file_entry, manifest_digest, parquet_bytes

WITHOUT_CROWD_VERSION = 3


def without_crowd(gt: Path) -> Path:
    """The GT store's copy without ``iscrowd`` (made once; a complete store)."""
    out = gt.with_name(gt.name + "-no-crowd")
    if (out / MANIFEST).exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(gt, tmp)
    manifest = json.loads((tmp / MANIFEST).read_text())
    for part in sorted((tmp / "instances").glob("*.parquet")):
        part.write_bytes(parquet_bytes(pq.read_table(part).drop_columns(["iscrowd"])))
        manifest["files"][f"instances/{part.name}"] = file_entry(part.read_bytes())
    manifest["format_version"] = WITHOUT_CROWD_VERSION
    manifest[SELF_HASH] = manifest_digest(manifest)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    tmp.rename(out)
    return out


def timed(gt: str, pred: str, client) -> tuple[float, float, dict[str, float]]:
    """Wall and CPU seconds of one evaluation, and its metrics."""
    start, cpu = time.perf_counter(), time.process_time()
    report = evaluate(gt, pred, protocol="singlempo", client=client)
    return time.perf_counter() - start, time.process_time() - cpu, report.metrics


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._pq_cost")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    stores = {"with": args.gt, "without": str(without_crowd(Path(args.gt)))}
    runs: dict[str, list[float]] = {"with": [], "without": []}
    cpu: dict[str, list[float]] = {"with": [], "without": []}
    with dask_client(scheduler=Local(args.workers, False)) as client:
        metrics = {kind: timed(gt, args.pred, client)[2] for kind, gt in stores.items()}
        for _ in range(args.repeat):
            for kind, gt in stores.items():
                wall, seconds, _ = timed(gt, args.pred, client)
                runs[kind].append(wall)
                cpu[kind].append(seconds)
    with_pq, without_pq = min(runs["with"]), min(runs["without"])
    with_cpu, without_cpu = min(cpu["with"]), min(cpu["without"])
    others = {n: v for n, v in metrics["with"].items() if n.partition("_")[0] not in
              ("PQ", "SQ", "RQ")}
    print(json.dumps({
        "with_pq_s": with_pq, "without_pq_s": without_pq, "with_pq_cpu_s": with_cpu,
        "without_pq_cpu_s": without_cpu, "pq_ratio": with_cpu / without_cpu - 1,
        "pq_wall_ratio": with_pq / without_pq - 1, "evaluate_s": with_pq, "runs": runs,
        "cpu": cpu, "workers": args.workers, "PQ": metrics["with"].get("PQ"),
        "pq_left_out": "PQ" not in metrics["without"],
        "other_metrics_equal": others == metrics["without"]}))


if __name__ == "__main__":
    main()
