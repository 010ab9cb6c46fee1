"""Inline SVG charts for report.html: grouped bars (with error bars) and lines over k.

Built as strings (every text escaped) instead of drawn by matplotlib: a report page's two
figures cost ~0.27 CPU-s through matplotlib and ~1 ms here, which matters when a cluster
writes a page for each of a thousand models. The markup has no ``xmlns`` (HTML5 inline
SVG needs none, and the page stays free of ``http://``), no ``style`` attributes (only
presentation attributes) and no script. Values are drawn at 0.1 px precision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from sgdask.report.page import esc

# matplotlib's default colour cycle ("C0", "C1", ...), so the pages look as they did.
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
# matplotlib line styles as SVG dash arrays.
_DASHES = {"-": "", "--": "6 3", ":": "1.5 2.5", "-.": "6 2 1.5 2"}

_PLOT_HEIGHT = 280.0
_TOP = 40.0
_LEFT = 60.0
_CHAR_W = 6.0  # px per character at the 10 px labels (legend and tick label widths)
#: px per character kept free for the rotated category labels (10 px) and the title (12 px):
#: generous, as wide fonts (DejaVu Sans) run past 6 px a character
_LABEL_CHAR_W, _TITLE_CHAR_W = 7.0, 7.5

Series = Sequence[float | None]


def bar_chart(title: str, ylabel: str, categories: Sequence[str], series: dict[str, Series],
              errors: dict[str, tuple[Series, Series] | None] | None = None,
              alt: str = "") -> str:
    """Grouped bars: one group per category, one bar per series side by side; ``errors``
    maps a series to (length below, length above) per bar; a missing value draws no bar."""
    n = max(len(categories), 1)
    step = max(480.0 / n, 30.0)
    values = [v for s in series.values() for v in s if _finite(v)]
    for label, err in (errors or {}).items():
        if err is not None:
            values += [v - lo for v, lo in zip(series[label], err[0], strict=True)
                       if _finite(v) and _finite(lo)]
            values += [v + hi for v, hi in zip(series[label], err[1], strict=True)
                       if _finite(v) and _finite(hi)]
    ticks = _ticks(min(values, default=0.0), max(values, default=1.0))
    bottom = _TOP + _PLOT_HEIGHT + 12.0 + _LABEL_CHAR_W * max((len(c) for c in categories),
                                                              default=0)
    y = _scale(ticks[0], ticks[-1], _TOP + _PLOT_HEIGHT, _TOP)
    parts = _frame(title, ylabel, ticks, y, _LEFT, _LEFT + step * n)
    zero = y(0.0)
    bar_w = 0.8 * step / max(len(series), 1)
    for i, (label, vals) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        err = (errors or {}).get(label)
        for j, value in enumerate(vals):
            if not _finite(value):
                continue
            x = _LEFT + step * j + 0.1 * step + bar_w * i
            top, height = min(y(value), zero), abs(y(value) - zero)
            name = esc(f"{label}: {categories[j]} {value:.2f}")
            parts.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar_w:.1f}" '
                         f'height="{height:.1f}" fill="{color}"><title>{name}</title></rect>')
            if err is not None:
                parts.append(_error_bar(x + bar_w / 2, y(value - (err[0][j] or 0.0)),
                                        y(value + (err[1][j] or 0.0))))
    if ticks[0] < 0 < ticks[-1]:
        parts.append(f'<line x1="{_LEFT}" x2="{_LEFT + step * n:.1f}" y1="{zero:.1f}" '
                     f'y2="{zero:.1f}" stroke="black" stroke-width="0.8"/>')
    for j, name in enumerate(categories):
        cx, cy = _LEFT + step * (j + 0.5), _TOP + _PLOT_HEIGHT + 6.0
        parts.append(f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="10" text-anchor="end" '
                     f'dominant-baseline="middle" transform="rotate(-90 {cx:.1f} {cy:.1f})">'
                     f'{esc(name)}</text>')
    legend = [(label, _COLORS[i % len(_COLORS)], None) for i, label in enumerate(series)]
    parts.append(_legend(legend, _LEFT + step * n + 12.0))
    return _svg(max(_LEFT + step * n + 22.0 + _legend_width(legend), _title_width(title)),
                bottom + 10.0, alt or title, parts)


def line_chart(title: str, xlabel: str, ylabel: str, xticks: Sequence[int],
               lines: Sequence[tuple[str, int, str, Sequence[tuple[float, float]]]],
               alt: str = "") -> str:
    """Lines with point markers over numeric x; ``lines`` holds (label, colour index,
    matplotlib line style, points); the legend is right of the plot."""
    plot_w = 420.0
    ys = [p[1] for *_, points in lines for p in points]
    ticks = _ticks(min(ys, default=0.0), max(ys, default=1.0))
    lo_x, hi_x = min(xticks, default=0), max(xticks, default=1)
    pad = 0.05 * ((hi_x - lo_x) or 1)
    x = _scale(lo_x - pad, hi_x + pad, _LEFT, _LEFT + plot_w)
    y = _scale(ticks[0], ticks[-1], _TOP + _PLOT_HEIGHT, _TOP)
    parts = _frame(title, ylabel, ticks, y, _LEFT, _LEFT + plot_w)
    base = _TOP + _PLOT_HEIGHT
    for k in xticks:
        parts.append(f'<text x="{x(k):.1f}" y="{base + 14:.1f}" font-size="10" '
                     f'text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{_LEFT + plot_w / 2:.1f}" y="{base + 32:.1f}" font-size="11" '
                 f'text-anchor="middle">{esc(xlabel)}</text>')
    for label, index, style, points in lines:
        color = _COLORS[index % len(_COLORS)]
        coords = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in points)
        dash = _DASHES.get(style, "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                     f'stroke-width="1.5"{dash_attr}><title>{esc(label)}</title></polyline>')
        parts += [f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="3" fill="{color}">'
                  f'<title>{esc(f"{label}: k={px:g} {py:.2f}")}</title></circle>'
                  for px, py in points]
    legend = [(label, _COLORS[index % len(_COLORS)], _DASHES.get(style, ""))
              for label, index, style, _ in lines]
    parts.append(_legend(legend, _LEFT + plot_w + 12.0))
    return _svg(max(_LEFT + plot_w + 22.0 + _legend_width(legend), _title_width(title)),
                base + 44.0, alt or title, parts)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _ticks(low: float, high: float) -> list[float]:
    """About five round ticks (1, 2 or 5 times a power of ten) covering [low, high] and 0."""
    low, high = min(low, 0.0), max(high, 0.0)
    if high - low <= 0:
        high = low + 1.0
    raw = (high - low) / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def _scale(d0: float, d1: float, r0: float, r1: float) -> Callable[[float], float]:
    """The affine map from data [d0, d1] to pixels [r0, r1]."""
    ratio = (r1 - r0) / ((d1 - d0) or 1.0)
    return lambda v: r0 + (v - d0) * ratio


def _frame(title: str, ylabel: str, ticks: list[float], y: Callable[[float], float],
           x0: float, x1: float) -> list[str]:
    """Title, y label, horizontal grid lines with tick labels and the plot's box."""
    top, base = y(ticks[-1]), y(ticks[0])
    centre = max((x0 + x1) / 2, _title_width(title) / 2)  # a long title starts inside
    parts = [f'<text x="{centre:.1f}" y="20" font-size="12" text-anchor="middle">'
             f'{esc(title)}</text>',
             f'<text x="14" y="{(top + base) / 2:.1f}" font-size="11" text-anchor="middle" '
             f'transform="rotate(-90 14 {(top + base) / 2:.1f})">{esc(ylabel)}</text>']
    for t in ticks:
        parts.append(f'<line x1="{x0}" x2="{x1:.1f}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                     f'stroke="#ccc" stroke-width="0.5"/>'
                     f'<text x="{x0 - 4}" y="{y(t):.1f}" font-size="10" text-anchor="end" '
                     f'dominant-baseline="middle">{t:g}</text>')
    parts.append(f'<rect x="{x0}" y="{top:.1f}" width="{x1 - x0:.1f}" height="{base - top:.1f}" '
                 f'fill="none" stroke="black" stroke-width="0.8"/>')
    return parts


def _title_width(title: str) -> float:
    """The width a chart needs for its title, margins included."""
    return 8.0 + _TITLE_CHAR_W * len(title)


def _error_bar(x: float, y_low: float, y_high: float) -> str:
    cap = 2.0
    return (f'<path d="M{x:.1f} {y_low:.1f}V{y_high:.1f}M{x - cap:.1f} {y_low:.1f}'
            f'H{x + cap:.1f}M{x - cap:.1f} {y_high:.1f}H{x + cap:.1f}" stroke="#333" '
            f'stroke-width="0.8" fill="none"/>')


def _legend_width(entries: list[tuple[str, str, str | None]]) -> float:
    return 30.0 + _CHAR_W * max((len(label) for label, *_ in entries), default=0)


def _legend(entries: list[tuple[str, str, str | None]], left: float) -> str:
    """One row per entry right of the plot: a swatch (a line with ``dash``, a square when
    ``dash`` is None) and the label."""
    width = _legend_width(entries)
    rows = [f'<rect x="{left:.1f}" y="{_TOP + 4}" width="{width:.1f}" '
            f'height="{8 + 16 * len(entries)}" fill="white" fill-opacity="0.85" stroke="#ccc"/>']
    for i, (label, color, dash) in enumerate(entries):
        cy = _TOP + 16 + 16 * i
        if dash is None:
            rows.append(f'<rect x="{left + 6:.1f}" y="{cy - 5:.1f}" width="10" height="10" '
                        f'fill="{color}"/>')
        else:
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            rows.append(f'<line x1="{left + 4:.1f}" x2="{left + 20:.1f}" y1="{cy:.1f}" '
                        f'y2="{cy:.1f}" stroke="{color}" stroke-width="1.5"{dash_attr}/>')
        rows.append(f'<text x="{left + 24:.1f}" y="{cy:.1f}" font-size="10" '
                    f'dominant-baseline="middle">{esc(label)}</text>')
    return "".join(rows)


def _svg(width: float, height: float, alt: str, parts: list[str]) -> str:
    return (f'<svg role="img" aria-label="{esc(alt)}" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'font-family="sans-serif">\n' + "\n".join(parts) + "\n</svg>")
