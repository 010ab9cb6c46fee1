"""The settings record: every field is spelled in the record, its CLI option and the docs,
and nowhere else; every field is validated by the record, with one-line errors."""

from __future__ import annotations

import ast
import re
from dataclasses import fields

import pytest
import typer.main

from sgdask.batch.many import parse_manifest
from sgdask.cli import app
from sgdask.core.settings import Settings
from sgdask.errors import SettingError, SgdaskError
from sgdask.evaluator import Evaluator
from tests.helpers import ROOT

FIELDS = [f.name for f in fields(Settings)]
#: the names that spell a setting besides the fields themselves
ALIASES = {"legacy_metrics", "intervals"}
#: signatures that take several setting-named values and why they are not the settings
NOT_SETTINGS = {
    ("sgdask/core/settings.py", "Settings"): "the record itself",
    ("sgdask/core/findings.py", "Findings"): "the report file's provenance, as read back",
    ("sgdask/core/plan.py", "CISettings"): "the bootstrap's view, Settings.intervals",
    ("sgdask/batch/compare.py", "CompareJob"): "compare's own paired resampling options",
    ("sgdask/batch/rerank.py", "BoardCI"): "the leaderboard's own interval options",
    ("sgdask/metrics/base.py", "Context"): "the metrics' view, EvalSettings.context",
    ("sgdask/evaluator.py", "__init__"): "the documented call Evaluator(protocol, ks, "
    "predicates, classes, stats); the rest is settings= and keyword fields",
    ("sgdask/formats/psg.py", "write_gt_store"): "a GT store's part size and statistics table",
    ("sgdask/service/benchmark.py", "Phase"): "a benchmark file's phase: its protocols and "
    "whether its board shows intervals, as the file spells them",
}
#: layers that compute with single values (a kernel's match_labels is its argument)
#: (a protocol's per-image hit function takes the kernels' parameters)
COMPUTE = ("sgdask/kernels/", "sgdask/metrics/", "sgdask/stats/", "sgdask/core/accum.py",
           "sgdask/protocols/")


def cli_options(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    return {opt for param in click_app.commands[command].params for opt in param.opts}


def docs_rows() -> dict[str, tuple[str, str]]:
    """The settings table of the API reference: field -> (default, CLI option)."""
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]+)` \| `([^`]+)` \|", text, re.M)
    return {name: (default, flag) for name, default, flag in rows}


def test_every_field_has_a_cli_option_of_evaluate():
    options = cli_options("evaluate")
    for f in fields(Settings):
        assert f.metadata["flag"] in options, f.name


def test_the_docs_table_lists_every_field_with_its_default_and_option():
    rows = docs_rows()
    assert list(rows) == FIELDS
    for f in fields(Settings):
        default = f'"{f.default}"' if isinstance(f.default, str) else repr(f.default)
        assert rows[f.name] == (default, f.metadata["flag"]), f.name


def signatures(tree: ast.Module) -> list[tuple[str, set[str]]]:
    """Every function's parameter names and every class's annotated fields."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            found.append((node.name, {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}))
        elif isinstance(node, ast.ClassDef):
            found.append((node.name, {s.target.id for s in node.body
                                      if isinstance(s, ast.AnnAssign)
                                      and isinstance(s.target, ast.Name)}))
    return found


def test_no_signature_spells_the_settings_but_the_record_and_the_cli():
    """A signature taking two or more settings takes the record instead (the CLI's commands
    are its options); ``tau`` is in no signature but the record's, its CLI option, the
    metrics' view and wIMR's weight."""
    names = set(FIELDS) | ALIASES
    spelled, taus = [], []
    for path in sorted((ROOT / "sgdask").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name, params in signatures(ast.parse(path.read_text())):
            if "tau" in params:
                taus.append((rel, name))
            if (len(params & names) >= 2 and not rel.startswith("sgdask/cli/")
                    and not rel.startswith(COMPUTE) and (rel, name) not in NOT_SETTINGS):
                spelled.append((rel, name, sorted(params & names)))
    assert spelled == []
    assert taus == [("sgdask/cli/evaluation.py", "evaluate"),
                    ("sgdask/core/settings.py", "Settings"),
                    ("sgdask/metrics/base.py", "Context"), ("sgdask/metrics/imr.py", "weight")]


@pytest.mark.parametrize(("given", "message"), [
    ({"aggregation": "pooed"}, "--aggregation: unknown mode 'pooed' (did you mean 'pooled'?)"),
    ({"protocols": "singlempo,multimpoo"},
     "--protocol: unknown protocol 'multimpoo' (did you mean 'multimpo'?)"),
    ({"protocols": ","}, "--protocol: no protocol given"),
    ({"ks": "20,fifty"}, "--k:"),
    ({"partition_size": 0}, "--partition-size: must be at least 1"),
    ({"tau": -1.0}, "--tau: -1.0 must be a number >= 0"),
    ({"tau": "0.5"}, "--tau: '0.5' is not float or int"),
    ({"legacy": 1}, "--legacy-metrics: 1 is not bool"),
    ({"resamples": True}, "--resamples: True is not int"),
    ({"ci": 1.5}, "--ci: 1.5 is not a level between 0 and 1"),
    ({"ci_metrics": "mR@50"}, "--ci-metrics: only with --ci LEVEL"),
])
def test_every_field_is_checked_by_the_record(given, message):
    """On the command line the error names the field's option; in Python, the field."""
    with pytest.raises(SettingError) as err:
        Settings(**given).checked()
    assert err.value.render("cli").startswith(message)
    assert "\n" not in err.value.render("cli")
    [name] = given
    assert isinstance(err.value, ValueError) and err.value.setting == name
    assert str(err.value).startswith(f"{name}: ") and "--" not in str(err.value)


def test_defaults_are_valid_and_overrides_are_checked():
    assert Settings().checked() == Settings()
    assert Settings().with_fields(tau=1.0, ks="1,2").k_specs == Settings(ks="1,2").k_specs
    with pytest.raises(TypeError, match=r"unknown setting 'taus' \(did you mean 'tau'\?\)"):
        Settings().with_fields(taus=1.0)
    with pytest.raises(SgdaskError, match=r"^aggregation: unknown mode 'mean'"):
        Settings().with_fields(aggregation="mean")


def test_a_manifest_gives_the_settings_and_the_default_protocols():
    job = parse_manifest({"gt": "gt.store", "tau": 1.0, "protocols": ["sgbench", "multimpo"],
                          "submissions": [{"name": "a", "url": "a.store"},
                                          {"name": "b", "url": "b.store",
                                           "protocols": ["singlempo"]}]}, "many.yaml")
    assert job.options == Settings(protocols="sgbench,multimpo", tau=1.0)
    assert job.submissions == [("a", "a.store", "sgbench,multimpo"),
                               ("b", "b.store", "singlempo")]
    with pytest.raises(SgdaskError, match=r"^aggregation: unknown mode 'imgae'"):
        parse_manifest({"gt": "g", "aggregation": "imgae",
                        "submissions": [{"name": "a", "url": "a"}]}, "many.yaml")


def test_the_evaluator_takes_the_record_or_its_fields():
    by_fields = Evaluator("sgbench", "1,5", 3, 4, aggregation="image", tau=2.0)
    by_record = Evaluator(predicates=3, classes=4, settings=Settings(
        protocols="sgbench", ks="1,5", aggregation="image", tau=2.0))
    assert by_fields.settings() == by_record.settings()
    assert by_fields.settings()["tau"] == 2.0 and by_fields.protocol.name == "sgbench"
    with pytest.raises(SgdaskError, match="Evaluator: one protocol"):
        Evaluator("singlempo,sgbench", predicates=3, classes=4)
