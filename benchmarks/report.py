"""Summaries of the measured runs: tables (Markdown, also printed), targets and result files."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.measure import Measurement

MIB = 2**20
GIB = 2**30
README_START = "<!-- latest-results:start -->"
README_END = "<!-- latest-results:end -->"
Table = tuple[list[str], list[list[str]]]


@dataclass
class Series:
    """Repeated runs of one configuration."""

    key: str
    label: str
    n_images: int
    runs: list[Measurement] = field(default_factory=list)

    def _median(self, values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    @property
    def wall_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def wall_min_s(self) -> float:
        """The fastest run: the least disturbed by other processes on a shared machine."""
        return min(r.wall_s for r in self.runs)

    @property
    def work_s(self) -> float | None:
        """Median time without start-up (evaluate-only, or decode-only for the floor)."""
        return self._median([r.extra["work_s"] for r in self.runs if "work_s" in r.extra])

    @property
    def cpu_s(self) -> float:
        return statistics.median(r.cpu_s for r in self.runs)

    def peak(self, role: str | None = None) -> int:
        """Largest single-process peak RSS over all runs (of ``role`` when given)."""
        return max(r.peak_rss(role) for r in self.runs)

    @property
    def peak_sum(self) -> int:
        return max(r.peak_rss_sum for r in self.runs)

    @property
    def foreign_share(self) -> float:
        """Median share of the machine's CPU that other processes used during the runs."""
        return statistics.median(r.foreign_share for r in self.runs)

    @property
    def images_per_s(self) -> float:
        return self.n_images / self.wall_s

    @property
    def work_images_per_s(self) -> float | None:
        work = self.work_s
        return self.n_images / work if work else None

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "n_images": self.n_images, "wall_s_median": self.wall_s,
                "wall_s_min": self.wall_min_s,
                "work_s_median": self.work_s, "cpu_s_median": self.cpu_s,
                "peak_rss_max": self.peak(), "peak_rss_worker": self.peak("worker"),
                "peak_rss_main": self.peak("main"), "peak_rss_sum": self.peak_sum,
                "foreign_share_median": self.foreign_share,
                "runs": [r.summary() for r in self.runs]}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}{suffix}"


def mib(n_bytes: int | None) -> str:
    return "—" if not n_bytes else f"{n_bytes / MIB:,.0f}"


def markdown(table: Table) -> str:
    """An aligned Markdown table (readable as plain text too)."""
    headers, rows = table
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def main_table(series: list[Series], reference: Series) -> Table:
    headers = ["config", "runs", "wall s (median)", "wall s (min)", "work s", "CPU s",
               "peak RSS/proc MiB",
               "peak RSS/worker MiB", "peak RSS sum MiB", "img/s (wall)", "A/x wall",
               "A/x work", "others' CPU"]
    rows = []
    for s in series:
        rows.append([s.label, str(len(s.runs)), fmt(s.wall_s), fmt(s.wall_min_s), fmt(s.work_s),
                     fmt(s.cpu_s, 1),
                     mib(s.peak()), mib(s.peak("worker")), mib(s.peak_sum),
                     fmt(s.images_per_s, 1), fmt(ratio(reference.wall_s, s.wall_s), 1, "x"),
                     fmt(ratio(reference.wall_s, s.work_s), 1, "x"),
                     fmt(100 * s.foreign_share, 0, " %")])
    return headers, rows


def phase_table(phases: dict[str, Any]) -> Table:
    protocols = [k for k in phases if isinstance(phases[k], dict)]
    names = list(phases[protocols[0]])
    rows = [[name, *(fmt(phases[p][name], 3) for p in protocols)] for name in names]
    rows.append(["kernels (all but reading)",
                 *(fmt(sum(v for k, v in phases[p].items() if not k.startswith("read")), 3)
                   for p in protocols)])
    rows.append(["total", *(fmt(sum(phases[p].values()), 3) for p in protocols)])
    return ["phase", *protocols], rows


def floor_table(floor: dict[str, Any], workers: int, best_b: Series | None) -> Table:
    per_core = floor["store_s"] / workers
    rows = [
        ["read + decode all masks from the stores, 1 process", fmt(floor["store_s"])],
        ["  of which the GT store", fmt(floor["store_gt_s"])],
        ["  of which the submission store", fmt(floor["store_pred_s"])],
        [f"floor at {workers} cores (store decode / {workers})", fmt(per_core)],
        ["for comparison: decode the raw PNGs + ZIP TIFFs, 1 process", fmt(floor["raw_s"])],
        ["  of which the ZIP's TIFFs", fmt(floor["raw_tiff_s"])],
        ["the same raw files to word masks with sgdask's readers, 1 process",
         fmt(floor["own_png_s"] + floor["own_tiff_s"])],
        ["  of which the ZIP's TIFFs (compiled inflater)", fmt(floor["own_tiff_s"])],
    ]
    if best_b is not None and best_b.work_s:
        rows.append([f"fastest B evaluate-only ({best_b.label}) / floor at {workers} cores",
                     fmt(best_b.work_s / per_core, 1, "x")])
    return ["floor (CPU)", "seconds"], rows


def evaluator_table(ev: dict[str, Any]) -> Table:
    """The in-memory evaluator's phases: per update, compute, setup."""
    rows = [["images", str(ev["images"])],
            ["first update (loads the compiled kernels)", fmt(ev["first_update_s"], 3)],
            ["per further update, ms", fmt(ev["ms_per_update"], 1)],
            ["compute() (the report)", fmt(ev["compute_s"], 3)],
            ["Evaluator() incl. first import of sgdask's evaluation modules",
             fmt(ev["setup_s"], 2)]]
    return ["phase", "seconds"], rows


def sizes_table(sizes: dict[str, dict[str, int]]) -> Table:
    zip_bytes, png_bytes = sizes["submission.zip"]["bytes"], sizes["GT PNGs"]["bytes"]
    against = {"submission store": zip_bytes, "GT store": png_bytes}
    rows = []
    for name, info in sizes.items():
        base = against.get(name)
        rows.append([name, f"{info['files']:,}", f"{info['bytes'] / MIB:,.1f}",
                     fmt(ratio(info["bytes"], base), 2) if base else ""])
    return ["artefact", "files", "MiB", "ratio (store / source)"], rows


def scaling_table(scaling: list[dict[str, Any]]) -> Table:
    headers = ["protocol", "workers", "img/s (evaluate-only)", "img/s (wall)",
               "speed-up vs fewest workers (evaluate-only)", "(wall)",
               "img/s (warm cluster)", "speed-up (warm cluster)"]
    rows = [[s["protocol"], str(s["workers"]), fmt(s["work_ips"], 1), fmt(s["wall_ips"], 1),
             fmt(s["work_speedup"], 2, "x"), fmt(s["wall_speedup"], 2, "x"),
             fmt(s.get("warm_ips"), 1), fmt(s.get("warm_speedup"), 2, "x")] for s in scaling]
    return headers, rows


def memory_table(memory: dict[str, Any]) -> Table:
    rows = [[memory["label_small"], str(memory["n_small"]), mib(memory["worker_small"]),
             mib(memory["main_small"])],
            [memory["label_full"], str(memory["n_full"]), mib(memory["worker_full"]),
             mib(memory["main_full"])],
            ["ratio (full / quarter)", "", fmt(memory["ratio"], 2),
             fmt(memory["main_ratio"], 2)]]
    return ["config", "images", "peak RSS per worker MiB", "client process MiB"], rows


def targets_table(targets: list[dict[str, Any]]) -> Table:
    def verdict(t: dict[str, Any]) -> str:
        return "—" if t["met"] is None else ("yes" if t["met"] else "**no**")

    rows = [[t["target"], t["measured"], verdict(t)] for t in targets]
    return ["target", "measured", "met"], rows


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")


def update_readme(readme: Path, text: str) -> bool:
    """Replace the README's latest-results block with ``text``; False without the markers."""
    if not readme.exists():
        return False
    content = readme.read_text()
    start, end = content.find(README_START), content.find(README_END)
    if start < 0 or end < start:
        return False
    block = f"{README_START}\n{text.strip()}\n{README_END}"
    readme.write_text(content[:start] + block + content[end + len(README_END):])
    return True
