"""``--help`` of every command reads well in an 80-column terminal: every option listed in
full (nothing cut with "…"), no line wider than the terminal, no Python types for metavars.

The commands are found by walking the command tree typer builds, so a new command or option
is checked without touching this file; nothing here is a golden copy of the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption

from sgdask.cli import app, main

WIDTH = 80


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the tree (typer's click-like objects), with the words that name it
    (the root: none)."""
    yield path, command
    if isinstance(command, TyperGroup):
        context = command.context_class(command, info_name="sgdask")
        for name in command.list_commands(context):
            yield from _commands(command.get_command(context, name), (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _help(capsys, monkeypatch, words: tuple[str, ...]) -> str:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    with pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    out, err = capsys.readouterr()
    assert (done.value.code or 0, err) == (0, "")
    return out


def test_every_command_is_checked():
    names = {" ".join(path) for path in COMMANDS}
    assert {"", "evaluate", "convert", "ingest-gt", "compare", "serve", "tokens",
            "tokens add", "tokens revoke"} <= names
    assert len(names) >= 17


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "sgdask")
def test_help_fits_80_columns(path, capsys, monkeypatch):
    text = _help(capsys, monkeypatch, path)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, "\n".join(
        line for line in lines if len(line) > WIDTH)
    assert "…" not in text, "\n".join(line for line in lines if "…" in line)
    assert "<bool>" not in text and "<list[" not in text
    words = set(text.replace(",", " ").split())
    for param in COMMANDS[path].params:
        if getattr(param, "hidden", False):
            continue
        if isinstance(param, TyperOption):
            for name in (*param.opts, *param.secondary_opts):
                assert name in words, f"sgdask {' '.join(path)} --help: {name} not listed"
        else:
            assert param.display_name_raw in words, param.display_name_raw


def test_help_text_is_not_wrapped_at_the_source_line_breaks(capsys, monkeypatch):
    """A docstring paragraph flows to the terminal's width: no line of the help of
    ``verify`` (several long paragraphs) ends where its source line did while the next
    line would have fit on it."""
    lines = [line.strip() for line in _help(capsys, monkeypatch, ("verify",)).splitlines()]
    for line, after in pairwise(lines):
        if line and after and not set(line + after) & set("│╭╰"):
            assert len(line) + 1 + len(after.split()[0]) > WIDTH - 2, (line, after)
