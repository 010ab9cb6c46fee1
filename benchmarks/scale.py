"""Scale benchmark: ``evaluate-many`` of 10 and 50 models on 1, 2, ... worker processes of a
real ``dask scheduler`` / ``dask worker`` cluster that the benchmark starts on 127.0.0.1.

``python -m benchmarks.scale`` (part of ``make bench``; a few minutes alone) measures 1 and 2
worker processes; ``--workers 1,2,4,8,16`` any counts (for a bigger machine: a count above
the usable cores is run and reported, marked as oversubscribed). Per worker count: a warm-up
job (the workers load the kernels), then the 1-model job and the 10-model job 3 times each
(medians) and the 50-model job once, each a fresh driver process
(``benchmarks._scale_driver``) writing reports and cache entries to a fresh directory.

Reported: wall, the driver's CPU per model (marginal: the 10-model job's driver CPU minus
the 1-model job's, over 9), the workers' CPU per model (every process of ``dask worker``:
nannies and worker processes), the scheduler's CPU, the speed-up of every worker count over
1, the driver's peak RSS at 10 and 50 models, and per task of the 10-model job (from the
scheduler's task stream) the driver's, the scheduler's and the workers' CPU and how long the
workers idled at the job's start and end: the costs the extrapolation to larger clusters
(docs/performance.md) is computed from. Wall-clock ratios need a quiet machine, and on a
shared one CPU seconds grow under load too: the load average is recorded with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from benchmarks.dataset import prepare
from sgdask.cluster import usable_cores

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
PRELOAD = "sgdask.worker_preload"
TARGETS = {"driver_cpu_per_model_s": 0.05, "speedup": 1.8, "cpu_per_model_s": 1.4,
           "wall_10_s": 10.0, "rss_ratio": 1.2}


def _log(message: str) -> None:
    print(f"[scale] {message}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of a process and its live descendants."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def _preload(env: dict[str, str]) -> list[str]:
    """``--preload sgdask.worker_preload`` where the sgdask measured has it (an older one,
    for a baseline, does not)."""
    probe = "import importlib.util, sys; sys.exit(not importlib.util.find_spec(sys.argv[1]))"
    found = subprocess.run([sys.executable, "-c", probe, PRELOAD], env=env).returncode == 0
    return ["--preload", PRELOAD] if found else []


@contextmanager
def _cluster(workers: int, env: dict[str, str]):
    """A ``dask scheduler`` and ``dask worker --nworkers N --nthreads 1`` on 127.0.0.1, both
    with sgdask's preload (as docs/performance.md tells a cluster's owner to start them)."""
    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{_free_port()}"
    port = address.rsplit(":", 1)[1]
    preload = _preload(env)
    logs = tempfile.TemporaryDirectory(prefix="sgdask-scale-")
    with open(Path(logs.name, "scheduler.log"), "wb") as slog, \
            open(Path(logs.name, "worker.log"), "wb") as wlog:
        scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", port,
                                      "--dashboard-address", ":0", *preload], stdout=slog,
                                     stderr=subprocess.STDOUT, env=env)
        worker = subprocess.Popen([dask, "worker", address, "--nworkers", str(workers),
                                   "--nthreads", "1", "--dashboard-address", ":0", *preload],
                                  stdout=wlog, stderr=subprocess.STDOUT, env=env)
        try:
            from distributed import Client

            with Client(address, timeout="60s") as client:
                client.wait_for_workers(workers, timeout=120)
            yield address, psutil.Process(scheduler.pid), psutil.Process(worker.pid)
        finally:
            for proc in (worker, scheduler):
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            logs.cleanup()


def _run(address: str, gt: Path, preds: list[Path], work: Path, env: dict[str, str],
         scheduler: psutil.Process, worker: psutil.Process) -> dict[str, Any]:
    """One driver process: its own numbers, the workers' and the scheduler's CPU."""
    out = work / f"out-{len(preds)}"
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "benchmarks._scale_driver", "--scheduler", address,
            "--gt", str(gt), "--out", str(out), *[a for p in preds for a in ("--pred", str(p))]]
    load = os.getloadavg()[0]
    w0, s0 = _tree_cpu_s(worker), _tree_cpu_s(scheduler)
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"driver failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    if row["failed"]:
        raise SystemExit(f"models failed: {row['failed']}")
    row.update(worker_cpu_s=_tree_cpu_s(worker) - w0, scheduler_cpu_s=_tree_cpu_s(scheduler) - s0,
               load_before=load, load_after=os.getloadavg()[0])
    shutil.rmtree(out, ignore_errors=True)
    return row


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def measure(workers: int, gt: Path, preds: list[Path], work: Path, repeats: int,
            large: int | None, env: dict[str, str]) -> dict[str, Any]:
    """Every job on one cluster of ``workers`` worker processes."""
    with _cluster(workers, env) as (address, scheduler, worker):
        def run(n: int) -> dict[str, Any]:
            row = _run(address, gt, preds[:n], work, env, scheduler, worker)
            _log(f"{workers} worker(s), {n} model(s): {row['wall_s']:.1f} s wall, driver "
                 f"{row['driver_cpu_s']:.2f} CPU-s, workers {row['worker_cpu_s']:.1f} CPU-s, "
                 f"load {row['load_before']:.1f}")
            return row

        fresh = run(1)  # warm-up: the workers' first job (and the kernels' first compile)
        one = [run(1) for _ in range(repeats)]
        ten = [run(10) for _ in range(repeats)]
        fifty = run(large) if large else None
    return {"workers": workers, "fresh": fresh, "one": one, "ten": ten, "fifty": fifty}


def _task_row(runs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """Per task of a job (medians over ``runs``): tasks, the driver's, the scheduler's and
    the workers' CPU per task, compute seconds per kind of task, and the workers' idle
    seconds before their first task and after their last (mean per worker), their
    utilisation (busy seconds over workers x the job's wall)."""
    def med(f: Any) -> float:
        return statistics.median(f(r) for r in runs)

    def n(r: dict[str, Any]) -> int:
        return max(1, r["tasks"]["n"])

    kinds = sorted({k for r in runs for k in r["tasks"]["kinds"]})
    return {
        "tasks": med(lambda r: r["tasks"]["n"]),
        "driver_cpu_per_task_ms": med(lambda r: 1000 * r["driver_cpu_s"] / n(r)),
        "scheduler_cpu_per_task_ms": med(lambda r: 1000 * r["scheduler_cpu_s"] / n(r)),
        "worker_cpu_per_task_ms": med(lambda r: 1000 * r["worker_cpu_s"] / n(r)),
        "kinds": {k: _kind_medians(runs, k) for k in kinds},
        "idle_first_s": med(lambda r: _mean([w["first_s"] for w in r["tasks"]["workers"]])),
        "idle_last_s": med(lambda r: _mean([r["tasks"]["end_s"] - w["last_s"]
                                            for w in r["tasks"]["workers"]])),
        "utilisation": med(lambda r: sum(w["busy_s"] for w in r["tasks"]["workers"])
                           / (workers * r["tasks"]["end_s"])),
    }


def _marginal_per_task(one: list[dict[str, Any]], ten: list[dict[str, Any]]
                       ) -> dict[str, float]:
    """The driver's and the scheduler's CPU per task added by the 10-model job's extra tasks
    over the 1-model job's (what the job costs whatever its size, and the scheduler's
    periodic work, cancel out)."""
    extra = (statistics.median(r["tasks"]["n"] for r in ten)
             - statistics.median(r["tasks"]["n"] for r in one))
    return {f"{who}_cpu_per_task_marginal_ms": 1000 * (
        _median(ten, f"{who}_cpu_s") - _median(one, f"{who}_cpu_s")) / max(1.0, extra)
        for who in ("driver", "scheduler")}


def _kind_medians(runs: list[dict[str, Any]], kind: str) -> dict[str, float]:
    costs = [r["tasks"]["kinds"].get(kind, {"n": 0, "compute_s": 0.0}) for r in runs]
    return {"n": statistics.median(c["n"] for c in costs),
            "compute_s": statistics.median(c["compute_s"] for c in costs)}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summary(by_workers: dict[int, dict[str, Any]], cores: int) -> dict[str, Any]:
    """The targets' numbers: medians of the repeated jobs, per worker count; each count's
    speed-up over 1 worker (``speedup_10``: 2 over 1, the target's) and whether it had
    more worker processes than ``cores``."""
    out: dict[str, Any] = {}
    for w, m in by_workers.items():
        d1, d10 = _median(m["one"], "driver_cpu_s"), _median(m["ten"], "driver_cpu_s")
        w10 = _median(m["ten"], "worker_cpu_s")
        row = {"wall_10_s": _median(m["ten"], "wall_s"), "wall_1_s": _median(m["one"], "wall_s"),
               "driver_cpu_1_s": d1, "driver_cpu_10_s": d10,
               "driver_cpu_per_model_s": (d10 - d1) / 9, "worker_cpu_per_model_s": w10 / 10,
               "scheduler_cpu_10_s": _median(m["ten"], "scheduler_cpu_s"),
               "cpu_per_model_s": (d10 + w10) / 10,
               "driver_rss_10_mb": _median(m["ten"], "driver_peak_rss") / 2**20,
               "load": [round(r["load_before"], 1) for r in m["ten"]],
               "oversubscribed": w > cores}
        if all("tasks" in r for r in m["ten"] + m["one"]):
            row["per_task_10"] = _task_row(m["ten"], w)
            row["per_task_10"].update(_marginal_per_task(m["one"], m["ten"]))
        if "tasks" in m.get("fresh", {}):  # the first job of fresh workers: their start-up
            row["fresh_1"] = {"wall_s": m["fresh"]["wall_s"], "first_task_s": min(
                x["first_s"] for x in m["fresh"]["tasks"]["workers"])}
        if m["fifty"]:
            f = m["fifty"]
            row.update(wall_50_s=f["wall_s"], driver_cpu_50_s=f["driver_cpu_s"],
                       worker_cpu_per_model_50_s=f["worker_cpu_s"] / f["models"],
                       driver_rss_50_mb=f["driver_peak_rss"] / 2**20,
                       rss_ratio=f["driver_peak_rss"] / _median(m["ten"], "driver_peak_rss"),
                       driver_cpu_per_model_50_s=(f["driver_cpu_s"] - d1) / (f["models"] - 1))
        out[str(w)] = row
    if "1" in out:
        for row in out.values():
            row["speedup_10"] = out["1"]["wall_10_s"] / row["wall_10_s"]
            if "wall_50_s" in row and "wall_50_s" in out["1"]:
                row["speedup_50"] = out["1"]["wall_50_s"] / row["wall_50_s"]
    if "1" in out and "2" in out:
        out["speedup_10"] = out["2"]["speedup_10"]
    return out


def _counts(s: dict[str, Any]) -> list[str]:
    return sorted((k for k in s if k.isdigit()), key=int)


def render(result: dict[str, Any]) -> str:
    s, cores = result["summary"], result["cores"]
    lines = [f"# Scale benchmark ({result['images']} images, {result['protocol']}, "
             f"{result['started']}, {cores} usable cores)", "",
             "| worker processes | wall, 1 model | wall, 10 models | speed-up over 1, 10 models "
             "| driver CPU-s per model (marginal) | worker CPU-s per model | CPU-s per model, "
             "driver + workers | driver RSS, 10 models | wall, 50 models | driver RSS, 50 "
             "models | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in _counts(s):
        r = s[w]
        fifty = (f"{r['wall_50_s']:.1f} s | {r['driver_rss_50_mb']:.0f} MB "
                 f"({r['rss_ratio']:.2f}x)" if "wall_50_s" in r else "- | -")
        speedup = f"{r['speedup_10']:.2f}x" if "speedup_10" in r else "-"
        over = f" (oversubscribed: {cores} cores)" if r.get("oversubscribed") else ""
        lines.append(f"| {w}{over} | {r['wall_1_s']:.1f} s | {r['wall_10_s']:.1f} s | "
                     f"{speedup} | "
                     f"{r['driver_cpu_per_model_s']:.3f} | {r['worker_cpu_per_model_s']:.2f} | "
                     f"{r['cpu_per_model_s']:.2f} | {r['driver_rss_10_mb']:.0f} MB | {fifty} | "
                     f"{', '.join(map(str, r['load']))} |")
    lines += _task_lines(s)
    if "speedup_10" in s:
        lines += ["", f"10 models, 2 worker processes vs 1: {s['speedup_10']:.2f}x "
                  f"(target >= {TARGETS['speedup']}x; wall-clock ratios need a quiet machine)"]
    if "2" in s:
        lines += ["", f"driver CPU per model (marginal), 2 worker processes: "
                  f"{s['2']['driver_cpu_per_model_s']:.3f} s (target <= "
                  f"{TARGETS['driver_cpu_per_model_s']} s)"]
    over = [w for w in _counts(s) if s[w].get("oversubscribed")]
    if over:
        lines += ["", f"{', '.join(over)} worker processes ran on {cores} usable cores: their "
                  f"speed-ups are bounded by the cores, not by sgdask (run them on a machine "
                  f"with as many cores as workers)."]
    return "\n".join(lines) + "\n"


def _task_lines(s: dict[str, Any]) -> list[str]:
    """Per task of the 10-model job: the costs the extrapolation is computed from."""
    counts = [w for w in _counts(s) if "per_task_10" in s[w]]
    if not counts:
        return []
    lines = ["", "Per task of the 10-model job (medians; the scheduler's task stream):", "",
             "| worker processes | tasks | driver CPU-ms per task (marginal) | scheduler "
             "CPU-ms per task (marginal) "
             "| worker CPU-ms per task | compute s: scoring / finalizing / checks / shares "
             "| worker idle before first / after last task, s | worker utilisation "
             "| fresh workers' first job (1 model): wall, first task at |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in counts:
        t = s[w]["per_task_10"]
        k, c = t["kinds"], _kind_cell
        lines.append(f"| {w} | {t['tasks']:.0f} | {t['driver_cpu_per_task_ms']:.1f} "
                     f"({t['driver_cpu_per_task_marginal_ms']:.1f}) | "
                     f"{t['scheduler_cpu_per_task_ms']:.1f} "
                     f"({t['scheduler_cpu_per_task_marginal_ms']:.1f}) | "
                     f"{t['worker_cpu_per_task_ms']:.0f} "
                     f"| {c(k, 'score_partition')} / {c(k, 'finalized')} / {c(k, 'planned')} "
                     f"/ {c(k, 'of')} | {t['idle_first_s']:.2f} / {t['idle_last_s']:.2f} | "
                     f"{100 * t['utilisation']:.0f} % | {_fresh_cell(s[w])} |")
    return lines


def _fresh_cell(row: dict[str, Any]) -> str:
    f = row.get("fresh_1")
    return f"{f['wall_s']:.1f} s, {f['first_task_s']:.2f} s" if f else "-"


def _kind_cell(kinds: dict[str, dict[str, float]], name: str) -> str:
    """Compute seconds of one kind of task, and how many there were."""
    k = kinds.get(name)
    return f"{k['compute_s']:.1f} ({k['n']:.0f})" if k else "-"


def worker_counts(given: str) -> list[int]:
    """The worker counts of ``--workers``, ascending, 1 among them (the speed-ups' base)."""
    try:
        counts = {int(x) for x in given.split(",") if x.strip()}
    except ValueError:
        raise SystemExit(f"--workers {given}: not a list of counts, e.g. 1,2,4") from None
    if not counts or min(counts) < 1:
        raise SystemExit(f"--workers {given}: counts must be at least 1")
    return sorted(counts | {1})


def _stores(args: argparse.Namespace, models: int) -> tuple[Path, list[Path]]:
    """The GT store and ``models`` submission stores (distinct rankings of one submission)."""
    if args.stores:
        return args.stores / "gt.store", [args.stores / "pred.store", *(
            args.stores / f"pred-m{i}.store" for i in range(1, models))]
    ds = prepare(args.cache, args.images, 0, _log, models=models)
    return ds.gt_store, list(ds.models)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2177)
    parser.add_argument("--workers", default="1,2", help="worker process counts, e.g. "
                        "1,2,4,8,16 (speed-ups are over 1, which is always run)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large", type=int, default=50, help="models of the single large "
                        "job (0: none)")
    parser.add_argument("--protocol", default="singlempo")
    parser.add_argument("--cache", type=Path, default=BENCH / "cache")
    parser.add_argument("--results", type=Path, default=BENCH / "results")
    parser.add_argument("--stores", type=Path, help="use DIR/gt.store, DIR/pred.store and "
                        "DIR/pred-m1.store ... instead of the cached dataset's stores")
    args = parser.parse_args(argv)
    gt, preds = _stores(args, max(10, args.large))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # a given PYTHONPATH first: a baseline
        p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    started = time.strftime("%Y-%m-%dT%H%MZ", time.gmtime())
    by_workers = {}
    with tempfile.TemporaryDirectory(prefix="sgdask-scale-") as work:
        for w in worker_counts(args.workers):
            by_workers[w] = measure(w, gt, preds, Path(work), args.repeats,
                                    args.large or None, env)
    cores = usable_cores()
    result = {"started": started, "images": args.images, "protocol": args.protocol,
              "cores": cores, "runs": {str(w): m for w, m in by_workers.items()},
              "summary": summary(by_workers, cores)}
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"{started}-scale"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    text = render(result)
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
