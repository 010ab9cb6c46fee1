"""Server-rendered pages: plain HTML strings, every piece of user text through ``esc``.

No build step and no script but the leaderboard's sorter (allowed by its hash in the
Content-Security-Policy); status pages refresh themselves with ``<meta http-equiv=refresh>``
until the submission is final.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sgdask.batch.leaderboard_html import CSS as BOARD_CSS
from sgdask.batch.leaderboard_html import (
    SORTER_JS,
    BoardLook,
    board_section,
    header,
    matching_boards,
)
from sgdask.batch.rerank import BOARD_PROTOCOLS, BoardRule, board_look, row_columns
from sgdask.batch.video import is_video_board
from sgdask.formats.video_upload import video_upload
from sgdask.metrics import RANK_BY, board_columns, format_value
from sgdask.protocols import DEFAULT_PROTOCOL
from sgdask.report import page as html_page
from sgdask.report.page import esc, link, script_hash
from sgdask.service.access import BOARDS
from sgdask.service.benchmark import Phase
from sgdask.service.queue import FINAL, Submission
from sgdask.service.tokens import Account

STEPS = ("received", "validating", "converting", "evaluating", "ranked")
REFRESH_SECONDS = 2
SCRIPT_HASH = script_hash(SORTER_JS)

CSS = BOARD_CSS + """
nav { margin-bottom: 1.2em; padding-bottom: 0.5em; border-bottom: 1px solid #ddd; }
nav a, nav form { margin-right: 1.2em; display: inline; }
nav .who { color: #555; margin-right: 0.6em; }
form.upload label { display: block; margin: 0.6em 0 0.2em; }
form.upload input[type=text], form.upload input[type=password], form.upload input[type=url] {
  width: 28em; }
ol.steps { list-style: none; padding: 0; display: flex; gap: 0.4em; }
ol.steps li { padding: 0.2em 0.7em; border-radius: 1em; background: #eee; color: #777; }
ol.steps li.done { background: #d7f0dc; color: #1a7f37; }
ol.steps li.current { background: #1565c0; color: #fff; }
ol.steps li.bad { background: #c62828; color: #fff; }
.errors li { font-family: ui-monospace, monospace; color: #c62828; white-space: pre-wrap; }
.warnings li { font-family: ui-monospace, monospace; color: #8a6d00; white-space: pre-wrap; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { color: #555; }
.error-box { border: 1px solid #c62828; padding: 0.6em 1em; color: #c62828; }
.actions form { display: inline; margin-right: 0.6em; }
"""


def page(title: str, body: str, account: Account | None, csrf: str,
         refresh: bool = False, script: str = "") -> str:
    """A whole page: navigation, the body (HTML the caller escaped), optional script."""
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">\n' if refresh else ""
    return html_page.page(title, f"{nav(account, csrf)}\n{body}", CSS, head=meta,
                          script=script)


def nav(account: Account | None, csrf: str) -> str:
    links = ['<a href="/">Leaderboard</a>', '<a href="/submit">Submit</a>',
             '<a href="/mine">My submissions</a>']
    if account is not None and account.is_maintainer:
        links.append('<a href="/host">Host</a>')
    if account is None:
        links.append('<a href="/login">Sign in</a>')
    else:
        links.append(f'<span class="who">team {esc(account.team)} ({esc(account.role)})</span>'
                     f'<form method="post" action="/logout">{csrf_field(csrf)}'
                     '<button type="submit">Sign out</button></form>')
    return "<nav>" + " ".join(links) + "</nav>"


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(csrf)}">'


# --- leaderboard ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PhaseBoard:
    """What the page shows of one phase: its published rows (None: none published, or not
    shown), when they were published, why they are not shown (``note``), and whether the
    reader may reveal its scores (a maintainer, a private phase not yet revealed)."""

    phase: Phase
    rows: list[dict[str, Any]] | None
    published: str | None
    note: str | None = None
    may_reveal: bool = False


def leaderboard(rows: list[dict[str, Any]] | None, published_at: str | None, title: str,
                account: Account | None, csrf: str) -> str:
    """The board of ``sgdask serve`` without a benchmark file (one phase)."""
    if rows is None:
        body = (f"<h1>{esc(title)}</h1>\n<p class=\"note\">No leaderboard has been published "
                'yet: <a href="/submit">submit a model</a>.</p>')
        return page(title, body, account, csrf)
    body = "\n".join([header(title, published_at or "", None), _phase_boards(rows)])
    return page(title, body, account, csrf, script=SORTER_JS)


def challenge_page(phases: list[PhaseBoard], title: str, account: Account | None,
                   csrf: str) -> str:
    """Every phase of a benchmark file under its name, visibility and dates, with what the
    reader may see of its boards."""
    parts = [header(title, "", None, "each phase's ranking metric",
                    protocols=f"a phase's numbers are under its first protocol; Δ P is its "
                    f"second protocol P − the first, {RANK_BY} in percentage points")]
    for shown in phases:
        phase = shown.phase
        parts.append(f'<h2 class="phase" id="phase-{esc(phase.name)}">phase {esc(phase.name)}'
                     f' ({esc(phase.visibility)})</h2>\n<p class="meta">ranked by '
                     f"{esc(phase.headline)}{_under(phase)}; uploads {esc(phase.dates())}"
                     + (f"; published {esc(shown.published)}" if shown.published else "")
                     + "</p>")
        if shown.may_reveal:
            parts.append(f'<form method="post" action="/phases/{esc(phase.name)}/reveal">'
                         f'{csrf_field(csrf)}<button type="submit" id="reveal-{esc(phase.name)}"'
                         ">Reveal the scores now (private until then)</button></form>")
        if shown.note:
            parts.append(f'<p class="note private" id="note-{esc(phase.name)}">Scores are '
                         f"hidden: {esc(shown.note)}.</p>")
        elif shown.rows is None:
            parts.append('<p class="note">No board has been published for this phase yet.</p>')
        else:
            parts.append(_phase_boards(shown.rows, phase))
    return page(title, "\n".join(parts), account, csrf, script=SORTER_JS)


def _phase_boards(rows: list[dict[str, Any]], phase: Phase | None = None) -> str:
    """A phase's boards (``board_view``), each with links to its exports."""
    boards, titles, columns, extra = board_view(rows, phase)
    return "\n".join(['<div class="boards">',
                      *(board_section(f"{phase.name}-{name}" if phase else name, entries,
                                      columns, titles[name], extra,
                                      f"/boards/{phase.name}/{name}" if phase else None,
                                      phase_look(phase))
                        for name, entries in boards.items()), "</div>"])


def _under(phase: Phase) -> str:
    """`` under sgbench2`` for a phase whose board is not the default's protocols."""
    if phase.protocols == BOARD_PROTOCOLS:
        return ""
    return f" under {esc(phase.protocols[0])}"


def phase_look(phase: Phase | None) -> BoardLook:
    """The labels of a phase's boards: its protocols, its metrics' directions."""
    if phase is None:
        return board_look(BoardRule())
    return board_look(BoardRule(rank_by=phase.headline, protocols=phase.protocols,
                                direction=phase.direction))


def board_view(rows: list[dict[str, Any]], phase: Phase | None = None
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str], list[str],
                          tuple[str, ...]]:
    """A phase's boards as the page shows them (one public and one approved board per
    matching mode), their headings, metric columns and metadata columns: what ``phase``
    names (None: the default board). The page and the exports both show this."""
    columns = list(phase.columns) if phase and phase.columns else \
        row_columns(phase.headline if phase else RANK_BY,
                    phase.protocols if phase else BOARD_PROTOCOLS)
    extra = phase.meta_columns if phase else ()
    if phase is not None and not phase.intervals:
        rows = [{**r, "intervals": {}} for r in rows]
    if phase is not None and not phase.rank_ranges:
        rows = [{**r, "rank_range": None} for r in rows]
    public = [{**r, "report": f"/reports/{r['submission_id']}"} for r in rows]
    approved = sorted(({**r, "rank": r["approved_rank"],
                        "rank_change": r.get("approved_rank_change")}
                       for r in public if r.get("approved_rank") is not None),
                      key=lambda r: r["rank"])
    boards, titles = matching_boards(public, approved)
    return boards, titles, columns, extra


# --- upload form ---------------------------------------------------------------------------

def upload_form(account: Account | None, csrf: str, max_mb: float, open_uploads: bool,
                phases: list[Phase] | None = None, error: str | None = None) -> str:
    """The upload form; ``phases``: the phases open now to choose from (None: no choice)."""
    token = ("" if account is not None else
             '<label for="token">Token' + (" (optional for the public board)"
                                           if open_uploads else "") + "</label>\n"
             '<input type="password" id="token" name="token" autocomplete="off">\n')
    boards = "".join(f'<option value="{b}">{b}</option>' for b in BOARDS)
    phase = "" if phases is None else (
        '<label for="phase">Phase</label>\n<select id="phase" name="phase">'
        + "".join(f'<option value="{esc(p.name)}">{esc(p.name)} (until '
                  f'{esc(p.dates().split(" to ")[1])}{_upload_kind(p)})</option>'
                  for p in reversed(phases))
        + "</select>\n" if phases else '<p class="error-box">No phase takes uploads now.</p>\n')
    body = f"""<h1>Submit a model</h1>
{error_box(error)}<form class="upload" method="post" action="/submit" enctype="multipart/form-data">
{csrf_field(csrf)}
{token}{phase}<label for="name">Model name</label>
<input type="text" id="name" name="name" required maxlength="200">
<label for="paper">Paper link (http or https, optional)</label>
<input type="url" id="paper" name="paper" maxlength="2000">
<label for="method">Method name (optional)</label>
<input type="text" id="method" name="method" maxlength="200">
<label for="description">Description (optional)</label>
<input type="text" id="description" name="description" maxlength="2000">
<label for="code">Code link (http or https, optional)</label>
<input type="url" id="code" name="code" maxlength="2000">
<label for="external_data">Uses external data</label>
<select id="external_data" name="external_data"><option value="">not said</option>
<option value="no">no</option><option value="yes">yes</option></select>
<label for="board">Board</label>
<select id="board" name="board">{boards}</select>
<label for="file">Submission: {_file_kind(phases)} (at most {max_mb:g} MiB)</label>
<input type="file" id="file" name="file" required accept=".zip,.json,.pkl">
<p><button type="submit" id="upload">Upload</button></p>
</form>
<p class="note">The approved board takes uploads from maintainers only.</p>"""
    return page("Submit a model", body, account, csrf)


def _file_kind(phases: list[Phase] | None) -> str:
    """What the file field takes: an SGBench ZIP or JSON, unless a phase takes another
    kind (then its option says which)."""
    if phases and any(p.upload != "submission" for p in phases):
        return "the file its phase takes (beside the phase's name; else an SGBench ZIP or JSON)"
    return "SGBench ZIP or JSON"


def _upload_kind(phase: Phase) -> str:
    """What the phase option adds when an upload there is not a plain submission."""
    video = video_upload(phase.upload)
    if video is not None:
        return f"; {video.what}"
    return {"submission+scores": "; a ZIP of the submission and its score file",
            "psg-challenge": "; the PSG challenge's files: a ZIP of relation.json and "
                             "panseg/"}.get(phase.upload, "")


def login_form(account: Account | None, csrf: str, error: str | None = None) -> str:
    body = f"""<h1>Sign in</h1>
{error_box(error)}<form class="upload" method="post" action="/login">
{csrf_field(csrf)}
<label for="token">Token</label>
<input type="password" id="token" name="token" autocomplete="off" required>
<p><button type="submit">Sign in</button></p>
</form>
<p class="note">The token is kept in an HttpOnly cookie for this browser session.</p>"""
    return page("Sign in", body, account, csrf)


def error_box(error: str | None) -> str:
    return f'<p class="error-box" id="error">{esc(error)}</p>\n' if error else ""


def error_page(status: int, message: str, account: Account | None, csrf: str) -> str:
    body = (f"<h1>Error {status}</h1>\n{error_box(message)}"
            '<p><a href="/submit">Back to the upload form</a></p>')
    return page(f"Error {status}", body, account, csrf)


# --- one submission ------------------------------------------------------------------------

def status_page(sub: Submission, rank: int | None, has_report: bool, may_see_errors: bool,
                may_change: bool, account: Account | None, csrf: str, phase: str = "main",
                private: str | None = None, marks: tuple[str, ...] = (),
                protocol: str = DEFAULT_PROTOCOL) -> str:
    """A submission's page; ``private``: why its scores are not shown (a private phase);
    ``protocol``: the one its phase's board shows;
    ``marks``: the board marks the reader may set (``choose``: the team's row under the
    ``chosen`` rule; ``baseline`` or ``unbaseline``: a maintainer's)."""
    e = sub.entry
    facts = [("id", esc(sub.id)), ("team", esc(e.team or "-")), ("phase", esc(phase)),
             ("board", esc(sub.board)),
             ("file", esc(e.filename or "-")), ("submitted", esc(e.submitted_at)),
             ("updated", esc(sub.updated_at)), ("attempts", esc(sub.attempts)),
             ("paper", link(e.paper, e.paper) if e.paper else "-"),
             ("method", esc(e.method or "-")), ("description", esc(e.description or "-")),
             ("code", link(e.code, e.code) if e.code else "-"),
             ("external data", "-" if e.external_data is None
              else "yes" if e.external_data else "no"),
             ("visibility", "hidden" if sub.hidden else "public"),
             ("rank", esc(rank) if rank is not None else "-")]
    if has_report:
        facts.append(("report", link(f"/reports/{sub.id}", "full report")))
    parts = [f"<h1>{esc(e.name)}</h1>", steps(sub.status),
             f'<p>Status: <strong id="status" data-status="{esc(sub.status)}">'
             f"{esc(sub.status)}</strong></p>",
             '<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
             + "</dl>"]
    if may_see_errors:
        parts.append(problem_list("errors", sub.shown_errors))
        parts.append(problem_list("warnings", sub.latest("warnings")))
    metrics = sub.latest("metrics") if sub.status == "ranked" and private is None else None
    if metrics:
        parts.append(metrics_table(metrics, protocol))
        parts.append(lint_list(sub.latest("lint")))
    if private is not None:
        parts.append(f'<p class="note private" id="private">{esc(private)}.</p>')
    if may_change:
        parts.append(visibility_form(sub, csrf))
    parts += [_mark_form(sub, mark, csrf) for mark in marks]
    return page(f"{e.name}: {sub.status}", "\n".join(p for p in parts if p), account, csrf,
                refresh=sub.status not in FINAL)


def steps(status: str) -> str:
    if status in ("rejected", "failed"):
        return f'<ol class="steps"><li class="bad">{esc(status)}</li></ol>'
    index = STEPS.index(status) if status in STEPS else 0

    def state(i: int) -> str:
        return "done" if i < index or status == "ranked" else "current" if i == index else ""

    items = [f'<li class="{state(i)}">{s}</li>' for i, s in enumerate(STEPS)]
    return '<ol class="steps">' + "".join(items) + "</ol>"


def problem_list(kind: str, lines: list[str] | None) -> str:
    if not lines:
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return f'<h2>{kind.capitalize()}</h2>\n<ul class="{kind}" id="{kind}">{items}</ul>'


def lint_list(warnings: list[dict[str, str]] | None) -> str:
    """The protocol lint's warnings of a scored submission (docs: Metrics and protocols,
    Protocol lint)."""
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(w['code'])}: {esc(w['message'])}</li>" for w in warnings)
    return ('<h2>Protocol lint</h2>\n<p class="note">What the submission\'s shape says about '
            'how it may have been scored elsewhere (warnings, not errors).</p>\n'
            f'<ul class="lint" id="lint">{items}</ul>')


def metrics_table(metrics: dict[str, Any], protocol: str = DEFAULT_PROTOCOL) -> str:
    """The board's metrics of a submission under ``protocol``, then the other protocol's
    ranking metric (``multimpo mR@50``); under a video protocol, its board's columns as
    the worker recorded them (``report_metrics``)."""
    names = list(metrics) if is_video_board((protocol,)) else \
        [c for c in board_columns() if c in metrics] + \
        [k for k in metrics if k.endswith(f" {RANK_BY}")]
    rows = "".join(f'<tr><td class="text">{esc(n)}</td>'
                   f"<td>{esc(format_value(n.split()[-1], metrics[n]))}</td></tr>"
                   for n in names)
    return (f'<h2>Metrics ({esc(protocol)})</h2>\n<table id="metrics"><thead><tr><th class="text">'
            f"metric</th><th>value</th></tr></thead><tbody>{rows}</tbody></table>")


def visibility_form(sub: Submission, csrf: str) -> str:
    action, label = ("public", "Make public") if sub.hidden else ("hidden", "Hide")
    return (f'<form method="post" action="/submissions/{esc(sub.id)}/visibility">'
            f'{csrf_field(csrf)}<input type="hidden" name="visibility" value="{action}">'
            f'<button type="submit" id="visibility">{label}</button></form>')


_MARKS = {"choose": ("choose", "", "Choose for the board"),
          "baseline": ("baseline", "yes", "Mark as baseline"),
          "unbaseline": ("baseline", "no", "Unmark baseline")}


def _mark_form(sub: Submission, mark: str, csrf: str) -> str:
    action, value, label = _MARKS[mark]
    return (f'<form method="post" action="/submissions/{esc(sub.id)}/{action}">'
            f'{csrf_field(csrf)}<input type="hidden" name="value" value="{value}">'
            f'<button type="submit" id="{mark}">{label}</button></form>')


# --- the caller's submissions --------------------------------------------------------------

def mine_page(subs: list[Submission], account: Account | None, csrf: str) -> str:
    if account is None:
        body = ('<h1>My submissions</h1>\n<p><a href="/login">Sign in</a> with your team\'s '
                "token to see its submissions.</p>")
        return page("My submissions", body, account, csrf)
    rows = "".join(
        f'<tr><td class="text">{link(f"/submissions/{s.id}", s.entry.name)}</td>'
        f'<td class="text">{esc(s.entry.team or "-")}</td><td class="text">{esc(s.board)}</td>'
        f'<td class="text">{esc(s.status)}</td><td class="text">{esc(s.entry.submitted_at)}</td>'
        f'<td class="text">{"hidden" if s.hidden else "public"}</td></tr>'
        for s in reversed(subs))
    empty = '<tr><td colspan="6" class="empty">no submissions</td></tr>'
    body = (f"<h1>Submissions of team {esc(account.team)}</h1>\n<table id=\"mine\"><thead><tr>"
            '<th class="text">model</th><th class="text">team</th><th class="text">board</th>'
            '<th class="text">status</th><th class="text">submitted</th>'
            '<th class="text">visibility</th></tr></thead>'
            f"<tbody>{rows or empty}</tbody></table>")
    return page("My submissions", body, account, csrf, refresh=any(
        s.status not in FINAL for s in subs))


# --- the maintainers' page -----------------------------------------------------------------

def host_page(phases: list[tuple[Phase, bool, list[dict[str, Any]]]], actions: dict[str, str],
              account: Account | None, csrf: str) -> str:
    """Every phase with its state, a button per host action and the log of who did what."""
    parts = ["<h1>Host</h1>", '<p class="note">' + "; ".join(
        f"<strong>{esc(a)}</strong>: {esc(what)}" for a, what in actions.items()) + ".</p>"]
    for phase, is_open, log in phases:
        buttons = "".join(
            f'<form method="post" action="/phases/{esc(phase.name)}/{esc(a)}">'
            f'{csrf_field(csrf)}<input type="hidden" name="back" value="host">'
            f'<button type="submit" id="{esc(a)}-{esc(phase.name)}">{esc(a)}</button></form>'
            for a in actions)
        rows = "".join(f'<tr><td class="text">{esc(r.get("at", ""))}</td>'
                       f'<td class="text">{esc(r["action"])}</td>'
                       f'<td class="text">{esc(r["by"])}</td></tr>' for r in log)
        empty = '<tr><td colspan="3" class="empty">nothing done yet</td></tr>'
        parts.append(
            f'<h2 id="host-{esc(phase.name)}">phase {esc(phase.name)} ({esc(phase.visibility)}, '
            f'{"open" if is_open else "closed"})</h2>\n<p class="meta">uploads '
            f'{esc(phase.dates())}; selection {esc(phase.selection)}</p>\n'
            f'<div class="actions">{buttons}</div>\n'
            f'<table id="log-{esc(phase.name)}"><thead><tr><th class="text">at</th>'
            '<th class="text">action</th><th class="text">by</th></tr></thead>'
            f"<tbody>{rows or empty}</tbody></table>")
    return page("Host", "\n".join(parts), account, csrf)
