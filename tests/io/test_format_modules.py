"""Formats that describe themselves: each built-in format's module registers its ``Format``
and the ``Signature``s ``sniff`` knows its files by, in the order the checks always had, and
the readers, the store and the readers' tools import one another without a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import sgdask.formats
from sgdask.formats import BUILT_IN, BUILT_IN_MODULES, FORMATS
from sgdask.formats.registry import PLACES, SIGNATURES, signatures

PACKAGE = Path(sgdask.formats.__file__).resolve().parents[1]
#: what the format registry and the sniffer tried, in order, before formats described
#: themselves (``tests/test_first_contact*.py`` pin what each check says)
FORMAT_ORDER = ["psg-json", "vg150-h5", "oiv6-json", "sgbench", "results", "coco-panoptic",
                "psg-challenge"]  # the PSG challenge's files came after, and come last
CHECK_ORDER = {
    "head": ["vg h5", "parquet", "pickle"],
    "object": ["coco panoptic", "coco json", "oi categories"],
    "keys": ["psg json", "sgbench json", "vg dicts"],
    "list": ["oi annotations", "psg challenge json"],
    "zip": ["sgbench zip", "psg challenge zip", "npz", "mask zip"],
    "dir": ["psg challenge", "npz directory", "png directory"],
}
#: the module each built-in format and kind of file belongs to
OWNERS = {"psg": {"psg-json", "psg json", "png directory", "mask zip"},
          "vg150": {"vg150-h5", "vg h5", "vg dicts"},
          "oiv6": {"oiv6-json", "oi annotations", "oi categories"},
          "sgbench": {"sgbench", "sgbench zip", "sgbench json"},
          "results": {"results", "pickle", "npz directory", "npz"},
          "scores": {"parquet"},
          "coco_panoptic": {"coco-panoptic", "coco panoptic", "coco json"},
          "psg_challenge": {"psg-challenge", "psg challenge", "psg challenge zip",
                            "psg challenge json"},
          "actiongenome": {"action-genome", "action-genome-output"},
          "pvsg": {"pvsg", "pvsg-results"}}


def test_built_in_formats_register_themselves_in_the_old_order():
    assert [name for name in FORMATS if name in BUILT_IN] == FORMAT_ORDER
    assert set(BUILT_IN_MODULES) == set(OWNERS)
    for module, names in OWNERS.items():
        for name in names & set(FORMATS):
            assert FORMATS[name].convert.__module__ == f"sgdask.formats.{module}", name


@pytest.mark.timeout(60)
def test_the_order_holds_whatever_imports_a_format_first():
    """The registry imports the built-in formats when first read; a module imported before
    (a result file's reader, PVSG's) registers early, yet takes its place in the order,
    and so do the claims (PSG challenge's before PVSG's)."""
    code = ("import sgdask.formats.pvsg, sgdask.formats.results\n"
            "from sgdask.formats import FORMATS\n"
            "from sgdask.formats.registry import _CLAIMS\n"
            "print(' '.join(FORMATS))\nprint(' '.join(name for name, _ in _CLAIMS))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    names, claims = run.stdout.splitlines()
    assert [n for n in names.split() if n in BUILT_IN] == FORMAT_ORDER, run.stderr[-2000:]
    assert names.split() == list(FORMATS)
    assert claims.split() == ["psg-challenge", "pvsg-results"]


def test_sniff_tries_each_formats_signatures_in_the_old_order():
    assert {place: [s.kind for s in signatures(place)] for place in PLACES} == CHECK_ORDER
    for module, names in OWNERS.items():
        for kind in names & set(SIGNATURES):
            sig = SIGNATURES[kind]
            declared_in = sig.hint.__module__ if sig.matches is None else sig.matches.__module__
            assert declared_in == f"sgdask.formats.{module}", kind


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports, at any level (``TYPE_CHECKING``
    imports aside: they never run)."""
    tree = ast.parse(path.read_text())
    unchecked = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(block.test)
                 for stmt in block.body for node in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in unchecked:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                      else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in ``graph``, if any (depth-first search)."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    return next((c for node in sorted(graph) if node not in state
                 for c in [visit(node)] if c), None)


def test_formats_store_and_readers_tools_import_without_a_circle():
    """The old circle (ingest -> openimages -> training_stats -> ingest) and any new one."""
    paths = {_module_name(p): p for sub in ("formats", "store", "io")
             for p in (PACKAGE / sub).rglob("*.py")}
    graph = {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
