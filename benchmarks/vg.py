"""The VG row of ``make bench``: ``sgbpytorch`` on a VG150-sized generated box benchmark.

``python -m benchmarks.vg [--images 26446] [--workers 2] [--repeats 1]``

A generated dataset of VG150 test's size (``sgdask.testing.vg``: ~11.5 boxes and ~6
relations per GT image, 80 predicted boxes and 100 scored pairs per image), ingested and
converted by triplet score with the NG list cut at 100 (once, cached, not measured: a
benchmark host does both once), then:

- R: the reference, ``benchmarks._sgb_reference``: a single process written the way
  Scene-Graph-Benchmark.pytorch's evaluator is (a Python loop over images, numpy per image);
- B: ``sgdask`` ``sgbpytorch`` from the stores on a LocalCluster of ``--workers`` workers
  (``benchmarks._evaluate``: wall includes starting the cluster).

Every metric of R must equal B's to 1e-9. Targets (issue 18): B >= 10x R's wall, and B
under 20 s wall on 2 cores. Writes ``results/vg.md`` and ``results/vg.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any

import sgdask.testing.vg
from benchmarks.dataset import COMPLETE, files_hash, is_store, package_hash, prune
from benchmarks.measure import Measurement, run_measured
from benchmarks.paired import agreement, environment, log, paired_runs, row_options
from benchmarks.run import last_json, python, run_store_evaluation
from sgdask.formats.sgbench import convert_submission
from sgdask.formats.vg150 import ingest_vg
from sgdask.testing.vg import vg_synth_paths, write_vg_dataset

ROOT = Path(__file__).resolve().parent.parent
VG150_TEST = 26446
COMPARED = ("R", "ngR", "zR", "ngzR", "mR", "mNgR")


def prepare(cache: Path, n_images: int, seed: int) -> tuple[Path, Path]:
    """GT and submission stores of the generated dataset (made once, cached)."""
    synth = files_hash([Path(sgdask.testing.vg.__file__)])
    root = cache / f"vg-{n_images}-seed{seed}-synth{synth}"
    prune(cache, f"vg-{n_images}-seed{seed}-synth*", [root], log)
    raw = root / "raw"
    if not (raw / COMPLETE).exists():
        log(f"generating {n_images} VG150-shaped images into {raw} (once; cached)")
        write_vg_dataset(raw, n_test=n_images, seed=seed, missing_fraction=0.002,
                         no_pairs_fraction=0.002)
        (raw / COMPLETE).touch()
    paths = vg_synth_paths(raw)
    suffix = package_hash()
    gt, pred = root / f"gt-{suffix}.store", root / f"pred-{suffix}.store"
    prune(root, "*.store", [gt, pred], log)
    if not is_store(gt):
        log(f"ingesting the GT into {gt} (once; not measured)")
        ingest_vg(str(paths.h5), str(gt), str(paths.dicts), str(paths.image_data),
                  overwrite=True)
    if not is_store(pred):
        log(f"converting the submission by triplet score into {pred} (once; not measured)")
        convert_submission(str(paths.submission), str(pred), str(gt),
                           from_scores=str(paths.scores), rank_by="triplet", ng_limit=100,
                           overwrite=True)
    return gt, pred


def run_reference(gt: Path, pred: Path, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._sgb_reference", "--gt", str(gt), "--pred", str(pred))
    m = run_measured("R Scene-Graph-Benchmark.pytorch rules, 1 process", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["evaluate_s"]
    return m


def run_sgdask(gt: Path, pred: Path, workers: int, interval: float) -> Measurement:
    return run_store_evaluation(f"B sgdask sgbpytorch, {workers} worker(s)", gt, pred,
                                "sgbpytorch", workers, interval)


def render(n_images: int, rows: list[dict[str, Any]], agree: dict[str, Any],
           targets: list[tuple[str, str, bool]], env: dict[str, Any]) -> str:
    lines = [f"# VG row: `sgbpytorch` on {n_images} generated VG150-shaped images", "",
             f"Machine: {env.get('cpu', '?')}, {env.get('cores', '?')} core(s); load "
             f"average at start {env.get('load', '?')} (other users share the cores).", "",
             "| config | runs | wall s (median) | work s (median) | CPU s | img/s (wall) "
             "| R/x wall |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['runs']} | {r['wall']:.2f} | {r['work']:.2f} | "
              f"{r['cpu']:.1f} | {r['rate']:.1f} | {r['ratio']:.1f}x |" for r in rows]
    lines += ["", f"Agreement: {agree['metrics']} metrics (R, ngR, zR, ngzR, mR, mNgR at "
              f"20/50/100), max |difference| {agree['max_abs_difference']:.3g}"
              + (f", missing in sgdask: {agree['missing']}" if agree["missing"] else ""),
              "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {measured} | {'yes' if met else '**no**'} |"
              for name, measured, met in targets]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = row_options("python -m benchmarks.vg", VG150_TEST, argv)
    gt, pred = prepare(args.cache, args.images, args.seed)
    env = environment()
    refs, fasts = paired_runs(args.repeats, lambda: run_reference(gt, pred, args.interval),
                              lambda: run_sgdask(gt, pred, args.workers, args.interval))
    metrics = refs[0].extra["metrics"]
    agree = agreement(metrics, fasts[0].extra["metrics"],
                      sorted(n for n in metrics if n.partition("@")[0] in COMPARED))
    ref_wall = median([m.wall_s for m in refs])
    rows = []
    for series in (refs, fasts):
        wall = median([m.wall_s for m in series])
        rows.append({"label": series[0].label, "runs": len(series), "wall": wall,
                     "work": median([m.extra["work_s"] for m in series]),
                     "cpu": median([m.cpu_s for m in series]),
                     "rate": args.images / wall, "ratio": ref_wall / wall})
    fast_wall = rows[1]["wall"]
    targets = [("B >= 10x faster than R (median wall)", f"{ref_wall / fast_wall:.1f}x",
                ref_wall / fast_wall >= 10),
               (f"B under 20 s wall on {args.workers} cores", f"{fast_wall:.1f} s",
                fast_wall < 20),
               ("every compared metric agrees to 1e-9",
                f"max {agree['max_abs_difference']:.3g}", agree["agree"])]
    text = render(args.images, rows, agree, targets, env)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "vg.md").write_text(text)
    (args.results / "vg.json").write_text(json.dumps({
        "images": args.images, "rows": rows, "agreement": agree,
        "targets": [{"name": n, "measured": m, "met": ok} for n, m, ok in targets],
        "runs": [m.summary() for m in refs + fasts], "env": env}, indent=1))
    print(text)
    return 0 if agree["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
