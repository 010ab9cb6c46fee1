"""The Python API speaks Python (issue 27, item 8): errors are exported ``ValueError``s
naming arguments, a report prints as a table, ``Report.write`` writes what ``evaluate
--out`` writes, and a left-out reason names the protocol used."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sgdask
from sgdask.cli import main
from sgdask.core.settings import Settings
from sgdask.metrics import left_out
from sgdask.protocols import MULTIMPO, SGBPYTORCH
from sgdask.report import EvalSettings


def test_the_errors_are_exported_and_bad_arguments_are_value_errors():
    for name in ("SgdaskError", "SettingError", "InputError", "StoreError",
                 "EvaluatorInputError"):
        assert name in sgdask.__all__ and issubclass(getattr(sgdask, name), Exception)
    assert issubclass(sgdask.SettingError, ValueError)
    assert issubclass(sgdask.SettingError, sgdask.SgdaskError)
    assert issubclass(sgdask.EvaluatorInputError, ValueError)


def test_evaluate_names_its_argument_not_a_flag(stores):
    with pytest.raises(sgdask.SettingError) as err:
        sgdask.evaluate(stores.gt, stores.pred, protocol="singlmpo")
    assert str(err.value).startswith("protocol: unknown protocol 'singlmpo' (did you mean "
                                     "'singlempo'?)")
    with pytest.raises(ValueError, match=r"^ks: '5O' is not a k \(did you mean '50'\?\)"):
        sgdask.evaluate(stores.gt, stores.pred, ks="20,5O")


@pytest.fixture(scope="module")
def report(stores, client) -> sgdask.Report:
    return sgdask.evaluate(stores.gt, stores.pred, protocol="sgbench", client=client, ci=0.9,
                           resamples=50)


def test_a_report_prints_as_a_table_with_intervals(report):
    text = str(report)
    lines = text.splitlines()
    assert lines[0] == report.heading and "Report(" not in text
    header = lines[1].split()
    assert header == ["metric", *report.ks]
    row = next(line for line in lines if line.startswith("mR "))
    assert report.cell("mR@50") in row  # the value and its interval, [lo, hi]
    assert re.search(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", row)
    assert any(line.startswith("intervals: 90% percentile bootstrap") for line in lines)
    html = report._repr_html_()
    assert html.startswith("<div><table>") and f"<td>{report.cell('mR@50')}</td>" in html
    assert "<th>metric</th>" in html and "Report(" not in html


def _undated(path: Path) -> str:
    """A report.md without its minute of writing (two writes can straddle a minute)."""
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "DATE UTC", path.read_text())


def test_report_write_writes_what_the_command_writes(stores, report, tmp_path, capsys):
    by_api = tmp_path / "api"
    report.write(str(by_api))
    by_command = tmp_path / "command"
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", stores.gt, "--pred", stores.pred, "--protocol", "sgbench",
              "--ci", "0.9", "--resamples", "50", "--workers", "1", "--out", str(by_command)])
    assert done.value.code in (0, None)
    table = capsys.readouterr().out  # intervals printed one way: [lo, hi], as report.md
    assert re.search(r"\[\d+\.\d\d, \d+\.\d\d\]", table) and "–" not in table
    files = sorted(p.name for p in Path(by_api).iterdir())
    assert files == sorted(p.name for p in Path(by_command).iterdir())
    assert "report.html" in files and "report.md" in files
    assert _undated(by_api / "report.md") == _undated(by_command / "report.md")


@pytest.mark.parametrize("protocol", [SGBPYTORCH, MULTIMPO], ids=lambda p: p.name)
def test_a_left_out_reason_names_the_protocol_used(protocol):
    """What build_report lists for a report of ``protocol`` without PRank."""
    settings = EvalSettings(protocol, Settings(protocols=protocol.name), True, False)
    reason = left_out(settings.inputs, {}, protocol.name)["PRank"]
    assert f"{protocol.name} matches triplets" in reason
    others = {"multimpo", "sgbpytorch"} - {protocol.name}
    assert not any(f"{name} matches" in reason for name in others)
