"""What a new user still tripped on (issue 41), each as the user meets it: group labels in
the terminal tables, ``evaluate --out`` over an existing folder or file, hints that name the
fix (each followed here: the command it suggests must work), a reason for every metric left
out, the Python API's arguments, and the messages of the smaller cases."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from rich.console import Console

import sgdask
from sgdask import Evaluator, Report
from sgdask.cli.console import print_delta, print_report
from sgdask.errors import SgdaskError
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate_protocols
from tests.helpers import ROOT, refused, run_main


def hint_of(line: str) -> str:
    """The fix an error line ends with, in parentheses."""
    match = re.search(r"\(([^()]*)\)$", line)
    assert match, line
    return match[1]


@pytest.fixture(scope="module")
def boxes(tiny) -> str:
    """The tiny dataset's box submission as a store (scored against the mask GT store)."""
    store = str(tiny.root / "first-contact-boxes")
    if not Path(store).exists():
        convert_submission(str(tiny.paths.submission_boxes), store, tiny.gt)
    return store


@pytest.fixture(scope="module")
def two_protocols(tiny, client) -> dict[str, Report]:
    return evaluate_protocols(tiny.gt, str(tiny.paths.submission_zip), "singlempo,multimpo",
                              client=client)


def printed(show, *args) -> str:
    console = Console(record=True, width=240)
    show(*args, console=console)
    return console.export_text()


# --------------------------------------------------------------- 3: labels are not markup

def test_group_labels_show_in_the_report_and_delta_tables(two_protocols):
    report = two_protocols["singlempo"]
    grouped = [n for n in report.metrics if n.endswith("[head]")]
    assert grouped, "the tiny GT has predicate groups"
    table = printed(print_report, report)
    for group in ("head", "body", "tail"):
        assert f"mR[{group}]" in table
    delta = printed(print_delta, two_protocols)
    for name in grouped:
        assert name in delta  # mR@20[head], not mR@20
    assert "mR@20[body]" in delta and "mR@20[tail]" in delta


# --------------------------------------------------------------- 4: evaluate --out

def test_evaluate_out_naming_a_file_is_refused_before_any_work(capsys, tiny, tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("notes\n")
    line = refused(capsys, "evaluate", "--gt", tiny.gt, "--pred", str(tiny.paths.submission_zip),
                   "--out", str(target))
    assert "is a file" in line and "--out" in line
    assert target.read_text() == "notes\n"


def test_evaluate_out_refuses_a_folder_with_files_unless_overwrite(capsys, tiny, client,
                                                                  tmp_path):
    out = tmp_path / "report"
    common = ("evaluate", "--gt", tiny.gt, "--pred", str(tiny.paths.submission_zip),
              "--scheduler", client.scheduler.address, "--out", str(out))
    code, _, err = run_main(capsys, *common, "--protocol", "singlempo,multimpo")
    assert code == 0, err
    assert (out / "multimpo" / "metrics.json").is_file()
    line = refused(capsys, *common)
    assert "already exists" in line and "--overwrite" in line
    code, _, err = run_main(capsys, *common, "--overwrite")
    assert code == 0, err
    # replaced whole: no folder of the earlier report is left beside the new one
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "report.html"} <= names
    assert not names & {"singlempo", "multimpo", "protocol_delta.json"}, names
    assert Report.read(str(out)).protocol["name"] == "singlempo"


def test_overwrite_replaces_only_a_report(capsys, tiny, tmp_path):
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("precious\n")
    line = refused(capsys, "evaluate", "--gt", tiny.gt, "--pred",
                   str(tiny.paths.submission_zip), "--out", str(folder), "--overwrite")
    assert "holds no sgdask report" in line
    assert (folder / "chapter1.tex").read_text() == "precious\n"
    assert "only with --out" in refused(capsys, "evaluate", "--gt", tiny.gt, "--pred",
                                        str(tiny.paths.submission_zip), "--overwrite")


# --------------------------------------------------------------- 5: hints, followed

def test_psg_json_given_as_masks_hint_followed(capsys, tiny, tmp_path):
    psg = str(tiny.paths.psg_json)
    line = refused(capsys, "ingest-gt", psg, "--masks", psg, "--out", str(tmp_path / "a"))
    hint = hint_of(line)
    assert "--gt-masks" in hint and "--gt " not in hint + " "
    code, _, err = run_main(capsys, "ingest-gt", psg, "--gt-masks", str(tiny.paths.masks_dir),
                       "--out", str(tmp_path / "b"), "--in-process")
    assert code == 0, err


def test_png_directory_given_to_ingest_gt_hint_followed(capsys, tiny, tmp_path):
    line = refused(capsys, "ingest-gt", str(tiny.paths.masks_dir), "--out", str(tmp_path / "a"))
    hint = hint_of(line)
    command = hint[hint.index("sgdask "):]
    words = shlex.split(command)
    filled = {"psg.json": str(tiny.paths.psg_json), "DIR": str(tiny.paths.masks_dir),
              "STORE": str(tmp_path / "b")}
    argv = [filled.get(word, word) for word in words[1:]]
    code, _, err = run_main(capsys, *argv, "--in-process")
    assert code == 0, err
    assert (tmp_path / "b" / "manifest.json").is_file()


def test_png_directory_given_to_stats_hint_followed(capsys, tiny, tmp_path):
    line = refused(capsys, "stats", str(tiny.paths.masks_dir), "--out", str(tmp_path / "s"))
    assert "give psg.json" in hint_of(line)
    code, _, err = run_main(capsys, "stats", str(tiny.paths.psg_json), "--out",
                       str(tmp_path / "s.parquet"))
    assert code == 0, err


@pytest.mark.parametrize("which", ["zip", "store"])
def test_a_submission_given_with_method_hint_followed(capsys, tiny, client, boxes, which):
    pred = str(tiny.paths.submission_zip) if which == "zip" else boxes
    line = refused(capsys, "evaluate", "--gt", tiny.gt, "--pred", pred, "--method", "psgtr")
    assert hint_of(line).endswith("drop --method")
    code, _, err = run_main(capsys, "evaluate", "--gt", tiny.gt, "--pred", pred,
                       "--scheduler", client.scheduler.address)
    assert code == 0, err


# --------------------------------------------------------------- 6: left-out reasons

def test_boxes_against_a_mask_gt_say_why_panoptic_quality_is_left_out(tiny, boxes, client):
    report = sgdask.evaluate(tiny.gt, boxes, client=client)
    for name in ("PQ", "SQ", "RQ", "PQ_th", "RQ_st"):
        assert "boxes" in report.left_out[name], name
    # every metric of the registry has a value or a reason
    from sgdask.metrics import metric_of, metrics
    from sgdask.protocols import PROTOCOLS

    # a protocol's own inputs (oiv6's AP, the video protocols') are not part of this one
    own = {need for p in PROTOCOLS.values() for need in type(p).not_listed}
    valued = {metric_of(name) for name in report.metrics}
    keyed = {key.strip() for keys in report.left_out for key in keys.split(",")}
    for metric in metrics():
        if metric.grouped or own & set(metric.needs) or "ngz" in metric.needs:
            continue
        assert metric in valued or metric.left_out_key in keyed, metric.key


def test_print_report_says_each_reason_once_in_python_terms(tiny, boxes, client):
    report = sgdask.evaluate(tiny.gt, boxes, client=client)
    lines = [line for line in str(report).splitlines() if line.startswith("left out")]
    assert len(lines) == len(set(report.left_out.values())) == 2
    panoptic = next(line for line in lines if "PQ" in line)
    assert panoptic.startswith("left out PQ, SQ, RQ, PQ_th, SQ_th, RQ_th, PQ_st, SQ_st, RQ_st:")
    assert not any("--" in line for line in lines), lines
    assert any("legacy=True" in line for line in lines)
    console = printed(print_report, report)  # the command line names its flags
    assert "(--legacy-metrics)" in console and "legacy=True" not in console


def test_a_reason_with_options_is_rendered_for_each_audience():
    from sgdask.metrics import reason_for
    from sgdask.metrics.base import need_reason

    reason = need_reason("groups")
    assert "--predicate-groups FILE" in reason and "--stats FILE" in reason
    python = reason_for(reason, "api")
    assert "predicate_groups=FILE" in python and "stats=FILE" in python and "--" not in python
    assert reason_for("anything else", "api") == "anything else"


# --------------------------------------------------------------- 7: the Python API

@pytest.mark.parametrize("name,value", [("ci", 0.95), ("resamples", 10), ("seed", 1),
                                        ("partition_size", 8), ("ci_metrics", "mR")])
def test_evaluator_refuses_settings_it_ignores(name, value):
    with pytest.raises(ValueError, match=rf"^{name}: not used by Evaluator"):
        Evaluator(predicates=3, classes=4, **{name: value})


def test_evaluator_needs_predicates_and_classes_as_a_value_error():
    with pytest.raises(ValueError, match="predicates"):
        Evaluator()
    with pytest.raises(ValueError, match="classes"):
        Evaluator(predicates=["on", "under"])


def test_ks_as_a_list(tiny, client):
    assert [k.label for k in Evaluator(predicates=3, classes=4, ks=[20, 50, "x1"]).ks] == [
        "20", "50", "x1"]
    report = sgdask.evaluate(tiny.gt, str(tiny.paths.submission_zip), client=client,
                             ks=[20, 50])
    assert report.ks == ["20", "50"] and "R@50" in report.metrics


def test_report_read_of_several_protocols_names_the_folders(two_protocols, tmp_path):
    from sgdask.report.writers import write_reports

    write_reports(two_protocols, str(tmp_path / "both"))
    with pytest.raises(SgdaskError) as err:
        Report.read(str(tmp_path / "both"))
    message = str(err.value)
    assert "\n" not in message and "several protocols" in message
    assert str(tmp_path / "both" / "singlempo") in message
    assert Report.read(str(tmp_path / "both" / "multimpo")).protocol["name"] == "multimpo"
    with pytest.raises(SgdaskError, match="no report here"):
        Report.read(str(tmp_path))


# --------------------------------------------------------------- 1: Getting started, as written

def _getting_started():
    """``.ci/getting-started``, the script CI runs the page with, as a module."""
    import importlib.machinery
    import importlib.util

    path = ROOT / ".ci" / "getting-started"
    loader = importlib.machinery.SourceFileLoader("getting_started", str(path))
    spec = importlib.util.spec_from_loader("getting_started", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_ci_follows_the_getting_started_page_in_order():
    script = _getting_started()
    page = (script.REPO / script.PAGE).read_text()
    found = script.blocks(page)
    clone = "\n".join(code for where, _, code in found if where == "clone")
    assert "make demo" in clone and "make test" not in clone
    assert "source .venv/bin/activate" in clone and "sgdask --version" in clone
    empty = [(lang, code) for where, lang, code in found if where == "empty"]
    assert [lang for lang, _ in empty] == ["bash", "bash", "python"]
    assert "sgdask synth data" in empty[0][1] and "sgdask evaluate" in empty[1][1]
    steps = script.script(page, Path("/c"), Path("/e"))
    assert steps.index("make demo") < steps.index("source .venv") < steps.index("synth data")
    assert "cd /e\nsgdask synth" in steps and "python - <<'SGDASK_PAGE_PYTHON'" in steps
    ci = (script.REPO / ".ci" / "run").read_text()
    assert "python3 .ci/getting-started" in ci


@pytest.mark.timeout(120)
def test_the_activated_venv_runs_sgdask_as_the_docs_write_it(tmp_path):
    """The page's activation block, in a checkout whose .venv is this test's environment."""
    import subprocess
    import sys

    script = _getting_started()
    page = (script.REPO / script.PAGE).read_text()
    [activate] = [code for where, _, code in script.blocks(page)
                  if where == "clone" and "activate" in code]
    (tmp_path / ".venv").symlink_to(sys.prefix)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", activate], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sgdask "), done.stdout


# --------------------------------------------------------------- 2: the first run says it compiles

def test_a_first_run_says_it_compiles_the_kernels(capsys, monkeypatch, tmp_path, tiny, client):
    import sgdask.kernels
    from sgdask.cli.console import compile_note

    evaluate = ("evaluate", "--gt", tiny.gt, "--pred", str(tiny.paths.submission_zip),
                "--scheduler", client.scheduler.address)
    code, _, err = run_main(capsys, *evaluate)  # compiles the kernels, if no run did before
    assert code == 0 and compile_note() is None
    fresh = tmp_path / "kernels"  # an install whose kernels were never compiled
    fresh.mkdir()
    monkeypatch.setattr(sgdask.kernels, "__file__", str(fresh / "__init__.py"))
    note = compile_note()
    assert note is not None and note.startswith("compiling sgdask's kernels once")
    code, _, err = run_main(capsys, *evaluate)
    assert code == 0 and err.index("compiling sgdask's kernels once") < err.index("evaluated in")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # cached elsewhere: cannot tell
    assert compile_note() is None


# --------------------------------------------------------------- 9: the demo's last lines

def test_the_demo_ends_with_its_headline_and_says_why_images_are_fewer(two_protocols):
    from sgdask.demo import headline

    evaluated = two_protocols["singlempo"].diagnostics["evaluated_images"]
    lines = headline(two_protocols, evaluated, 1.0, Path("demo-data/report"))
    assert lines[0] == f"demo: {evaluated} images synthesized, {evaluated} evaluated"
    assert lines[1].startswith("singlempo (the fair protocol): R@50 ")
    assert lines[-1] == "finished in 1.0 s; open demo-data/report/report.html"
    fewer = headline(two_protocols, evaluated + 4, 1.0, Path("r"))[0]
    assert f"{evaluated} evaluated (4 have no GT relation" in fewer


# --------------------------------------------------------------- 9: the smaller cases

def test_ctrl_c_says_interrupted_in_one_line(capsys, monkeypatch, tmp_path):
    import sgdask.testing.psg

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what Ctrl-C raises in the main thread

    monkeypatch.setattr(sgdask.testing.psg, "write_dataset", interrupted)
    code, _, err = run_main(capsys, "synth", str(tmp_path / "data"), "--images", "2")
    assert code == 130 and err.strip().splitlines()[-1] == "sgdask: interrupted", err
    assert "Traceback" not in err


def test_plain_messages_for_a_missing_path_a_directory_and_an_empty_file(capsys, tiny,
                                                                         boxes, tmp_path):
    gone = refused(capsys, "evaluate", "--gt", tiny.gt, "--pred", str(tmp_path / "gone.zip"))
    assert gone.endswith("gone.zip: not found (no file or directory at this path)")
    empty = tmp_path / "submission.zip"
    empty.write_bytes(b"")
    for line in (refused(capsys, "evaluate", "--gt", tiny.gt, "--pred", str(empty)),
                 refused(capsys, "convert", str(empty), "--gt", tiny.gt, "--out",
                         str(tmp_path / "s"))):
        assert "an empty file (0 bytes), where" in line and "JSON" not in line.split("where")[0]
    folder = str(tmp_path)
    for args in (("evaluate", "--gt", tiny.gt, "--pred", boxes, "--stats", folder),
                 ("evaluate", "--gt", tiny.gt, "--pred", boxes, "--predicate-groups", folder),
                 ("convert", str(tiny.paths.submission_boxes), "--gt", tiny.gt, "--out",
                  str(tmp_path / "s"), "--from-scores", folder)):
        line = refused(capsys, *args)
        assert f"{folder}: is a directory, not a file" in line or (
            f"{folder}: a directory, where a score file" in line), line
        assert "Error" not in line and "Errno" not in line, line


def test_vocabulary_means_say_why_mzr_can_exceed_mr(tiny, client):
    report = sgdask.evaluate(tiny.gt, str(tiny.paths.submission_zip), "multimpo",
                             client=client)
    [note] = [n for n in report.notes if "predicates of the vocabulary" in n]
    assert note.endswith("mzR@k and mR@inf average the occurring predicates only, so they can "
                         "exceed mR@k")


def test_cli_page_and_help_agree_on_threads_and_processes():
    from sgdask.cli.options import Processes

    help_text = Processes.__metadata__[0].help
    assert "threads for the one-off commands" in help_text
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    bullet = page[page.index("- **Where the work runs.**"):page.index("- **Errors**")]
    bullet = " ".join(bullet.split())
    assert "threads of this process for the one-off commands" in bullet
    assert "worker processes (one thread each) for `evaluate-many`, `rerank`" in bullet
    assert "one worker process per core" not in bullet


def test_a_chart_keeps_room_for_its_long_title_and_labels():
    from sgdask.report.svg import bar_chart

    title = ("Per-predicate mR@50 with bootstrap intervals, predicates by GT frequency "
             "(most frequent left)")
    labels = ["over", "in front of", "hanging from"]
    svg = bar_chart(title, "mR@50 (%)", labels, {"singlempo": [10.0, 20.0, 30.0]},
                    {"singlempo": ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])})
    width, height = (float(v) for v in re.search(
        r'width="([\d.]+)" height="([\d.]+)"', svg).groups())
    centre = float(re.search(r'<text x="([\d.]+)" y="20"', svg)[1])
    half = 7.5 * len(title) / 2  # 12 px text: at most 7.5 px a character
    assert centre - half >= 0 and centre + half <= width
    label_top = 40 + 280 + 6  # the plot's bottom edge, where the rotated labels start
    assert height >= label_top + 7 * max(map(len, labels))


def test_convert_counts_the_images_it_converts(capsys, tiny, tmp_path):
    import json

    code, _, err = run_main(capsys, "convert", str(tiny.paths.submission_zip), "--gt", tiny.gt,
                       "--out", str(tmp_path / "pred"), "--in-process")
    assert code == 0, err
    n = json.loads((tmp_path / "pred" / "manifest.json").read_text())["n_images"]
    assert re.search(rf"converting images .* {n} images \d+:\d\d:\d\d", err), err


def test_an_empty_upload_is_refused_as_empty():
    from sgdask.formats.sniff import unscorable

    assert unscorable(b"", "submission.zip") == (
        "submission.zip: an empty file (0 bytes), not a submission (expected an SGBench ZIP "
        "or JSON)")


def test_evaluate_many_where_every_submission_fails_names_each(capsys, tiny, tmp_path):
    """Every submission failing its checks is each one's line, not an internal error about
    the summary: ``summary.json`` is written, empty."""
    (tmp_path / "a.json").write_text('{"x": 1}')
    (tmp_path / "b.json").write_text("nope")
    manifest = tmp_path / "many.yaml"
    manifest.write_text(f"gt: {tiny.gt}\nout: {tmp_path / 'out'}\nsubmissions:\n"
                        f"  - {{name: a, url: {tmp_path / 'a.json'}}}\n"
                        f"  - {{name: b, url: {tmp_path / 'b.json'}}}\n")
    code, _, err = run_main(capsys, "evaluate-many", str(manifest), "--threads")
    assert code == 2, err
    assert "internal error" not in err and "summary.json" not in err
    assert "b: " in err and "b.json: not valid JSON" in err
    assert "sgdask: error: " in err and "a.json: version: missing" in err
    assert (tmp_path / "out" / "summary.json").read_text() == "[]"
