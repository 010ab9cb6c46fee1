"""A single self-contained HTML page for one or several protocols evaluated on the same data.

Plots are inline SVG built as strings (``sgdask.report.svg``: no matplotlib, about a
millisecond a page) and the CSS is inline, so the page opens offline and can be mailed or
archived as one file.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable
from itertools import cycle
from typing import Any

import numpy as np

from sgdask.io.fs import StorageOptions, filesystem, is_local
from sgdask.metrics import RANK_BY, format_value, is_rank, left_out_lines, units_note
from sgdask.metrics.recall import METRICS as RECALL_METRICS
from sgdask.report import Report, interval_caption, lint_warnings
from sgdask.report.intervals import is_interval_column
from sgdask.report.page import esc, page
from sgdask.report.svg import bar_chart, line_chart

ROW_KEYS = ("predicate", "name", "gt_count", "group")
CURVE_FAMILIES = tuple(m.prefix for m in RECALL_METRICS)
LINE_STYLES = ("-", "--", ":", "-.")

# The report's rules on top of the shared ``BASE_CSS`` (also comparison.html's).
CSS = """
body { max-width: 1200px; }
h2 { font-size: 1.3em; margin-top: 1.6em; }
h3 { font-size: 1.1em; }
td:first-child, th:first-child { text-align: left; }
img, svg { max-width: 100%; height: auto; display: block; margin: 0.6em 0; }
"""

def render_html(reports: dict[str, Report], title: str = "sgdask report",
                public: bool = False) -> str:
    """The whole page; ``reports`` maps protocol name -> Report, the first is the baseline.
    ``public`` (a page a server publishes): sources by their last path component only, so
    no host path reaches the page."""
    if not reports:
        raise ValueError("render_html needs at least one report")
    sections = [header_section(title, reports, public), lint_section(reports),
                overall_section(reports), plots_section(reports), details_section(reports)]
    return page(title, "\n".join(sections), CSS)


def write_html(reports: dict[str, Report], url: str,
               storage_options: StorageOptions | None = None) -> str:
    """Render the page and write it to a local path or any fsspec URL; returns the URL."""
    fs, path = filesystem(url, storage_options)
    parent = posixpath.dirname(path)
    if is_local(fs) and parent:
        # Object stores have no directories; creating one there may even need extra rights.
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "w", encoding="utf-8") as f:
        f.write(render_html(reports))
    return url


# --- small HTML helpers ----------------------------------------------------------------------

def table(header: list[str], rows: Iterable[list[str]]) -> str:
    """An HTML table; every cell is escaped here, so callers pass plain text."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                     for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def paragraph(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def bullet_list(items: Iterable[str]) -> str:
    return "<ul>\n" + "\n".join(f"<li>{esc(item)}</li>" for item in items) + "\n</ul>"


# --- header ----------------------------------------------------------------------------------

def header_section(title: str, reports: dict[str, Report], public: bool = False) -> str:
    protocols = table(["protocol", "version", "aggregation", "evaluated images"],
                      protocol_rows(reports))
    provenance = table(["protocols", "sgdask", "GT source", "GT content hash",
                        "submission source", "submission content hash"],
                       provenance_rows(reports, public))
    return f"<h1>{esc(title)}</h1>\n{protocols}\n<h3>Provenance</h3>\n{provenance}"


def protocol_rows(reports: dict[str, Report]) -> list[list[str]]:
    return [[name, str(r.protocol.get("version", "?")), r.aggregation,
             str(evaluated_images(r))] for name, r in reports.items()]


def evaluated_images(report: Report) -> int:
    """The pipeline's count when recorded, else the per-image table's length."""
    return int(report.diagnostics.get("evaluated_images", len(report.per_image)))


def provenance_rows(reports: dict[str, Report], public: bool = False) -> list[list[str]]:
    """One row per distinct provenance: protocols run on the same inputs share a row
    (``public``: sources by their last path component)."""
    shown = _basename if public else str
    groups: dict[str, list[str]] = {}
    for name, report in reports.items():
        key = json.dumps(report.provenance, sort_keys=True, default=str)
        groups.setdefault(key, []).append(name)
    rows = []
    for key, names in groups.items():
        prov = json.loads(key)
        gt, sub = prov.get("gt") or {}, prov.get("submission") or {}
        rows.append([", ".join(names), str(prov.get("sgdask_version", "?")),
                     shown(gt.get("source")), str(gt.get("content_hash")),
                     shown(sub.get("source")) + conversion_note(sub),
                     str(sub.get("content_hash"))])
    return rows


def _basename(source: Any) -> str:
    """The last component of a path or URL (``None`` as such)."""
    return str(source).rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def conversion_note(submission: dict[str, Any]) -> str:
    """How a store converted from model results was made (empty for SGBench files)."""
    if not submission.get("method"):
        return ""
    scores = "instance scores kept" if submission.get("instance_scores") else \
        "no instance scores"
    return f" (--method {submission['method']}, {scores})"


# --- overall numbers and protocol deltas -----------------------------------------------------

def overall_section(reports: dict[str, Report]) -> str:
    parts = ["<h2>Overall</h2>",
             paragraph(units_note()[0].upper() + units_note()[1:] + ".")]
    for name, report in reports.items():
        header, rows = report.grid()
        scalars = ", ".join(f"{m} {v}" for m, v in report.scalars())
        parts += [f"<h3>{esc(name)}</h3>", table(header, rows)]
        if scalars:
            parts.append(f"<p>{esc(scalars)}</p>")
        if report.ci:
            parts.append(paragraph(f"Intervals: {interval_caption(report.ci)}."))
    if len(reports) >= 2:
        parts += ["<h3>Protocol delta</h3>",
                  paragraph(f"Differences relative to {first_name(reports)}, in percentage "
                            "points (rank metrics: in ranks)."),
                  table(delta_header(reports), delta_rows(reports))]
    return "\n".join(parts)


def first_name(reports: dict[str, Report]) -> str:
    return next(iter(reports))


def common_metrics(reports: dict[str, Report]) -> list[str]:
    """Metrics every report has, in the first report's order."""
    first, *others = reports.values()
    return [m for m in first.metrics if all(m in r.metrics for r in others)]


def delta_header(reports: dict[str, Report]) -> list[str]:
    base, *others = reports
    return ["metric", *reports, *(f"{o} − {base}" for o in others)]


def delta_rows(reports: dict[str, Report]) -> list[list[str]]:
    first, *others = reports.values()
    return [[m, *(format_value(m, r.metrics[m]) for r in reports.values()),
             *(fmt_delta(m, r.metrics[m], first.metrics[m]) for r in others)]
            for m in common_metrics(reports)]


def fmt_delta(name: str, value: float, base: float) -> str:
    """Signed difference, in percentage points (in ranks for rank metrics); never
    ``-0.00``."""
    scale = 1 if is_rank(name) else 100
    return f"{round(scale * (value - base), 2) + 0.0:+.2f}"


# --- plots -----------------------------------------------------------------------------------

def plots_section(reports: dict[str, Report]) -> str:
    parts = ["<h2>Plots</h2>"]
    metric = predicate_metric(reports)
    if metric is not None:
        parts.append(predicate_bars_chart(reports, metric))
        if len(reports) >= 2:
            parts.append(predicate_delta_chart(reports, metric))
    if curve_ks(reports):
        parts.append(recall_curve_chart(reports))
    return "\n".join(parts)


def mean_columns(report: Report) -> list[str]:
    """The per-predicate table's metric columns, in table order (interval bounds
    ``<metric>_lo`` / ``_hi`` are not columns of their own)."""
    columns = [c for c in dict.fromkeys(k for row in report.per_predicate for k in row)
               if c not in ROW_KEYS]
    return [c for c in columns if not is_interval_column(c, columns)]


def predicate_metric(reports: dict[str, Report]) -> str | None:
    """The ranking metric when the first report has it, else the first column of the same
    metric at another k, else None."""
    columns = mean_columns(next(iter(reports.values())))
    if RANK_BY in columns:
        return RANK_BY
    prefix = RANK_BY.partition("@")[0]
    return next((c for c in columns if c.partition("@")[0] == prefix), None)


def predicates_by_frequency(reports: dict[str, Report]) -> list[tuple[int, str]]:
    """(predicate id, name) of every predicate in any report, most frequent in GT first."""
    seen: dict[int, dict[str, Any]] = {}
    for report in reports.values():
        for row in report.per_predicate:
            seen.setdefault(row["predicate"], row)
    return [(row["predicate"], str(row["name"])) for row in by_frequency(seen.values())]


def by_frequency(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-predicate rows, most frequent in GT first (ties by predicate id)."""
    return sorted(rows, key=lambda row: (-row["gt_count"], row["predicate"]))


def predicate_values(report: Report, metric: str, predicates: list[int]) -> np.ndarray:
    """The metric per predicate in the given order, percent; NaN where there is no value."""
    by_id = {row["predicate"]: row.get(metric) for row in report.per_predicate}
    return np.array([np.nan if by_id.get(p) is None else 100 * by_id[p] for p in predicates])


def predicate_errors(report: Report, metric: str, predicates: list[int]) -> np.ndarray | None:
    """Error bar lengths (2 x predicates, percent: below and above the value) of the
    per-predicate intervals, None when the report has none (0 where a predicate has
    none)."""
    if not any(f"{metric}_lo" in row for row in report.per_predicate):
        return None
    values = predicate_values(report, metric, predicates)
    low = predicate_values(report, f"{metric}_lo", predicates)
    high = predicate_values(report, f"{metric}_hi", predicates)
    return np.nan_to_num(np.array([values - low, high - values]).clip(min=0))


def _listed(values: np.ndarray) -> list[float | None]:
    """Array values as floats, None where NaN (no bar)."""
    return [None if np.isnan(v) else float(v) for v in values]


def predicate_bars_chart(reports: dict[str, Report], metric: str) -> str:
    ids, names = zip(*predicates_by_frequency(reports), strict=True)
    errors = {name: predicate_errors(r, metric, list(ids)) for name, r in reports.items()}
    bars = " with bootstrap intervals" if any(r.intervals for r in reports.values()) else ""
    return bar_chart(f"Per-predicate {metric}{bars}, predicates by GT frequency "
                     "(most frequent left)", f"{metric} (%)", list(names),
                     {name: _listed(predicate_values(r, metric, list(ids)))
                      for name, r in reports.items()},
                     {name: None if e is None else (_listed(e[0]), _listed(e[1]))
                      for name, e in errors.items()},
                     alt=f"per-predicate {metric} by GT frequency")


def predicate_delta_chart(reports: dict[str, Report], metric: str) -> str:
    ids, names = zip(*predicates_by_frequency(reports), strict=True)
    (base_name, base), *others = reports.items()
    base_values = predicate_values(base, metric, list(ids))
    return bar_chart(f"Per-predicate {metric} relative to {base_name}",
                     f"{metric} difference (pp)", list(names),
                     {f"{name} − {base_name}":
                      _listed(predicate_values(r, metric, list(ids)) - base_values)
                      for name, r in others},
                     alt=f"per-predicate {metric} delta vs {base_name}")


def curve_ks(reports: dict[str, Report]) -> list[int]:
    """Absolute ks (relative ``xF`` ones have no common x axis) with at least one curve point."""
    ks = {int(k) for r in reports.values() for k in r.ks if k.isdigit()
          for f in CURVE_FAMILIES if f"{f}@{k}" in r.metrics}
    return sorted(ks)


def recall_curve_chart(reports: dict[str, Report]) -> str:
    """R, mR, ngR, mNgR over absolute k: colour per metric family, line style per protocol."""
    lines = []
    for (name, report), style in zip(reports.items(), cycle(LINE_STYLES), strict=False):
        for i, family in enumerate(CURVE_FAMILIES):
            points = [(int(k), 100 * report.metrics[f"{family}@{k}"]) for k in report.ks
                      if k.isdigit() and f"{family}@{k}" in report.metrics]
            if points:
                lines.append((f"{family} ({name})", i, style, sorted(points)))
    return line_chart("Recall over k", "k", "recall (%)", curve_ks(reports), lines,
                      alt="recall over k")


# --- protocol lint ---------------------------------------------------------------------------

def lint_section(reports: dict[str, Report]) -> str:
    """The submission's protocol lint warnings (the same under every protocol; nothing for
    reports without lint: an in-memory ``Evaluator``'s, or written before it)."""
    report = next((r for r in reports.values() if r.lint), None)
    if report is None:
        return ""
    warnings = lint_warnings(report)
    body = (bullet_list(f"{w['code']}: {w['message']}" for w in warnings) if warnings
            else paragraph("No warning: nothing in the submission's shape suggests a "
                           "number scored elsewhere measured something else."))
    return ('<h2 id="lint">Protocol lint</h2>\n'
            + paragraph("What the submission's own shape says about how it may have been "
                        "scored elsewhere (warnings, never errors; docs: Metrics and "
                        "protocols, Protocol lint).") + "\n" + body)


# --- per-predicate tables, diagnostics, left-out metrics, notes ------------------------------

def details_section(reports: dict[str, Report]) -> str:
    parts = ["<h2>Per protocol details</h2>"]
    for name, report in reports.items():
        grouped = ["group"] if report.predicate_groups else []
        parts += [f"<h3>{esc(name)}: per predicate</h3>",
                  paragraph("Predicates by GT frequency; recalls in percent, PRank a mean rank."),
                  table(["name", "gt_count", *grouped, *mean_columns(report)],
                        predicate_rows(report)),
                  f"<h3>{esc(name)}: diagnostics</h3>",
                  table(["diagnostic", "value"],
                        [[k, str(v)] for k, v in report.diagnostics.items()])]
        if report.left_out:
            parts += [f"<h3>{esc(name)}: left-out metrics</h3>",
                      bullet_list(left_out_lines(report.left_out, "cli"))]
        if report.notes:
            parts += [f"<h3>{esc(name)}: notes</h3>", bullet_list(report.notes)]
    return "\n".join(parts)


def predicate_rows(report: Report) -> list[list[str]]:
    """Per predicate: name, GT count, its group (with predicate groups; ``-`` in none) and
    every mean metric."""
    columns = mean_columns(report)
    return [[str(row["name"]), str(row["gt_count"]),
             *([str(row.get("group") or "-")] if report.predicate_groups else []),
             *(format_value(c, row.get(c)) for c in columns)]
            for row in by_frequency(report.per_predicate)]
