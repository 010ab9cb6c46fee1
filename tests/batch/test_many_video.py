"""Video submissions in ``evaluate-many``: an Action Genome model output with its method and
a PVSG results directory, read as they are, score as ``evaluate`` scores them; their cache
key covers their bytes (a changed file is evaluated again); one that fails fails alone."""

from __future__ import annotations

import html as html_lib
import json
import pickle
import re
import shutil
from pathlib import Path

import pytest

from sgdask.batch.many import load_manifest, run_many
from sgdask.errors import InputError
from sgdask.formats.pvsg import ingest_pvsg
from sgdask.formats.results import ResultsMethod
from sgdask.pipeline import evaluate_protocols
from sgdask.testing.pvsg import write_pvsg
from tests.helpers.ag_data import ag_with_gt


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def ag(tmp_path_factory) -> tuple[Path, str]:
    return ag_with_gt(tmp_path_factory.mktemp("ag"), partition_size=16, videos=6, frames=6,
                      seed=3, settings=("sgcls", "sgdet"))


@pytest.fixture(scope="module")
def pvsg(tmp_path_factory):
    raw = write_pvsg(tmp_path_factory.mktemp("pvsg"), n_videos=4, n_frames=8, seed=2)
    gt = str(raw.annotation.parent.parent / "gt.store")
    ingest_pvsg(str(raw.annotation), gt, str(raw.data_dir), partition_size=2)
    return raw, gt


def _manifest(path: Path, gt: str, out: Path, subs: list[dict]) -> str:
    path.write_text(json.dumps({"gt": gt, "out": str(out), "submissions": subs}))
    return str(path)


def _same(many, alone) -> None:
    """The reports of evaluate-many equal evaluate's, number for number and row for row."""
    assert list(many) == list(alone)
    for protocol, report in alone.items():
        got = many[protocol]
        assert got.metrics == report.metrics, protocol
        assert got.per_predicate == report.per_predicate, protocol
        assert got.per_image == report.per_image, protocol


@pytest.mark.timeout(120)
def test_ag_outputs_equal_evaluate_and_write_per_video_rows(ag, client, tmp_path):
    root, gt = ag
    pkl = str(root / "predictions_sgcls.pkl")
    manifest = _manifest(tmp_path / "many.json", gt, tmp_path / "out", [
        {"name": "tempura", "url": pkl, "method": "tempura", "protocols": ["ag"]},
        {"name": "sttran", "url": pkl, "method": "sttran", "protocols": ["ag-semi"]}])
    outcome = run_many(load_manifest(manifest), client=client, log=lambda _: None)
    assert not outcome.failed and len(outcome.evaluated) == 4
    for name, protocols in (("tempura", "ag"), ("sttran", "ag-semi")):
        alone = evaluate_protocols(gt, pkl, protocols, client=client,
                                   method=ResultsMethod(name))
        _same(outcome.reports[name], alone)
    # the two methods read the same file differently: two cache keys, two results
    assert outcome.keys[("tempura", "ag-semi")] != outcome.keys[("sttran", "ag-semi")]
    assert outcome.reports["tempura"]["ag-semi"].metrics != \
        outcome.reports["sttran"]["ag-semi"].metrics
    # per-frame rows, each naming its video, written as evaluate --out writes them
    import pyarrow.parquet as pq

    from sgdask.report.writers import write_reports

    write_reports(alone, str(tmp_path / "alone"))
    for name in ("per_image.parquet", "per_predicate.parquet", "per_image_terms.parquet"):
        # equal values and schema metadata (the pages' layout may follow the tasks')
        written, expected = (pq.read_table(d / name) for d in (tmp_path / "out" / "sttran",
                                                                 tmp_path / "alone"))
        assert written.equals(expected, check_metadata=True), name
    assert json.loads((tmp_path / "out" / "sttran" / "metrics.json").read_text())["metrics"] \
        == json.loads((tmp_path / "alone" / "metrics.json").read_text())["metrics"]
    rows = pq.read_table(tmp_path / "out" / "tempura" / "ag-with" / "per_image.parquet")
    videos = {f.split("/")[0] for f in rows["image_id"].to_pylist()}
    assert set(rows["video_id"].to_pylist()) == videos and len(videos) > 3
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {(r["submission"], r["protocol"]) for r in summary} == \
        {("tempura", "ag-with"), ("tempura", "ag-semi"), ("tempura", "ag-no"),
         ("sttran", "ag-semi")}


@pytest.mark.timeout(120)
def test_a_changed_output_is_evaluated_again(ag, client, tmp_path):
    root, gt = ag
    pkl = tmp_path / "model.pkl"
    pkl.write_bytes((root / "predictions_sgcls.pkl").read_bytes())
    manifest = _manifest(tmp_path / "many.yaml", gt, tmp_path / "out", [
        {"name": "m", "url": str(pkl), "method": "tempura", "protocols": ["ag-with"]}])
    job = load_manifest(manifest)
    first = run_many(job, client=client, log=lambda _: None)
    again = run_many(job, client=client, log=lambda _: None)
    assert first.evaluated == [("m", "ag-with")] and again.cached == [("m", "ag-with")]
    assert again.reports["m"]["ag-with"].metrics == first.reports["m"]["ag-with"].metrics
    # another model's output at the same path: another key, evaluated, other numbers
    pkl.write_bytes((root / "predictions_sgdet.pkl").read_bytes())
    changed = run_many(job, client=client, log=lambda _: None)
    assert changed.evaluated == [("m", "ag-with")] and not changed.cached
    assert changed.keys[("m", "ag-with")] != first.keys[("m", "ag-with")]
    alone = evaluate_protocols(gt, str(pkl), "ag-with", client=client,
                               method=ResultsMethod("tempura"))
    _same(changed.reports["m"], alone)
    assert changed.reports["m"]["ag-with"].metrics != first.reports["m"]["ag-with"].metrics


@pytest.mark.timeout(120)
def test_a_failing_output_fails_alone(ag, client, tmp_path):
    root, gt = ag
    arrays = pickle.loads((root / "predictions_sgcls.pkl").read_bytes())
    arrays.pop(sorted(arrays)[0])  # a GT video without prediction
    short = tmp_path / "short.pkl"
    short.write_bytes(pickle.dumps(arrays, protocol=4))
    manifest = _manifest(tmp_path / "many.json", gt, tmp_path / "out", [
        {"name": "short", "url": str(short), "method": "tempura", "protocols": ["ag-with"]},
        {"name": "absent", "url": str(tmp_path / "nothing.pkl"), "method": "tempura",
         "protocols": ["ag-with"]},
        {"name": "good", "url": str(root / "predictions_sgcls.pkl"), "method": "tempura",
         "protocols": ["ag-with"]}])
    lines: list[str] = []
    outcome = run_many(load_manifest(manifest), client=client, log=lines.append,
                       isolate=True)
    assert set(outcome.failed) == {"short", "absent"}
    assert "no prediction" in str(outcome.failed["short"])
    assert "not found" in str(outcome.failed["absent"])
    assert list(outcome.reports) == ["good"] and outcome.evaluated == [("good", "ag-with")]
    assert (tmp_path / "out" / "good" / "metrics.json").exists()
    assert not (tmp_path / "out" / "short").exists()


@pytest.mark.timeout(120)
def test_pvsg_results_equal_evaluate_and_a_changed_file_misses_the_cache(pvsg, client,
                                                                         tmp_path):
    raw, gt = pvsg
    results = tmp_path / "results"
    shutil.copytree(raw.results, results)
    manifest = _manifest(tmp_path / "many.json", gt, tmp_path / "out", [
        {"name": "vps", "url": str(results), "protocols": ["pvsg", "pvsg-oneweak"]}])
    job = load_manifest(manifest)
    first = run_many(job, client=client, log=lambda _: None)
    assert not first.failed and len(first.evaluated) == 2
    _same(first.reports["vps"], evaluate_protocols(gt, str(results), "pvsg,pvsg-oneweak",
                                                   client=client))
    assert set(first.reports["vps"]["pvsg"].metrics) >= {"R@20", "mR@50", "wR@100", "PR@20"}
    # one video's relations ranked otherwise: its bytes differ, so does the key
    doc_path = next((results / raw.videos[0]).rglob("*.json"))
    doc = json.loads(doc_path.read_text())
    doc["relations"] = doc["relations"][::-1]
    doc_path.write_text(json.dumps(doc))
    second = run_many(job, client=client, log=lambda _: None)
    assert not second.cached and len(second.evaluated) == 2
    assert second.keys[("vps", "pvsg")] != first.keys[("vps", "pvsg")]
    _same(second.reports["vps"], evaluate_protocols(gt, str(results), "pvsg,pvsg-oneweak",
                                                    client=client))


def test_a_misspelt_method_is_one_line_naming_the_entry(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text("gt: gt.store\nsubmissions:\n  - {name: a, url: a.pkl, method: tempra}\n")
    with pytest.raises(InputError) as err:
        load_manifest(str(path))
    text = str(err.value)
    assert "submissions[0].method" in text and "tempura" in text and "\n" not in text


def test_the_schema_takes_the_examples_and_names_every_key():
    from dataclasses import fields

    import yaml

    from sgdask.batch.many import _ENTRY_KEYS, _MANIFEST_KEYS
    from sgdask.core.settings import Settings
    from sgdask.store.schemas import schema_problem, validator

    repo = Path(__file__).resolve().parents[2]
    doc = json.loads((repo / "sgdask" / "schemas" / "evaluate-many.schema.json").read_text())
    assert set(doc["properties"]) == {*_MANIFEST_KEYS, *(f.name for f in fields(Settings))}
    assert set(doc["properties"]["submissions"]["items"]["properties"]) == set(_ENTRY_KEYS)
    for example in ("many.yaml", "many-video.yaml"):
        assert schema_problem("evaluate-many.schema.json", yaml.safe_load(
            (repo / "jobs" / "examples" / example).read_text())) is None, example
    bad = {"gt": "g", "submissions": [{"name": "a", "url": "u", "method": "nope"}]}
    assert "method" in (schema_problem("evaluate-many.schema.json", bad) or "")
    assert validator("evaluate-many.schema.json") is not None


def _board_table(html: str) -> tuple[list[str], list[list[str]]]:
    """The first board's column keys and its rows' raw cell values (``data-value``)."""
    table = html[html.index('<table class="board"'):]
    table = table[:table.index("</table>")]
    columns = re.findall(r'<th data-col="([^"]*)"', table)
    rows = [re.findall(r'<td data-value="([^"]*)"', row)
            for row in re.findall(r"<tr data-order.*?</tr>", table)]
    return [html_lib.unescape(c) for c in columns], rows


@pytest.mark.timeout(180)
def test_a_registry_with_one_ag_output_ranks_on_a_video_board(ag, client, tmp_path):
    from sgdask.batch.registry import Registry
    from sgdask.batch.rerank import rerank
    from sgdask.batch.video import submit_output

    root, gt = ag
    pkl = str(root / "predictions_sgcls.pkl")
    registry = str(tmp_path / "registry")
    entry = submit_output(pkl, registry, gt, "tempura-sgcls", method="tempura",
                          paper="https://example.org/p")
    assert Registry(registry).entries()[0].output_method == "tempura"
    out = tmp_path / "board"
    first = rerank(registry, gt, str(out), client=client, log=lambda _: None)
    assert first.published and len(first.evaluated) == 3  # the three constraint modes
    alone = evaluate_protocols(gt, pkl, "ag", client=client, method=ResultsMethod("tempura"))
    [row] = json.loads((out / "leaderboard.json").read_text())
    assert row["submission_id"] == entry.submission_id and row["rank"] == 1
    expected = {**{m: alone["ag-with"].metrics[m] for m in ("R@10", "R@20", "R@50", "mR@50")},
                **{f"{p} {m}": alone[p].metrics[m] for p in ("ag-semi", "ag-no")
                   for m in ("R@10", "R@20", "R@50", "mR@10", "mR@20", "mR@50")}}
    assert {m: row["metrics"][m] for m in expected} == expected
    low, high = row["intervals"]["mR@50"]
    assert low <= row["metrics"]["mR@50"] <= high
    columns, rows = _board_table((out / "leaderboard.html").read_text())
    assert "ag-no mR@50" in columns and "mNgR@50" not in columns
    [cells] = rows
    for metric, value in expected.items():
        assert cells[columns.index(metric)] == repr(value), metric
    # nothing changed: cached, nothing published
    again = rerank(registry, gt, str(out), client=client, log=lambda _: None)
    assert again.published is None and len(again.cached) == 3


@pytest.mark.timeout(180)
def test_a_registry_with_pvsg_results_ranks_on_a_pvsg_board(pvsg, client, tmp_path):
    from sgdask.batch.rerank import rerank
    from sgdask.batch.video import submit_output

    raw, gt = pvsg
    registry = str(tmp_path / "registry")
    submit_output(str(raw.results), registry, gt, "vps")
    out = tmp_path / "board"
    assert rerank(registry, gt, str(out), client=client, log=lambda _: None).published
    alone = evaluate_protocols(gt, str(raw.results), "pvsg", client=client)["pvsg"]
    columns, [cells] = _board_table((out / "leaderboard.html").read_text())
    for metric in ("R@20", "mR@50", "wR@100", "PR@20"):
        assert cells[columns.index(metric)] == repr(alone.metrics[metric]), metric


def test_an_output_that_does_not_fit_the_gt_is_not_registered(ag, tmp_path):
    from sgdask.batch.video import submit_output

    root, gt = ag
    arrays = pickle.loads((root / "predictions_sgcls.pkl").read_bytes())
    arrays["99999.mp4"] = arrays[sorted(arrays)[0]]
    bad = tmp_path / "extra.pkl"
    bad.write_bytes(pickle.dumps(arrays, protocol=4))
    with pytest.raises(InputError, match="not a GT video"):
        submit_output(str(bad), str(tmp_path / "registry"), gt, "x", method="tempura")
    assert not (tmp_path / "registry").exists()


@pytest.mark.timeout(120)
def test_an_output_failing_in_its_task_fails_alone(ag, client, tmp_path):
    """A video whose arrays are checked only in the task that reads it: the task's other
    submission is scored all the same, as evaluate scores it."""
    root, gt = ag
    arrays = pickle.loads((root / "predictions_sgcls.pkl").read_bytes())
    video = sorted(arrays)[-1]
    arrays[video]["pair_idx"] = arrays[video]["pair_idx"][:, :1]  # (R, 1): not pairs
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps(arrays, protocol=4))
    good = str(root / "predictions_sgdet.pkl")
    manifest = _manifest(tmp_path / "many.json", gt, tmp_path / "out", [
        {"name": "bad", "url": str(bad), "method": "tempura", "protocols": ["ag-with"]},
        {"name": "good", "url": good, "method": "tempura", "protocols": ["ag-with"]}])
    outcome = run_many(load_manifest(manifest), client=client, log=lambda _: None,
                       isolate=True)
    assert list(outcome.failed) == ["bad"] and "pair_idx" in str(outcome.failed["bad"])
    _same(outcome.reports["good"], evaluate_protocols(gt, good, "ag-with", client=client,
                                                      method=ResultsMethod("tempura")))
    with pytest.raises(InputError, match="pair_idx"):
        evaluate_protocols(gt, str(bad), "ag-with", client=client,
                           method=ResultsMethod("tempura"))
