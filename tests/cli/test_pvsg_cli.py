"""PVSG from the command line: ``ingest-gt pvsg.json --data-dir DATA``, then ``evaluate
--pred RESULTS --protocol pvsg,pvsg-oneweak`` writes each protocol's metrics.json, equal to
the reference's numbers, and one report.html; bad input is one line naming the file, the
video and the field, and leaves no store behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgdask.testing.pvsg import write_pvsg
from tests.helpers import run_main

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "pvsg_golden.json"


def _error_lines(err: str) -> list[str]:
    """stderr without the progress bars."""
    return [line for line in err.strip().splitlines() if "━" not in line]


def _ingest(capsys, raw, gt: str) -> tuple[int, str, str]:
    return run_main(capsys, "ingest-gt", str(raw.annotation), "--data-dir", str(raw.data_dir),
                    "--out", gt)


@pytest.mark.timeout(240)
def test_ingest_and_evaluate(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=8, seed=1)
    gt, out = str(tmp_path / "gt.store"), tmp_path / "out"
    code, said, err = _ingest(capsys, raw, gt)
    assert code == 0, err
    assert "8 val videos of PVSG" in " ".join(said.split())
    code, _, err = run_main(capsys, "evaluate", "--gt", gt, "--pred", str(raw.results),
                            "--protocol", "pvsg,pvsg-oneweak", "--out", str(out),
                            "--workers", "1")
    assert code == 0, err
    golden = json.loads(GOLDEN.read_text())["metrics"]
    written = json.loads((out / "pvsg" / "metrics.json").read_text())
    assert max(abs(written["metrics"][m] - v) for m, v in golden.items()) < 1e-9
    assert written["protocol"]["unit"] == "video"
    once = json.loads((out / "pvsg-oneweak" / "metrics.json").read_text())["metrics"]
    assert once["R@50"] == written["metrics"]["R@50"]
    assert once["wR@50"] < written["metrics"]["wR@50"]
    assert (out / "report.html").exists()


@pytest.mark.timeout(120)
def test_a_bad_results_line_is_one_line_naming_file_video_and_field(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=2, n_frames=6, seed=4)
    gt = str(tmp_path / "gt.store")
    assert _ingest(capsys, raw, gt)[0] == 0
    video = raw.videos[1]
    masks = raw.results / video / "quantitive" / "masks.txt"
    lines = masks.read_text().splitlines()
    lines[2] = lines[2].rsplit(" ", 1)[0] + " not-an-rle!"
    masks.write_text("\n".join(lines) + "\n")
    code, _, err = run_main(capsys, "evaluate", "--gt", gt, "--pred", str(raw.results),
                            "--protocol", "pvsg", "--out", str(tmp_path / "out"),
                            "--workers", "1")
    assert code != 0 and len(_error_lines(err)) == 1, err
    assert "masks.txt" in err and f"video {video}" in err and "line 3" in err
    assert "Traceback" not in err


@pytest.mark.timeout(120)
def test_a_bad_annotation_is_one_line_and_leaves_no_store(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=2, n_frames=6, seed=4)
    anno = json.loads(raw.annotation.read_text())
    anno["data"][1]["relations"][0][3] = [[0, 99]]
    raw.annotation.write_text(json.dumps(anno))
    gt = tmp_path / "gt.store"
    code, _, err = _ingest(capsys, raw, str(gt))
    assert code != 0 and len(_error_lines(err)) == 1, err
    assert "pvsg.json" in err and f"video {raw.videos[1]}" in err and "relations[0]" in err
    assert not gt.exists()


@pytest.mark.timeout(120)
def test_a_missing_frame_png_leaves_no_store(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=2, n_frames=6, seed=4)
    next(iter(sorted((raw.data_dir / "vidor" / "masks" / raw.videos[0]).glob("*.png")))
         ).unlink()
    gt = tmp_path / "gt.store"
    code, _, err = _ingest(capsys, raw, str(gt))
    assert code != 0 and len(_error_lines(err)) == 1, err
    assert f"video {raw.videos[0]}" in err and "frame 0" in err
    assert not gt.exists()


@pytest.mark.timeout(120)
def test_a_video_without_results_is_one_line_naming_file_and_video(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=2, n_frames=6, seed=4)
    gt = str(tmp_path / "gt.store")
    assert _ingest(capsys, raw, gt)[0] == 0
    (raw.results / raw.videos[0] / "relations.json").unlink()
    code, _, err = run_main(capsys, "evaluate", "--gt", gt, "--pred", str(raw.results),
                            "--protocol", "pvsg", "--out", str(tmp_path / "out"),
                            "--workers", "1")
    assert code != 0 and len(_error_lines(err)) == 1, err
    assert "relations.json" in err and raw.videos[0] in err
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_pvsg_json_without_its_masks_names_the_option(tmp_path, capsys):
    raw = write_pvsg(tmp_path / "raw", n_videos=1, n_frames=4, seed=4)
    code, _, err = run_main(capsys, "ingest-gt", str(raw.annotation), "--out",
                            str(tmp_path / "gt.store"))
    assert code != 0 and len(_error_lines(err)) == 1, err
    assert "--data-dir" in err and not (tmp_path / "gt.store").exists()
