"""Outside ``sgdask/protocols/`` no module names a protocol or reads a protocol's recorded
choices (issue 37, item 1): a protocol is one module or package of ``sgdask.protocols`` and
says what it does through its methods. The scan reads every module's syntax tree: string
constants (docstrings excepted) and identifiers that name a registered protocol, and
attributes, keywords and strings that name one of ``Protocol``'s recorded choices."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import sgdask
from sgdask.protocols import PROTOCOLS, Protocol

PACKAGE = Path(sgdask.__file__).parent
OWN = PACKAGE / "protocols"

# What a protocol declares about itself (not a choice that changes a number): anyone may
# read these.
DECLARED = {"name", "version", "description", "ks", "unit"}
# Choices whose names are also other things' settings (the converter's and the service
# phase's ``ng_limit`` option, the leaderboard's ``matching`` column, the kernels'
# ``ImageRules.normalization`` / ``.matching``): checked only when read from a protocol.
SHARED_NAMES = {"normalization", "matching", "ng_limit"}
_PROTOCOL_RECEIVER = re.compile(r"(^|\.)(p|proto|protocol|\w+_protocol)$|protocols\[")

# Where a protocol's name means something else, each justified:
ALLOWED = {
    # "singlempo" is also the name SPEC 5.1 gives the mask merge (a normalization mode the
    # kernels implement and name; the notes and lint words quote it as "singlempo merge",
    # which tests/test_pq_differential.py asserts)
    ("kernels/lists.py", "singlempo"), ("kernels/normalize.py", "singlempo"),
    ("kernels/image.py", "singlempo"), ("metrics/panoptic.py", "singlempo"),
    ("core/lint.py", "singlempo"),
    # the Open Images V6 annotation format's name (``oiv6-json``) for ``sgdask ingest``
    ("cli/data.py", "oiv6"),
    # the demo's scripted tour runs a third protocol beside the two board protocols
    # (which it reads from the registry)
    ("demo.py", "sgbench"),
    # the registry converts submissions with the SGBench format's converter: the import
    # path ``sgdask.formats.sgbench`` names the file format, not the protocol
    ("batch/registry.py", "sgbench"),
    # the service's job processes are forked with the SGBench format's validators compiled
    ("service/preload.py", "sgbench"),
    # PVSG is the dataset before it is the protocol: its records and its generator are
    # named after the dataset (as its readers in io/ and formats/ are)
    ("types_pvsg.py", "pvsg"), ("testing/pvsg.py", "pvsg"),
    # ``ingest-gt``'s PVSG options name the dataset's files (pvsg.json and its frame masks)
    ("cli/data.py", "pvsg"),
    # ``submit --registry`` knows a PVSG results directory (the dataset's file format,
    # registered as it is) by its format's name
    ("cli/hosting.py", "pvsg"),
}
# File formats named after the tools they come from: the SGBench submission format
# (``sgbench`` ZIP / JSON, read by ``sgdask.io.sgbench``), the Open Images V6
# annotations (``oiv6-json``) and PVSG's files (``pvsg.json``, its results), in the
# readers' packages.
FORMAT_PACKAGES, FORMAT_NAMES = ("io/", "formats/"), {"sgbench", "oiv6", "pvsg"}


def _allowed(rel: str, name: str) -> bool:
    return (rel, name) in ALLOWED or (rel.startswith(FORMAT_PACKAGES) and name in FORMAT_NAMES)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def _identifier(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.alias):
        return node.asname or node.name
    if isinstance(node, ast.ImportFrom):
        return node.module
    return None


def _names_in(tree: ast.AST, names: set[str]) -> list[tuple[int, str, str]]:
    """(line, protocol name, what) of every non-docstring string constant holding a
    protocol name as a word and every identifier with one as a ``_``/``.`` part."""
    docs, found = _docstrings(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            found += [(node.lineno, n, repr(node.value[:50])) for n in names
                      if re.search(rf"(?<![\w-]){re.escape(n)}(?!\w)", node.value)]
        ident = _identifier(node)
        if ident:
            parts = set(re.split(r"[_.]", ident.lower()))
            found += [(getattr(node, "lineno", 0), n, ident) for n in names if n in parts]
    return found


def _choices_in(tree: ast.AST, choices: set[str]) -> list[tuple[int, str]]:
    """(line, code) of every read of a recorded choice: ``x.choice`` (for a shared name:
    only from a protocol), a ``choice=`` keyword or a ``"choice"`` string."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in choices:
            shared = node.attr in SHARED_NAMES
            if not shared or _PROTOCOL_RECEIVER.search(ast.unparse(node.value)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.keyword) and node.arg in choices - SHARED_NAMES:
            found.append((node.value.lineno, f"{node.arg}="))
        elif isinstance(node, ast.Constant) and node.value in choices - SHARED_NAMES:
            found.append((node.lineno, repr(node.value)))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if OWN not in p.parents)


def test_no_module_outside_the_protocols_names_a_protocol():
    names = set(PROTOCOLS)
    assert {"singlempo", "multimpo", "sgbench", "sgbench2", "sgbpytorch", "oiv6"} <= names
    offenders = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        for line, name, what in _names_in(ast.parse(path.read_text()), names):
            if not _allowed(rel, name):
                offenders.append(f"sgdask/{rel}:{line}: {name} ({what})")
    assert not offenders, "protocol names outside sgdask/protocols/:\n" + "\n".join(offenders)


def test_no_module_outside_the_protocols_reads_a_protocol_choice():
    choices = {f.name for f in fields(Protocol)} - DECLARED
    assert {"open_images", "box_iou_inclusive", "ng_limit", "mean_over_vocabulary"} <= choices
    offenders = [f"sgdask/{path.relative_to(PACKAGE).as_posix()}:{line}: {code}"
                 for path in _modules()
                 for line, code in _choices_in(ast.parse(path.read_text()), choices)]
    assert not offenders, "protocol choices read outside sgdask/protocols/:\n" + \
        "\n".join(offenders)


def test_the_scan_finds_what_it_looks_for():
    """The scan is not blind: a module that names a protocol and reads its choices is
    caught."""
    tree = ast.parse('"""Docstring: oiv6 is fine here."""\n'
                     'from sgdask.protocols import SGBPYTORCH\n'
                     'def f(protocol, rows):\n'
                     '    if protocol.open_images and protocol.matching == "triplet":\n'
                     '        return rows.matching, "oiv6", getattr(protocol, "ng_zero_shot")\n')
    names = sorted((n, what) for _, n, what in _names_in(tree, {"oiv6", "sgbpytorch"}))
    assert names == [("oiv6", "'oiv6'"), ("sgbpytorch", "SGBPYTORCH")]
    codes = sorted(code for _, code in _choices_in(tree, {"open_images", "matching",
                                                           "ng_zero_shot"}))
    assert codes == ["'ng_zero_shot'", "protocol.matching", "protocol.open_images"]
