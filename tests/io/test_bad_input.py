"""Bad input: one line naming file, image id and field; non-zero exit; no store left behind."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from sgdask.errors import StoreError
from sgdask.pipeline import evaluate
from tests.helpers import rewrite_zip, run_cli, tiff_bytes


def first_image(dataset) -> dict:
    with zipfile.ZipFile(dataset.submission_zip) as z:
        return json.loads(z.read("triplets.json"))["images"][0]


def assert_rejected(proc, out, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("sgdask: error:")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not out.exists(), "a partial store was left behind"


def test_unknown_image_id(dataset, stores, tmp_path):
    def rename(doc):
        doc["images"][0]["id"] = "no-such-image"

    bad = rewrite_zip(dataset.submission_zip, tmp_path / "bad.zip", rename)
    out = tmp_path / "store"
    proc = run_cli("convert", str(bad), "--out", str(out), "--gt", stores.gt)
    assert_rejected(proc, out, "triplets.json", "image no-such-image", "id",
                    "not in the ground truth")


def test_unknown_image_id_at_evaluation(dataset, stores, tmp_path, client):
    """Without --gt at conversion, evaluation refuses the unknown id and writes nothing."""
    from sgdask.errors import InputError
    from sgdask.formats.sgbench import convert_submission

    def rename(doc):
        doc["images"][0]["id"] = "no-such-image"

    bad = rewrite_zip(dataset.submission_zip, tmp_path / "bad.zip", rename)
    convert_submission(str(bad), str(tmp_path / "pred"))
    with pytest.raises(InputError, match="image no-such-image: id: not among"):
        evaluate(stores.gt, str(tmp_path / "pred"), client=client)


def test_triplet_index_out_of_range(dataset, tmp_path):
    image = first_image(dataset)
    n = len(image["annotation"])

    def corrupt(doc):
        doc["images"][0]["triplets"][3] = [0, n + 5, 1]

    bad = rewrite_zip(dataset.submission_zip, tmp_path / "bad.zip", corrupt)
    out = tmp_path / "store"
    proc = run_cli("convert", str(bad), "--out", str(out))
    assert_rejected(proc, out, "triplets.json", f"image {image['id']}", "triplets[3]",
                    "out of range")


def test_tiff_layer_count_differs(dataset, tmp_path):
    image = first_image(dataset)
    n = len(image["annotation"])
    layers = np.zeros((n + 2, 96, 128), dtype=np.uint8)
    bad = rewrite_zip(dataset.submission_zip, tmp_path / "bad.zip",
                      replace={image["seg_filename"]: tiff_bytes(layers)})
    out = tmp_path / "store"
    proc = run_cli("convert", str(bad), "--out", str(out))
    assert_rejected(proc, out, image["seg_filename"], f"image {image['id']}", "seg_filename",
                    f"{n + 2} layers", f"{n} instances")


def test_debug_flag_shows_traceback(dataset, tmp_path):
    def corrupt(doc):
        doc["version"] = 3

    bad = rewrite_zip(dataset.submission_zip, tmp_path / "bad.zip", corrupt)
    proc = run_cli("convert", str(bad), "--out", str(tmp_path / "s"), "--debug")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "InputError" in proc.stderr


def test_store_without_manifest_is_refused(stores, tmp_path, client):
    import shutil

    copy = tmp_path / "partial"
    shutil.copytree(stores.pred, copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(StoreError, match="not a complete sgdask store"):
        evaluate(stores.gt, str(copy), client=client)


def test_existing_store_is_not_overwritten(dataset, stores, tmp_path):
    proc = run_cli("convert", str(dataset.submission_zip), "--out", stores.pred)
    assert proc.returncode == 2
    assert "already exists" in proc.stderr
