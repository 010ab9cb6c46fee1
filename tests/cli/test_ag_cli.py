"""Action Genome from the command line: ``ingest-gt`` of the annotation pickles, then
``evaluate --method tempura --protocol ag`` (the three constraint modes in one pass) writes
each mode's metrics.json, equal to the reference's numbers, and one report.html."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgdask.testing.ag import write_ag
from tests.helpers import run_main

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "ag_golden.json"


@pytest.mark.timeout(240)
def test_ingest_and_evaluate(tmp_path, capsys):
    golden = json.loads(GOLDEN.read_text())
    root = write_ag(tmp_path, **golden["generator_args"], settings=("sgcls",))
    a = root / "annotations"
    gt, out = str(tmp_path / "gt.store"), tmp_path / "out"
    code, said, err = run_main(capsys, "ingest-gt", str(a / "object_bbox_and_relationship.pkl"),
                               "--persons", str(a / "person_bbox.pkl"), "--frame-list",
                               str(a / "frame_list.txt"), "--out", gt)
    assert code == 0, err
    assert f"{golden['frames']} test frames of Action Genome" in " ".join(said.split())
    code, _, err = run_main(capsys, "evaluate", "--gt", gt, "--pred",
                            str(root / "predictions_sgcls.pkl"), "--method", "tempura",
                            "--protocol", "ag", "--out", str(out), "--workers", "1")
    assert code == 0, err
    for mode in ("with", "semi", "no"):
        written = json.loads((out / f"ag-{mode}" / "metrics.json").read_text())
        expected = golden["metrics"][f"sgcls/{mode}"]
        assert max(abs(written["metrics"][m] - v) for m, v in expected.items()) < 1e-9
        assert written["protocol"]["unit"] == "video"
    assert (out / "report.html").exists()


def test_frame_list_needs_persons(tmp_path, capsys):
    code, _, err = run_main(capsys, "ingest-gt", str(tmp_path / "o.pkl"), "--frame-list",
                            str(tmp_path / "f.txt"), "--out", str(tmp_path / "s"))
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "--frame-list applies to Action Genome ground truth" in err


def test_a_pickle_without_persons_says_what_it_needs(tmp_path, capsys):
    path = tmp_path / "results.pkl"
    path.write_bytes(b"\x80\x04N.")
    code, _, err = run_main(capsys, "ingest-gt", str(path), "--out", str(tmp_path / "s"))
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "needs its person_bbox.pkl (--persons)" in err and "--pred with --method" in err
    assert not (tmp_path / "s").exists()
