"""What trusting no store costs (issue 12): the GT consistency check and the integrity
checks, against the evaluation they guard.

    python benchmarks/trust_cost.py [DATASET_DIR] [--workers 2] [--repeat 3]

DATASET_DIR holds psg.json, panoptic/ and submission.zip (``sgdask synth DIR --images
500``; default: a 500-image dataset synthesized into a temporary directory). Its GT and
submission are converted into format-3 stores in a temporary directory, then timed:

- ``evaluate``: the whole evaluation (singlempo, a LocalCluster of ``--workers``);
- ``consistency``: ``check_against_gt`` with fresh readers (reading the tables included);
- ``read``: reading every partition's GT images and predictions as evaluation does, all
  checks on (sizes + SHA-256 of every file, Parquet page checksums, chunk CRC-32C);
- ``sha256``: the SHA-256 part of that alone (hashing every file's bytes once);
- with ``gt.store`` and ``pred.store`` of an older format in DATASET_DIR: ``read`` on them
  (no checks to run), for comparison.

Prints one JSON object; medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def median_time(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    from distributed import Client, LocalCluster

    from sgdask.io.consistency import check_against_gt
    from sgdask.io.ingest import convert_submission, ingest_gt
    from sgdask.io.partition import load_gt_images, load_predictions
    from sgdask.io.store import StoreReader
    from sgdask.pipeline import evaluate
    from sgdask.synth import write_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="sgdask-trust-"))
    if args.dataset:
        src = Path(args.dataset)
        psg, masks, zip_ = src / "psg.json", src / "panoptic", src / "submission.zip"
    else:
        paths = write_dataset(tmp / "raw", n_images=500, seed=0)
        psg, masks, zip_ = paths.psg_json, paths.masks_dir, paths.submission_zip
    gt, pred = str(tmp / "gt"), str(tmp / "pred")
    ingest_gt(str(psg), gt, str(masks))
    convert_submission(str(zip_), pred, gt)

    def consistency() -> None:
        check_against_gt(StoreReader(pred), StoreReader(gt))

    def read_all(gt: str = gt, pred: str = pred) -> None:
        g, p = StoreReader(gt), StoreReader(pred)
        ids = g.images()["image_id"].to_pylist()
        for part in g.parts:
            list(load_gt_images(g, [part["name"]], ids))
        for part in p.parts:
            load_predictions(p, [part["name"]], ids)

    def sha256_all() -> None:
        for store in (gt, pred):
            reader = StoreReader(store)
            blobs = [reader.fs.cat_file(f"{reader.path}/{rel}") for rel in reader.manifest["files"]]
            start = time.perf_counter()
            for blob in blobs:
                hashlib.sha256(blob).hexdigest()
            sha256_all.seconds += time.perf_counter() - start

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        evaluate(gt, pred, client=client)  # warm up (numba, imports)
        t_eval = median_time(lambda: evaluate(gt, pred, client=client), args.repeat)
    t_consistency = median_time(consistency, args.repeat)
    t_read = median_time(read_all, args.repeat)
    older = {}
    if args.dataset and (src / "gt.store").is_dir() and (src / "pred.store").is_dir():
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            older = {"read_all_parts_given_stores_s": round(median_time(
                lambda: read_all(str(src / "gt.store"), str(src / "pred.store")),
                args.repeat), 3),
                "given_stores_version": StoreReader(str(src / "gt.store")).version}
    hashed = []
    for _ in range(args.repeat):
        sha256_all.seconds = 0.0
        sha256_all()
        hashed.append(sha256_all.seconds)
    t_sha = statistics.median(hashed)
    n_bytes = sum(e["size"] for s in (gt, pred)
                  for e in json.loads((Path(s) / "manifest.json").read_text())["files"].values())
    result = {"images": StoreReader(gt).manifest["n_images"], "store_bytes": n_bytes,
              "workers": args.workers, "evaluate_s": round(t_eval, 3),
              "consistency_s": round(t_consistency, 4),
              "consistency_pct_of_evaluate": round(100 * t_consistency / t_eval, 2),
              "read_all_parts_s": round(t_read, 3), "sha256_s": round(t_sha, 4),
              "sha256_pct_of_evaluate": round(100 * t_sha / t_eval, 2), **older}
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
