"""The documentation's links work both ways it is read: as Markdown files in the repository
(GitHub, an editor) and as the site ``make docs`` builds; and the site build ``make test``
runs fails on any warning, a broken link included.

Pages link the repository's files as they lie (``docs/`` links ``../schemas/store.md``,
``CHANGELOG.md`` links ``docs/tasks/compare.md``); the MkDocs hook (``docs/hooks/pages.py``)
points each link at the page of the file it names.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import pages

#: an inline link or image, outside code: ``[text](target#anchor "title")``
LINK = re.compile(r"\[[^\]\n]*\]\((?P<target>[^)\s#]*)(?P<anchor>#[^)\s]*)?(?:\s+\"[^\"]*\")?\)")
FENCE_LINE = re.compile(r"^(?P<fence>`{3,}|~{3,})", re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository a reader may open (the site shows them all)."""
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "schemas").rglob("*.md")), *sorted((ROOT / "jobs").rglob("*.md")),
             *sorted((ROOT / "benchmarks").rglob("*.md"))]
    return [path for path in found if path.is_file()]


def prose(text: str) -> str:
    """``text`` with fenced code blocks and code spans blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        match = FENCE_LINE.match(line)
        if fence is None and match:
            fence = match["fence"]
            out.append("")
        elif fence is not None:
            if line.strip() == fence:
                fence = None
            out.append("")
        else:
            out.append(CODE_SPAN.sub("``", line))
    return "\n".join(out)


def unclosed_fence(text: str) -> int | None:
    """The line number of a code fence that is never closed, or None."""
    fence, opened = None, 0
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE_LINE.match(line)
        if fence is None and match:
            fence, opened = match["fence"], number
        elif fence is not None and line.strip() == fence:
            fence = None
    return opened if fence is not None else None


def broken_links(path: Path) -> list[str]:
    """``line: target`` of every relative link of a Markdown file that names no file of the
    repository."""
    text = prose(path.read_text())
    broken = []
    for match in LINK.finditer(text):
        target = match["target"]
        if not target or "://" in target or target.startswith(("mailto:", "/")):
            continue
        if not (path.parent / target).exists():
            broken.append(f"{text.count(chr(10), 0, match.start()) + 1}: {target}")
    return broken


FILES = markdown_files()
IDS = [path.relative_to(ROOT).as_posix() for path in FILES]


def test_the_check_sees_the_docs():
    assert len(FILES) >= 30
    assert {"README.md", "CHANGELOG.md", "docs/getting-started.md", "schemas/README.md",
            "jobs/README.md"} <= set(IDS)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_relative_links_name_files_of_the_repository(path):
    assert broken_links(path) == [], f"{path.relative_to(ROOT)}: links to nothing"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_code_fence_is_closed(path):
    assert unclosed_fence(path.read_text()) is None, (
        f"{path.relative_to(ROOT)}:{unclosed_fence(path.read_text())}: a code fence never closes")


def test_the_checks_find_what_they_look_for(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# there\n")
    page.write_text("[ok](there.md#there) [gone](missing.md) ![img](gone.png)\n"
                    "`[not a link](nowhere.md)` [web](https://example.org/x.md)\n"
                    "```bash\n[in code](nowhere.md)\n```\n\n```text\n")
    assert broken_links(page) == ["1: missing.md", "1: gone.png"]
    assert unclosed_fence(page.read_text()) == 7


def test_the_readme_cites_only_what_the_repository_holds():
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text and "SPEC §" not in text and "SPEC.md" not in text
    assert "docs/metrics.md" in text


def test_links_between_repository_files_point_at_their_pages():
    site = pages.site_pages()
    docs_page = ROOT / "docs" / "tasks" / "compare.md"
    text = ("[schema](../../schemas/comparison.md#rows) [recipes](../../jobs/README.md) "
            "[api](../../sgdask/report/__init__.py) [page](hosting.md) [web](https://x.org/a.md)")
    assert pages.rewrite_links(text, docs_page, "tasks/compare.md", site) == (
        "[schema](../formats/comparison.md#rows) [recipes](cluster.md) "
        "[api](../reference/api/sgdask.report.md) [page](hosting.md) [web](https://x.org/a.md)")
    changelog = "[compare](docs/tasks/compare.md) [formats](schemas/README.md#what)"
    assert pages.rewrite_links(changelog, ROOT / "CHANGELOG.md", "changelog.md", site) == (
        "[compare](tasks/compare.md) [formats](formats/index.md#what)")


def test_an_included_file_sits_below_the_heading_before_it():
    page = "# Page\n\n## Latest\n\n<!-- generated: file CHANGELOG.md -->\n"
    included = pages.with_included_files(page, "performance.md")
    assert included.startswith("# Page\n\n## Latest\n\n### Changelog\n")
    alone = pages.with_included_files("<!-- generated: file CHANGELOG.md -->\n", "changelog.md")
    assert alone.startswith("# Changelog\n") and "](docs/" not in alone


def docs_build_command() -> str:
    """The documentation build ``make test`` runs, as make would run it (this Python)."""
    dry = subprocess.run(["make", "-n", "-o", ".venv/.installed-stamp", f"PY={sys.executable}",
                          "test"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    [line] = [line for line in dry.stdout.splitlines() if "mkdocs build" in line]
    return line


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_broken_link_fails_the_docs_build_of_make_test(tmp_path):
    command = docs_build_command()
    words = shlex.split(command)
    assert "--strict" in words and "--quiet" not in words and "-q" not in words
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("mkdocs.yml", "README.md", "CHANGELOG.md", "schemas", "jobs", "benchmarks",
                 "sgdask"):
        (copy / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "docs", copy / "docs")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, shell=True, cwd=copy, env=env, capture_output=True,
                          text=True, timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "no-such-page.md" in output and "strict mode" in output
