"""``make bench``: sgdask against the sgbench 1.0.0 reference, same data, same machine.

Synthesizes (once, cached) a PSG-scale dataset and measures, each as a subprocess whose whole
process tree is sampled (wall time, CPU seconds, peak RSS per process):

- A: ``python -m sgbench psg.json submission.zip --gt-masks DIR --workers 2`` (the reference);
- B: sgdask evaluate from the canonical stores on sgdask's LocalCluster (W worker threads),
  under the ``sgbench`` and ``singlempo`` protocols, for every W of ``--workers``
  (evaluate-only time reported by the process); B warm: the same W, four evaluations in one
  process, the median of the last three (a warm cluster's throughput, without the first
  evaluation's one-time costs); B-cli: the whole ``sgdask evaluate`` command;
- C: one command from the raw files, ``sgdask evaluate --gt psg.json --gt-masks DIR --pred
  submission.zip``: warm (the GT store cache filled) and cold (empty cache: the PNGs too);
- convert: ``sgdask convert`` of the ZIP, its CPU against decoding the ZIP's TIFFs;
- many: ``evaluate-many`` of 10 submissions (the submission and 9 copies with other
  rankings) in one graph, against 10 runs of A;
- the per-phase table (``benchmarks._phases``: CPU ms per image of each phase, 1 thread)
  and the floor (read + decode every mask from the stores, and from the raw files);
- memory flatness: B (singlempo) again on a dataset of a quarter of the images;
- the cost of intervals: 1000 bootstrap resamples of every metric of B (singlempo) against
  the evaluation itself (``benchmarks._ci_cost``), and with ``--ci-metrics mR@50``;
- D: a model's result files (one ``.npz`` per image, ``benchmarks._results``) to a score:
  the path labs take today (SGBench's ``psgtr`` conversion rules writing a deflate TIFF
  ZIP, emulated literally, then ``python -m sgbench``) against ``sgdask evaluate --pred
  DIR --method psgtr`` (one command, no TIFF);
- the in-memory evaluator: ``sgdask.Evaluator.update`` per image on arrays already in
  memory (``benchmarks._evaluator``);
- the cost of trusting no store: the GT consistency check and the integrity checks
  (SHA-256, Parquet page checksums, CRC-32C) against B (singlempo)
  (``benchmarks._trust_cost``);
- the cost of panoptic quality: B (singlempo) against the GT store and against its copy
  without crowd flags, which leaves PQ out (``benchmarks._pq_cost``).

Prints the tables and writes ``benchmarks/results/<UTC date and time>-<images>.json`` and
``.md`` (e.g. ``2026-11-22T0452Z-2177.json``), ``benchmarks/results/latest.md`` and the
latest-results block of ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import machine as machine_info
from benchmarks import report as rp
from benchmarks.dataset import Dataset, package_hash, prepare, tree_bytes, tree_files
from benchmarks.measure import (
    CommandFailed,
    Measurement,
    classify,
    combined,
    run_measured,
    wait_for_quiet,
)

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
PROTOCOLS = ("sgbench", "singlempo")
QUICK_IMAGES = 200
FLAT_LIMIT = 1.25
TARGETS = {"B": 15.0, "B-cli": 8.0, "C": 3.0, "C-cold": 2.0, "convert": 1.5, "many": 20.0, "D": 5.0,
           "scaling": 1.85, "worker_gib": 1.0, "store": 0.5, "ci": 0.2,
           "kernel sgbench": 0.8, "kernel singlempo": 1.2, "floor": 0.8,
           "consistency": 0.02, "integrity": 0.03, "pq": 0.15}
MODELS = 10
_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:8.1f}s] {message}", flush=True)


def int_list(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2177, help="test images (PSG test: 2177)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each sgdask config")
    parser.add_argument("--reference-repeats", type=int, default=1,
                        help="runs of the sgbench reference A")
    parser.add_argument("--workers", type=int_list, default=[1, 2],
                        help="worker counts for B's throughput, comma separated")
    parser.add_argument("--reference-workers", type=int, default=2,
                        help="--workers of sgbench (A) and of sgdask in C; the A/B ratio "
                        "uses B at this worker count")
    parser.add_argument("--e2e-protocol", default="sgbench", choices=PROTOCOLS,
                        help="protocol of the end-to-end run C (sgbench: the same metrics as A)")
    parser.add_argument("--cache", type=Path, default=BENCH / "cache")
    parser.add_argument("--results", type=Path, default=BENCH / "results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.1, help="sampling period, seconds")
    parser.add_argument("--quiet-wait", type=float, default=120.0,
                        help="before each run, wait up to this many seconds for other "
                        "processes to leave the CPU idle (0: do not wait)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_IMAGES} images, 1 repeat")
    parser.add_argument("--no-memory-check", action="store_true",
                        help="skip the quarter-size run of the memory flatness check")
    parser.add_argument("--no-latest", action="store_true",
                        help="do not update results/latest.md and the README")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats, args.reference_repeats = QUICK_IMAGES, 1, 1
    if args.reference_workers not in args.workers:
        args.workers = sorted({*args.workers, args.reference_workers})
    return args


# ----------------------------------------------------------------------------- commands


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def last_json(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise CommandFailed(f"no JSON result on stdout:\n{stdout[-2000:]}")
    return json.loads(lines[-1])


def parse_sgbench_output(stdout: str) -> dict[str, float]:
    """``name: value`` lines printed by ``python -m sgbench``."""
    metrics = {}
    for line in stdout.splitlines():
        name, sep, value = line.partition(": ")
        if sep:
            try:
                metrics[name.strip()] = float(value)
            except ValueError:
                continue
    return metrics


def run_reference(ds: Dataset, workers: int, interval: float) -> Measurement:
    raw = ds.raw
    argv = python("-m", "sgbench", str(raw.psg_json), str(raw.submission_zip),
                  "--gt-masks", str(raw.masks_dir), "--workers", str(workers))
    m = run_measured("A sgbench 1.0.0", argv, ROOT, interval)
    m.extra["metrics"] = parse_sgbench_output(m.stdout)
    return m


def run_evaluate(ds: Dataset, protocol: str, workers: int, interval: float) -> Measurement:
    return run_store_evaluation(f"B {protocol} w{workers}", ds.gt_store, ds.pred_store,
                                protocol, workers, interval)


def run_store_evaluation(label: str, gt: Path, pred: Path, protocol: str, workers: int,
                         interval: float, repeats: int = 1) -> Measurement:
    """``benchmarks._evaluate`` on two stores: wall and CPU, and its evaluate-only seconds,
    cluster start, metrics and diagnostics; with ``repeats`` > 1 the work is the median of
    the evaluations after the first (a warm cluster)."""
    argv = python("-m", "benchmarks._evaluate", "--gt", str(gt), "--pred", str(pred),
                  "--protocol", protocol, "--workers", str(workers), "--repeats", str(repeats))
    m = run_measured(label, argv, ROOT, interval)
    result = last_json(m.stdout)
    classify(m.processes, m.processes[0].pid, set(result["worker_pids"]))
    warm = result["evaluate_runs_s"][1:]
    m.extra.update(work_s=statistics.median(warm) if warm else result["evaluate_s"],
                   evaluate_runs_s=result["evaluate_runs_s"],
                   cluster_start_s=result["cluster_start_s"],
                   metrics=result["metrics"], diagnostics=result["diagnostics"])
    return m


WARM_REPEATS = 4  # evaluations on one cluster: the first pays the process's one-time costs


def run_warm(ds: Dataset, protocol: str, workers: int, interval: float) -> Measurement:
    return run_store_evaluation(f"B warm {protocol} w{workers}", ds.gt_store, ds.pred_store,
                                protocol, workers, interval, WARM_REPEATS)


def run_cli(ds: Dataset, protocol: str, interval: float) -> Measurement:
    argv = python("-m", "sgdask", "evaluate", "--gt", str(ds.gt_store), "--pred",
                  str(ds.pred_store), "--protocol", protocol)
    return run_measured(f"B-cli {protocol}", argv, ROOT, interval)


def run_one_command(ds: Dataset, protocol: str, cold: bool, interval: float) -> Measurement:
    """``sgdask evaluate`` from psg.json + PNGs + the ZIP; ``cold``: with an empty GT cache."""
    cache = ds.root / "gt-cache"
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    argv = python("-m", "sgdask", "evaluate", "--gt", str(ds.raw.psg_json), "--gt-masks",
                  str(ds.raw.masks_dir), "--pred", str(ds.raw.submission_zip),
                  "--cache-dir", str(cache), "--protocol", protocol)
    return run_measured(f"C {'cold' if cold else 'warm'} {protocol}", argv, ROOT, interval)


def run_convert(ds: Dataset, interval: float) -> Measurement:
    argv = python("-m", "sgdask", "convert", str(ds.raw.submission_zip), "--out",
                  str(ds.scratch_store), "--gt", str(ds.gt_store), "--overwrite")
    return run_measured("convert", argv, ROOT, interval)


def run_many(ds: Dataset, protocol: str, workers: int, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._many", "--gt", str(ds.gt_store), "--protocol", protocol,
                  "--workers", str(workers))
    for store in ds.models:
        argv += ["--pred", str(store)]
    m = run_measured(f"many {len(ds.models)}", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["evaluate_s"]
    return m


def run_phases(ds: Dataset, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._phases", "--gt", str(ds.gt_store), "--pred",
                  str(ds.pred_store), "--protocols", ",".join(PROTOCOLS))
    m = run_measured("phases", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    return m


def run_ci_cost(ds: Dataset, workers: int, interval: float) -> Measurement:
    return run_store_helper("_ci_cost", f"intervals w{workers}", ds, workers, interval)


def results_dir(ds: Dataset) -> Path:
    """The dataset's model results as .npz files (written once, not measured)."""
    from benchmarks._results import make_results

    out = ds.root / "results_npz"
    done = out / ".complete"
    if not done.exists():
        log(f"writing model results (.npz per image) into {out} ...")
        make_results(ds.raw.psg_json, ds.raw.submission_zip, out)
        done.write_text("")
    return out


def run_results_reference(ds: Dataset, workers: int, interval: float) -> Measurement:
    """D, today's path: SGBench's conversion rules write a TIFF ZIP, sgbench scores it."""
    results, archive = results_dir(ds), ds.root / "results-sgbench.zip"
    convert = python("-m", "benchmarks._results", "convert", "--results", str(results),
                     "--psg", str(ds.raw.psg_json), "--out", str(archive))
    score = python("-m", "sgbench", str(ds.raw.psg_json), str(archive), "--gt-masks",
                   str(ds.raw.masks_dir), "--workers", str(workers))
    parts = [run_measured("D convert (SGBench rules, TIFF ZIP)", convert, ROOT, interval),
             run_measured("D sgbench", score, ROOT, interval)]
    m = combined("D SGBench conversion + sgbench", parts)
    m.extra["metrics"] = parse_sgbench_output(parts[-1].stdout)
    return m


def run_results_sgdask(ds: Dataset, interval: float) -> Measurement:
    """D, one command: sgdask evaluate --pred DIR --method psgtr (sgbench protocol)."""
    with tempfile.TemporaryDirectory(prefix="sgdask-bench-d-") as out:
        argv = python("-m", "sgdask", "evaluate", "--gt", str(ds.gt_store), "--pred",
                      str(results_dir(ds)), "--method", "psgtr", "--protocol", "sgbench",
                      "--out", out)
        m = run_measured("D sgdask evaluate --method psgtr", argv, ROOT, interval)
        m.extra["metrics"] = json.loads(Path(out, "metrics.json").read_text())["metrics"]
    return m


def run_evaluator_cost(ds: Dataset, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._evaluator", "--psg", str(ds.raw.psg_json),
                  "--masks-dir", str(ds.raw.masks_dir), "--zip", str(ds.raw.submission_zip))
    m = run_measured("sgdask.Evaluator", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["update_s"] + m.extra["compute_s"]
    return m


def run_trust_cost(ds: Dataset, workers: int, interval: float) -> Measurement:
    return run_store_helper("_trust_cost", f"trust w{workers}", ds, workers, interval)


def run_pq_cost(ds: Dataset, workers: int, interval: float) -> Measurement:
    return run_store_helper("_pq_cost", f"pq w{workers}", ds, workers, interval)


def run_store_helper(module: str, label: str, ds: Dataset, workers: int, interval: float
                     ) -> Measurement:
    """A ``benchmarks.<module>`` run on the two stores that evaluates, then measures its
    extra work and prints it as one JSON line (``evaluate_s`` is its work time)."""
    argv = python("-m", f"benchmarks.{module}", "--gt", str(ds.gt_store), "--pred",
                  str(ds.pred_store), "--workers", str(workers))
    m = run_measured(label, argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["evaluate_s"]
    return m


def run_floor(ds: Dataset, interval: float) -> Measurement:
    argv = python("-m", "benchmarks._floor", "--gt", str(ds.gt_store), "--pred",
                  str(ds.pred_store), "--zip", str(ds.raw.submission_zip),
                  "--masks-dir", str(ds.raw.masks_dir), "--psg-json", str(ds.raw.psg_json))
    m = run_measured("floor", argv, ROOT, interval)
    m.extra.update(last_json(m.stdout))
    m.extra["work_s"] = m.extra["store_s"]
    return m


def settle(max_wait: float) -> None:
    """Wait for a quiet machine (``--quiet-wait``) and say so when it took a while."""
    if max_wait <= 0:
        return
    waited = wait_for_quiet(max_wait)
    if waited >= 2:
        log(f"  waited {waited:.0f} s for other processes to leave the CPU idle")


def repeat(series: rp.Series, times: int, run: Callable[[], Measurement],
           quiet_wait: float = 0.0) -> rp.Series:
    for i in range(times):
        settle(quiet_wait)
        log(f"{series.label}: run {i + 1}/{times} ...")
        m = run()
        series.runs.append(m)
        work = f", work {m.extra['work_s']:.1f} s" if "work_s" in m.extra else ""
        log(f"  {m.wall_s:.1f} s wall{work}, {m.cpu_s:.1f} CPU s, peak RSS "
            f"{m.peak_rss() / rp.MIB:.0f} MiB/proc, {m.peak_rss('worker') / rp.MIB:.0f} "
            f"MiB/worker, {m.peak_rss_sum / rp.MIB:.0f} MiB summed; others used "
            f"{100 * m.foreign_share:.0f} % of the CPU")
    return series


# ----------------------------------------------------------------------------- the suite


def b_key(protocol: str, workers: int, warm: bool = False) -> str:
    return f"B-{'warm-' if warm else ''}{protocol}-w{workers}"


def run_suite(args: argparse.Namespace, ds: Dataset, runs: dict[str, rp.Series]) -> None:
    """Every measured configuration on the full dataset, reference first, into ``runs``
    (each series is registered before its first run, so a failure keeps what was done)."""
    n, iv, q = ds.n_images, args.interval, args.quiet_wait
    ref_w, e2e = args.reference_workers, args.e2e_protocol

    def measure(series: rp.Series, times: int, run: Callable[[], Measurement]) -> None:
        runs[series.key] = series
        repeat(series, times, run, q)

    measure(rp.Series("floor", "floor: decode masks (1 proc)", n), 1, lambda: run_floor(ds, iv))
    measure(rp.Series("phases", "per-phase CPU (1 thread)", n), 1, lambda: run_phases(ds, iv))
    measure(rp.Series("A", f"A sgbench 1.0.0 --workers {ref_w}", n), args.reference_repeats,
            lambda: run_reference(ds, ref_w, iv))
    for workers in sorted(args.workers, reverse=True):
        for protocol in PROTOCOLS:
            measure(rp.Series(b_key(protocol, workers), f"B {protocol}, {workers} worker(s)", n),
                    args.repeats, lambda p=protocol, w=workers: run_evaluate(ds, p, w, iv))
    for workers in sorted(args.workers, reverse=True):
        for protocol in PROTOCOLS:
            measure(rp.Series(b_key(protocol, workers, warm=True),
                              f"B {protocol}, {workers} worker(s), warm cluster "
                              f"(evaluations 2-{WARM_REPEATS} of one process)", n), 1,
                    lambda p=protocol, w=workers: run_warm(ds, p, w, iv))
    for protocol in PROTOCOLS:
        measure(rp.Series(f"B-cli-{protocol}", f"B-cli sgdask evaluate (stores, {protocol})", n),
                args.repeats, lambda p=protocol: run_cli(ds, p, iv))
    measure(rp.Series("C-cold", f"C cold: one command, psg.json + PNGs + ZIP ({e2e})", n), 1,
            lambda: run_one_command(ds, e2e, True, iv))
    measure(rp.Series("C", f"C warm: one command, cached GT store + ZIP ({e2e})", n),
            args.repeats, lambda: run_one_command(ds, e2e, False, iv))
    measure(rp.Series("convert", "sgdask convert (ZIP -> store)", n), 1,
            lambda: run_convert(ds, iv))
    measure(rp.Series("many", f"evaluate-many, {len(ds.models)} models ({e2e})", n), 1,
            lambda: run_many(ds, e2e, ref_w, iv))
    measure(rp.Series("ci", f"B singlempo + 1000 bootstrap resamples, {ref_w} worker(s)", n),
            1, lambda: run_ci_cost(ds, ref_w, iv))
    measure(rp.Series("D-ref", f"D SGBench conversion (TIFF ZIP) + sgbench --workers {ref_w}",
                      n), args.reference_repeats, lambda: run_results_reference(ds, ref_w, iv))
    measure(rp.Series("D", "D sgdask evaluate --pred DIR --method psgtr (sgbench)", n),
            args.repeats, lambda: run_results_sgdask(ds, iv))
    measure(rp.Series("evaluator", "sgdask.Evaluator (singlempo, in memory)", n), 1,
            lambda: run_evaluator_cost(ds, iv))
    measure(rp.Series("trust", f"B singlempo + consistency and integrity checks, {ref_w} "
                      "worker(s)", n), 1, lambda: run_trust_cost(ds, ref_w, iv))
    measure(rp.Series("pq", f"B singlempo with and without panoptic quality, {ref_w} "
                      "worker(s)", n), 1, lambda: run_pq_cost(ds, ref_w, iv))


def run_memory_check(args: argparse.Namespace, small: Dataset) -> rp.Series:
    workers = args.reference_workers
    label = f"B singlempo, {workers} worker(s), {small.n_images} images"
    return repeat(rp.Series("memory-small", label, small.n_images), 1,
                  lambda: run_evaluate(small, "singlempo", workers, args.interval),
                  args.quiet_wait)


# ----------------------------------------------------------------------------- summaries


def sizes(ds: Dataset) -> dict[str, dict[str, int]]:
    items = {"submission.zip": ds.raw.submission_zip, "submission store": ds.pred_store,
             "GT PNGs": ds.raw.masks_dir, "GT store": ds.gt_store, "psg.json": ds.raw.psg_json}
    return {name: {"bytes": tree_bytes(p), "files": tree_files(p)} for name, p in items.items()}


def scaling(runs: dict[str, rp.Series], workers: list[int]) -> list[dict[str, Any]]:
    rows = []
    for protocol in PROTOCOLS:
        base = runs[b_key(protocol, min(workers))]
        warm_base = runs[b_key(protocol, min(workers), warm=True)]
        for w in workers:
            s, warm = runs[b_key(protocol, w)], runs[b_key(protocol, w, warm=True)]
            rows.append({"protocol": protocol, "workers": w, "work_ips": s.work_images_per_s,
                         "wall_ips": s.images_per_s,
                         "work_speedup": rp.ratio(s.work_images_per_s, base.work_images_per_s),
                         "wall_speedup": rp.ratio(s.images_per_s, base.images_per_s),
                         "warm_ips": warm.work_images_per_s,
                         "warm_speedup": rp.ratio(warm.work_images_per_s,
                                                  warm_base.work_images_per_s)})
    return rows


def memory(runs: dict[str, rp.Series], small: rp.Series | None, workers: int
           ) -> dict[str, Any] | None:
    if small is None:
        return None
    full = runs[b_key("singlempo", workers)]

    def worker_peak(series: rp.Series) -> int:
        """Worker processes' peak RSS; with worker threads, the process that runs them."""
        return series.peak("worker") or series.peak("main")

    return {"label_small": small.label, "n_small": small.n_images,
            "worker_small": worker_peak(small), "main_small": small.peak("main"),
            "label_full": full.label, "n_full": full.n_images,
            "worker_full": worker_peak(full), "main_full": full.peak("main"),
            "ratio": rp.ratio(worker_peak(full), worker_peak(small)),
            "main_ratio": rp.ratio(full.peak("main"), small.peak("main"))}


def agreement(runs: dict[str, rp.Series], workers: int) -> dict[str, Any]:
    """A's printed metrics against B's under the sgbench protocol (should agree to 1e-9)."""
    ref = runs["A"].runs[0].extra["metrics"]
    ours = runs[b_key("sgbench", workers)].runs[0].extra["metrics"]
    diffs = {name: abs(ref[name] - ours[name]) for name in ref
             if isinstance(ours.get(name), float) and math.isfinite(ref[name])
             and math.isfinite(ours[name])}
    return {"compared": sorted(diffs), "not_compared": sorted(set(ref) - set(diffs)),
            "max_abs_diff": max(diffs.values(), default=None),
            "reference": ref, "sgdask": {k: ours.get(k) for k in ref}}


def target(name: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"target": name, "measured": measured, "met": met}


def speed_targets(runs: dict[str, rp.Series], workers: int) -> list[dict[str, Any]]:
    """A against B (evaluate-only and the whole command), C warm and cold, and the many-model
    run, on median wall times (and on the fastest runs, the least contended)."""
    a, a_min = runs["A"].wall_s, runs["A"].wall_min_s
    b = {p: runs[b_key(p, workers)] for p in PROTOCOLS}
    b_work = {p: rp.ratio(a, s.work_s) or 0.0 for p, s in b.items()}
    b_text = "; ".join(f"{p} {r:.1f}x (fastest runs {rp.fmt(rp.ratio(a_min, b[p].work_s), 1)}x)"
                       for p, r in b_work.items())
    cli = {p: runs[f"B-cli-{p}"] for p in PROTOCOLS}
    cli_ratio = {p: rp.ratio(a, s.wall_s) or 0.0 for p, s in cli.items()}
    cli_text = "; ".join(f"{p} {r:.1f}x ({cli[p].wall_s:.1f} s)" for p, r in cli_ratio.items())
    rows = [target(f"B evaluate-only >= {TARGETS['B']:g}x faster than A (median wall)", b_text,
                   min(b_work.values()) >= TARGETS["B"]),
            target(f"B-cli `sgdask evaluate` >= {TARGETS['B-cli']:g}x faster than A", cli_text,
                   min(cli_ratio.values()) >= TARGETS["B-cli"])]
    for key, name in (("C", "C warm (cached GT)"), ("C-cold", "C cold (GT from PNGs)")):
        r = rp.ratio(a, runs[key].wall_s) or 0.0
        rows.append(target(f"{name} >= {TARGETS[key]:g}x faster than A",
                           f"{r:.1f}x ({runs[key].wall_s:.1f} s)", r >= TARGETS[key]))
    many = runs["many"]
    models = many.runs[0].extra["models"]
    r = rp.ratio(models * a, many.wall_s) or 0.0
    rows.append(target(f"{models} models, evaluate-many >= {TARGETS['many']:g}x faster than "
                       f"A x {models}", f"{r:.1f}x ({many.wall_s:.1f} s against {models} x "
                       f"{a:.1f} s)", r >= TARGETS["many"]))
    return rows


def cpu_targets(runs: dict[str, rp.Series]) -> list[dict[str, Any]]:
    """Per-image kernel CPU (the per-phase table), the store floor and conversion's CPU."""
    phases = runs["phases"].runs[0].extra
    rows = []
    for protocol in PROTOCOLS:
        kernel = sum(v for k, v in phases[protocol].items() if not k.startswith("read"))
        limit = TARGETS[f"kernel {protocol}"]
        rows.append(target(f"per-image kernel CPU, {protocol} <= {limit:g} ms",
                           f"{kernel:.2f} ms", kernel <= limit))
    floor = runs["floor"].runs[0].extra
    per_image = 1000 * floor["store_s"] / runs["floor"].n_images
    rows.append(target(f"store read + decode CPU per image <= {TARGETS['floor']:g} ms",
                       f"{per_image:.2f} ms", per_image <= TARGETS["floor"]))
    convert = runs["convert"].cpu_s
    r = rp.ratio(convert, floor["raw_tiff_s"]) or 0.0
    rows.append(target(f"sgdask convert CPU <= {TARGETS['convert']:g}x the CPU of decoding "
                       "the TIFFs", f"{r:.2f}x ({convert:.1f} s against "
                       f"{floor['raw_tiff_s']:.1f} s)", r <= TARGETS["convert"]))
    return rows


def results_target(runs: dict[str, rp.Series]) -> dict[str, Any]:
    """D: a model's result files to a score, today's path against sgdask's one command."""
    ref, ours = runs["D-ref"], runs["D"]
    r = rp.ratio(ref.wall_s, ours.wall_s) or 0.0
    text = f"{r:.1f}x (fastest runs {rp.fmt(rp.ratio(ref.wall_min_s, ours.wall_min_s), 1)}x)"
    return target(f"D >= {TARGETS['D']:g}x faster than SGBench's conversion + sgbench "
                  "(median wall)", text, r >= TARGETS["D"])


def results_agreement(runs: dict[str, rp.Series]) -> dict[str, Any]:
    """D: sgbench's printed metrics on the converted ZIP against sgdask's on the results."""
    ref = runs["D-ref"].runs[0].extra["metrics"]
    ours = runs["D"].runs[0].extra["metrics"]
    diffs = {name: abs(ref[name] - ours[name]) for name in ref
             if isinstance(ours.get(name), float) and math.isfinite(ref[name])
             and math.isfinite(ours[name])}
    return {"compared": sorted(diffs), "max_abs_diff": max(diffs.values(), default=None)}


def scaling_target(rows: list[dict[str, Any]], workers: list[int]) -> dict[str, Any]:
    top = [r for r in rows if r["workers"] == max(workers)]
    text = (", ".join(f"{r['protocol']} {rp.fmt(r['work_speedup'])}x" for r in top)
            + " (warm cluster: " + ", ".join(f"{r['protocol']} {rp.fmt(r['warm_speedup'])}x"
                                             for r in top) + ")")
    met = None if len(workers) < 2 else all((r["work_speedup"] or 0) >= TARGETS["scaling"]
                                           for r in top)
    name = (f"{max(workers)} workers >= {TARGETS['scaling']:g}x the throughput of "
            f"{min(workers)} (evaluate-only)")
    return target(name, text, met)


def memory_targets(runs: dict[str, rp.Series], mem: dict[str, Any] | None
                   ) -> list[dict[str, Any]]:
    worker_peak = max(max(s.peak("worker"), s.peak("main")) for k, s in runs.items()
                      if k.startswith("B-") and not k.startswith("B-cli"))
    rows = [target(f"peak RSS per worker process < {TARGETS['worker_gib']:g} GiB",
                   f"{worker_peak / rp.MIB:.0f} MiB", worker_peak < TARGETS["worker_gib"] * rp.GIB)]
    if mem is not None:
        rows.append(target(f"worker memory flat in images (4x images: <= {FLAT_LIMIT}x RSS)",
                           f"{rp.fmt(mem['ratio'])}x", (mem["ratio"] or 99) <= FLAT_LIMIT))
    return rows


def ci_target(runs: dict[str, rp.Series]) -> dict[str, Any]:
    """What 1000 resamples of every metric add to the evaluation (and of one metric)."""
    r = runs["ci"].runs[0].extra
    text = (f"{r['intervals_all_s']:.2f} s on {r['evaluate_s']:.2f} s "
            f"({100 * r['ratio_all']:.0f} %; {r['metrics']} metrics, {r['term_rows']} term "
            f"rows); --ci-metrics {r['ci_metrics']}: {r['intervals_some_s']:.2f} s")
    return target(f"1000 resamples of every metric add <= {100 * TARGETS['ci']:.0f} % to "
                  "the evaluation (singlempo)", text, r["ratio_all"] <= TARGETS["ci"])


def trust_targets(runs: dict[str, rp.Series]) -> list[dict[str, Any]]:
    """What the GT consistency check and the integrity checks cost (issue 12)."""
    r = runs["trust"].runs[0].extra
    return [
        target(f"GT consistency check <= {100 * TARGETS['consistency']:g} % of the evaluation",
               f"{r['consistency_s']:.3f} s on {r['evaluate_s']:.2f} s "
               f"({100 * r['consistency_ratio']:.1f} %; {r['consistency_fresh_s']:.3f} s with "
               "the images tables, which evaluate reads anyway to plan)",
               r["consistency_ratio"] <= TARGETS["consistency"]),
        target(f"integrity checks <= {100 * TARGETS['integrity']:g} % of the evaluation",
               f"{r['integrity_s']:.3f} s ({100 * r['integrity_ratio']:.1f} %: SHA-256 "
               f"{r['sha256_s']:.3f} s, Parquet page checksums {r['page_checksums_s']:.3f} s, "
               f"CRC-32C {r['crc32c_s']:.3f} s over {r['files']} files)",
               r["integrity_ratio"] <= TARGETS["integrity"]),
    ]


def pq_target(runs: dict[str, rp.Series]) -> dict[str, Any]:
    """What panoptic quality adds to a singlempo evaluation (issue 26)."""
    r = runs["pq"].runs[0].extra
    return target(f"PQ adds <= {100 * TARGETS['pq']:g} % to the evaluation (singlempo)",
                  f"{r['with_pq_cpu_s']:.2f} CPU s with, {r['without_pq_cpu_s']:.2f} without "
                  f"({100 * r['pq_ratio']:+.1f} %; wall {r['with_pq_s']:.2f} s and "
                  f"{r['without_pq_s']:.2f} s, {100 * r['pq_wall_ratio']:+.1f} %; least of "
                  f"{len(r['runs']['with'])} each)", r["pq_ratio"] <= TARGETS["pq"])


def size_target(size: dict[str, dict[str, int]]) -> dict[str, Any]:
    r = rp.ratio(size["submission store"]["bytes"], size["submission.zip"]["bytes"]) or 0.0
    return target(f"submission store <= {TARGETS['store']:g} x ZIP size", f"{r:.2f}x",
                  r <= TARGETS["store"])


def summarize(args: argparse.Namespace, ds: Dataset, runs: dict[str, rp.Series],
              small: rp.Series | None) -> dict[str, Any]:
    w = args.reference_workers
    size, scale, mem = sizes(ds), scaling(runs, args.workers), memory(runs, small, w)
    targets = [*speed_targets(runs, w), results_target(runs), *cpu_targets(runs),
               scaling_target(scale, args.workers),
               *memory_targets(runs, mem), size_target(size), ci_target(runs),
               *trust_targets(runs), pq_target(runs)]
    return {"sizes": size, "scaling": scale, "memory": mem, "targets": targets,
            "agreement": agreement(runs, w), "results_agreement": results_agreement(runs),
            "evaluator": {k: v for k, v in runs["evaluator"].runs[0].extra.items()
                          if k != "metrics"},
            "floor": runs["floor"].runs[0].extra, "phases": runs["phases"].runs[0].extra}


# ----------------------------------------------------------------------------- output


def render(args: argparse.Namespace, ds: Dataset, runs: dict[str, rp.Series],
           summary: dict[str, Any], machine: dict[str, Any], stamp: str) -> str:
    mode = "quick smoke run" if args.quick else "full run"
    w = args.reference_workers
    order = ["A", *(b_key(p, x) for x in sorted(args.workers, reverse=True) for p in PROTOCOLS),
             *(f"B-cli-{p}" for p in PROTOCOLS), "C", "C-cold", "convert", "many"]
    b_fast = min((runs[b_key(p, w)] for p in PROTOCOLS), key=lambda s: s.work_s or 1e99)
    agree = summary["agreement"]
    lines = [
        f"## sgdask vs sgbench 1.0.0 — {ds.n_images} images ({mode}, {stamp})", "",
        f"Machine: {machine_info.one_line(machine)}.  ",
        "Packages: " + ", ".join(f"{k} {v}" for k, v in machine["packages"].items()) + ".  ",
        f"Dataset: `sgdask.testing.psg` seed {ds.seed}, {ds.n_images} test images 640×480; "
        f"sgdask runs: median of {args.repeats}, sgbench: median of {args.reference_repeats}.",
        "", rp.markdown(rp.main_table([runs[k] for k in order], runs["A"])), "",
        "**Targets**", "", rp.markdown(rp.targets_table(summary["targets"])), "",
        "**Worker scaling (B)**", "", rp.markdown(rp.scaling_table(summary["scaling"])), "",
        "**Per-phase CPU, ms per image** (1 thread, `benchmarks._phases`)", "",
        rp.markdown(rp.phase_table(summary["phases"])), "",
        "**D: a model's result files to a score**", "",
        rp.markdown(rp.main_table([runs["D-ref"], runs["D"]], runs["D-ref"])), "",
        f"Agreement of D (sgdask, sgbench protocol) with sgbench on the converted ZIP, on "
        f"{', '.join(summary['results_agreement']['compared'])}: max |difference| = "
        f"{summary['results_agreement']['max_abs_diff']}.", "",
        "**In-memory evaluator** (`sgdask.Evaluator`, singlempo, inputs decoded beforehand)",
        "", rp.markdown(rp.evaluator_table(summary["evaluator"])), "",
        "**Floor**", "", rp.markdown(rp.floor_table(summary["floor"], w, b_fast)), "",
        "**Sizes**", "", rp.markdown(rp.sizes_table(summary["sizes"])), "",
    ]
    if summary["memory"] is not None:
        lines += ["**Memory flatness**", "", rp.markdown(rp.memory_table(summary["memory"])), ""]
    lines += [f"Agreement of B (sgbench protocol) with A on {', '.join(agree['compared'])}: "
              f"max |difference| = {agree['max_abs_diff']}"
              + (f" (not compared, not finite in A's output: {', '.join(agree['not_compared'])})"
                 if agree["not_compared"] else "") + ".", "",
              f"1-min load average at start: {summary['load_start']:.2f}, at end: "
              f"{summary['load_end']:.2f} ({machine['usable_cores']} cores). "
              "\"Others' CPU\" is the share of the machine's CPU time that processes outside "
              "the measured tree used during a run (contention makes every number worse).", ""]
    if summary["sgdask_source_changed"]:
        lines += ["**Warning**: the sgdask source changed while the benchmark ran; the runs may "
                  "mix versions.", ""]
    return "\n".join(lines)


def write_outputs(args: argparse.Namespace, payload: dict[str, Any], text: str,
                  date: str) -> list[Path]:
    base = args.results / f"{date}-{payload['dataset']['n_images']}"
    rp.write_json(base.with_suffix(".json"), payload)
    base.with_suffix(".md").write_text(text)
    written = [base.with_suffix(".json"), base.with_suffix(".md")]
    if not args.no_latest:
        latest = args.results / "latest.md"
        latest.write_text(text)
        written.append(latest)
        if rp.update_readme(BENCH / "README.md", text):
            written.append(BENCH / "README.md")
    return written


def payload_of(args: argparse.Namespace, ds: Dataset, runs: dict[str, rp.Series],
               small: rp.Series | None, summary: dict[str, Any], machine: dict[str, Any],
               stamp: str) -> dict[str, Any]:
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    series = {k: s.to_json() for k, s in runs.items()}
    if small is not None:
        series["memory-small"] = small.to_json()
    return {"utc": stamp, "options": options, "machine": machine,
            "dataset": {"n_images": ds.n_images, "seed": ds.seed, "root": str(ds.root)},
            "series": series, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start, source_start = os.getloadavg()[0], package_hash()
    now = datetime.now(timezone.utc)
    stamp, date = now.strftime("%Y-%m-%d %H:%M UTC"), now.strftime("%Y-%m-%dT%H%MZ")
    machine = machine_info.describe()
    log(f"benchmark: {args.images} images; {machine_info.one_line(machine)}")
    runs: dict[str, rp.Series] = {}
    try:
        ds = prepare(args.cache, args.images, args.seed, log, MODELS)
        small_ds = None if args.no_memory_check else prepare(
            args.cache, max(1, args.images // 4), args.seed, log)
        run_suite(args, ds, runs)
        small = None if small_ds is None else run_memory_check(args, small_ds)
    except CommandFailed as err:
        print(f"benchmark failed: {err}", file=sys.stderr)
        path = args.results / f"{date}-{args.images}-failed.json"
        rp.write_json(path, {"utc": stamp, "error": str(err), "machine": machine,
                             "series": {k: s.to_json() for k, s in runs.items() if s.runs}})
        log(f"wrote the completed runs to {path}")
        return 1
    summary = summarize(args, ds, runs, small)
    summary.update(load_start=load_start, load_end=os.getloadavg()[0],
                   sgdask_source=source_start, sgdask_source_changed=package_hash() != source_start)
    text = render(args, ds, runs, summary, machine, stamp)
    print("\n" + text, flush=True)
    for path in write_outputs(args, payload_of(args, ds, runs, small, summary, machine, stamp),
                              text, date):
        log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
