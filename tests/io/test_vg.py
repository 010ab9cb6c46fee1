"""Visual Genome (VG150) ground truth: `sgdask ingest-gt VG-SGG-with-attri.h5 --dicts ...
--image-data ...` against a literal re-implementation of Scene-Graph-Benchmark.pytorch's
loader (``visual_genome.py``), written here without any sgdask code; malformed files; the
synthetic VG generator; the export script for a model's output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import fastjsonschema
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from sgdask.cli import main
from sgdask.formats.sgbench import convert_submission
from sgdask.formats.vg150 import ingest_vg, split_image_ids
from sgdask.store.store import StoreReader
from sgdask.testing.vg import VGSynthPaths, write_vg_dataset
from tests.helpers import ROOT, run_cli

VAL = 10  # validation images carved from flag 0 in these tests (the loader's default: 5000)

# --------------------------------------------------------------------------- the literal loader


def sgb_load_info(dict_file):
    with open(dict_file) as f:
        info = json.load(f)
    info["label_to_idx"]["__background__"] = 0
    info["predicate_to_idx"]["__background__"] = 0
    class_to_ind = info["label_to_idx"]
    predicate_to_ind = info["predicate_to_idx"]
    ind_to_classes = sorted(class_to_ind, key=lambda k: class_to_ind[k])
    ind_to_predicates = sorted(predicate_to_ind, key=lambda k: predicate_to_ind[k])
    return ind_to_classes, ind_to_predicates


def sgb_load_image_filenames(image_file):
    with open(image_file) as f:
        im_data = json.load(f)
    corrupted_ims = ["1592.jpg", "1722.jpg", "4616.jpg", "4617.jpg"]
    img_info = []
    for img in im_data:
        basename = f"{img['image_id']}.jpg"
        if basename in corrupted_ims:
            continue
        img_info.append(img)
    return img_info


def sgb_load_graphs(roidb_file, split, num_val_im, filter_empty_rels=True):
    with h5py.File(roidb_file, "r") as roi_h5:
        return sgb_load_graphs_from(roi_h5, split, num_val_im, filter_empty_rels)


def sgb_load_graphs_from(roi_h5, split, num_val_im, filter_empty_rels):
    data_split = roi_h5["split"][:]
    split_flag = 2 if split == "test" else 0
    split_mask = data_split == split_flag
    split_mask &= roi_h5["img_to_first_box"][:] >= 0
    if filter_empty_rels:
        split_mask &= roi_h5["img_to_first_rel"][:] >= 0
    image_index = np.where(split_mask)[0]
    if num_val_im > 0:
        if split == "val":
            image_index = image_index[:num_val_im]
        elif split == "train":
            image_index = image_index[num_val_im:]
    split_mask = np.zeros_like(data_split).astype(bool)
    split_mask[image_index] = True

    all_labels = roi_h5["labels"][:, 0]
    all_boxes = roi_h5["boxes_1024"][:]  # cx,cy,w,h
    assert np.all(all_boxes[:, :2] >= 0)
    assert np.all(all_boxes[:, 2:] > 0)
    all_boxes[:, :2] = all_boxes[:, :2] - all_boxes[:, 2:] / 2
    all_boxes[:, 2:] = all_boxes[:, :2] + all_boxes[:, 2:]

    im_to_first_box = roi_h5["img_to_first_box"][split_mask]
    im_to_last_box = roi_h5["img_to_last_box"][split_mask]
    im_to_first_rel = roi_h5["img_to_first_rel"][split_mask]
    im_to_last_rel = roi_h5["img_to_last_rel"][split_mask]
    _relations = roi_h5["relationships"][:]
    _relation_predicates = roi_h5["predicates"][:, 0]

    boxes, gt_classes, relationships = [], [], []
    for i in range(len(image_index)):
        i_obj_start, i_obj_end = im_to_first_box[i], im_to_last_box[i]
        i_rel_start, i_rel_end = im_to_first_rel[i], im_to_last_rel[i]
        boxes_i = all_boxes[i_obj_start: i_obj_end + 1, :]
        gt_classes_i = all_labels[i_obj_start: i_obj_end + 1]
        predicates = _relation_predicates[i_rel_start: i_rel_end + 1]
        obj_idx = _relations[i_rel_start: i_rel_end + 1] - i_obj_start
        assert np.all(obj_idx >= 0)
        assert np.all(obj_idx < boxes_i.shape[0])
        rels = np.column_stack((obj_idx, predicates))
        boxes.append(boxes_i)
        gt_classes.append(gt_classes_i)
        relationships.append(rels)
    return split_mask, boxes, gt_classes, relationships


def sgb_dataset(paths: VGSynthPaths, split: str, num_val_im: int = VAL) -> list[dict]:
    """What ``VGDataset(split).get_groundtruth(i, evaluation=True)`` holds, per image,
    before ``clip_to_image`` (the float32 ``BoxList`` boxes), in dataset order."""
    split_mask, gt_boxes, gt_classes, relationships = sgb_load_graphs(paths.h5, split,
                                                                      num_val_im)
    img_info = sgb_load_image_filenames(paths.image_data)
    img_info = [img_info[i] for i in np.where(split_mask)[0]]
    out = []
    for index, info in enumerate(img_info):
        w, h = info["width"], info["height"]
        box = gt_boxes[index] / 1024 * max(w, h)
        out.append({"image_id": str(info["image_id"]), "width": w, "height": h,
                    "boxes": box.astype(np.float32), "labels": gt_classes[index],
                    "relations": relationships[index]})
    return out


def sgb_train_triplets(paths: VGSynthPaths, evaluated: set[str]) -> Counter:
    """(subject label, object label, predicate) counts over flag-0 images with boxes and
    relations that are not evaluated (1-based, as in the file)."""
    split_mask, _, gt_classes, relationships = sgb_load_graphs(paths.h5, "train", 0)
    img_info = sgb_load_image_filenames(paths.image_data)
    ids = [str(img_info[i]["image_id"]) for i in np.where(split_mask)[0]]
    counts: Counter = Counter()
    for image_id, classes, rels in zip(ids, gt_classes, relationships, strict=True):
        if image_id in evaluated:
            continue
        for s, o, p in rels.tolist():
            counts[(int(classes[s]), int(classes[o]), int(p))] += 1
    return counts


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def vg(tmp_path_factory) -> VGSynthPaths:
    return write_vg_dataset(tmp_path_factory.mktemp("vg"), n_test=40, n_train=60, seed=3,
                            dropped_fraction=0.1, missing_fraction=0.1, no_pairs_fraction=0.1)


def store_images(url: str) -> dict[str, dict]:
    reader = StoreReader(url, kind="gt")
    parts = [p["name"] for p in reader.parts]
    images = reader.table("images", parts).to_pylist()
    instances = reader.table("instances", parts).to_pylist()
    triplets = reader.table("triplets", parts).to_pylist()
    out = {r["image_id"]: {"width": r["width"], "height": r["height"], "boxes": [],
                           "categories": [], "relations": []} for r in images}
    for r in instances:
        out[r["image_id"]]["boxes"].append([r["x1"], r["y1"], r["x2"], r["y2"]])
        out[r["image_id"]]["categories"].append(r["category"])
    for r in triplets:
        out[r["image_id"]]["relations"].append([r["subject"], r["object"], r["predicate"]])
    return out


# --------------------------------------------------------------------------- ingest


@pytest.mark.parametrize("split", ["test", "val"])
def test_ingest_reads_what_the_loader_reads(vg, tmp_path, split):
    manifest = ingest_vg(str(vg.h5), str(tmp_path / "gt"), str(vg.dicts), str(vg.image_data),
                         split=split, val_images=VAL, partition_size=8)
    expected = sgb_dataset(vg, split)
    stored = store_images(str(tmp_path / "gt"))
    assert sorted(stored) == sorted(e["image_id"] for e in expected)
    assert len(expected) == (VAL if split == "val" else 40)
    for image in expected:
        got = stored[image["image_id"]]
        assert (got["width"], got["height"]) == (image["width"], image["height"])
        np.testing.assert_array_equal(got["boxes"], image["boxes"].astype(np.float64))
        assert got["categories"] == (image["labels"] - 1).tolist()
        rels = image["relations"]
        assert got["relations"] == np.column_stack([rels[:, :2], rels[:, 2] - 1]).tolist()
    classes, predicates = sgb_load_info(vg.dicts)
    assert manifest["thing_classes"] == classes[1:] and manifest["stuff_classes"] == []
    assert manifest["predicate_classes"] == predicates[1:]
    assert manifest["split"] == split and manifest["boxes"]["clipped"] is False
    assert manifest["kind"] == "gt" and manifest["instances"] == "boxes"

    stats = pq.read_table(tmp_path / "gt" / manifest["train_stats"]).to_pylist()
    train = sgb_train_triplets(vg, set(stored))
    assert {(r["subject_category"] + 1, r["object_category"] + 1, r["predicate"] + 1):
            r["count"] for r in stats} == train


def test_the_data_exercises_the_loaders_corners(vg):
    """Duplicate relations are kept, a box with an odd width at the left border is
    truncated toward zero, corrupted image_data entries are skipped."""
    test = sgb_dataset(vg, "test")
    assert any(len({tuple(r) for r in i["relations"].tolist()}) < len(i["relations"])
               for i in test)
    with h5py.File(vg.h5) as f:
        centre = f["boxes_1024"][:]
        assert f["boxes_1024"].dtype == np.int32
    odd_at_border = (centre[:, 2] % 2 == 1) & (centre[:, 0] == centre[:, 2] // 2)
    assert odd_at_border.any()  # cx - w / 2 = -0.5: the loader's x1 is 0, not -1
    ids = {str(e["image_id"]) for e in json.loads(vg.image_data.read_text())}
    assert {"1592", "1722", "4616", "4617"} <= ids


def test_split_image_ids_are_the_datasets_order(vg):
    assert split_image_ids(str(vg.h5), str(vg.image_data)) == [
        i["image_id"] for i in sgb_dataset(vg, "test")]


def test_cli_ingest_convert_evaluate(vg, tmp_path, client):
    from sgdask.pipeline import evaluate

    gt, pred = tmp_path / "gt", tmp_path / "pred"
    proc = subprocess.run([sys.executable, "-m", "sgdask", "ingest-gt", str(vg.h5), "--dicts",
                           str(vg.dicts), "--image-data", str(vg.image_data), "--out", str(gt),
                           "--in-process"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "40 test images" in " ".join(proc.stdout.split())  # rich wraps lines
    manifest = convert_submission(str(vg.submission), str(pred), str(gt),
                                  from_scores=str(vg.scores), rank_by="triplet", ng_limit=100)
    assert manifest["rank_by"] == "triplet"
    report = evaluate(str(gt), str(pred), protocol="singlempo", client=client)
    assert report.diagnostics["evaluated_images"] == 40
    assert report.provenance["submission"]["rank_by"] == "triplet"
    assert 0 < report.metrics["R@100"] <= 1
    check = fastjsonschema.compile(json.loads(
        (ROOT / "schemas" / "store-manifest.schema.json").read_text()))
    for store in (gt, pred):
        check(json.loads((store / "manifest.json").read_text()))
    fastjsonschema.compile(json.loads((ROOT / "schemas" / "metrics.schema.json").read_text()))(
        json.loads(report.to_json()))


# --------------------------------------------------------------------------- malformed files


def copy_h5(src: Path, dst: Path, drop: str | None = None, **replace: np.ndarray) -> Path:
    with h5py.File(src) as fin, h5py.File(dst, "w") as fout:
        for key in fin:
            if key != drop:
                fout.create_dataset(key, data=replace.get(key, fin[key][()]))
    return dst


def with_value(key: str, row: int | tuple, value) -> dict[str, np.ndarray]:
    """A replacement for ``key`` with one cell changed."""
    return {"key": key, "row": row, "value": value}


def h5_case(vg: VGSynthPaths, tmp_path: Path, case: str) -> Path:
    with h5py.File(vg.h5) as f:
        arrays = {key: f[key][()] for key in f}
    test = np.flatnonzero((arrays["split"] == 2) & (arrays["img_to_first_rel"] >= 0)
                          & (arrays["img_to_first_box"] >= 0))
    first = int(test[0])
    out = tmp_path / "bad.h5"
    if case == "missing":
        return copy_h5(vg.h5, out, drop="predicates")
    if case == "box-shape":
        return copy_h5(vg.h5, out, boxes_1024=arrays["boxes_1024"][:, :3])
    if case == "labels-1d":
        return copy_h5(vg.h5, out, labels=arrays["labels"][:, 0])
    if case == "index-length":
        return copy_h5(vg.h5, out, img_to_last_rel=arrays["img_to_last_rel"][:-1])
    edited = {key: arrays[key].copy() for key in ("img_to_last_box", "relationships",
                                                  "labels", "boxes_1024")}
    if case == "box-range":
        edited["img_to_last_box"][first] = len(arrays["boxes_1024"])
    elif case == "relation-outside-image":
        edited["relationships"][arrays["img_to_first_rel"][first], 1] = (
            arrays["img_to_last_box"][first] + 1)
    elif case == "background-label":
        edited["labels"][arrays["img_to_first_box"][first], 0] = 0
    elif case == "empty-box":
        edited["boxes_1024"][3, 2] = 0
    return copy_h5(vg.h5, out, **edited)


H5_CASES = [  # case, key named, what
    ("missing", "predicates", "missing"),
    ("box-shape", "boxes_1024", "shape"),
    ("labels-1d", "labels", "shape"),
    ("index-length", "img_to_last_rel", "rows but split has"),
    ("box-range", "img_to_last_box", "out of range"),
    ("relation-outside-image", "relationships", "out of range"),
    ("background-label", "labels", "out of range"),
    ("empty-box", "boxes_1024", "row 3"),
]


def cli_error(capsys, *args: str) -> str:
    """Run the CLI in this process; return its one error line (exit code 2 asserted)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("sgdask: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("case", "key", "what"), H5_CASES, ids=[c[0] for c in H5_CASES])
def test_malformed_h5_is_one_line_naming_file_and_key(vg, tmp_path, capsys, case, key, what):
    bad = h5_case(vg, tmp_path, case)
    out = tmp_path / "store"
    line = cli_error(capsys, "ingest-gt", str(bad), "--dicts", str(vg.dicts), "--image-data",
                     str(vg.image_data), "--out", str(out), "--in-process")
    assert line.startswith(f"sgdask: error: {bad}: ")
    assert f": {key}: " in line and what in line
    assert not out.exists()


def test_malformed_json_files(vg, tmp_path, capsys):
    dicts = json.loads(vg.dicts.read_text())
    dicts["predicate_to_idx"]["on"] = 99
    bad_dicts = tmp_path / "dicts.json"
    bad_dicts.write_text(json.dumps(dicts))
    line = cli_error(capsys, "ingest-gt", str(vg.h5), "--dicts", str(bad_dicts),
                     "--image-data", str(vg.image_data), "--out", str(tmp_path / "a"))
    assert f"{bad_dicts}: predicate_to_idx: indices are not 1..K" in line

    images = json.loads(vg.image_data.read_text())
    bad_images = tmp_path / "image_data.json"
    bad_images.write_text(json.dumps(images[:-1]))
    line = cli_error(capsys, "ingest-gt", str(vg.h5), "--dicts", str(vg.dicts),
                     "--image-data", str(bad_images), "--out", str(tmp_path / "b"))
    assert f"{bad_images}: " in line and "but the h5 file has" in line

    line = cli_error(capsys, "ingest-gt", str(vg.dicts), "--dicts", str(vg.dicts),
                     "--image-data", str(vg.image_data), "--out", str(tmp_path / "c"))
    assert f"{vg.dicts}: not a readable HDF5 file" in line
    line = cli_error(capsys, "ingest-gt", str(vg.h5), "--out", str(tmp_path / "d"))
    assert "needs --dicts and --image-data" in line
    assert not any((tmp_path / n).exists() for n in "abcd")


# --------------------------------------------------------------------------- generator


def test_generator_layout_and_counts(tmp_path):
    paths = write_vg_dataset(tmp_path / "a", n_test=300, n_train=100, seed=5,
                             missing_fraction=0.1, no_pairs_fraction=0.05)
    again = write_vg_dataset(tmp_path / "b", n_test=300, n_train=100, seed=5,
                             missing_fraction=0.1, no_pairs_fraction=0.05)
    for name in ("dicts", "image_data", "submission", "scores"):
        assert getattr(paths, name).read_bytes() == getattr(again, name).read_bytes(), name
    with h5py.File(paths.h5) as f:
        assert {"split", "img_to_first_box", "img_to_last_box", "img_to_first_rel",
                "img_to_last_rel", "boxes_1024", "labels", "relationships", "predicates",
                "attributes"} <= set(f)
        assert f["labels"].shape[1] == f["predicates"].shape[1] == 1
        assert f["relationships"].shape[1] == 2 and f["attributes"].shape[1] == 10
    test = sgb_dataset(paths, "test")
    assert len(test) == 300
    boxes = np.mean([len(i["labels"]) for i in test])
    rels = np.mean([len(i["relations"]) for i in test])
    assert 10 < boxes < 13 and 5 < rels < 7  # VG150: ~11.5 boxes, ~6 relations per image
    doc = json.loads(paths.submission.read_text())
    assert 255 <= len(doc["images"]) < 300  # ~10 % missing
    assert all(len(i["instances"]) >= 80 for i in doc["images"])
    scores = pq.read_table(paths.scores)
    per_image = Counter(scores["image_id"].to_pylist())
    assert len(per_image) < len(doc["images"])  # some images have no scored pair
    assert max(per_image.values()) <= 100
    assert {str(i) for i in per_image} <= {str(i["id"]) for i in doc["images"]}
    assert {str(i["id"]) for i in doc["images"]} <= {i["image_id"] for i in test}


# --------------------------------------------------------------------------- export script


def sgb_post_processor(pairs, rel_prob, obj_scores):
    """Its PostProcessor's ranking (float32): pairs sorted by rel * obj0 * obj1."""
    obj_scores0 = obj_scores[pairs[:, 0]]
    obj_scores1 = obj_scores[pairs[:, 1]]
    rel_scores = rel_prob[:, 1:].max(1)
    triple_scores = rel_scores * obj_scores0 * obj_scores1
    sorting_idx = np.argsort(-triple_scores)
    return pairs[sorting_idx], rel_prob[sorting_idx]


def sgb_evaluator_lists(pred_rel_inds, rel_scores, obj_scores):
    """Its evaluator's graph list and NG list (1-based predicates)."""
    pred_rels = np.column_stack((pred_rel_inds, 1 + rel_scores[:, 1:].argmax(1)))
    obj_scores_per_rel = obj_scores[pred_rel_inds].prod(1)
    nogc_overall_scores = obj_scores_per_rel[:, None] * rel_scores[:, 1:]
    flat = np.argsort(-nogc_overall_scores.ravel())
    nogc_score_inds = np.column_stack(np.unravel_index(flat, nogc_overall_scores.shape))[:100]
    nogc_pred_rels = np.column_stack((pred_rel_inds[nogc_score_inds[:, 0]],
                                      nogc_score_inds[:, 1] + 1))
    return pred_rels, nogc_pred_rels


def test_export_script_reproduces_its_rankings(tmp_path):
    rng = np.random.default_rng(11)
    npz, expected = tmp_path / "npz", {}
    npz.mkdir()
    for image_id in ("7", "9"):
        n = 14
        pairs = np.array([(s, o) for s in range(n) for o in range(n) if s != o])
        logits = rng.normal(size=(len(pairs), 51)).astype(np.float32)
        prob = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        obj_scores = rng.random(n).astype(np.float32)
        shuffled = rng.permutation(len(pairs))
        sorted_pairs, sorted_prob = sgb_post_processor(pairs[shuffled], prob[shuffled],
                                                       obj_scores)
        expected[image_id] = sgb_evaluator_lists(sorted_pairs, sorted_prob, obj_scores)
        np.savez(npz / f"{image_id}.npz", boxes=rng.random((n, 4)).cumsum(1) * 50,
                 pred_labels=rng.integers(1, 151, n), pred_scores=obj_scores,
                 rel_pair_idxs=sorted_pairs, pred_rel_scores=sorted_prob)
    sub, scores = tmp_path / "sub.json", tmp_path / "scores.parquet"
    proc = run_cli("export-sgb", str(npz), "--submission", str(sub), "--scores", str(scores))
    assert proc.returncode == 0, proc.stderr
    rows = pq.read_table(scores).num_rows
    assert proc.stdout.startswith(f"wrote {sub} (2 images) and {scores} ({rows} pairs); next: "
                                  f"sgdask convert {sub} --from-scores {scores}")
    assert pq.read_table(scores).num_rows < 2 * 14 * 13  # pairs that cannot rank: left out
    convert_submission(str(sub), str(tmp_path / "store"), from_scores=str(scores),
                       rank_by="triplet", ng_limit=100)
    reader = StoreReader(str(tmp_path / "store"))
    rows = reader.table("triplets", [p["name"] for p in reader.parts]).to_pylist()
    for image_id, (graph, ng) in expected.items():
        got = {name: [[r["subject"], r["object"], r["predicate"] + 1] for r in rows
                      if r["image_id"] == image_id and r["list"] == name]
               for name in ("graph", "ng")}
        assert got["graph"][:100] == graph[:100].tolist()
        assert got["ng"] == ng.tolist()
    shutil.rmtree(npz)


def test_export_sgb_says_what_is_wrong_in_one_line(tmp_path):
    npz = tmp_path / "npz"
    args = ("--submission", str(tmp_path / "s.json"), "--scores", str(tmp_path / "s.parquet"))
    missing = run_cli("export-sgb", str(npz), *args)
    assert (missing.returncode, missing.stderr) == (
        2, f"sgdask: error: {npz}: not found (expected a directory of .npz files)\n")
    npz.mkdir()
    np.savez(npz / "7.npz", boxes=np.zeros((1, 4)), pred_labels=np.ones(1))
    partial = run_cli("export-sgb", str(npz), *args)
    assert (partial.returncode, partial.stderr) == (
        2, f"sgdask: error: {npz / '7.npz'}: pred_scores, rel_pair_idxs, pred_rel_scores: "
        "missing (expected the arrays boxes, pred_labels, pred_scores, rel_pair_idxs, "
        "pred_rel_scores)\n")
    assert not (tmp_path / "s.json").exists()
