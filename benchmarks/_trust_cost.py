"""Measured subprocess of the trust cost rows (issue 12): what the GT consistency check and
the integrity checks add to an evaluation.

``python -m benchmarks._trust_cost --gt G --pred P [--workers 2] [--repeat 3]`` (format-3
stores) starts a LocalCluster of W worker processes, times the evaluation (singlempo,
median of ``--repeat`` after one warm-up run), then, in this process:

- ``consistency_s``: what ``check_against_gt`` adds to ``evaluate`` on the client before any
  kernel: the check on readers that already hold their images tables (``evaluate`` reads
  both for planning the partitions whether or not it checks), so reading the instances and
  triplets columns and every check (fastest of 5 runs); ``consistency_fresh_s``: the same
  on fresh readers, the images tables' reading included;
- ``integrity_s``: what verifying costs on top of reading, summed over every file of both
  stores: SHA-256 of every file, Parquet page checksum verification (read with minus
  without, fastest of 5 each), CRC-32C of every mask chunk (as zarr's ``crc32c`` codec
  computes it); fastest of ``--repeat`` runs (small costs on a shared machine).

Prints one JSON line. ``measure_trust_cost`` is the same as a function.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import google_crc32c
import pyarrow as pa
import pyarrow.parquet as pq
from distributed import Client, LocalCluster

from sgdask.pipeline import evaluate
from sgdask.store.consistency import check_against_gt
from sgdask.store.store import CHECKSUMMED_VERSION, StoreReader


def median_time(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def min_time(run: Callable[[Any], Any], repeat: int,
             setup: Callable[[], Any] = lambda: None) -> float:
    """The fastest of ``repeat`` runs of ``run(setup())`` (``setup`` not timed): small costs
    on a shared machine."""
    times = []
    for _ in range(repeat):
        argument = setup()
        start = time.perf_counter()
        run(argument)
        times.append(time.perf_counter() - start)
    return min(times)


def readers_with_images(pred: str, gt: str) -> tuple[StoreReader, StoreReader]:
    """Fresh readers of both stores whose images tables are read (as ``evaluate``'s planning
    reads them)."""
    readers = StoreReader(pred), StoreReader(gt)
    for reader in readers:
        reader.images()
    return readers


def store_bytes(url: str) -> dict[str, bytes]:
    reader = StoreReader(url)
    if reader.version < CHECKSUMMED_VERSION:
        raise SystemExit(f"{url}: store format {reader.version} has no checksums to time")
    return {rel: reader.fs.cat_file(f"{reader.path}/{rel}") for rel in reader.manifest["files"]}


def integrity_seconds(files: dict[str, bytes]) -> dict[str, float]:
    """Seconds of each verification over the files' bytes (already in memory)."""
    start = time.perf_counter()
    for data in files.values():
        hashlib.sha256(data).hexdigest()
    sha = time.perf_counter() - start
    pages = 0.0
    for rel, data in files.items():
        if rel.endswith(".parquet"):
            timings = []
            for verify in (True, False):
                timings.append(min_time(lambda _, v=verify, d=data: pq.ParquetFile(
                    pa.BufferReader(d), page_checksum_verification=v).read(
                        use_threads=False), 5))
            pages += max(timings[0] - timings[1], 0.0)
    start = time.perf_counter()
    for rel, data in files.items():
        if "/c/" in rel:
            google_crc32c.value(data[:-4])
    crc = time.perf_counter() - start
    return {"sha256_s": sha, "page_checksums_s": pages, "crc32c_s": crc}


def measure_trust_cost(gt: str, pred: str, client: Client, repeat: int = 3
                       ) -> dict[str, Any]:
    evaluate(gt, pred, client=client)  # warm-up: imports, compilation, the OS file cache
    evaluate_s = median_time(lambda: evaluate(gt, pred, client=client), repeat)
    consistency_s = min_time(lambda readers: check_against_gt(*readers), max(repeat, 5),
                             setup=lambda: readers_with_images(pred, gt))
    fresh_s = min_time(lambda _: check_against_gt(StoreReader(pred), StoreReader(gt)),
                       max(repeat, 5))
    files = {**{f"gt/{k}": v for k, v in store_bytes(gt).items()},
             **{f"pred/{k}": v for k, v in store_bytes(pred).items()}}
    runs = [integrity_seconds(files) for _ in range(repeat)]
    parts = {k: min(r[k] for r in runs) for k in runs[0]}
    integrity_s = sum(parts.values())
    return {"evaluate_s": evaluate_s, "consistency_s": consistency_s,
            "consistency_ratio": consistency_s / evaluate_s, "consistency_fresh_s": fresh_s,
            "consistency_fresh_ratio": fresh_s / evaluate_s, "integrity_s": integrity_s,
            "integrity_ratio": integrity_s / evaluate_s, **parts,
            "store_bytes": sum(len(v) for v in files.values()), "files": len(files)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._trust_cost")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        result = measure_trust_cost(args.gt, args.pred, client, args.repeat)
    print(json.dumps({**result, "workers": args.workers}))


if __name__ == "__main__":
    main()
