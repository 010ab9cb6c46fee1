"""A setting's default is spelled once, in the record (issue 37, item 4): every command line
parameter named for a setting (``k`` for ``ks``, ``protocol`` for ``protocols``,
``legacy_metrics`` for ``legacy``) defaults to ``DEFAULTS.<field>``, never to a literal."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from sgdask.core.settings import DEFAULTS, Settings

CLI = Path(__file__).resolve().parents[2] / "sgdask" / "cli"
#: the command line's parameter names that are not the field's
RENAMED = {"k": "ks", "protocol": "protocols", "legacy_metrics": "legacy"}
FIELDS = {f.name for f in fields(Settings)}
#: parameters named like a setting that are not it, and why
OWN = {("data.py", "synth", "seed"): "the synthetic data's seed",
       ("evaluation.py", "compare", "ci"): "compare's interval level: a comparison always "
       "has one (0.95 by default)"}


def setting_defaults(tree: ast.Module) -> list[tuple[str, str, ast.expr]]:
    """(function, field, default expression) of every setting-named parameter."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            for arg, default in zip(args, node.args.defaults, strict=True):
                name = RENAMED.get(arg.arg, arg.arg)
                if name in FIELDS:
                    found.append((node.name, name, default))
    return found


def literal_defaults() -> list[str]:
    """The setting-named parameters whose default is not ``DEFAULTS.<their field>``."""
    bad = []
    for path in sorted(CLI.glob("*.py")):
        for function, name, default in setting_defaults(ast.parse(path.read_text())):
            own = (path.name, function, name) in OWN
            if not own and ast.unparse(default) != f"DEFAULTS.{name}":
                bad.append(f"{path.name}:{function}:{name} = {ast.unparse(default)}")
    return bad


def test_no_setting_default_is_spelled_in_the_cli():
    assert literal_defaults() == []


def test_the_commands_take_settings_and_the_record_has_a_default_for_each():
    tree = ast.parse((CLI / "evaluation.py").read_text())
    names = {name for _, name, _ in setting_defaults(tree)}
    assert names >= {"ks", "protocols", "aggregation", "tau", "resamples", "seed"}
    assert all(getattr(DEFAULTS, f) == f_default for f, f_default in
               ((f.name, f.default) for f in fields(Settings)))


def test_the_check_sees_a_literal_default():
    tree = ast.parse("def evaluate(k: str = '20,50', tau: float = DEFAULTS.tau,\n"
                     "             out: str = 'x'): ...")
    found = [(n, ast.unparse(d)) for _, n, d in setting_defaults(tree)]
    assert found == [("ks", "'20,50'"), ("tau", "DEFAULTS.tau")]
