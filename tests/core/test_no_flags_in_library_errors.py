"""Errors without flags outside the command line (issue 37, item 6): a library raise, warning
or report note names a setting as an ``Option`` (``sgdask.errors``), which each reader
renders its way (``--k`` on the command line, ``ks`` in Python), never as ``--flag`` text.
The scan reads every module outside ``sgdask/cli/``: the string pieces of ``raise``
statements, ``warnings.warn`` calls and ``notes.append`` / ``notes += [...]``, and of module
constants (a message kept in a name and raised elsewhere); ``sgdask/errors.py`` is the one
renderer that spells flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
#: what still spells a flag, to be turned into ``Option`` pieces (issue 37, item 6): this
#: list only shrinks (path, a piece of the text)
KNOWN: set[tuple[str, str]] = set()
#: where flags are spelled on purpose: the renderer of ``Option`` pieces for the command line
RENDERER = "sgdask/errors.py"


def _texts(node: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _messages(tree: ast.Module) -> list[ast.Constant]:
    """The string pieces of raises, warnings and report notes."""
    found: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            found += _texts(node.exc)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
                ("Error", "Mismatch")):  # an error built to be raised later
            found += _texts(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if (node.func.attr == "warn" and owner == "warnings") or (
                    node.func.attr in ("append", "extend") and owner.endswith("notes")):
                found += [t for arg in node.args for t in _texts(arg)]
        elif isinstance(node, ast.AugAssign) and ast.unparse(node.target).endswith("notes"):
            found += _texts(node.value)
        elif isinstance(node, ast.Return) and node.value is not None and any(
                isinstance(t, ast.Constant) for t in ast.walk(node.value)) and isinstance(
                node.value, ast.Tuple) and len(node.value.elts) == 2 and isinstance(
                node.value.elts[1], ast.List):
            found += _texts(node.value.elts[1])  # (values, notes) of a finalisation step
    for node in tree.body:  # module constants: messages raised by name elsewhere
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found += _texts(node.value)
    return list({id(t): t for t in found}.values())  # a raised error's pieces once


def known(path: str, text: str) -> bool:
    return any(path == p and piece in text for p, piece in KNOWN)


def flag_texts() -> list[tuple[str, int, str]]:
    """(path, line, text) of every message piece outside ``sgdask/cli/`` that spells a
    flag."""
    out = []
    for path in sorted((ROOT / "sgdask").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("sgdask/cli/") or rel == RENDERER:
            continue
        for text in _messages(ast.parse(path.read_text())):
            if FLAG.search(text.value):
                out.append((rel, text.lineno, text.value))
    return out


def test_no_library_message_spells_a_flag():
    offenders = [f"{path}:{line}: {text!r}" for path, line, text in flag_texts()
                 if not known(path, text)]
    assert offenders == [], "\n".join(offenders)


def test_the_known_list_only_names_what_is_still_there():
    found = flag_texts()
    stale = {(path, piece) for path, piece in KNOWN
             if not any(p == path and piece in text for p, _, text in found)}
    assert stale == set(), "fixed: drop from KNOWN"


def test_the_scan_sees_a_flag_in_a_raise_a_warning_and_a_note():
    tree = ast.parse('raise SgdaskError(f"{x}: give --gt-masks")\n'
                     'warnings.warn("see --k")\nnotes.append("--tau: ok")\n'
                     'raise SgdaskError(Option("gt_masks"), ": a store")\n'
                     'def f():\n    x = "--not-a-message"\n'
                     'HINT = ("run it with --out",)\n')
    assert [t.value for t in _messages(tree) if FLAG.search(t.value)] == [
        ": give --gt-masks", "see --k", "--tau: ok", "run it with --out"]
