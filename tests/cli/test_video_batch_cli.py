"""Video models through the batch commands: ``submit --registry --method`` of an Action
Genome output, ``rerank`` publishing its board of the three constraint modes, and
``evaluate-many`` of a manifest naming outputs with their method."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_main
from tests.helpers.ag_data import ag_with_gt


@pytest.fixture(scope="module")
def ag(tmp_path_factory):
    return ag_with_gt(tmp_path_factory.mktemp("ag"), videos=5, frames=5, seed=7,
                      settings=("sgcls",))


@pytest.mark.timeout(180)
def test_submit_rerank_and_evaluate_many(ag, tmp_path, capsys):
    root, gt = ag
    pkl = str(root / "predictions_sgcls.pkl")
    registry, board = str(tmp_path / "registry"), tmp_path / "board"
    code, said, err = run_main(capsys, "submit", pkl, "--registry", registry, "--gt", gt,
                               "--name", "tempura", "--method", "tempura")
    assert code == 0, err
    assert "registered" in said and "/outputs/" in said
    code, said, err = run_main(capsys, "rerank", "--registry", registry, "--gt", gt, "--out",
                               str(board), "--workers", "1", "--threads")
    assert code == 0, err
    [row] = json.loads((board / "leaderboard.json").read_text())
    manifest = tmp_path / "many.yaml"
    manifest.write_text(f"gt: {gt}\nout: {tmp_path / 'out'}\nsubmissions:\n"
                        f"  - {{name: tempura, url: {pkl}, method: tempura, protocols: [ag]}}\n")
    code, said, err = run_main(capsys, "evaluate-many", str(manifest), "--workers", "1",
                               "--threads")
    assert code == 0, err
    written = json.loads((tmp_path / "out" / "tempura" / "ag-no" / "metrics.json").read_text())
    assert written["metrics"]["mR@50"] == row["metrics"]["ag-no mR@50"]
    assert written["protocol"]["unit"] == "video"


def test_a_misspelt_method_is_one_line(ag, tmp_path, capsys):
    root, gt = ag
    code, _, err = run_main(capsys, "submit", str(root / "predictions_sgcls.pkl"),
                            "--registry", str(tmp_path / "r"), "--gt", gt, "--name", "x",
                            "--method", "tempra")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "tempura" in err and not (tmp_path / "r").exists()
