"""Every ``sgdask`` command the documentation shows exists, with the options it is shown with.

The code blocks of ``docs/**/*.md``, ``README.md`` and the Markdown files the site mirrors
(``schemas/``, ``jobs/``), not Python, YAML or JSON ones, and their `sgdask ...` code spans
are read as the shell would read them (``\\`` continues a line, ``#`` starts a comment);
every command line that runs ``sgdask`` is resolved against the command tree typer builds:
its command (and subcommand) must exist and every ``--option`` and ``-x`` it uses must be
one of that command's. Optional parts written ``[--k 20,50]`` and alternatives ``a|b``
count as used. The runnable blocks also run (``test_docs.py``); this covers every other
block.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from sgdask.cli import app
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import pages

FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.M | re.S)
#: a command in running text: `sgdask ...`
SPAN = re.compile(r"(?<!`)`(?P<code>sgdask [^`\n]+)`(?!`)")
NOT_SHELL = re.compile(r"python|yaml|yml|json|toml|html|ini|diff|mermaid", re.I)
#: words that end a command on a shell line
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "&"}
#: options of the process, not of a command (``sgdask.cli.process``)
PROCESS_OPTIONS = {"--debug", "--help"}
COMMAND_TREE = typer.main.get_command(app)


def _doc_files() -> list[Path]:
    """README.md, the pages of docs/ and the repository's Markdown files the site shows
    (schemas/, jobs/)."""
    mirrored = [path for path in pages.mirrored_pages() if path.suffix == ".md"]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *mirrored]


def _shell_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, logical line)`` of every non-Python code block, continuations
    joined."""
    found = []
    for match in FENCE.finditer(text):
        if NOT_SHELL.search(match["info"]):
            continue
        first = text.count("\n", 0, match.start("code")) + 1
        logical, start = "", first
        for number, line in enumerate(match["code"].splitlines(), first):
            if not logical:
                start = number
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            found.append((start, logical + line))
            logical = ""
    return found


def _invocations(line: str) -> list[list[str]]:
    """The words after each ``sgdask`` (``sgdask``, ``.venv/bin/sgdask``, ``python -m
    sgdask``) of a shell line, up to a shell operator; ``[``/``]`` of optional parts
    dropped."""
    try:
        words = shlex.split(line.lstrip("$ "), comments=True)
    except ValueError:  # prose in a text block, not a command
        return []
    runs, current = [], None
    for word in words:
        if word == "sgdask" or word.endswith("bin/sgdask"):
            current = []
            runs.append(current)
        elif word in SHELL_OPERATORS:
            current = None
        elif current is not None:
            current.extend(w for w in word.strip("[]").split("|") if w)
    return runs


def _options(command: Any) -> set[str]:
    known = {*PROCESS_OPTIONS}
    for param in command.params:
        known.update(getattr(param, "opts", ()), getattr(param, "secondary_opts", ()))
    return known


def _resolved(words: list[str]) -> tuple[str, list[str]]:
    """The command the words name (its words) and the options they use that it (or, before
    it, its group) does not have."""
    command: Any = COMMAND_TREE
    path, unknown = [], []
    for word in words:
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", word):
            if word.split("=", 1)[0] not in _options(command):
                unknown.append(word.split("=", 1)[0])
        elif isinstance(command, TyperGroup) and not word.startswith("-"):
            context = command.context_class(command, info_name="sgdask")
            command = command.get_command(context, word)
            path.append(word)
            assert command is not None, f"sgdask {' '.join(path)}: no such command"
    return " ".join(path), unknown


def _spans(text: str) -> list[tuple[int, str]]:
    """``(line number, command)`` of every `sgdask ...` code span outside code blocks."""
    prose = FENCE.sub(lambda m: "\n" * m[0].count("\n"), text)
    return [(prose.count("\n", 0, m.start()) + 1, m["code"]) for m in SPAN.finditer(prose)]


def _documented() -> list[tuple[str, list[str]]]:
    found = []
    for path in _doc_files():
        text = path.read_text()
        for number, line in [*_shell_lines(text), *_spans(text)]:
            for words in _invocations(line):
                found.append((f"{path.relative_to(ROOT)}:{number}", words))
    return found


DOCUMENTED = _documented()


def test_the_docs_show_many_commands():
    assert len(DOCUMENTED) >= 40
    assert {_resolved(words)[0] for _, words in DOCUMENTED} >= {
        "evaluate", "convert", "ingest-gt", "compare", "serve", "submit", "tokens add"}


@pytest.mark.parametrize(("where", "words"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_documented_command_exists_with_its_options(where, words):
    name, unknown = _resolved(words)
    assert not unknown, f"{where}: sgdask {name}: no option {', '.join(unknown)}"


def test_a_wrong_option_or_command_is_found():
    assert _resolved(["evaluate", "--gt", "g", "--pred", "p"]) == ("evaluate", [])
    assert _resolved(["tokens", "add", "f", "--team", "t"]) == ("tokens add", [])
    assert _resolved(["--version", "-v"]) == ("", [])
    assert _resolved(["compare", "a", "b", "--levle", "0.9", "-x"]) == (
        "compare", ["--levle", "-x"])
    with pytest.raises(AssertionError, match="sgdask evaluat: no such command"):
        _resolved(["evaluat", "--gt", "g"])
    assert _invocations("sgdask evaluate [--k 20,50] [--aggregation pooled|image] | head") == [
        ["evaluate", "--k", "20,50", "--aggregation", "pooled", "image"]]
