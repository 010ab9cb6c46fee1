"""COCO panoptic files: recognised by content, and one line naming file, image and field for
each kind of bad file (the differential test against panopticapi is in
``tests/differential/test_pq_differential.py``)."""

from __future__ import annotations

import json

import imagecodecs
import numpy as np
import pytest

from sgdask.cli import main
from sgdask.formats import COCO_PANOPTIC, recognised
from sgdask.formats.sniff import COCO_JSON, what_is
from sgdask.testing.coco import write_coco_panoptic


@pytest.fixture
def files(tmp_path):
    return write_coco_panoptic(tmp_path, n_images=4, seed=1, height=32, width=40, cell=4)


def run(capsys, files, *extra: str, pred: str | None = None) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_code:
        main(["evaluate", "--gt", str(files.gt_json), "--gt-masks", str(files.gt_masks),
              "--pred", pred or str(files.pred_json), *extra])
    return exit_code.value.code or 0, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_recognised_by_content(files, tmp_path):
    assert what_is(str(files.pred_json)).what == "COCO panoptic segments (JSON)"
    assert recognised(str(files.pred_json), None, "submission").name == COCO_PANOPTIC
    doc = json.loads(files.gt_json.read_text())
    doc["images"] *= 400  # the annotations far beyond the sniffed head, as in COCO's GT
    (tmp_path / "long.json").write_text(json.dumps({"info": {}, **doc}))
    assert what_is(str(tmp_path / "long.json")).kind == COCO_JSON


def test_a_png_segment_missing_from_the_json(capsys, files):
    pred = json.loads(files.pred_json.read_text())
    dropped = pred["annotations"][1]["segments_info"].pop()
    files.pred_json.write_text(json.dumps(pred))
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks))
    line = one_line(err)
    assert code != 0 and f"segment {dropped['id']} is in the PNG, not in the JSON" in line
    assert f"image {pred['annotations'][1]['image_id']}" in line and "segments_info" in line


def test_an_unknown_category(capsys, files):
    pred = json.loads(files.pred_json.read_text())
    pred["annotations"][2]["segments_info"][0]["category_id"] = 999
    files.pred_json.write_text(json.dumps(pred))
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks))
    line = one_line(err)
    assert code != 0 and "pred.json" in line and "unknown category_id 999" in line
    assert f"image {pred['annotations'][2]['image_id']}" in line


def test_a_png_of_another_size(capsys, files):
    name = json.loads(files.pred_json.read_text())["annotations"][0]["file_name"]
    rgb = imagecodecs.png_decode((files.pred_masks / name).read_bytes())
    (files.pred_masks / name).write_bytes(imagecodecs.png_encode(np.ascontiguousarray(
        rgb[:20])))
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks))
    assert code != 0 and "PNG is 40x20" in one_line(err) and "40x32" in err


def test_a_damaged_json_and_a_damaged_png(capsys, files):
    text = files.pred_json.read_text()
    files.pred_json.write_text(text[:len(text) // 2])
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks))
    assert code != 0 and "pred.json: not JSON" in one_line(err)
    files.pred_json.write_text(text)
    name = json.loads(text)["annotations"][3]["file_name"]
    (files.pred_masks / name).write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks))
    assert code != 0 and "not a readable PNG" in one_line(err) and name in err


def test_masks_are_asked_for_and_only_for_coco_files(capsys, files, tmp_path):
    code, err = run(capsys, files)
    assert code != 0 and "--pred-masks DIR" in one_line(err)
    (tmp_path / "sgbench.json").write_text(json.dumps({"version": 1, "images": []}))
    code, err = run(capsys, files, "--pred-masks", str(files.pred_masks),
                    pred=str(tmp_path / "sgbench.json"))
    assert code != 0 and "drop --pred-masks" in one_line(err)
