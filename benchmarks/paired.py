"""What the rows that pair sgdask with a single-process reference share (``benchmarks.vg``,
``benchmarks.oiv6``): their options, the runs taken in turn (R, then B, ``--repeats``
times), the agreement of the two processes' numbers and the machine they ran on."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks import machine
from benchmarks.measure import Measurement

BENCH = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def row_options(prog: str, images: int, argv: list[str] | None) -> argparse.Namespace:
    """A paired row's options: the test split's size (default ``images``), workers,
    repeats, the generator's seed, the cache and results folders, the sampling interval."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--images", type=int, default=images)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=BENCH / "cache")
    parser.add_argument("--results", type=Path, default=BENCH / "results")
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    return args


def environment() -> dict[str, Any]:
    """The machine line of a row's table: CPU, usable cores, load average at the start."""
    return {"cpu": machine.cpu_model(), "cores": machine.usable_cores(),
            "load": " ".join(f"{x:.1f}" for x in os.getloadavg())}


def paired_runs(repeats: int, reference: Callable[[], Measurement],
                fast: Callable[[], Measurement]) -> tuple[list[Measurement], list[Measurement]]:
    """R's and B's measurements, the two run in turn ``repeats`` times (a drift of the
    machine's speed touches both)."""
    refs, fasts = [], []
    for i in range(repeats):
        log(f"run {i + 1}/{repeats}: reference")
        refs.append(reference())
        log(f"run {i + 1}/{repeats}: sgdask")
        fasts.append(fast())
    return refs, fasts


def agreement(reference: dict[str, float], fast: dict[str, float], names: Iterable[str]
              ) -> dict[str, Any]:
    """How far B's ``names`` are from R's (they must agree to 1e-9), and which B lacks."""
    names = list(names)
    worst = max((abs(reference[n] - fast[n]) for n in names if n in fast), default=0.0)
    missing = [n for n in names if n not in fast]
    return {"metrics": len(names), "max_abs_difference": worst, "missing": missing,
            "agree": not missing and worst <= 1e-9}
