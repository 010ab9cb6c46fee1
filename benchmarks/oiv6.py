"""The Open Images V6 row of ``make bench``: ``oiv6`` on an OI-V6-sized generated benchmark.

``python -m benchmarks.oiv6 [--images 5322] [--workers 2] [--repeats 1]``

A generated dataset of Open Images V6 test's size (``sgdask.testing.oi``: 300 classes, 30
predicates, ~5 boxes and ~2 relations per GT image, 16 predicted boxes and 64 scored pairs
per image, so 128 candidates of which the top 100 count), ingested and converted from
its score file with the NG list cut at 100 as the VG row's (once, cached, not measured: a
benchmark host does both once), then:

- R: the reference, ``benchmarks._oi_reference``: a single process written the way
  RelDN's / PySGG's ``eval_rel_results`` and ``ap_eval_rel`` are (a Python loop over
  images, numpy per image, then per predicate a loop over the ranked detections);
- B: ``sgdask evaluate --protocol oiv6`` from the stores on a LocalCluster of ``--workers``
  workers, its reports written to a temporary ``--out`` (wall: from starting the process
  to its exit; work: the "evaluated in" seconds it prints, one decimal);
- M: ``benchmarks._evaluate`` with worker processes, on all images and on a quarter of
  them: the largest worker's peak memory (the kernel's ``ru_maxrss``, median of
  ``--repeats`` runs) against the number of images (the merged runs, 2.4 MB per 1000
  images, and their final form, 1.6 MB, live in the worker that finalizes).

Every metric of R must equal B's to 1e-9 (they are bit-identical). Targets (issue 28): B
>= 10x R's wall (and, as the cores are shared, R's CPU seconds against B's), B at most 15 s
wall on 2 cores, a worker's peak memory flat in images. Writes ``results/oiv6.md`` and
``results/oiv6.json``.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

import sgdask.testing.oi
from benchmarks.dataset import COMPLETE, files_hash, is_store, package_hash, prune
from benchmarks.measure import Measurement, classify, run_measured
from benchmarks.paired import agreement, environment, log, paired_runs, row_options
from benchmarks.run import last_json, python
from sgdask.formats.oiv6 import ingest_oi
from sgdask.formats.sgbench import convert_submission
from sgdask.testing.oi import oi_synth_paths, write_oi_dataset

ROOT = Path(__file__).resolve().parent.parent
OIV6_TEST = 5322
COMPARED = ("R@50", "mAP_rel", "wmAP_rel", "mAP_phr", "wmAP_phr", "score_wtd")


def prepare(cache: Path, n_images: int, seed: int) -> tuple[Path, Path]:
    """GT and submission stores of the generated dataset (made once, cached)."""
    synth = files_hash([Path(sgdask.testing.oi.__file__)])
    root = cache / f"oiv6-{n_images}-seed{seed}-synth{synth}"
    prune(cache, f"oiv6-{n_images}-seed{seed}-synth*", [root], log)
    raw = root / "raw"
    if not (raw / COMPLETE).exists():
        log(f"generating {n_images} Open Images V6-shaped images into {raw} (once; cached)")
        write_oi_dataset(raw, n_test=n_images, seed=seed)
        (raw / COMPLETE).touch()
    paths = oi_synth_paths(raw)
    suffix = package_hash()
    gt, pred = root / f"gt-{suffix}.store", root / f"pred-{suffix}.store"
    prune(root, "*.store", [gt, pred], log)
    if not is_store(gt):
        log(f"ingesting the GT into {gt} (once; not measured)")
        ingest_oi(str(paths.anno), str(gt), overwrite=True)
    if not is_store(pred):
        log(f"converting the submission from its scores into {pred} (once; not measured)")
        convert_submission(str(paths.submission), str(pred), str(gt),
                           from_scores=str(paths.scores), ng_limit=100, overwrite=True)
    return gt, pred


def run_reference(gt: Path, pred: Path, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._oi_reference", "--gt", str(gt), "--pred", str(pred))
    m = run_measured("R RelDN / PySGG rules, 1 process", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["evaluate_s"]
    return m


def run_sgdask(gt: Path, pred: Path, workers: int, interval: float) -> Measurement:
    """The command a user runs: ``sgdask evaluate --protocol oiv6`` from the stores, its
    reports written (wall from process start to exit); work: the seconds it prints."""
    with tempfile.TemporaryDirectory(prefix="sgdask-bench-oiv6-") as out:
        argv = python("-m", "sgdask", "evaluate", "--gt", str(gt), "--pred", str(pred),
                      "--protocol", "oiv6", "--workers", str(workers), "--out", out)
        m = run_measured(f"B sgdask evaluate --protocol oiv6, {workers} worker(s)", argv,
                         ROOT, interval)
        m.extra["metrics"] = json.loads(Path(out, "metrics.json").read_text())["metrics"]
    printed = re.search(r"evaluated in ([0-9.]+) s", m.stderr_tail)
    m.extra["work_s"] = float(printed.group(1)) if printed else float("nan")
    return m


def _run_worker_processes(gt: Path, pred: Path, workers: int, interval: float) -> Measurement:
    """B with worker processes, so that each worker's memory is measured on its own (the
    kernel's peak of each worker, ``worker_peak_mb``, besides the sampled RSS)."""
    argv = python("-m", "benchmarks._evaluate", "--gt", str(gt), "--pred", str(pred),
                  "--protocol", "oiv6", "--workers", str(workers), "--processes")
    m = run_measured(f"M sgdask oiv6, {workers} worker processes", argv, ROOT, interval)
    result = last_json(m.stdout)
    classify(m.processes, m.processes[0].pid, set(result["worker_pids"]))
    m.extra.update(work_s=result["evaluate_s"], metrics=result["metrics"],
                   worker_peak_mb=max(result["worker_peak_rss_mb"]))
    return m


def _row(series: list[Measurement], n_images: int, ratio: str) -> dict[str, Any]:
    """A table row: the series' median wall, work and CPU, the sampled peak RSS of its
    largest process."""
    wall = median([m.wall_s for m in series])
    return {"label": series[0].label, "images": n_images, "runs": len(series), "wall": wall,
            "work": median([m.extra["work_s"] for m in series]),
            "cpu": median([m.cpu_s for m in series]), "rate": n_images / wall,
            "ratio": ratio, "worker_mb": round(max(m.peak_rss() for m in series) / 2**20)}


def _memory_row(series: list[Measurement], n_images: int) -> dict[str, Any]:
    """An M row: memory, the median over runs of the largest worker's kernel peak."""
    return {**_row(series, n_images, "-"),
            "worker_mb": round(median([m.extra["worker_peak_mb"] for m in series]))}


def render(n_images: int, rows: list[dict[str, Any]], agree: dict[str, Any],
           targets: list[tuple[str, str, bool]], env: dict[str, Any]) -> str:
    lines = [f"# Open Images V6 row: `oiv6` on {n_images} generated OI-V6-shaped images", "",
             f"Machine: {env.get('cpu', '?')}, {env.get('cores', '?')} core(s); load "
             f"average at start {env.get('load', '?')} (other users share the cores).", "",
             "| config | images | runs | wall s (median) | work s (median) | CPU s | img/s "
             "(wall) | R/x wall | peak RSS MB (M: a worker's, median of runs) |", "|---" * 9 + "|"]
    lines += [f"| {r['label']} | {r['images']} | {r['runs']} | {r['wall']:.2f} | "
              f"{r['work']:.2f} | {r['cpu']:.1f} | {r['rate']:.1f} | {r['ratio']} | "
              f"{r['worker_mb']} |" for r in rows]
    lines += ["", f"Agreement: {agree['metrics']} metrics ({', '.join(COMPARED)}), max "
              f"|difference| {agree['max_abs_difference']:.3g}"
              + (f", missing in sgdask: {agree['missing']}" if agree["missing"] else ""),
              "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {measured} | {'yes' if met else '**no**'} |"
              for name, measured, met in targets]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = row_options("python -m benchmarks.oiv6", OIV6_TEST, argv)
    gt, pred = prepare(args.cache, args.images, args.seed)
    env = environment()
    refs, fasts = paired_runs(args.repeats, lambda: run_reference(gt, pred, args.interval),
                              lambda: run_sgdask(gt, pred, args.workers, args.interval))
    agree = agreement(refs[0].extra["metrics"], fasts[0].extra["metrics"],
                      [n for n in COMPARED if n in refs[0].extra["metrics"]])
    quarter = args.images // 4
    log("worker processes on all images and on a quarter (memory against images)")
    small_stores = prepare(args.cache, quarter, args.seed)
    larges = [_run_worker_processes(gt, pred, args.workers, args.interval)
              for _ in range(args.repeats)]
    smalls = [_run_worker_processes(*small_stores, args.workers, args.interval)
              for _ in range(args.repeats)]
    ref_wall = median([m.wall_s for m in refs])
    rows = [_row(refs, args.images, f"{1.0:.1f}x"),
            _row(fasts, args.images, f"{ref_wall / median([m.wall_s for m in fasts]):.1f}x"),
            _memory_row(larges, args.images), _memory_row(smalls, quarter)]
    fast_wall = rows[1]["wall"]
    worker_mb, small_mb = rows[2]["worker_mb"], rows[3]["worker_mb"]
    cpu_ratio = rows[0]["cpu"] / rows[1]["cpu"]
    targets = [("B >= 10x faster than R (median wall)", f"{ref_wall / fast_wall:.1f}x",
                ref_wall / fast_wall >= 10),
               ("B >= 10x faster than R by CPU seconds (other users' load inflates both "
                "walls)", f"{cpu_ratio:.1f}x", cpu_ratio >= 10),
               (f"B at most 15 s wall on {args.workers} cores", f"{fast_wall:.1f} s",
                fast_wall <= 15),
               ("worker memory flat in images (M: a worker process's peak RSS, all images "
                "against a quarter, at most 1.2x; the kernel's peak, median of runs)",
                f"{worker_mb} MB against {small_mb} MB",
                worker_mb <= 1.2 * small_mb),
               ("every compared metric agrees to 1e-9",
                f"max {agree['max_abs_difference']:.3g}", agree["agree"])]
    text = render(args.images, rows, agree, targets, env)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "oiv6.md").write_text(text)
    (args.results / "oiv6.json").write_text(json.dumps({
        "images": args.images, "rows": rows, "agreement": agree,
        "targets": [{"name": n, "measured": m, "met": ok} for n, m, ok in targets],
        "runs": [m.summary() for m in [*refs, *fasts, *larges, *smalls]], "env": env},
        indent=1))
    print(text)
    return 0 if agree["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
