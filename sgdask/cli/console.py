"""What the commands print: reports, protocol deltas and comparisons as tables on stdout,
progress bars and notes on stderr (``sgdask.demo`` prints through it too)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sgdask.metrics import board_columns, format_value, units_note
from sgdask.report import Report, lint_warnings

if TYPE_CHECKING:
    from sgdask.batch.many import ManyOutcome
    from sgdask.stats.paired import Comparison

err_console = Console(stderr=True)
out_console = Console()


@contextmanager
def progress_bar(description: str, total: int | None, unit: str = "images") -> Iterator[Any]:
    """A rich progress bar on stderr; yields the ``advance(n)`` callback. Without a
    ``total`` (a conversion learns its size as it goes) it counts what is done, in
    ``unit``, next to the time elapsed."""
    columns = () if total is not None else (
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn(f"{{task.completed:,.0f}} {unit}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


#: about how long numba compiles the kernels of a first evaluation on 2 cores (measured:
#: docs/performance.md, "The first run after an install")
COMPILE_SECONDS = 60
#: kernel modules every evaluation calls: no cached code of theirs means a first run
_EVERY_RUN = ("matching", "hits")


def compile_note() -> str | None:
    """The line a first run after an install prints while numba compiles the kernels
    (compiled code is cached beside them, in ``__pycache__``, so later runs skip it); None
    when their code is cached, or when numba caches elsewhere (``NUMBA_CACHE_DIR``, or a
    read-only install: then this cannot tell)."""
    import os
    from pathlib import Path

    import sgdask.kernels

    kernels = Path(sgdask.kernels.__file__).parent
    if os.environ.get("NUMBA_CACHE_DIR") or not os.access(kernels, os.W_OK):
        return None
    cached = kernels / "__pycache__"
    if any(next(cached.glob(f"{module}.*.nbi"), None) for module in _EVERY_RUN):
        return None
    return (f"compiling sgdask's kernels once (about {COMPILE_SECONDS} s on 2 cores; "
            "later runs reuse them)")


def print_report(report: Report, console: Console = out_console) -> None:
    header, rows = report.grid(sep="\n")
    console.print(escape(report.heading))  # not the table's title: a narrow table wraps it
    table = Table()
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:  # as text, not markup: a grouped metric's row is mR[head]
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    console.print(escape(units_note(report.metrics)))
    for line in report.footnotes("cli"):
        console.print(escape(line))
    missing = report.diagnostics.get("images_missing", 0)
    if missing:
        console.print(escape(f"{missing} evaluated image(s) have no prediction (scored 0): "
                             f"{_first_missing(report, missing)}"))


def print_lint(report: Report, console: Console = err_console) -> None:
    """The protocol lint's warnings, one line each (the submission's, the same under every
    protocol: printed once; docs: Metrics and protocols, "Protocol lint")."""
    for warning in lint_warnings(report):
        console.print(escape(f"warning (lint {warning['code']}): {warning['message']}"),
                      highlight=False)


#: how many of the images without a prediction the console names
MISSING_SHOWN = 5


def _first_missing(report: Report, count: int) -> str:
    """The first images without a prediction, by id, and how many more there are."""
    ids = [str(row["image_id"]) for row in report.per_image if row.get("missing")]
    shown = ", ".join(ids[:MISSING_SHOWN])
    more = count - min(len(ids), MISSING_SHOWN)
    return f"{shown} … and {more} more" if more > 0 else shown


def print_delta(reports: dict[str, Report], console: Console = out_console,
                only: tuple[str, ...] | None = None) -> None:
    """Metrics of every protocol side by side, with the difference to the first one
    (``only``: these metrics)."""
    from sgdask.report.writers import protocol_delta

    names = list(reports)
    table = Table(title=f"protocol delta (percentage points, vs {names[0]})")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for name in names[1:]:
        table.add_column(f"{name} − {names[0]}", justify="right")
    rows = [r for r in protocol_delta(reports) if only is None or r["metric"] in only]
    for row in rows:  # as text, not markup: a row is mR@20[head]
        table.add_row(escape(row["metric"]), *[_fmt(row[n]) for n in names],
                      *[_fmt(row[f"delta_{n}"], signed=True) for n in names[1:]])
    console.print(table)


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"


def print_comparison(comparison: Comparison, metrics: str | None,
                     console: Console = out_console) -> None:
    """The leaderboard's columns (every metric with ``--metrics``; all of them are in
    comparison.json), laid out for 80 columns: one table of the models (a metric per row),
    one table of differences per pair, then one verdict line per pair and metric."""
    from sgdask.report.compare_html import interval_text, model_cell, p_text, points, verdicts

    rows = comparison.rows
    names = list(dict.fromkeys(r["metric"] for r in rows))
    shown = names if metrics else [c for c in board_columns() if c in names] or names
    settings = comparison.settings
    models = Table(title=f"{len(comparison.models)} models · protocol "
                   f"{settings['protocol']} · {settings['images']} images · "
                   f"{100 * settings['level']:g}% intervals")
    models.add_column("metric", no_wrap=True)
    for model in comparison.models:
        runs = f" ({model['runs']} runs)" if model["runs"] > 1 else ""
        models.add_column(escape(model["name"] + runs), justify="right")
    for name in shown:
        models.add_row(escape(name), *(escape(model_cell(m, name, "\n"))
                                       for m in comparison.models))
    console.print(models)
    for a, b in dict.fromkeys((r["a"], r["b"]) for r in rows):
        diffs = Table(title=escape(f"{b} − {a} (points; PRank in ranks, lower is better)"))
        diffs.add_column("metric", no_wrap=True)
        for name in ("Δ", "interval", "p", "p Holm", "W/T/L"):
            diffs.add_column(name, justify="right")
        for r in rows:
            if r["metric"] in shown and (r["a"], r["b"]) == (a, b):
                diffs.add_row(escape(r["metric"]), points(r["metric"], r["delta"]),
                              interval_text(r["metric"], r["ci_low"], r["ci_high"]),
                              p_text(r["p_value"]), p_text(r["p_holm"]),
                              "-" if r["wins"] is None
                              else f"{r['wins']}/{r['ties']}/{r['losses']}")
        console.print(diffs)
    over = "" if settings.get("unit", "image") == "image" else f" over {settings['unit']}s"
    console.print(f"interval: paired percentile bootstrap{over}, {settings['resamples']} "
                  "resamples; "
                  f"p: paired approximate randomization, {settings['permutations']} "
                  "permutations, Holm over all pairs; W/T/L: images b wins/ties/loses",
                  highlight=False)
    for line in verdicts(comparison, shown):
        console.print(escape(line), highlight=False)


def print_many(outcome: ManyOutcome, console: Console = out_console) -> None:
    """``evaluate-many``'s table: one row per submission and protocol, the leaderboard's
    columns (no table without reports)."""
    from sgdask.batch.many import summary_rows

    rows = summary_rows(outcome.reports)
    if rows:
        table = Table(title=f"{len(outcome.reports)} submissions "
                      f"({len(outcome.cached)} cached, {len(outcome.evaluated)} evaluated)")
        columns = [c for c in board_columns() if any(c in r for r in rows)]
        for name in ("submission", "protocol", *columns):
            table.add_column(escape(name), justify="left" if name in ("submission", "protocol")
                             else "right")
        for r in rows:
            table.add_row(escape(r["submission"]), r["protocol"],
                          *[format_value(c, r.get(c)) for c in columns])
        console.print(table)
