"""The synthetic dataset: reproducible, internally consistent, model-like, readable by SGBench."""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from sgdask.testing import psg as synth

SMALL = {"height": 120, "width": 160}


def _psg(paths: synth.SynthPaths) -> dict:
    return json.loads(paths.psg_json.read_text())


def _test_entries(paths: synth.SynthPaths) -> dict[str, dict]:
    psg = _psg(paths)
    test_ids = set(psg["test_image_ids"])
    return {d["image_id"]: d for d in psg["data"] if d["image_id"] in test_ids}


def _zip_submission(paths: synth.SynthPaths) -> dict:
    with zipfile.ZipFile(paths.submission_zip) as archive:
        return json.loads(archive.read("triplets.json"))


def _pred_masks(paths: synth.SynthPaths, seg_filename: str) -> np.ndarray:
    with zipfile.ZipFile(paths.submission_zip) as archive:
        return tifffile.imread(io.BytesIO(archive.read(seg_filename))).astype(bool)


def _panoptic_ids(paths: synth.SynthPaths, entry: dict) -> np.ndarray:
    with Image.open(paths.masks_dir / entry["pan_seg_file_name"]) as img:
        rgb = np.asarray(img).astype(np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def _tight_box(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / (a | b).sum())


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> synth.SynthPaths:
    """Twelve small test images, one missing from the submission; enough for predicate coverage
    (12 * 6 >= 56)."""
    root = tmp_path_factory.mktemp("synth")
    return synth.write_dataset(root, 12, seed=3, missing_fraction=0.1, **SMALL)


def test_same_seed_gives_same_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    first = synth.write_dataset(tmp_path / "a", 6, seed=5, **SMALL)
    second = synth.write_dataset(tmp_path / "b", 6, seed=5, **SMALL)
    other = synth.write_dataset(tmp_path / "c", 6, seed=6, **SMALL)
    assert first.psg_json.read_bytes() == second.psg_json.read_bytes()
    assert _zip_submission(first) == _zip_submission(second)
    assert first.submission_zip.read_bytes() == second.submission_zip.read_bytes()
    assert first.submission_boxes.read_bytes() == second.submission_boxes.read_bytes()
    assert first.psg_json.read_bytes() != other.psg_json.read_bytes()
    assert _zip_submission(first) != _zip_submission(other)


def test_paths_and_psg_layout(dataset: synth.SynthPaths) -> None:
    assert dataset.psg_json == dataset.root / "psg.json"
    assert dataset.masks_dir == dataset.root / "panoptic"
    psg = _psg(dataset)
    assert (len(psg["thing_classes"]), len(psg["stuff_classes"])) == (80, 53)
    assert len(psg["predicate_classes"]) == 56
    test_ids, train_ids = psg["test_image_ids"], psg["train_image_ids"]
    assert (len(test_ids), len(train_ids)) == (12, 6)
    assert not set(test_ids) & set(train_ids)
    ids = [d["image_id"] for d in psg["data"]]
    assert sorted(ids) == sorted(test_ids + train_ids)
    assert {p.stem for p in dataset.masks_dir.glob("*.png")} == set(test_ids)
    for entry in psg["data"]:
        assert entry["file_name"] == f"{entry['image_id']}.jpg"
        assert entry["pan_seg_file_name"] == f"{entry['image_id']}.png"
        assert (entry["height"], entry["width"]) == (120, 160)
        assert len(entry["annotations"]) == len(entry["segments_info"])
        for seg, box in zip(entry["segments_info"], entry["annotations"], strict=True):
            assert 0 < seg["id"] < 2**24
            assert seg["isthing"] == int(seg["category_id"] < 80)
            assert 0 <= seg["category_id"] < 133
            assert box["category_id"] == seg["category_id"]
            assert box["bbox_mode"] == 0
        assert len({s["id"] for s in entry["segments_info"]}) == len(entry["segments_info"])


def test_png_ids_areas_and_boxes_match_segments_info(dataset: synth.SynthPaths) -> None:
    for entry in _test_entries(dataset).values():
        ids = _panoptic_ids(dataset, entry)
        assert set(np.unique(ids).tolist()) - {0} == {s["id"] for s in entry["segments_info"]}
        for seg, box in zip(entry["segments_info"], entry["annotations"], strict=True):
            mask = ids == seg["id"]
            assert seg["area"] == mask.sum() >= 64
            assert box["bbox"] == _tight_box(mask)


def test_relations_are_valid_and_cover_every_predicate(dataset: synth.SynthPaths) -> None:
    seen = set()
    for entry in _psg(dataset)["data"]:
        n = len(entry["segments_info"])
        relations = [tuple(r) for r in entry["relations"]]
        assert len(set(relations)) == len(relations)
        for s, o, p in relations:
            assert 0 <= s < n and 0 <= o < n and s != o
            assert 0 <= p < 56
        if entry["image_id"] in _psg(dataset)["test_image_ids"]:
            seen |= {p for _, _, p in relations}
    assert seen == set(range(56))


def test_submission_matches_its_masks(dataset: synth.SynthPaths) -> None:
    gt = _test_entries(dataset)
    submission = _zip_submission(dataset)
    boxes_only = json.loads(dataset.submission_boxes.read_text())
    assert submission["version"] == boxes_only["version"] == 1
    for image, box_image in zip(submission["images"], boxes_only["images"], strict=True):
        assert image["id"] in gt
        assert image["seg_filename"] == f"{image['id']}.tiff"
        assert {k: v for k, v in image.items() if k != "seg_filename"} == box_image
        masks = _pred_masks(dataset, image["seg_filename"])
        n = len(image["annotation"])
        assert masks.shape == (n, 120, 160) and n >= 2
        for mask, ann in zip(masks, image["annotation"], strict=True):
            assert ann["bbox"] == _tight_box(mask)
            assert 0 <= ann["category"] < 133 and 0.3 <= ann["score"] < 1.0
        triplets = np.array(image["triplets"])
        assert len(triplets) == min(100, n * (n - 1))
        assert len(image["scores"]) == len(triplets)
        assert image["scores"] == sorted(image["scores"], reverse=True)
        ng = np.array(image["ng_triplets"])
        for listed in (triplets, ng):
            assert (listed[:, :2] >= 0).all() and (listed[:, :2] < n).all()
            assert (listed[:, 0] != listed[:, 1]).all()
            assert ((listed[:, 2] >= 0) & (listed[:, 2] < 56)).all()
        assert {tuple(t) for t in triplets.tolist()} <= {tuple(t) for t in ng.tolist()}
        assert 2 * len(triplets) <= len(ng) <= 3 * len(triplets)


def test_progress_is_called_once_per_test_image(tmp_path: Path) -> None:
    calls: list[int] = []
    synth.write_dataset(tmp_path, 4, seed=1, progress=calls.append, **SMALL)
    assert calls == [1, 1, 1, 1]


def test_predictions_look_like_a_model(dataset: synth.SynthPaths) -> None:
    gt = _test_entries(dataset)
    best_ious, duplicates = [], 0
    for image in _zip_submission(dataset)["images"]:
        entry = gt[image["id"]]
        ids = _panoptic_ids(dataset, entry)
        masks = _pred_masks(dataset, image["seg_filename"])
        categories = np.array([a["category"] for a in image["annotation"]])
        for seg in entry["segments_info"]:
            same = masks[categories == seg["category_id"]]
            best_ious.append(max((_iou(ids == seg["id"], m) for m in same), default=0.0))
        duplicates += sum(
            _iou(masks[i], masks[j]) >= 0.5
            for i in range(len(masks))
            for j in range(i + 1, len(masks))
        )
    matched = [iou for iou in best_ious if iou > 0]
    assert 0.5 < np.median(best_ious) < 0.95
    assert min(matched) < 0.5 < max(matched)
    assert duplicates > 0


def test_missing_and_relation_free_images(tmp_path: Path) -> None:
    paths = synth.write_dataset(
        tmp_path, 20, seed=2, missing_fraction=0.2, no_relation_fraction=0.2, **SMALL
    )
    gt = _test_entries(paths)
    submitted = {image["id"] for image in _zip_submission(paths)["images"]}
    assert len(submitted) == 16 and submitted < set(gt)
    boxes_only = json.loads(paths.submission_boxes.read_text())
    assert {image["id"] for image in boxes_only["images"]} == submitted
    with zipfile.ZipFile(paths.submission_zip) as archive:
        assert set(archive.namelist()) == {f"{i}.tiff" for i in submitted} | {"triplets.json"}
    assert sum(not entry["relations"] for entry in gt.values()) == 4


@pytest.mark.parametrize("kind", ["masks", "boxes"])
def test_sgbench_evaluates_it(dataset: synth.SynthPaths, kind: str) -> None:
    """Every predicate occurs in a submitted image, so even SGBench's mR@k is finite."""
    sgbench_file = pytest.importorskip("sgbench.file")
    pred_path, gt_seg_dir = {
        "masks": (dataset.submission_zip, dataset.masks_dir),
        "boxes": (dataset.submission_boxes, None),
    }[kind]
    metrics = sgbench_file.evaluate(
        anno_path=dataset.psg_json, pred_path=pred_path, gt_seg_dir=gt_seg_dir, workers=0
    )
    for key in ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "InstR"):
        assert math.isfinite(metrics[key]) and 0.0 <= metrics[key] <= 1.0, key
    assert metrics["R@20"] <= metrics["R@50"] <= metrics["R@100"]
    assert metrics["InstR"] > 0.5


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_sgbench_reads_a_tiny_split(tmp_path: Path) -> None:
    """Too few images to hold every predicate: mR@k is NaN there, R@k and InstR are not."""
    sgbench_file = pytest.importorskip("sgbench.file")
    paths = synth.write_dataset(tmp_path, 3, seed=4, **SMALL)
    metrics = sgbench_file.evaluate(
        anno_path=paths.psg_json,
        pred_path=paths.submission_zip,
        gt_seg_dir=paths.masks_dir,
        workers=0,
    )
    for key in ("R@20", "R@50", "R@100", "InstR"):
        assert math.isfinite(metrics[key]) and 0.0 <= metrics[key] <= 1.0, key
