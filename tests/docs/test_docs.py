"""The documentation's examples run, so they never rot; its generated pages cover what they
claim to. Every fenced block marked ``{.bash .run}`` or ``{.python .run}`` in ``docs/``
runs, page by page, in the page's order, in a fresh empty directory, by
``tests/docs/docs_examples.py`` (one interpreter per page, Dask where a reader's commands
put it: bash blocks are ``sgdask`` commands run through the ``sgdask`` entry point with the
argv the shell would give them, Python blocks run as they are and hold their own
``assert``s). A page passes when every block does. The S3 page runs against a real moto S3
server on 127.0.0.1. The installed ``sgdask`` command itself is run from outside the
repository by the wheel smoke test (``.ci/wheel-smoke``).

The strict site build itself (broken links, missing pages, missing API objects) runs in
``make test`` (``mkdocs build --strict``), not here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.helpers import (
    AWS_ENV,
    BUCKET,
    ROOT,
)

DOCS = ROOT / "docs"
RUNNER = ROOT / "tests" / "docs" / "docs_examples.py"
sys.path.insert(0, str(DOCS / "hooks"))
import pages  # noqa: E402  (docs/hooks/pages.py, the MkDocs hook)

from tests.docs import docs_examples  # noqa: E402

FENCE = re.compile(r"^```\{\.(?P<lang>python|bash) \.run\}\n(?P<code>.*?)^```$", re.M | re.S)
#: pages whose examples need an S3 server (given as $ENDPOINT and $BUCKET)
NEEDS_S3 = {"tasks/s3.md"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str


def runnable_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    page = path.relative_to(DOCS).as_posix()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m["lang"], m["code"])
            for m in FENCE.finditer(text)]


def pages_with_examples() -> dict[str, list[Block]]:
    found = {}
    for path in sorted(DOCS.rglob("*.md")):
        blocks = runnable_blocks(path)
        if blocks:
            found[blocks[0].page] = blocks
    return found


EXAMPLES = pages_with_examples()


def run_page(blocks: list[Block], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, str(RUNNER)], cwd=cwd, env=env, text=True,
                          input=json.dumps([asdict(b) for b in blocks]),
                          capture_output=True, timeout=600)
    assert done.returncode == 0, (
        f"docs/{blocks[0].page}: an example failed\n--- stdout\n{done.stdout[-3000:]}\n"
        f"--- stderr\n{done.stderr[-6000:]}")


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a reader has, plus ``extra``; no repository on the import path."""
    env = {**os.environ, **(extra or {})}
    for name in ("PYTHONPATH", "AWS_PROFILE"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def s3_env(s3) -> dict[str, str]:
    """The variables the S3 page reads, for the module's moto S3 server (``s3``)."""
    return {**AWS_ENV, "ENDPOINT": s3.endpoint, "BUCKET": f"s3://{BUCKET}/docs-example"}


#: pages whose examples start servers and an S3 server: the slow tier (``make test-slow``)
SLOW_PAGES = {"tasks/hosting.md", "tasks/s3.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES
                                  else p for p in sorted(EXAMPLES)])
def test_examples_run(page, tmp_path, request):
    extra = request.getfixturevalue("s3_env") if page in NEEDS_S3 else None
    run_page(EXAMPLES[page], tmp_path, example_env(extra))


def test_runner_reads_bash_blocks_as_the_shell_does(monkeypatch):
    monkeypatch.setenv("STORE", "s3://b/gt")
    code = 'sgdask convert "a b.zip" --out $STORE  # comment\n\nsgdask evaluate \\\n    --gt x\n'
    assert docs_examples.commands(code) == [["convert", "a b.zip", "--out", "s3://b/gt"],
                                            ["evaluate", "--gt", "x"]]
    with pytest.raises(ValueError, match="not an sgdask command"):
        docs_examples.commands("rm -rf data\n")


def test_every_task_page_and_getting_started_has_examples():
    """The pages that promise runnable examples have them (a typo in a fence marker would
    otherwise silently turn an example into untested text)."""
    expected = {"getting-started.md", "tasks/evaluate-zip.md", "tasks/result-files.md",
                "tasks/s3.md", "tasks/hosting.md", "tasks/visual-genome.md",
                "tasks/training-loop.md", "reference/api.md"}
    assert expected <= set(EXAMPLES)
    for path in DOCS.rglob("*.md"):
        for line in path.read_text().splitlines():
            if line.startswith("```{") and ".run" in line:
                assert FENCE.match(line + "\n\n```"), f"{path}: unrecognized fence {line!r}"


def test_command_help_covers_every_command():
    from sgdask.cli import app

    text = pages.command_help()
    commands = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert len(commands) >= 9
    for name in commands:
        assert f"## `sgdask {name}`" in text
        assert f"Usage: sgdask {name} [OPTIONS]" in text
    assert "--version" in text and "╭" not in text  # plain text, not rich panels
    for name in ("tokens add", "tokens revoke"):  # the commands of a group too
        assert f"## `sgdask {name}`" in text and f"Usage: sgdask {name} [OPTIONS]" in text


def test_every_schema_file_has_a_page():
    mirrored = pages.mirrored_pages()
    for path in (ROOT / "schemas").iterdir():
        assert mirrored[path].startswith("formats/")
    assert mirrored[ROOT / "schemas" / "README.md"] == "formats/index.md"
    assert mirrored[ROOT / "schemas" / "metrics.schema.json"] == "formats/metrics.schema.json.md"


def test_every_input_limit_is_documented():
    """The limits table (schemas/README.md, the formats page the security model links to)
    names every ``--limit``, and the security model names every service option it lists."""
    import dataclasses

    from sgdask.io.archive import ArchiveLimits

    table = (ROOT / "schemas" / "README.md").read_text()
    for limit in dataclasses.fields(ArchiveLimits):
        assert f"| `{limit.name}` |" in table, limit.name
    security = (ROOT / "docs" / "security.md").read_text()
    for option in ("--max-upload-mb", "--daily-limit", "--concurrent-limit", "--lease"):
        assert f"`{option}`" in security, option


def test_links_between_mirrored_files_point_at_their_pages():
    mirrored = pages.mirrored_pages()
    source = ROOT / "jobs" / "README.md"
    text = ("[manual](cluster/manual.md) [file](cluster/Dockerfile#top) "
            "[away](https://example.org/x.md) [other](../schemas/store.md)")
    out = pages.rewrite_links(text, source, "tasks/cluster.md", mirrored)
    assert out == ("[manual](cluster/manual.md) [file](cluster/Dockerfile.md#top) "
                   "[away](https://example.org/x.md) [other](../formats/store.md)")


def test_nav_entries_of_groups_become_sections():
    groups = {"formats/index.md": [("Overview", "formats/index.md"),
                                   ("store.md", "formats/store.md")]}
    nav = [{"Home": "index.md"}, {"File formats": "formats/index.md"},
           {"Reference": [{"Formats": "formats/index.md"}]}]
    section = [{"Overview": "formats/index.md"}, {"store.md": "formats/store.md"}]
    assert pages.expanded_nav(nav, groups) == [
        {"Home": "index.md"}, {"File formats": section}, {"Reference": [{"Formats": section}]}]


def test_formulas_become_mathml():
    html = ('<p>a <span class="arithmatex">\\(x_k &lt; 1\\)</span></p>'
            '<div class="arithmatex">\\[\\frac{a}{b}\\]</div>')
    out = pages.MATH.sub(pages.mathml, html)
    assert "arithmatex" not in out and out.count("<math") == 2
    assert 'display="block"' in out and "<mfrac>" in out and "<mo>&#x0003C;</mo>" in out
