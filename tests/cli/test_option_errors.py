"""Every option is checked before any work: a typo is one line naming the option, with the
nearest name, exit code 2, and nothing ingested, started or written (issue 27, item 1)."""

from __future__ import annotations

import json

import pytest

from sgdask.batch.registry import Registry
from sgdask.cli import main
from sgdask.cli.process import EXIT_ERROR
from sgdask.errors import SettingError
from sgdask.evaluator import Evaluator
from sgdask.service.access import Refusal, authorize
from sgdask.service.inbox import sidecar_fields


def run(argv: list[str], capsys) -> str:
    """The command's one error line (exit code 2, nothing on stdout)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    out, err = capsys.readouterr()
    assert done.value.code == EXIT_ERROR, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


EVALUATE_MISTAKES = [
    (["--protocol", "singlemp"], "--protocol: unknown protocol 'singlemp' (did you mean "
     "'singlempo'?)"),
    (["--k", "20,5O"], "--k: '5O' is not a k (did you mean '50'?)"),
    (["--aggregation", "pooledd"], "--aggregation: unknown mode 'pooledd' (did you mean "
     "'pooled'?)"),
    (["--ci", "0.95", "--ci-metrics", "mR@5O"], "--ci-metrics: 'mR@5O': '5O' is not a k "
     "(did you mean 'mR@50'?)"),
    (["--ci", "0.95", "--ci-metrics", "mRR"], "--ci-metrics: 'mRR' is not a metric name "
     "(did you mean 'mR'?)"),
    (["--ci", "0.95", "--ci-metrics", "R@200"], "--ci-metrics: 'R@200': '200' is not a k of "
     "the ks evaluated (20, 50, 100, x1, x10)"),
    (["--ci", "1.5"], "--ci: 1.5 is not a level between 0 and 1"),
    (["--method", "psgtrr"], "--method: 'psgtrr' is not a method (did you mean 'psgtr'?)"),
    (["--limit", "max_entriez=3"], "--limit: unknown limit 'max_entriez' (did you mean "
     "'max_entries'?)"),
    (["--predicate-groups", "no-groups.json"], "no-groups.json: no such file"),
    (["--stats", "no-stats.parquet"], "no-stats.parquet: no training statistics here"),
]


@pytest.mark.parametrize(("extra", "message"), EVALUATE_MISTAKES,
                         ids=[" ".join(e) for e, _ in EVALUATE_MISTAKES])
def test_evaluate_checks_every_option_before_the_gt_is_ingested(dataset, tmp_path, capsys,
                                                                 extra, message):
    cache, out = tmp_path / "cache", tmp_path / "out"
    line = run(["evaluate", "--gt", str(dataset.psg_json), "--gt-masks",
                str(dataset.masks_dir), "--pred", str(dataset.submission_zip), "--cache-dir",
                str(cache), "--out", str(out), *extra], capsys)
    assert line.startswith(f"sgdask: error: {message}"), line
    assert not cache.exists() and not out.exists()  # no GT store cached, nothing written


@pytest.mark.parametrize(("extra", "message"), [
    (["--metrics", "mRR"], "--metrics: 'mRR' is not a metric name (did you mean 'mR'?)"),
    (["--metrics", "mR@5O"], "--metrics: 'mR@5O': '5O' is not a k"),
    (["--protocol", "multimp"], "--protocol: unknown protocol 'multimp' (did you mean "
     "'multimpo'?)"),
    (["--aggregation", "imag"], "--aggregation: unknown mode 'imag' (did you mean 'image'?)"),
])
def test_compare_checks_every_option_before_the_gt_is_ingested(dataset, tmp_path, capsys,
                                                                extra, message):
    cache = tmp_path / "cache"
    line = run(["compare", "--gt", str(dataset.psg_json), str(dataset.submission_zip),
                str(dataset.submission_boxes), "--cache-dir", str(cache), *extra], capsys)
    assert line.startswith(f"sgdask: error: {message}"), line
    assert not cache.exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "hilp", "--gt", "gt.store"], "--method: 'hilp' is not a method (did you mean "
     "'hilo'?)"),
    (["--from-scores", "s.parquet", "--rank-by", "triplett"], "--rank-by: 'triplett' is not "
     "a ranking (did you mean 'triplet'?)"),
])
def test_convert_checks_its_choices_before_reading(dataset, tmp_path, capsys, extra, message):
    out = tmp_path / "store"
    line = run(["convert", str(dataset.submission_zip), "--out", str(out), *extra], capsys)
    assert line.startswith(f"sgdask: error: {message}"), line
    assert not out.exists()


@pytest.mark.parametrize(("body", "message"), [
    ("agregation: pooled\nsubmissions:\n  - {name: a, url: A}\n",
     "unknown key 'agregation' (did you mean 'aggregation'?)"),
    ("submissions:\n  - {name: a, url: A}\n  - {name: b, url: B, protocol: [sgbench]}\n",
     "submissions[1]: unknown key 'protocol' (did you mean 'protocols'?)"),
    ("submissions:\n  - {name: a, url: A}\n  - {name: b, url: B, protocols: [sgbnch]}\n",
     "submissions[1].protocols: unknown protocol 'sgbnch' (did you mean 'sgbench'?)"),
])
def test_a_manifest_is_checked_whole_before_any_model_is_scored(stores, tmp_path, capsys,
                                                                 body, message):
    manifest, out = tmp_path / "many.yaml", tmp_path / "out"
    manifest.write_text(f"gt: {stores.gt}\nout: {out}\n{body}")
    line = run(["evaluate-many", str(manifest)], capsys)
    assert line == f"sgdask: error: {manifest}: {message}" or line.startswith(
        f"sgdask: error: {manifest}: {message} (expected one of"), line
    assert not out.exists()


def test_a_role_is_one_of_the_roles(tmp_path, capsys):
    tokens = tmp_path / "tokens.json"
    line = run(["tokens", "add", str(tokens), "--team", "a", "--role", "maintaner"], capsys)
    assert line.startswith("sgdask: error: --role 'maintaner': unknown role (did you mean "
                           "'maintainer'?)"), line
    assert not tokens.exists()


def test_the_api_names_arguments_and_the_nearest_name():
    with pytest.raises(SettingError) as err:
        Evaluator(protocol="singlmpo")
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith("protocol: unknown protocol 'singlmpo' (did you mean "
                                     "'singlempo'?)")
    assert "--" not in str(err.value)


def test_the_service_suggests_the_board_before_the_upload_streams():
    with pytest.raises(Refusal) as err:
        authorize(None, False, "publc", True)
    assert err.value.status == 400
    assert str(err.value).startswith("board: 'publc' is not a board (did you mean 'public'?)")


def test_ingest_gt_checks_the_split_before_reading(tmp_path, capsys):
    out = tmp_path / "vg.store"
    line = run(["ingest-gt", str(tmp_path / "VG-SGG-with-attri.h5"), "--dicts",
                str(tmp_path / "dicts.json"), "--image-data", str(tmp_path / "image_data.json"),
                "--split", "tset", "--out", str(out)], capsys)
    assert line.startswith("sgdask: error: --split: 'tset' is not a split (did you mean "
                           "'test'?)"), line
    assert not out.exists()


def test_an_inbox_sidecar_with_a_misspelt_field_is_refused_with_the_nearest(tmp_path):
    sidecar = tmp_path / "m.meta.json"
    sidecar.write_text(json.dumps({"name": "m", "papr": "https://example.org/paper"}))
    fields, problem = sidecar_fields(Registry(str(tmp_path / "registry")), str(sidecar),
                                     sidecar.stat().st_size)
    assert fields == {}
    assert problem is not None and problem.startswith(
        "unknown field 'papr' (did you mean 'paper'?)")


def test_a_group_name_is_checked_once_the_groups_are_known(stores, client, capsys):
    """A predicate group's name depends on the GT: the one option checked after scoring."""
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", stores.gt, "--pred", stores.pred, "--ci", "0.9",
              "--resamples", "10", "--ci-metrics", "mR[hed]", "--scheduler",
              client.scheduler.address])
    assert done.value.code == EXIT_ERROR
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert line.startswith("sgdask: error: --ci-metrics: 'mR[hed]' is not a metric of this "
                           "evaluation (did you mean 'mR[head]'?)"), line


CLICK_MISTAKES = [
    (["evaluate", "--protocl", "sgbench"], "No such option: --protocl (Possible options: "),
    (["evaluate", "--gt", "g", "--pred", "p", "--ci", "abc"], "Invalid value for '--ci'"),
    (["evaluate", "--pred", "p"], "Missing option '--gt'"),
    (["evaluat"], "No such command 'evaluat'"),
]


@pytest.mark.parametrize(("argv", "message"), CLICK_MISTAKES,
                         ids=[" ".join(a) for a, _ in CLICK_MISTAKES])
def test_a_usage_error_is_one_line_with_the_help_to_turn_to(argv, message, capsys):
    """What the command line parser refuses (an unknown option or command, a value of the
    wrong type, a missing option) is sgdask's one line too, not a usage box."""
    line = run(argv, capsys)
    assert line.startswith(f"sgdask: error: {message}"), line
    assert line.endswith("--help')"), line
    if "--protocl" in argv:  # click's near names
        assert "--protocol" in line


def test_no_command_still_shows_the_help(capsys):
    with pytest.raises(SystemExit) as done:
        main([])
    out, err = capsys.readouterr()
    assert done.value.code == EXIT_ERROR
    assert "Usage: sgdask [OPTIONS] COMMAND" in out + err and "evaluate" in out + err
