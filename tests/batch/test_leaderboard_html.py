"""The leaderboard page: formatting, rank changes, escaping, safe links, and sorting in a real
headless Chromium."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sgdask.batch.leaderboard_html import render_leaderboard
from sgdask.report.page import is_safe_url

COLUMNS = ["mR@50", "mR@20", "mR@100", "R@50", "mNgR@50", "PRank"]


def entry(rank: int, name: str, r50: float | None, prank: float | None, **extra: Any
          ) -> dict[str, Any]:
    """One board row; mR@50 falls with the rank, R@50 and PRank are chosen per test."""
    metrics = {"mR@50": 0.5 - rank / 10, "mR@20": 0.2, "mR@100": 0.3, "R@50": r50,
               "mNgR@50": 0.6, "PRank": prank}
    row = {"rank": rank, "name": name, "submission_id": f"s{rank}", "approved": False,
           "submitted_at": f"2024-05-0{rank}T12:00:00+00:00", "paper": None,
           "report": f"reports/s{rank}.html", "metrics": metrics, "delta": {},
           "rank_change": None}
    return {**row, **extra}


@pytest.fixture
def boards() -> dict[str, list[dict[str, Any]]]:
    public = [entry(1, "alpha", 0.40, 2.0, rank_change=2, delta={"mR@50": 0.0321},
                    approved=True, paper="https://example.org/alpha.pdf"),
              entry(2, "bravo", None, 10.5, rank_change=-1, delta={"mR@50": -0.00001}),
              entry(3, "charlie", 0.10, 9.25, rank_change=0),
              entry(4, "delta", 0.55, None)]
    approved = [{**public[0], "rank": 1, "rank_change": None}]
    return {"public": public, "approved": approved}


def render(boards: dict[str, list[dict[str, Any]]]) -> str:
    return render_leaderboard(boards, COLUMNS, generated_at="2024-06-01T00:00:00Z",
                              previous_generated_at="2024-05-01T00:00:00Z")


# --- pure HTML ------------------------------------------------------------------------------

def test_numbers_formatted(boards):
    page = render(boards)
    assert '<td data-value="0.4">40.00</td>' in page                  # R@50 in percent
    assert '<td data-value="0.1">10.00</td>' in page
    assert '<td data-value="9.25">9.25</td>' in page                  # PRank: plain
    assert '<td data-value="">-</td>' in page                         # None
    assert '<td data-value="0.0321">+3.21</td>' in page               # delta in points, signed
    assert '<td data-value="-1e-05">+0.00</td>' in page               # never -0.00
    assert page.count('data-col="PRank"') == 2 and 'data-col="Δ multimpo"' in page


def test_interval_and_rank_range(boards):
    boards["public"][0].update(rank_range=[1, 2], intervals={"mR@50": [0.35, 0.45]})
    boards["public"][1].update(rank_range=[1, 3])
    page = render(boards)
    assert page.count('data-col="rank range"') == 1  # the approved board has no ranges
    assert '<td data-value="1">1–2</td>' in page and '<td data-value="1">1–3</td>' in page
    assert ('<td data-value="0.4">40.00<br><span class="ci">[35.00, 45.00]</span></td>'
            in page)
    assert '<td data-value="0.3">30.00</td>' in page  # no interval: plain


def test_exact_values_for_sorting():
    board = {"public": [entry(1, "x", 0.123456789, 1.0)]}
    page = render_leaderboard(board, ["R@50"])
    assert '<td data-value="0.123456789">12.35</td>' in page


def test_ranks_and_rank_changes(boards):
    page = render(boards)
    assert '<td data-value="1">1 <span class="up">▲2</span></td>' in page
    assert '<td data-value="2">2 <span class="down">▼1</span></td>' in page
    assert '<td data-value="3">3 <span class="same">=</span></td>' in page
    assert '<td data-value="4">4 <span class="new">new</span></td>' in page


def test_header(boards):
    page = render(boards)
    assert "<h1>sgdask leaderboard</h1>" in page
    assert "generated 2024-06-01T00:00:00Z" in page
    assert "compared with the leaderboard of 2024-05-01T00:00:00Z" in page
    assert "compared with" not in render_leaderboard(boards, COLUMNS)


def test_links(boards):
    page = render(boards)
    assert '<a href="reports/s1.html">alpha</a>' in page
    assert '(<a href="https://example.org/alpha.pdf">paper</a>)' in page


def test_escaping(boards):
    boards["public"][0]["name"] = "<script>alert(1)</script>"
    page = render_leaderboard(boards, COLUMNS, title="a & <b>")
    assert "<script>alert(1)" not in page
    assert ">&lt;script&gt;alert(1)&lt;/script&gt;</a>" in page
    assert "<title>a &amp; &lt;b&gt;</title>" in page


@pytest.mark.parametrize("url", ["javascript:alert(1)", " JavaScript:alert(1)",
                                 "java\tscript:alert(1)", "data:text/html,x", "vbscript:x"])
def test_unsafe_links_are_text(boards, url):
    boards["public"][0].update(report=url, paper=url)
    page = render(boards)
    assert 'href="java' not in page.lower() and 'href="data:' not in page
    assert 'href=" ' not in page and 'href="vbscript' not in page
    assert '<span class="unsafe-link"' in page and ">alpha</span>" in page


def test_safe_urls():
    assert is_safe_url("https://a.b/c") and is_safe_url("HTTP://a") and is_safe_url("r/x.html")
    assert is_safe_url("reports/a:b.html") and is_safe_url("../x.html")
    assert not is_safe_url("javascript:x") and not is_safe_url("\x01javascript:x")
    assert not is_safe_url("file:///etc/passwd")


def test_both_boards_and_empty_board(boards):
    page = render_leaderboard({"public": boards["public"], "approved": []}, COLUMNS)
    assert '<table class="board" id="board-public">' in page
    assert '<table class="board" id="board-approved">' in page
    assert page.count("no submissions") == 1
    assert f'colspan="{len(COLUMNS) + 4}">no submissions' in page


def test_self_contained(boards):
    page = render(boards)
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert "url(" not in page


# --- real browser ---------------------------------------------------------------------------

def names(page: Any, board: str) -> list[str]:
    """The model names in display order, read from the name cells' data-value."""
    cells = page.locator(f"#board-{board} tbody tr td:nth-child(2)")
    return [cells.nth(i).get_attribute("data-value") for i in range(cells.count())]


def screenshot(page: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Screenshot to $SGDASK_ARTIFACTS (default tmp_path), copied to pytest's base temp."""
    out = Path(os.environ.get("SGDASK_ARTIFACTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "leaderboard.png"
    page.screenshot(path=str(path), full_page=True)
    kept = tmp_path_factory.getbasetemp() / "leaderboard.png"
    if kept != path:
        shutil.copyfile(path, kept)
    print(f"leaderboard screenshot: {path} (copy: {kept})")
    return path


def test_sorting_in_chromium(boards, chromium_page, tmp_path, tmp_path_factory):
    page = chromium_page
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    file = tmp_path / "leaderboard.html"
    file.write_text(render(boards), encoding="utf-8")
    page.goto(file.as_uri())

    assert page.locator("#board-public tbody tr").count() == 4
    assert page.locator("#board-approved tbody tr").count() == 1
    assert names(page, "public") == ["alpha", "bravo", "charlie", "delta"]
    assert names(page, "approved") == ["alpha"]
    assert page.locator("#board-public tbody tr").first.locator("a").first.inner_text() == "alpha"

    r50 = page.locator('#board-public th[data-col="R@50"]')
    r50.click()                                   # ascending, the missing value last
    assert names(page, "public") == ["charlie", "alpha", "delta", "bravo"]
    assert r50.get_attribute("aria-sort") == "ascending"
    r50.click()                                   # descending, the missing value still last
    assert names(page, "public") == ["delta", "alpha", "charlie", "bravo"]
    assert r50.get_attribute("aria-sort") == "descending"

    page.locator('#board-public th[data-col="PRank"]').click()  # numeric, not text order
    assert names(page, "public") == ["alpha", "charlie", "bravo", "delta"]
    assert r50.get_attribute("aria-sort") is None

    path = screenshot(page, tmp_path, tmp_path_factory)
    assert path.stat().st_size > 0
    assert errors == []
    assert requests == [file.as_uri()]            # nothing fetched but the page itself
