"""The import graph of the package (issue 37, item 3): no import circle runs through the
core (``sgdask.core``), the errors (``sgdask.errors``) or the settings record. Every import
counts, at module level and inside functions (a function-level import that closes a circle
is a circle all the same); ``if TYPE_CHECKING:`` blocks do not, they never run."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sgdask"
#: modules no circle may run through (a package name covers its modules)
GUARDED = ("sgdask.core", "sgdask.errors")


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load (``from a import b``: ``a.b``, or the
    name ``b`` of the module ``a``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _loaded(name: str, modules: dict[str, Path]) -> list[str]:
    """The package's modules importing ``name`` runs: the longest module its dotted name
    starts with, and the packages above it (not ``sgdask`` itself: its imports are lazy)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    out = []
    while name.count("."):
        out.append(name)
        name = name.rpartition(".")[0]
    return out


def _statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, at any depth, outside ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            found += [s for node in child.orelse for s in _statements(node)]
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        found += _statements(child)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (directly, at any depth of its code)."""
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = graph.setdefault(module, set())
        for node in _statements(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, module, path.name == "__init__.py"):
                if name == "sgdask" or name.startswith("sgdask."):
                    targets.update(m for m in _loaded(name, modules) if m != module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def guarded(module: str) -> bool:
    return any(module == g or module.startswith(g + ".") for g in GUARDED)


def test_no_import_circle_runs_through_the_core_or_the_errors():
    offending = [c for c in circles(import_graph()) if any(guarded(m) for m in c)]
    assert offending == [], offending


def test_the_errors_import_nothing_of_the_package():
    assert import_graph()["sgdask.errors"] == set()


def test_the_core_imports_no_report_and_no_dask_layer():
    graph = import_graph()
    for module, targets in graph.items():
        if guarded(module):
            bad = {t for t in targets if t.split(".")[1] in (
                "report", "cli", "io", "pipeline", "batch", "service", "cluster")}
            assert bad == set(), (module, bad)


def test_the_check_sees_a_circle_through_a_function_level_import():
    """The graph counts imports inside functions and skips TYPE_CHECKING blocks, and the
    circle finder reports a circle of two and of three modules."""
    tree = ast.parse("import sgdask.errors\nif TYPE_CHECKING:\n    import sgdask.core.plan\n"
                     "def f():\n    from sgdask.core import settings\n")
    names = [n for s in _statements(tree) for n in _imported(s, "sgdask.x", False)]
    assert names == ["sgdask.errors", "sgdask.core.settings", "sgdask.core"]
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": set()}
    assert sorted(circles(graph)) == [["a", "b"], ["c", "d", "e"]]
