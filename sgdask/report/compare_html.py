"""``comparison.html``: one self-contained page for ``sgdask compare`` (inline CSS, PNG plots
drawn by matplotlib as data URIs; a comparison is one page per ``compare`` run, so its
plots' cost does not scale with a registry as report.html's did)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sgdask.metrics import RANK_BY, format_value, is_rank, metric_of, units_note
from sgdask.report.html import CSS, paragraph, table
from sgdask.report.page import esc, page
from sgdask.stats.paired import Comparison


def headline(comparison: Comparison) -> str | None:
    """The metric the plots show: the leaderboard's ranking metric when compared, else the
    first compared mean metric, else the first metric."""
    metrics = list(dict.fromkeys(r["metric"] for r in comparison.rows))
    means = list(dict.fromkeys(r["metric"] for r in comparison.per_predicate))
    if RANK_BY in metrics:
        return RANK_BY
    return (means or metrics or [None])[0]


def points(name: str, value: float | None) -> str:
    """A difference in percentage points (in ranks for rank metrics)."""
    if value is None:
        return "-"
    scale = 1 if is_rank(name) else 100
    return f"{round(scale * value, 2) + 0.0:+.2f}"


def p_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def model_rows(comparison: Comparison, names: list[str], sep: str = " ") -> list[list[str]]:
    """Per model: name, runs, and per metric its cell (``model_cell``)."""
    return [[model["name"], str(model["runs"]), *(model_cell(model, name, sep)
                                                   for name in names)]
            for model in comparison.models]


def model_cell(model: dict[str, Any], name: str, sep: str = " ") -> str:
    """A model's value of a metric (± sd over runs) and its interval ``[lo, hi]`` after
    ``sep``."""
    m = model["metrics"].get(name)
    if m is None:
        return "-"
    text = format_value(name, m["value"])
    if m["sd"] is not None:
        text += f" ± {format_value(name, m['sd'])}"
    if m["ci_low"] is not None:
        text += f"{sep}[{format_value(name, m['ci_low'])}, {format_value(name, m['ci_high'])}]"
    return text


def interval_text(name: str, low: float | None, high: float | None) -> str:
    """A difference's interval, ``[lo, hi]`` in points (ranks for rank metrics)."""
    return f"[{points(name, low)}, {points(name, high)}]"


def verdicts(comparison: Comparison, names: list[str]) -> list[str]:
    """One sentence per compared pair and metric of ``names``: which model is better, by
    how much (with the interval of the difference) and the Holm-corrected p-value, or "no
    significant difference". The decision is the test's (Holm-corrected p below 1 − the
    interval level); the interval is shown beside it and may disagree (docs/tasks/compare.md
    says why)."""
    alpha = 1 - comparison.settings["level"]
    lines = []
    for r in comparison.rows:
        name, delta, p = r["metric"], r["delta"], r["p_holm"]
        if name not in names or delta is None or p is None:
            continue
        unit = "ranks" if is_rank(name) else "points"
        low, high = r["ci_low"], r["ci_high"]
        if p >= alpha or delta == 0:
            lines.append(f"no significant difference on {name}: {r['b']} − {r['a']} = "
                         f"{points(name, delta)} {unit} {interval_text(name, low, high)}, "
                         f"p = {p_text(p)} (Holm)")
            continue
        metric = metric_of(name)
        b_better = (delta < 0) == bool(metric is not None and metric.lower_is_better)
        winner, sign = (r["b"], 1) if b_better else (r["a"], -1)
        ends = sorted(sign * v for v in (low, high) if v is not None)
        shown = interval_text(name, *ends) if len(ends) == 2 else "[-, -]"
        lines.append(f"{winner} is better on {name}: {points(name, sign * delta)} {unit} "
                     f"{shown}, p = {p_text(p)} (Holm)")
    return lines


def pair_rows(comparison: Comparison) -> list[list[str]]:
    return [[r["metric"], r["a"], r["b"], format_value(r["metric"], r["a_value"]),
             format_value(r["metric"], r["b_value"]), points(r["metric"], r["delta"]),
             interval_text(r["metric"], r["ci_low"], r["ci_high"]),
             p_text(r["p_value"]), p_text(r["p_holm"]),
             "-" if r["wins"] is None else f"{r['wins']}/{r['ties']}/{r['losses']}"]
            for r in comparison.rows]


def _image(fig: Figure, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="{_png_data_uri(fig)}">'


def _png_data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _predicate_axes(n_predicates: int, names: list[str], ylabel: str) -> tuple[Figure, Axes]:
    """A figure wide enough for one labelled bar per predicate."""
    fig = Figure(figsize=(max(6.0, 2.0 + 0.3 * n_predicates), 4.0))
    ax = fig.add_subplot()
    ax.set_xticks(np.arange(n_predicates), names, rotation=90, fontsize=8, parse_math=False)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    return fig, ax


def predicate_delta_figure(comparison: Comparison, a: str, b: str, metric: str) -> Figure:
    """b − a per predicate (percentage points) with paired bootstrap intervals, predicates
    by the size of the difference."""
    rows = [r for r in comparison.per_predicate
            if r["a"] == a and r["b"] == b and r["metric"] == metric and r["delta"] is not None]
    rows.sort(key=lambda r: -r["delta"])
    scale = 1 if is_rank(metric) else 100
    fig, ax = _predicate_axes(len(rows), [str(r.get("name", r["predicate"])) for r in rows],
                             f"{metric}: {b} − {a} ({'ranks' if scale == 1 else 'pp'})")
    delta = np.array([scale * r["delta"] for r in rows])
    low = np.array([np.nan if r["ci_low"] is None else scale * r["ci_low"] for r in rows])
    high = np.array([np.nan if r["ci_high"] is None else scale * r["ci_high"] for r in rows])
    helped = (low > 0) if scale == 100 else (high < 0)
    hurt = (high < 0) if scale == 100 else (low > 0)
    colors = np.where(helped, "#1a7f37", np.where(hurt, "#c62828", "#888888"))
    errors = np.nan_to_num(np.array([delta - low, high - delta]).clip(min=0))
    ax.bar(np.arange(len(rows)), delta, color=colors, yerr=errors,
           error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "#333"})
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_title(f"Per-predicate {metric}, {b} − {a}, with {level_text(comparison)} paired "
                 "bootstrap intervals (green: helped, red: hurt)")
    return fig


def level_text(comparison: Comparison) -> str:
    return f"{100 * comparison.settings['level']:g}%"


def scatter_figure(comparison: Comparison, a: str, b: str, metric: str) -> Figure:
    """Per image: a's value against b's (above the diagonal: b better, for recalls)."""
    x = comparison.image_values[a][metric]
    y = comparison.image_values[b][metric]
    keep = ~(np.isnan(x) | np.isnan(y))
    scale = 1 if is_rank(metric) else 100
    fig = Figure(figsize=(5.0, 5.0))
    ax = fig.add_subplot()
    ax.scatter(scale * x[keep], scale * y[keep], s=8, alpha=0.4, edgecolors="none")
    top = float(max(np.max(scale * x[keep], initial=0), np.max(scale * y[keep], initial=0)))
    ax.plot([0, top], [0, top], color="black", linewidth=0.8)
    unit = "" if scale == 1 else " (%)"
    ax.set_xlabel(f"{a}: per-image {metric}{unit}")
    ax.set_ylabel(f"{b}: per-image {metric}{unit}")
    ax.set_title(f"Per image, {int(keep.sum())} images")
    ax.grid(alpha=0.3)
    return fig


def plots(comparison: Comparison, metric: str | None) -> list[str]:
    parts = []
    if metric is None:
        return parts
    pairs = list(dict.fromkeys((r["a"], r["b"]) for r in comparison.rows))
    for a, b in pairs:
        parts.append(f"<h3>{esc(b)} vs {esc(a)}</h3>")
        if any(r["metric"] == metric for r in comparison.per_predicate):
            parts.append(_image(predicate_delta_figure(comparison, a, b, metric),
                               f"per-predicate {metric} difference {b} - {a}"))
        if metric in comparison.image_values.get(a, {}):
            parts.append(_image(scatter_figure(comparison, a, b, metric),
                               f"per-image {metric}: {a} vs {b}"))
    return parts


def render_comparison(comparison: Comparison, title: str = "sgdask comparison") -> str:
    settings: dict[str, Any] = comparison.settings
    metric = headline(comparison)
    names = list(dict.fromkeys(r["metric"] for r in comparison.rows))
    shown = [n for n in (RANK_BY, *names) if n in names][:6]
    body = [f"<h1>{esc(title)}</h1>",
            paragraph(f"Protocol {settings.get('protocol')}, aggregation "
                      f"{settings['aggregation']}, {settings['images']} images; "
                      f"{level_text(comparison)} intervals: {settings['method']}; "
                      f"{settings['resamples']} resamples, {settings['permutations']} "
                      f"permutations, seed {settings['seed']}. {units_note().capitalize()}."),
            "<h2>Models</h2>",
            paragraph("Value [test-set interval]; groups of runs: mean ± standard deviation "
                      "over runs [interval of the mean]."),
            table(["model", "runs", *shown], model_rows(comparison, shown)),
            "<h2>Differences</h2>",
            paragraph("Δ = b − a in percentage points (rank metrics: in ranks, lower is "
                      "better); interval: paired bootstrap; p: paired approximate "
                      "randomization, two-sided; Holm: corrected over all pairs of the "
                      "metric; W/T/L: images where b is better / equal / worse."),
            table(["metric", "a", "b", "a value", "b value", "Δ", "interval", "p",
                   "p (Holm)", "W/T/L"], pair_rows(comparison)),
            "<h2>Verdicts</h2>",
            paragraph("Which model is better where the Holm-corrected p is below "
                      f"{1 - settings['level']:.2g}; the interval is a separate percentile "
                      "bootstrap and may disagree near the boundary."),
            "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in verdicts(comparison, shown))
            + "</ul>",
            "<h2>Plots</h2>", *plots(comparison, metric)]
    return page(title, "\n".join(body), CSS)
