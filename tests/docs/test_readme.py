"""The README's architecture table is true to the tree, and the README stays a front door
whose long parts live on the documentation site.

The table's convention (README "Architecture"): one row per module or package; the first
cell names paths in backticks (`sgdask/accum.py`, `sgdask/io/`, or several modules of one
row); a package's row names each of its modules in backticks anywhere in the row (`store` or
`store.py`). So a new module needs its name in its package's row, and a new package a row
of its own (`sgdask/core/` naming its modules).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.helpers import ROOT

README = ROOT / "README.md"
PACKAGE = ROOT / "sgdask"
CODE = re.compile(r"`([^`]+)`")
#: top-level folders whose paths the table may name (a backticked token starting with one is
#: taken for a path and must exist)
PATH_ROOTS = ("sgdask/", "benchmarks/", "schemas/", "docs/", "jobs/", "tests/")


def architecture_rows(text: str) -> list[tuple[list[str], str]]:
    """(paths of the first cell, the whole row) of every row of the README's architecture
    table: the first table after the heading ``## Architecture`` with the header
    ``| path | role | rule |``."""
    section = text.split("\n## Architecture\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.replace(" ", "") == "|path|role|rule|")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        first = line.strip("|").split("|", 1)[0]
        rows.append((CODE.findall(first), line))
    return rows


def modules() -> list[Path]:
    """Every module under ``sgdask/`` but the packages' ``__init__.py``."""
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def uncovered(rows: list[tuple[list[str], str]], paths: list[Path]) -> list[str]:
    """The modules of ``paths`` that no row names: not a row's path, and not named in the row
    of their package."""
    named_files = {p for first, _ in rows for p in first if p.endswith(".py")}
    package_rows = {p: row for first, row in rows for p in first if p.endswith("/")}
    missing = []
    for path in paths:
        relative = path.relative_to(ROOT).as_posix()
        if relative in named_files:
            continue
        row = package_rows.get(path.parent.relative_to(ROOT).as_posix() + "/")
        if row is None or not {path.stem, path.name} & set(CODE.findall(row)):
            missing.append(relative)
    return missing


def named_paths(rows: list[tuple[list[str], str]]) -> set[str]:
    """Every path the table names: each first cell's, and every backticked token in a row
    that starts with a top-level folder of the repository."""
    found = {p for first, _ in rows for p in first}
    for _, row in rows:
        found |= {t for t in CODE.findall(row) if t.startswith(PATH_ROOTS) and " " not in t}
    return found


def test_architecture_table_names_every_module():
    rows = architecture_rows(README.read_text())
    assert len(rows) >= 15
    assert uncovered(rows, modules()) == []


def test_every_path_the_architecture_table_names_exists():
    rows = architecture_rows(README.read_text())
    for _, row in rows:
        first = row.strip("|").split("|", 1)[0]
        assert CODE.findall(first), f"a row without a path: {row[:80]}"
    missing = sorted(p for p in named_paths(rows) if not (ROOT / p).exists())
    assert missing == []


def test_every_package_row_path_is_a_folder_and_module_row_path_a_file():
    for first, _ in architecture_rows(README.read_text()):
        for path in first:
            assert (ROOT / path).is_dir() if path.endswith("/") else (ROOT / path).is_file(), path


def test_the_check_sees_a_missing_module_and_a_new_package():
    rows = [(["sgdask/io/"], "| `sgdask/io/` | `store.py` and `fs` | |"),
            (["sgdask/accum.py"], "| `sgdask/accum.py` | sums | |")]
    paths = [PACKAGE / "io" / "store.py", PACKAGE / "io" / "fs.py", PACKAGE / "accum.py",
             PACKAGE / "io" / "lock.py", PACKAGE / "core" / "score.py"]
    assert uncovered(rows, paths) == ["sgdask/io/lock.py", "sgdask/core/score.py"]
    rows.append((["sgdask/core/"], "| `sgdask/core/` | `score` | |"))
    assert uncovered(rows, paths) == ["sgdask/io/lock.py"]


def test_readme_links_resolve():
    """Relative links of the README point at files of the repository (GitHub shows them)."""
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_snippets_the_docs_include_from_the_readme_exist():
    text = README.read_text()
    for path in (ROOT / "docs").rglob("*.md"):
        for name in re.findall(r'^--8<-- "README\.md:([\w-]+)"$', path.read_text(), re.M):
            start = f"<!-- --8<-- [start:{name}] -->"
            end = f"<!-- --8<-- [end:{name}] -->"
            assert start in text and end in text and text.index(start) < text.index(end), name


def test_performance_page_shows_the_latest_benchmark_results():
    """docs/performance.md is filled from benchmarks/results/ when the site is built."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import pages

    source = (ROOT / "docs" / "performance.md").read_text()
    assert "<!-- generated: file benchmarks/results/latest.md -->" in source
    built = pages.on_page_markdown(source, None, None, None)
    assert "generated: file" not in built
    latest = (ROOT / "benchmarks" / "results" / "latest.md").read_text()
    table_line = next(line for line in latest.splitlines() if line.startswith("| A sgbench"))
    assert table_line in built
    title = latest.splitlines()[0].lstrip("#").strip()
    assert f"\n### {title}\n" in built


def test_included_headings_move_below_the_page_and_code_is_left_alone():
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    import pages

    text = "# Top\n\n```bash\n# a comment\n```\n\n## Sub\n#hashtag\n"
    assert pages.demoted_headings(text, 3) == (
        "### Top\n\n```bash\n# a comment\n```\n\n#### Sub\n#hashtag\n")
