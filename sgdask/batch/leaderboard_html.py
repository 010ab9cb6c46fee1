"""The leaderboard page: one static, self-contained HTML file with sortable boards.

The CSS and the sorter (a few lines of vanilla JS) are inline and nothing is loaded from
anywhere, so the page opens offline. Every cell carries its raw value in ``data-value`` so the
sorter compares the exact numbers, not the rounded text. Only http(s) and relative links become
``href``; any other link (``javascript:``, ``data:``, ...) is shown as plain text.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sgdask.metrics import RANK_BY, format_value
from sgdask.protocols import BOARD_PROTOCOLS
from sgdask.report.page import esc, link, page

Entry = dict[str, Any]

#: rows are ranked within their matching mode, one board per mode, in this order
MATCHING_MODES = ("masks", "boxes")
#: the mode of a row published before rows named theirs (sgdask ranked masks then)
DEFAULT_MATCHING = "masks"
MATCHING_TITLES = {"masks": "mask matching", "boxes": "box matching"}
RANGE_COLUMN = "rank range"
MISSING = "-"
ARROWS = {"higher": "\u2191", "lower": "\u2193"}


@dataclass(frozen=True)
class BoardLook:
    """What a board's labels say: the protocol its numbers are of, the protocol its delta
    column compares with (None: no delta column), each metric column's direction
    (``higher`` or ``lower`` is better; a column not named shows none) and the metric its
    intervals are of."""

    protocol: str = BOARD_PROTOCOLS[0]
    delta: str | None = BOARD_PROTOCOLS[1]
    better: dict[str, str] = field(default_factory=dict)
    rank_by: str = RANK_BY

    @property
    def delta_column(self) -> str | None:
        return None if self.delta is None else f"\u0394 {self.delta}"

# The board's rules on top of the shared ``BASE_CSS`` (also the service pages').
CSS = """
h1 { margin-bottom: 0.2em; }
h2 { font-size: 1.25em; }
.meta, .note { color: #555; font-size: 0.9em; margin: 0.2em 0; }
.boards { display: flex; flex-wrap: wrap; gap: 2.5em; align-items: flex-start; }
th, td { padding: 0.25em 0.6em; white-space: nowrap; }
th { cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
th[data-better]::before { content: attr(data-arrow) " "; color: #777; }
td.text, th.text { text-align: left; }
td.empty { text-align: center; color: #777; font-style: italic; }
.up { color: #1a7f37; } .down { color: #c62828; } .same { color: #777; }
.new { color: #1565c0; font-size: 0.85em; }
.approved { color: #1a7f37; }
.ci { color: #666; font-size: 0.8em; }
tr.baseline td { background: #f4f4f4; font-style: italic; }
span.baseline { color: #6a1b9a; font-size: 0.85em; }
"""

# Rows are sorted by the clicked column's data-value: numerically when both values are
# numbers, as text otherwise; missing values ("") stay last in both directions. The first click
# sorts ascending, the next one descending; ties keep the rank order (data-order).
SORTER_JS = """
(function () {
  function key(row, col) { return row.cells[col].getAttribute("data-value"); }
  function compare(a, b) {
    var x = Number(a), y = Number(b);
    if (!isNaN(x) && !isNaN(y)) { return x - y; }
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  function sortBy(table, th) {
    var col = th.cellIndex;
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).filter(function (r) {
      return r.hasAttribute("data-order");
    });
    rows.sort(function (r, s) {
      var a = key(r, col), b = key(s, col);
      if (a === "" || b === "") {
        if (a !== b) { return a === "" ? 1 : -1; }
      } else {
        var c = compare(a, b);
        if (c !== 0) { return dir * c; }
      }
      return Number(r.getAttribute("data-order")) - Number(s.getAttribute("data-order"));
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
  }
  document.querySelectorAll("table.board").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });
})();
"""


def render_leaderboard(boards: dict[str, list[Entry]], columns: list[str],
                       title: str = "sgdask leaderboard", generated_at: str = "",
                       previous_generated_at: str | None = None,
                       titles: dict[str, str] | None = None,
                       look: BoardLook | None = None) -> str:
    """The whole page; ``boards`` maps board name -> entries in rank order, ``titles`` a
    board's name to its heading (default: the name)."""
    look = look or BoardLook()
    body = "\n".join([header(title, generated_at, previous_generated_at, look.rank_by, look),
                      '<div class="boards">',
                      *(board_section(name, entries, columns, (titles or {}).get(name),
                                      look=look)
                        for name, entries in boards.items()),
                      "</div>"])
    return page(title, body, CSS, script=SORTER_JS)


def by_matching(rows: list[Entry]) -> dict[str, list[Entry]]:
    """The rows of each matching mode present, in ``MATCHING_MODES`` order, order kept."""
    out: dict[str, list[Entry]] = {}
    for mode in MATCHING_MODES:
        found = [r for r in rows if r.get("matching", DEFAULT_MATCHING) == mode]
        if found:
            out[mode] = found
    return out


def matching_boards(public: list[Entry], approved: list[Entry]
                    ) -> tuple[dict[str, list[Entry]], dict[str, str]]:
    """The page's boards and their headings: a public and an approved board per matching
    mode present (the mask boards when there is no row). The mask boards keep the names
    ``public`` and ``approved`` (their ids ``board-public``, ``board-approved``), the box
    boards are ``public-boxes`` and ``approved-boxes``."""
    modes = list(by_matching(public)) or [DEFAULT_MATCHING]
    boards: dict[str, list[Entry]] = {}
    titles: dict[str, str] = {}
    split = {"public": by_matching(public), "approved": by_matching(approved)}
    for mode in modes:
        for kind, rows in split.items():
            name = kind if mode == DEFAULT_MATCHING else f"{kind}-{mode}"
            boards[name] = rows.get(mode, [])
            titles[name] = f"{kind}: {MATCHING_TITLES[mode]}"
    return boards, titles


# --- header ----------------------------------------------------------------------------------

def header(title: str, generated_at: str, previous_generated_at: str | None,
           rank_by: str = RANK_BY, look: BoardLook | None = None,
           protocols: str | None = None) -> str:
    """The page's title, dates and the note on its columns (``rank_by``: what the
    intervals are of, as the note names it; ``look``: the protocols its numbers are of,
    default singlempo with the multimpo delta; ``protocols``: what the note says of them
    instead, on a page of boards under different protocols)."""
    parts = [f"<h1>{esc(title)}</h1>"]
    if generated_at:
        parts.append(f'<p class="meta">generated {esc(generated_at)}</p>')
    if previous_generated_at:
        parts.append(f'<p class="meta">compared with the leaderboard of '
                     f"{esc(previous_generated_at)}</p>")
    look = look or BoardLook()
    delta = "" if look.delta_column is None else (
        f"{esc(look.delta_column)} is {esc(look.delta)} − {esc(look.protocol)} "
        f"{esc(RANK_BY)} in percentage points")
    parts.append(f'<p class="note">Recalls in percent, PRank in ranks (lower is better); '
                 f"{protocols or delta or 'numbers under ' + esc(look.protocol)}. "
                 f"\u2191/\u2193: higher/lower is better. Under {esc(rank_by)}: its bootstrap "
                 "interval over the test "
                 f"images; {esc(RANGE_COLUMN)}: from 1 + the number of models significantly "
                 "better to the number of models not significantly worse (paired bootstrap). "
                 "Mask and box submissions are ranked on separate boards, each titled "
                 "with its matching mode: their numbers are not comparable. "
                 "Click a column header to sort.</p>")
    return "\n".join(parts)


# --- one board -------------------------------------------------------------------------------

#: the entry metadata a board may show as columns (``sgdask serve --benchmark``), with labels
META_COLUMNS = {"team": "team", "method": "method", "description": "description",
                "code": "code", "external_data": "external data"}


class Cell(NamedTuple):
    """One cell: its raw value (``data-value``, what the sorter and the exports read), its
    HTML content (escaped by whoever made it) and whether it is text (left-aligned)."""

    value: Any
    content: str
    text: bool = False


def board_section(name: str, entries: list[Entry], columns: list[str],
                  heading: str | None = None, extra: tuple[str, ...] = (),
                  exports: str | None = None, look: BoardLook | None = None) -> str:
    """One board; ``extra``: metadata columns after the model's name; ``exports``: the URL
    prefix of its CSV and JSON exports (``PREFIX.csv``, ``PREFIX.json``), linked under it."""
    ranges = any(e.get("rank_range") for e in entries)
    links = "" if exports is None else (
        f'<p class="meta">export: {link(exports + ".csv", "CSV")} · '
        f'{link(exports + ".json", "JSON")}</p>\n')
    return (f'<section>\n<h2>{esc(heading or name)}</h2>\n'
            f'<table class="board" id="{esc(board_id(name))}">\n'
            f"<thead><tr>{header_cells(columns, ranges, extra, look)}</tr></thead>\n"
            f"<tbody>\n{body_rows(entries, columns, ranges, extra, look)}\n</tbody>\n"
            "</table>\n"
            f"{links}</section>")


def board_id(name: str) -> str:
    return "board-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def _header_labels(columns: list[str], ranges: bool = False, extra: tuple[str, ...] = (),
                   look: BoardLook | None = None) -> list[tuple[str, str, bool]]:
    """(column key, label, is text) of every column, in page order."""
    delta = (look or BoardLook()).delta_column
    return [("rank", "#", False), *([(RANGE_COLUMN, RANGE_COLUMN, False)] if ranges else []),
            ("name", "model", True), *((c, META_COLUMNS[c], True) for c in extra),
            ("submitted_at", "submitted", True), *((c, c, False) for c in columns),
            *([(delta, delta, False)] if delta else [])]


def header_cells(columns: list[str], ranges: bool = False, extra: tuple[str, ...] = (),
                 look: BoardLook | None = None) -> str:
    better = (look or BoardLook()).better
    return "".join(th(col, label, text, better.get(col)) for col, label, text in
                   _header_labels(columns, ranges, extra, look))


def th(col: str, label: str, text: bool = False, better: str | None = None) -> str:
    """A header cell; ``better``: which way the metric points, its arrow drawn by the CSS
    before the label (so the label, as exported, stays the metric's name)."""
    cls = ' class="text"' if text else ""
    arrow = "" if better is None else (f' data-better="{esc(better)}" '
                                       f'data-arrow="{ARROWS[better]}" '
                                       f'title="{esc(better)} is better"')
    return f'<th data-col="{esc(col)}"{cls}{arrow}>{esc(label)}</th>'


def body_rows(entries: list[Entry], columns: list[str], ranges: bool = False,
              extra: tuple[str, ...] = (), look: BoardLook | None = None) -> str:
    if not entries:
        width = len(_header_labels(columns, ranges, extra, look))
        return f'<tr><td class="empty" colspan="{width}">no submissions</td></tr>'
    return "\n".join(entry_row(order, entry, columns, ranges, extra, look)
                     for order, entry in enumerate(entries))


def entry_row(order: int, entry: Entry, columns: list[str], ranges: bool = False,
              extra: tuple[str, ...] = (), look: BoardLook | None = None) -> str:
    kind = ' class="baseline"' if entry.get("baseline") else ""
    return (f'<tr data-order="{order}"{kind}>'
            + "".join(td(*cell) for cell in _row_cells(entry, columns, ranges, extra, look))
            + "</tr>")


def _row_cells(entry: Entry, columns: list[str], ranges: bool = False,
               extra: tuple[str, ...] = (), look: BoardLook | None = None) -> list[Cell]:
    """A row's cells in page order (the page and the exports both read these)."""
    metrics = entry.get("metrics") or {}
    delta = (entry.get("delta") or {}).get(RANK_BY)
    submitted = str(entry.get("submitted_at") or "")
    intervals = entry.get("intervals") or {}
    return [_rank_cell(entry),
            *([range_cell(entry.get("rank_range"))] if ranges else []),
            Cell(entry["name"], name_cell(entry), True),
            *(_meta_cell(c, entry.get(c)) for c in extra),
            Cell(submitted, esc(submitted[:10]), True),
            *(metric_cell(c, metrics.get(c), intervals.get(c)) for c in columns),
            *([number_cell(delta, fmt_delta(delta))]
              if (look or BoardLook()).delta_column else [])]


def board_export(entries: list[Entry], columns: list[str], extra: tuple[str, ...] = (),
                 look: BoardLook | None = None) -> tuple[list[str], list[list[Any]]]:
    """The board as the page shows it: the column labels and every row's cell values
    (``data-value``; numbers unrounded), for the CSV and JSON exports."""
    ranges = any(e.get("rank_range") for e in entries)
    labels = [label for _, label, _ in _header_labels(columns, ranges, extra, look)]
    return labels, [[cell.value for cell in _row_cells(e, columns, ranges, extra, look)]
                    for e in entries]


#: what a spreadsheet reads a cell starting with as a formula (OWASP, CSV injection)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A cell as the CSV export writes it: text that a spreadsheet would read as a formula
    (``=HYPERLINK(...)``, ``+cmd|...``, ``@SUM(...)``) behind a single quote, as OWASP
    recommends; numbers as they are (a negative number is no formula)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def board_csv(labels: list[str], values: list[list[Any]]) -> str:
    """A board export (``board_export``) as CSV text, every cell through ``csv_cell``; rows
    end in CRLF (RFC 4180), so a cell holding either character is quoted."""
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\r\n").writerows(
        [[csv_cell(v) for v in row] for row in [labels, *values]])
    return out.getvalue()


def _meta_cell(column: str, value: Any) -> Cell:
    """A metadata cell: a link for ``code``, yes/no for ``external_data``."""
    if value is None:
        return Cell("", MISSING, True)
    if column == "code":
        return Cell(value, link(value, "code"), True)
    if column == "external_data":
        return Cell("yes" if value else "no", "yes" if value else "no", True)
    return Cell(value, esc(value), True)


def _rank_cell(entry: Entry) -> Cell:
    """The rank and its change; a baseline is outside the ranking: no rank."""
    if entry.get("baseline"):
        return Cell("", '<span class="baseline" title="a baseline, outside the ranking">'
                        "baseline</span>")
    return Cell(entry["rank"], f"{esc(entry['rank'])} {rank_change(entry.get('rank_change'))}")


def range_cell(ranks: list[int] | None) -> Cell:
    """A rank range ``2–4`` (one number when it is one rank); sorts by its first rank."""
    if not ranks:
        return Cell("", MISSING)
    text = str(ranks[0]) if ranks[0] == ranks[1] else f"{ranks[0]}–{ranks[1]}"
    return Cell(ranks[0], esc(text))


def metric_cell(name: str, value: float | None, interval: list[float] | None) -> Cell:
    """A metric cell, with its bootstrap interval underneath when the row has one."""
    if not interval:
        return number_cell(value, format_value(name, value))
    shown = (f"{esc(format_value(name, value))}<br><span class=\"ci\">"
             f"[{esc(format_value(name, interval[0]))}, "
             f"{esc(format_value(name, interval[1]))}]</span>")
    return Cell("" if value is None else repr(float(value)), shown)


def td(value: Any, content: str, text: bool = False) -> str:
    """A cell; ``content`` is HTML the caller has escaped, ``value`` is escaped here."""
    cls = ' class="text"' if text else ""
    return f'<td data-value="{esc(value)}"{cls}>{content}</td>'


def number_cell(value: float | None, shown: str) -> Cell:
    # repr() round-trips a float exactly, so the sorter sees the unrounded number.
    return Cell("" if value is None else repr(float(value)), esc(shown))


# --- cell contents ---------------------------------------------------------------------------

def fmt_delta(value: float | None) -> str:
    """A signed difference in percentage points; never ``-0.00``."""
    if value is None:
        return MISSING
    return f"{round(100 * value, 2) + 0.0:+.2f}"


def rank_change(change: int | None) -> str:
    if change is None:
        return '<span class="new">new</span>'
    if change > 0:
        return f'<span class="up">▲{change}</span>'
    if change < 0:
        return f'<span class="down">▼{-change}</span>'
    return '<span class="same">=</span>'


def name_cell(entry: Entry) -> str:
    parts = [link(entry.get("report"), entry["name"])]
    if entry.get("approved"):
        parts.append('<span class="approved" title="approved">✓</span>')
    if entry.get("paper"):
        parts.append(f"({link(entry['paper'], 'paper')})")
    return " ".join(parts)
