"""The shared HTML pieces: every page type escapes hostile names and links, and wears the one
skeleton; the service's script hash allows exactly the sorter the pages carry."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable

import numpy as np
import pytest

from sgdask.batch.leaderboard_html import SORTER_JS, render_leaderboard
from sgdask.batch.registry import Entry
from sgdask.report import Report
from sgdask.report.compare_html import render_comparison
from sgdask.report.html import render_html
from sgdask.report.page import esc, is_safe_url, link, page, url_scheme
from sgdask.service import pages
from sgdask.service.queue import Submission
from sgdask.service.tokens import Account
from sgdask.stats.paired import Comparison

NAME = '<script>alert("name")</script><img src=x onerror=alert(1)> \'q\''
SCRIPT_URL = " JavaScript:alert(1)"
BREAKOUT_URL = 'https://example.org/?q="><script>alert("paper")</script>'


def report_page() -> str:
    report = Report(protocol={"name": "singlempo", "version": "1.0"},
                    aggregation="per_predicate", ks=["50"], metrics={"R@50": 0.5},
                    per_predicate=[{"predicate": 0, "name": NAME, "gt_count": 3,
                                    "mR@50": 0.5}],
                    per_image=[{"image_id": "a"}], diagnostics={"evaluated_images": 1},
                    left_out={"zR@k": NAME}, notes=[NAME],
                    provenance={"sgdask_version": "0", "gt": {"source": NAME},
                                "submission": {"source": BREAKOUT_URL}})
    return render_html({NAME: report}, title=NAME)


def comparison_page() -> str:
    value = {"value": 0.5, "sd": None, "ci_low": 0.4, "ci_high": 0.6}
    comparison = Comparison(
        settings={"protocol": NAME, "aggregation": "per_predicate", "images": 2,
                  "level": 0.95, "method": "percentile", "resamples": 10,
                  "permutations": 10, "seed": 0},
        models=[{"name": NAME, "runs": 1, "metrics": {"R@50": value}},
                {"name": "b", "runs": 1, "metrics": {"R@50": value}}],
        rows=[{"metric": "R@50", "a": NAME, "b": "b", "a_value": 0.5, "b_value": 0.5,
               "delta": 0.0, "ci_low": -0.1, "ci_high": 0.1, "p_value": 1.0, "p_holm": 1.0,
               "wins": 0, "ties": 2, "losses": 0}],
        per_predicate=[], image_ids=np.array(["a", "b"]))
    return render_comparison(comparison, title=NAME)


def board_row(**extra: object) -> dict[str, object]:
    return {"rank": 1, "name": NAME, "submission_id": "s1", "approved": True,
            "submitted_at": "2024-05-01T12:00:00+00:00", "paper": SCRIPT_URL,
            "report": BREAKOUT_URL, "metrics": {"R@50": 0.5}, "delta": {},
            "rank_change": None, **extra}


def leaderboard_page() -> str:
    return render_leaderboard({NAME: [board_row(), board_row(rank=2, paper=BREAKOUT_URL,
                                                             report=SCRIPT_URL)]},
                              ["R@50"], title=NAME, generated_at=NAME)


def service_board_page() -> str:
    rows = [board_row(approved_rank=1), board_row(submission_id=NAME, paper=BREAKOUT_URL)]
    return pages.leaderboard(rows, NAME, NAME, Account(team=NAME, role="team"), NAME)


def service_status_page() -> str:
    entry = Entry(submission_id=NAME, name=NAME, url="", source="", submitted_at=NAME,
                  approved=False, paper=SCRIPT_URL, status="rejected", content_hash="",
                  team=NAME, filename=NAME)
    sub = Submission(entry=entry, history=[{"status": "rejected", "errors": [NAME]}])
    return pages.status_page(sub, None, True, True, True, Account(team=NAME, role="team"),
                             NAME)


RENDERERS: dict[str, Callable[[], str]] = {
    "report": report_page, "comparison": comparison_page, "leaderboard": leaderboard_page,
    "service board": service_board_page, "service status": service_status_page}


@pytest.mark.parametrize("render", RENDERERS.values(), ids=RENDERERS.keys())
def test_every_page_escapes_names_and_links(render):
    html = render()
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", html, flags=re.S)
    assert scripts in ([], [SORTER_JS])  # the page's own sorter, nothing a user wrote
    assert "<img src=x" not in html and 'alert("' not in html and "'q'" not in html
    assert esc(NAME) in html  # shown, as text
    assert not re.search(r'href="\s*javascript:', html, flags=re.I)
    assert '"><script>' not in html


@pytest.mark.parametrize("render", RENDERERS.values(), ids=RENDERERS.keys())
def test_every_page_wears_the_one_skeleton(render):
    html = render()
    assert html.startswith('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                           '<meta name="viewport"')
    assert re.search(r"<title>([^<]*)</title>", html)[1].startswith(esc(NAME))
    assert html.count("<style>") == 1 and html.endswith("</body>\n</html>\n")


def test_script_hash_allows_the_sorter():
    digest = base64.b64encode(hashlib.sha256(SORTER_JS.encode()).digest()).decode()
    assert f"sha256-{digest}" == pages.SCRIPT_HASH
    assert f"<script>{SORTER_JS}</script>" in leaderboard_page()
    assert f"<script>{SORTER_JS}</script>" in service_board_page()


@pytest.mark.parametrize(("url", "scheme"), [
    ("https://a.b/c", "https"), ("HTTP://a", "http"), ("r/x.html", None),
    ("reports/a:b.html", None), (" Java\tScript:alert(1)", "javascript"),
    ("\x01javascript:x", "javascript"), ("file:///etc/passwd", "file"),
    ("data:text/html,x", "data")])
def test_url_scheme_as_a_browser_reads_it(url, scheme):
    assert url_scheme(url) == scheme
    assert is_safe_url(url) == (scheme in (None, "http", "https"))


def test_link_is_an_anchor_only_for_safe_urls():
    assert link("https://a.b/?q=\"'", "t<") == '<a href="https://a.b/?q=&quot;&#x27;">t&lt;</a>'
    assert link("javascript:alert(1)", "t") == (
        '<span class="unsafe-link" title="javascript:alert(1)">t</span>')
    assert link(None, "<b>") == "&lt;b&gt;"


def test_page_puts_head_css_and_script_in_place():
    html = page("<t>", "<p>body</p>", css="p { x: y; }", head="<meta name=a>\n", script="s()")
    assert "<meta name=a>\n<title>&lt;t&gt;</title>" in html
    assert "p { x: y; }</style>" in html and ".note" in html  # page CSS after the base
    assert html.endswith("<p>body</p>\n<script>s()</script>\n</body>\n</html>\n")
