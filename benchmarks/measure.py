"""Run one command as a subprocess and measure its whole process tree.

Wall time is the subprocess's lifetime. Every ``interval`` seconds the root process and all its
descendants are sampled with psutil: each process's peak RSS, the peak of the tree's summed RSS,
and each process's last CPU times (user + system). CPU seconds are also taken exactly from
``getrusage(RUSAGE_CHILDREN)``, which the kernel fills with every reaped descendant; the larger
of the two is reported (the sampled value misses each process's last ``interval``).
"""

from __future__ import annotations

import compileall
import functools
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

HELPER_MARKERS = ("resource_tracker", "semaphore_tracker", "forkserver")


class CommandFailed(RuntimeError):
    """A measured command exited non-zero; the message holds its stderr tail."""


@dataclass
class ProcStat:
    """One process of the measured tree."""

    pid: int
    cmd: str
    role: str = "main"
    peak_rss: int = 0
    cpu_s: float = 0.0


@dataclass
class Measurement:
    """What one run of one command cost."""

    label: str
    argv: list[str]
    wall_s: float
    cpu_s: float
    cpu_sampled_s: float
    peak_rss_sum: int
    processes: list[ProcStat]
    foreign_cpu_s: float = 0.0
    stdout: str = ""
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def foreign_share(self) -> float:
        """Share of the machine's CPU time other processes used during the run."""
        capacity = self.wall_s * (psutil.cpu_count() or 1)
        return self.foreign_cpu_s / capacity if capacity else 0.0

    def peak_rss(self, role: str | None = None) -> int:
        """The largest peak RSS of one process (of ``role`` when given; 0 if none)."""
        return max((p.peak_rss for p in self.processes if role in (None, p.role)), default=0)

    def n_role(self, role: str) -> int:
        return sum(p.role == role for p in self.processes)

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers (no stdout)."""
        data = asdict(self)
        data.pop("stdout")
        data["peak_rss_max"] = self.peak_rss()
        data["peak_rss_main"] = self.peak_rss("main")
        data["peak_rss_worker"] = self.peak_rss("worker")
        data["foreign_share"] = self.foreign_share
        return data


class TreeSampler:
    """Peak RSS and last CPU times of every process in the tree under ``root``."""

    def __init__(self, root: psutil.Process) -> None:
        self.root = root
        self.stats: dict[int, ProcStat] = {}
        self.peak_sum = 0

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return [self.root]

    def _stat(self, proc: psutil.Process) -> ProcStat:
        stat = self.stats.get(proc.pid)
        if stat is None:
            stat = ProcStat(proc.pid, " ".join(proc.cmdline())[:300])
            self.stats[proc.pid] = stat
        return stat

    def sample(self) -> None:
        total = 0
        for proc in self._tree():
            try:
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    cpu = proc.cpu_times()
                    stat = self._stat(proc)
            except psutil.Error:
                continue
            stat.peak_rss = max(stat.peak_rss, rss)
            stat.cpu_s = cpu.user + cpu.system
            total += rss
        self.peak_sum = max(self.peak_sum, total)


def classify(stats: Collection[ProcStat], root_pid: int, worker_pids: Collection[int] = ()
             ) -> None:
    """Role of each process: main (the command), worker, or helper (multiprocessing trackers).

    ``worker_pids`` (reported by the command itself) wins; otherwise every descendant that is
    not a tracker counts as a worker (dask spawns workers through ``multiprocessing``, sgbench's
    pool forks copies of itself).
    """
    for stat in stats:
        if stat.pid == root_pid:
            stat.role = "main"
        elif stat.pid in worker_pids:
            stat.role = "worker"
        elif any(marker in stat.cmd for marker in HELPER_MARKERS):
            stat.role = "helper"
        else:
            stat.role = "worker" if not worker_pids else "helper"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (all processes)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def busy_share(seconds: float = 1.0) -> float:
    """Share of the machine's CPU busy over the next ``seconds``."""
    return psutil.cpu_percent(interval=seconds) / 100


def wait_for_quiet(max_wait: float, threshold: float = 0.25) -> float:
    """Wait (at most ``max_wait`` s) until other processes leave the CPU mostly idle.

    Returns the seconds waited. Other benchmarks or test runs on the same machine would
    otherwise contend with the measured command for the same cores.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < max_wait and busy_share() > threshold:
        pass
    return time.perf_counter() - start


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _as_installed(env: dict[str, str] | None) -> dict[str, str]:
    """The environment of a measured command, as a user's install runs: with the bytecode
    caches that pip writes at install time. A shell with ``PYTHONDONTWRITEBYTECODE=1``
    would have every run compile every module of the checkout from source again (0.3 CPU-s
    of a 1.7 s ``sgdask evaluate``); the caches are compiled once, here, instead."""
    _compile_checkout()
    out = dict(os.environ if env is None else env)
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


@functools.cache
def _compile_checkout() -> None:
    root = Path(__file__).resolve().parent.parent
    for package in ("sgdask", "benchmarks"):
        compileall.compile_dir(root / package, quiet=1)


def _exited(proc: subprocess.Popen, sampler: TreeSampler, interval: float) -> bool:
    """Sample the tree, then wait up to ``interval`` for the command to end: the wall
    clock stops when it exits (a sleep between samples would add up to ``interval``)."""
    sampler.sample()
    try:
        proc.wait(timeout=interval)
    except subprocess.TimeoutExpired:
        return False
    return True


def run_measured(label: str, argv: Sequence[str], cwd: Path, interval: float = 0.1,
                 env: dict[str, str] | None = None) -> Measurement:
    """Run ``argv``, sampling its tree; raise ``CommandFailed`` on a non-zero exit."""
    with tempfile.TemporaryDirectory(prefix="sgdask-bench-") as tmp:
        out_path, err_path = Path(tmp, "stdout"), Path(tmp, "stderr")
        cpu_before, busy_before = _children_cpu(), busy_cpu_s()
        start = time.perf_counter()
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(list(argv), cwd=cwd, stdout=out, stderr=err,
                                    env=_as_installed(env))
            sampler = TreeSampler(psutil.Process(proc.pid))
            while not _exited(proc, sampler, interval):
                pass
        wall = time.perf_counter() - start
        cpu_exact, busy = _children_cpu() - cpu_before, busy_cpu_s() - busy_before
        stdout, stderr_tail = out_path.read_text(errors="replace"), _tail(err_path)
    if proc.returncode != 0:
        raise CommandFailed(f"{label}: exit code {proc.returncode}\n  command: "
                            f"{' '.join(argv)}\n  stderr (tail):\n{stderr_tail}")
    stats = list(sampler.stats.values())
    classify(stats, proc.pid)
    cpu_sampled = sum(s.cpu_s for s in stats)
    cpu = max(cpu_exact, cpu_sampled)
    return Measurement(label, list(argv), wall, cpu, cpu_sampled, sampler.peak_sum, stats,
                       max(0.0, busy - cpu), stdout, stderr_tail)


def combined(label: str, parts: Sequence[Measurement]) -> Measurement:
    """Several commands run one after the other, as one measurement (sums and maxima)."""
    return Measurement(
        label=label,
        argv=[arg for part in parts for arg in [*part.argv, "&&"]][:-1],
        wall_s=sum(p.wall_s for p in parts),
        cpu_s=sum(p.cpu_s for p in parts),
        cpu_sampled_s=sum(p.cpu_sampled_s for p in parts),
        peak_rss_sum=max(p.peak_rss_sum for p in parts),
        foreign_cpu_s=sum(p.foreign_cpu_s for p in parts),
        processes=[stat for p in parts for stat in p.processes],
        stdout=parts[-1].stdout,
        stderr_tail=parts[-1].stderr_tail,
        extra={"steps": {p.label: p.wall_s for p in parts}},
    )
