"""Video phases of the challenge service (issue 38): `sgdask serve --benchmark` with an
Action Genome phase (model outputs read with the phase's method) and a PVSG phase (results
directories as ZIPs), as a real process on 127.0.0.1 with its workers on the session's
cluster. An upload is ranked with the numbers `sgdask evaluate` gives on the same file; a
bad one is refused or rejected in one line naming the upload, no host path."""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from sgdask.batch.video import column_value, video_columns
from sgdask.errors import InputError
from sgdask.formats.pvsg import ingest_pvsg
from sgdask.formats.results import ResultsMethod
from sgdask.pipeline import evaluate_protocols
from sgdask.service.benchmark import check_gts, load_benchmark
from sgdask.service.tokens import add_token
from sgdask.testing.pvsg import write_pvsg
from tests.helpers.ag_data import ag_with_gt
from tests.helpers.servicekit import Proc, auth, upload, wait_final

AG_PROTOCOLS = ("ag-with", "ag-semi", "ag-no")


@dataclass
class Videos:
    ag_root: Path
    ag_gt: str
    pvsg_results: Path
    pvsg_videos: tuple[str, ...]
    pvsg_gt: str


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Videos:
    """A few generated Action Genome videos and PVSG videos, each ingested into its GT
    store."""
    root, ag_gt = ag_with_gt(tmp_path_factory.mktemp("ag"), videos=4, frames=5, seed=7,
                             settings=("sgcls",))
    raw = write_pvsg(tmp_path_factory.mktemp("pvsg"), n_videos=3, n_frames=6, seed=4)
    pvsg_gt = str(raw.annotation.parent.parent / "gt.store")
    ingest_pvsg(str(raw.annotation), pvsg_gt, str(raw.data_dir), partition_size=2)
    return Videos(root, ag_gt, raw.results, raw.videos, pvsg_gt)


@dataclass
class Served:
    base: str
    root: Path
    token: str


@pytest.fixture(scope="module")
def served(videos, client, tmp_path_factory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("served-video")
    benchmark = root / "challenge.yaml"
    benchmark.write_text(f"""title: video challenge
phases:
  - {{name: ag, gt: {videos.ag_gt}, upload: action-genome-output, method: tempura,
      protocols: [ag]}}
  - {{name: pvsg, gt: {videos.pvsg_gt}, upload: pvsg-results, headline: R@20}}
""")
    tokens = root / "tokens.json"
    token = add_token(tokens, "team-v", "participant")
    proc = Proc(["serve", "--registry", str(root / "registry"), "--out", str(root / "board"),
                 "--benchmark", str(benchmark), "--tokens", str(tokens), "--port", "0",
                 "--scheduler", client.scheduler.address, "--poll", "0.2"],
                root / "serve.log")
    try:
        yield Served(proc.url(), root, token)
    finally:
        proc.stop()
        print(proc.text()[-3000:])


def _board(served: Served, phase: str) -> list[dict]:
    return httpx.get(f"{served.base}/api/leaderboard?phase={phase}", timeout=30).json()


def _expected(reports: dict, protocols: tuple[str, ...]) -> dict[str, float]:
    """The board columns of ``protocols`` from `evaluate`'s reports."""
    return {c: column_value(reports, protocols[0], c) for c in video_columns(protocols)}


def _npz_zip(pkl: Path, path: Path) -> Path:
    """The pickle's videos as a ZIP of a folder of VIDEO.npz (the other output layout)."""
    arrays = pickle.loads(pkl.read_bytes())
    folder = path.parent / "npz"
    folder.mkdir()
    with zipfile.ZipFile(path, "w") as z:
        for video, fields in arrays.items():
            np.savez(folder / f"{video}.npz", **fields)
            z.write(folder / f"{video}.npz", f"model/{video}.npz")
    return path


def _clean(line: str, served: Served) -> None:
    """One line, no host path, no traceback."""
    assert "\n" not in line and str(served.root) not in line and "/tmp" not in line
    assert "Traceback" not in line and "stores/" not in line


@pytest.mark.timeout(300)
def test_an_ag_output_is_ranked_with_evaluates_numbers(served, videos, client, tmp_path):
    pkl = videos.ag_root / "predictions_sgcls.pkl"
    sent = upload(served.base, served.token, pkl, "tempura model", phase="ag")
    assert sent.status_code == 202, sent.text
    sid = sent.json()["id"]
    zipped = upload(served.base, served.token, _npz_zip(pkl, tmp_path / "npz.zip"),
                    "tempura npz", phase="ag")
    assert zipped.status_code == 202, zipped.text
    doc = wait_final(served.base, served.token, sid, 240)
    assert doc["status"] == "ranked", doc
    alone = evaluate_protocols(videos.ag_gt, str(pkl), "ag", client=client,
                               method=ResultsMethod("tempura"))
    expected = _expected(alone, AG_PROTOCOLS)
    assert {"R@20", "mR@50", "ag-semi R@20", "ag-no mR@50"} <= set(expected)
    assert doc["metrics"] == expected
    assert wait_final(served.base, served.token, zipped.json()["id"], 240)["status"] \
        == "ranked"
    rows = _board(served, "ag")
    assert sorted(r["name"] for r in rows) == ["tempura model", "tempura npz"]
    for row in rows:  # the same arrays as a pickle and as .npz files: the same numbers
        assert row["metrics"] == expected
    page = httpx.get(f"{served.base}/submissions/{sid}", headers=auth(served.token),
                     timeout=30).text
    assert "<h2>Metrics (ag-with)</h2>" in page and "ag-no mR@50" in page
    board = httpx.get(f"{served.base}/", timeout=30).text
    assert "ag-semi R@20" in board


@pytest.mark.timeout(300)
def test_a_pvsg_results_zip_is_ranked_with_evaluates_numbers(served, videos, client,
                                                             tmp_path):
    bundle = tmp_path / "results.zip"
    with zipfile.ZipFile(bundle, "w") as z:
        for path in sorted(videos.pvsg_results.rglob("*")):
            if path.is_file():
                z.write(path, "results/" + path.relative_to(videos.pvsg_results).as_posix())
    sent = upload(served.base, served.token, bundle, "vps model", phase="pvsg")
    assert sent.status_code == 202, sent.text
    doc = wait_final(served.base, served.token, sent.json()["id"], 240)
    assert doc["status"] == "ranked", doc
    alone = evaluate_protocols(videos.pvsg_gt, str(videos.pvsg_results), "pvsg",
                               client=client)
    expected = _expected(alone, ("pvsg",))
    assert {"R@20", "mR@50", "wR@100", "PR@20"} <= set(expected)
    assert doc["metrics"] == expected
    [row] = _board(served, "pvsg")
    assert row["rank"] == 1 and row["metrics"] == expected
    page = httpx.get(f"{served.base}/submissions/{sent.json()['id']}",
                     headers=auth(served.token), timeout=30).text
    assert "<h2>Metrics (pvsg)</h2>" in page and "wR@100" in page


@pytest.mark.timeout(300)
def test_bad_video_uploads_are_one_line_naming_the_upload(served, videos, tmp_path):
    base, token = served.base, served.token
    # not an output at all: refused from its first bytes, before it is queued
    text = tmp_path / "notes.json"
    text.write_text('{"a": 1}')
    refused = upload(base, token, text, "json", phase="ag")
    assert refused.status_code == 415
    assert refused.json()["detail"].startswith(
        "notes.json: not an Action Genome model output")
    pkl = videos.ag_root / "predictions_sgcls.pkl"
    as_pvsg = upload(base, token, pkl, "pickle", phase="pvsg")
    assert as_pvsg.status_code == 415
    assert as_pvsg.json()["detail"].startswith(
        "predictions_sgcls.pkl: not a PVSG results directory as a ZIP")
    # an output without one GT video: rejected by the worker, naming the upload and video
    arrays = pickle.loads(pkl.read_bytes())
    gone = sorted(arrays)[0]
    del arrays[gone]
    short = tmp_path / "short.pkl"
    short.write_bytes(pickle.dumps(arrays, protocol=4))
    # a ZIP holding no results, and one lacking a video's masks
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("readme.txt", "nothing")
    part = tmp_path / "part.zip"
    lost = videos.pvsg_videos[-1]
    with zipfile.ZipFile(part, "w") as z:
        for path in sorted(videos.pvsg_results.rglob("*")):
            relative = path.relative_to(videos.pvsg_results).as_posix()
            if path.is_file() and not relative.startswith(lost):
                z.write(path, relative)
    sent = {name: upload(base, token, path, name, phase=phase).json()["id"]
            for name, path, phase in (("short", short, "ag"), ("empty", empty, "pvsg"),
                                      ("part", part, "pvsg"))}
    errors = {}
    for name, sid in sent.items():
        final = wait_final(base, token, sid, 240)
        assert final["status"] == "rejected", final
        [errors[name]] = final["errors"]
        _clean(errors[name], served)
    assert errors["short"].startswith(f"error: short.pkl: video {gone}: no prediction")
    assert errors["empty"] == (
        "error: empty.zip: holds no quantitive/masks.txt file (expected a PVSG results "
        "directory as a ZIP (VIDEO/quantitive/masks.txt and VIDEO/relations.json per "
        "video))")
    assert errors["part"].startswith(
        f"error: part.zip/{lost}/quantitive/masks.txt: video {lost}: missing")
    assert [r["name"] for r in _board(served, "pvsg")] in ([], ["vps model"])


@pytest.mark.parametrize(("phase", "fragment"), [
    ("{name: a, gt: g, protocols: [pvsg]}",
     "phases[0].protocols: 'pvsg' is a video protocol, and this phase takes submission "
     "uploads"),
    ("{name: a, gt: g, upload: action-genome-output}",
     "phases[0].method: action-genome-output uploads need the method that reads them "
     "(expected one of sttran, tempura)"),
    ("{name: a, gt: g, upload: pvsg-results, method: sttran}",
     "phases[0].method: pvsg-results uploads are read without a method"),
    ("{name: a, gt: g, upload: pvsg-results, protocols: [ag-semi]}",
     "phases[0].protocols: 'ag-semi' does not score PVSG outputs"),
    ("{name: a, gt: g, upload: action-genome-output, method: sttran, protocols: [sgbench]}",
     "phases[0].protocols: 'sgbench' does not score Action Genome outputs"),
    ("{name: a, gt: g, upload: pvsg-results, headline: mNgR@50}",
     "phases[0].headline: 'mNgR@50' is not a board column"),
    ("{name: a, gt: g, protocols: [singlempo, multimpo, sgbench]}",
     "phases[0].protocols: 3 image protocols"),
])
def test_a_bad_video_phase_is_one_line_naming_its_field(tmp_path, phase, fragment):
    path = tmp_path / "bench.yaml"
    path.write_text(f"phases:\n  - {phase}\n")
    with pytest.raises(InputError) as err:
        load_benchmark(str(path), "registry", "board")
    line = err.value.render("cli")
    assert "\n" not in line and line.startswith(str(path)) and fragment in line, line


def test_a_video_phase_takes_its_datasets_protocols_by_default(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text("phases:\n  - {name: a, gt: g, upload: action-genome-output, "
                    "method: sttran}\n  - {name: b, gt: g, upload: pvsg-results, "
                    "protocols: [pvsg, pvsg-oneweak], board: {columns: [R@20, "
                    "pvsg-oneweak wR@20]}}\n")
    a, b = load_benchmark(str(path), "registry", "board").phases
    assert (a.protocols, a.method, a.headline) == (AG_PROTOCOLS, "sttran", "mR@50")
    assert (b.protocols, b.method, b.columns) == (("pvsg", "pvsg-oneweak"), None,
                                                  ("R@20", "pvsg-oneweak wR@20"))


def test_a_phase_whose_gt_does_not_fit_its_uploads_is_refused(videos, tiny, tmp_path):
    path = tmp_path / "bench.yaml"
    for phase, fragment in (
            (f"{{name: a, gt: {videos.ag_gt}}}",
             "phases[0].upload: the GT store holds Action Genome ground truth, scored only "
             "on its model outputs, not on submission uploads (expected upload: "
             "action-genome-output)"),
            (f"{{name: a, gt: {videos.pvsg_gt}, upload: action-genome-output, "
             "method: tempura}",
             "phases[0].gt: action-genome-output uploads are scored against Action Genome "
             "ground truth; this GT store holds pvsg ground truth"),
            (f"{{name: a, gt: {tiny.gt}, upload: pvsg-results}}",
             "phases[0].gt: pvsg-results uploads are scored against PVSG ground truth; "
             "this GT store holds image ground truth")):
        path.write_text(f"phases:\n  - {phase}\n")
        with pytest.raises(InputError) as err:
            check_gts(load_benchmark(str(path), "r", "o"), None)
        line = err.value.render("cli")
        assert "\n" not in line and fragment in line, line
    path.write_text(f"phases:\n  - {{name: a, gt: {videos.ag_gt}, upload: "
                    "action-genome-output, method: tempura}\n")
    check_gts(load_benchmark(str(path), "r", "o"), None)  # fits: nothing raised


def test_serve_refuses_a_video_gt_without_a_benchmark_file(videos, tmp_path, capsys):
    from sgdask.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--registry", str(tmp_path / "r"), "--out", str(tmp_path / "o"),
              "--gt", videos.pvsg_gt, "--port", "0", "--no-worker"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "PVSG ground truth" in err and "upload: pvsg-results" in err
    assert not json.dumps(err).count("Traceback")


def test_the_upload_form_says_what_each_phase_takes(served):
    """The file field does not promise an SGBench ZIP where a phase takes model outputs;
    each phase's option says what it takes."""
    page = httpx.get(f"{served.base}/submit", timeout=30)
    assert page.status_code == 200
    assert "Submission: the file its phase takes" in page.text
    assert "SGBench ZIP or JSON (at most" not in page.text
    assert page.text.count('<option value="ag">') == page.text.count('<option value="pvsg">') == 1
