"""The benchmarking service in a real headless Chromium (Playwright): the upload form, the
status page until `ranked`, the leaderboard with the paper link; a broken ZIP rejected with
`sgdask validate`'s message; an HTML/JS payload shown as text. Screenshots are saved in the
test's tmp dir (or $SGDASK_ARTIFACTS)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sgdask.service.tokens import add_token
from tests.helpers.servicekit import Proc, upload, wait_final

pytestmark = pytest.mark.slow

XSS_NAME = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
XSS_PAPER = 'https://example.org/paper?x="><script>window.__pwned=3</script>'


@pytest.fixture(scope="module")
def site(tiny, client, tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    tokens = root / "tokens.json"
    token = add_token(tokens, "vision-lab", "participant")
    proc = Proc(["serve", "--registry", str(root / "registry"), "--gt", tiny.gt,
                 "--out", str(root / "board"), "--tokens", str(tokens), "--port", "0",
                 "--scheduler", client.scheduler.address, "--poll", "0.2"],
                root / "serve.log")
    try:
        yield proc.url(), token
    finally:
        proc.stop()
        print(proc.text()[-3000:])


def artifacts(tmp_path: Path) -> Path:
    out = Path(os.environ.get("SGDASK_ARTIFACTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    return out


def shot(page: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


def upload_through_form(page: Any, base: str, name: str, paper: str, file: Path,
                        token: str | None, screenshot_to: Path | None = None) -> None:
    page.goto(f"{base}/submit")
    if token is not None:
        page.fill("#token", token)
    else:
        assert page.locator("#token").count() == 0   # the cookie holds the token
    page.fill("#name", name)
    page.fill("#paper", paper)
    page.set_input_files("#file", str(file))
    if screenshot_to is not None:
        shot(page, screenshot_to, "upload-form")
    page.click("#upload")
    page.wait_for_url(f"{base}/submissions/*", timeout=60_000)


def wait_status(page: Any, final: str, timeout: float) -> None:
    """Reload the status page (it also refreshes itself) until it shows ``final``."""
    deadline = time.monotonic() + timeout
    while True:
        shown = page.locator("#status").get_attribute("data-status")
        if shown == final:
            return
        assert shown not in ("ranked", "rejected", "failed"), f"{shown}, expected {final}"
        assert time.monotonic() < deadline, f"still {shown} after {timeout} s"
        page.wait_for_timeout(500)
        page.reload()


def test_upload_rank_reject_and_escape_in_chromium(site, tiny, chromium_page,
                                                   tmp_path):
    base, token = site
    page, folder = chromium_page, artifacts(tmp_path)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    upload_through_form(page, base, "browser model", "https://example.org/browser-paper",
                        tiny.variant(1), token, folder)
    assert page.locator("h1").inner_text() == "browser model"
    wait_status(page, "ranked", 120)
    assert page.locator("#metrics").count() == 1
    shot(page, folder, "status-ranked")

    page.goto(base + "/")
    row = page.locator("#board-public tbody tr", has_text="browser model")
    assert row.count() == 1
    paper = row.locator("a", has_text="paper")
    assert paper.get_attribute("href") == "https://example.org/browser-paper"
    report = row.locator("a", has_text="browser model").get_attribute("href")
    assert report.startswith("/reports/")
    header = page.locator('#board-public th[data-col="mR@50"]')
    header.click()                       # the sorter runs under the page's CSP (script hash)
    assert header.get_attribute("aria-sort") == "ascending"
    shot(page, folder, "leaderboard")
    page.goto(base + report)
    assert "sgdask report" in page.title()

    upload_through_form(page, base, "broken model", "", tiny.broken(), None)
    wait_status(page, "rejected", 90)
    message = page.locator("#errors li").first.inner_text()
    assert message.startswith("error: broken.zip:"), message
    assert "missing from the archive" in message and "seg_filename" in message
    assert "/uploads/" not in page.content()          # no storage path leaks
    shot(page, folder, "status-rejected")

    upload_through_form(page, base, XSS_NAME, XSS_PAPER, tiny.variant(1), None)
    assert page.locator("h1").inner_text() == XSS_NAME
    wait_status(page, "ranked", 120)
    page.goto(base + "/")
    cell = page.locator("#board-public tbody tr td.text", has_text="onerror")  # the name cell
    assert cell.get_attribute("data-value") == XSS_NAME
    assert cell.locator("a").first.inner_text() == XSS_NAME
    assert cell.locator("a", has_text="paper").get_attribute("href") == XSS_PAPER
    page.goto(base + "/mine")
    assert page.locator("#mine tbody tr").count() == 3
    shot(page, folder, "mine")
    assert page.evaluate("window.__pwned") is None
    assert dialogs == [] and errors == []


def test_board_per_matching_mode_in_chromium(site, tiny, chromium_page,
                                             tmp_path):
    """Issue 27 item 5: the same model as masks (ZIP) and as boxes (JSON) is ranked on two
    boards, each titled with its matching mode, never on one."""
    base, token = site
    ids = [upload(base, token, path, "same model").json()["id"]
           for path in (tiny.variant(4), tiny.paths.submission_boxes)]
    for submission_id in ids:
        assert wait_final(base, token, submission_id, 180)["status"] == "ranked"
    rows = httpx.get(f"{base}/api/leaderboard", timeout=30).json()
    mine = {r["submission_id"]: r for r in rows if r["submission_id"] in ids}
    assert [mine[i]["matching"] for i in ids] == ["masks", "boxes"]
    assert mine[ids[1]]["rank"] == 1                    # alone on the box board
    page = chromium_page
    page.goto(base + "/")
    headings = page.locator("section h2").all_inner_texts()
    assert headings == ["public: mask matching", "approved: mask matching",
                        "public: box matching", "approved: box matching"]
    masks = page.locator("#board-public tbody tr", has_text="same model")
    boxes = page.locator("#board-public-boxes tbody tr", has_text="same model")
    assert masks.count() == 1 and boxes.count() == 1
    assert page.locator("#board-public-boxes tbody tr").count() == 1
    assert boxes.locator("td").first.get_attribute("data-value") == "1"
    shot(page, artifacts(tmp_path), "boards-per-matching-mode")
