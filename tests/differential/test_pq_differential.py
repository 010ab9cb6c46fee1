"""Differential test: sgdask's PQ, SQ, RQ (all, things, stuff, per category) against COCO
panopticapi's own ``pq_compute``, from the ``panopticapi-lite`` package (it ships
panopticapi's ``evaluation.py`` unchanged but for whitespace, a shebang, two unused imports
and ``class X():`` written ``class X:``; docs/decisions.md).

A generated PSG-shaped dataset (``sgdask.testing.psg``: images without prediction, predictions
with duplicate and overlapping masks) with some GT segments marked ``iscrowd`` is ingested
and evaluated by sgdask under every protocol (PQ does not depend on it). panopticapi gets
what the SPEC says PQ is computed on, written as its files in a temporary directory: the
GT JSON and PNGs of the evaluated images (segment areas = their pixel counts) and, per
image, the singlempo merge of the submission's masks (SPEC 5.1, written out below from
the SPEC) as a panoptic PNG; an image without prediction gets an empty one (its GT segments
are false negatives). panopticapi runs in its own process (its ``pq_compute`` forks a pool).

The COCO panoptic path (``sgdask evaluate --pred panoptic.json --pred-masks DIR --gt
gt.json --gt-masks DIR``, ``sgdask.pq``) is compared on files panopticapi reads as they
are: a generated COCO panoptic GT (VOID pixels, crowd regions, category ids with gaps) and
predictions of it (``sgdask.testing.coco``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tifffile
from PIL import Image

from sgdask.cli import main
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate_protocols
from sgdask.pq import evaluate_pq
from sgdask.testing.coco import write_coco_panoptic
from sgdask.testing.psg import write_dataset

GROUPS = {"": "All", "_th": "Things", "_st": "Stuff"}
RUN = ("import json, sys\n"
       "from panopticapi.evaluation import pq_compute\n"
       "print('RESULT ' + json.dumps(pq_compute(*sys.argv[1:5])))\n")


def rgb2id(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]


def singlempo_merge(masks: np.ndarray, scores: list[float] | None) -> list[tuple[int, np.ndarray]]:
    """SPEC 5.1's mask merge: (original index, new mask) of each kept instance, in order."""
    n = len(masks)
    order = sorted(range(n), key=lambda i: -scores[i]) if scores else list(range(n))
    claimed = np.zeros(masks.shape[1:], dtype=bool)
    owner: list[int | None] = [None] * n
    merged = [False] * n
    kept: list[tuple[int, np.ndarray]] = []
    for position, m in enumerate(order):
        if merged[m]:
            continue
        new = masks[m] & ~claimed
        if not new.any():
            continue
        owner[m] = len(kept)
        kept.append((m, new))
        claimed |= new
        for later in order[position + 1:]:
            union = np.count_nonzero(masks[m] | masks[later])
            if not merged[later] and owner[later] is None and union \
                    and 2 * np.count_nonzero(masks[m] & masks[later]) >= union:
                merged[later] = True
                owner[later] = owner[m]
    return kept


def panopticapi_files(root, psg: dict, masks_dir, archive_path, evaluated: list[str]) -> list:
    """panopticapi's four arguments: GT JSON and folder, prediction JSON and folder."""
    entries = {str(e["image_id"]): e for e in psg["data"]}
    n_things = len(psg["thing_classes"])
    names = psg["thing_classes"] + psg["stuff_classes"]
    gt_annotations, pred_annotations = [], []
    pred_dir = root / "pred"
    pred_dir.mkdir()
    with zipfile.ZipFile(archive_path) as archive:
        submitted = {str(i["id"]): i for i in json.loads(archive.read("triplets.json"))["images"]}
        for image_id in evaluated:
            entry = entries[image_id]
            ids = rgb2id(np.asarray(Image.open(masks_dir / entry["pan_seg_file_name"])))
            gt_annotations.append({"image_id": image_id, "file_name": entry["pan_seg_file_name"],
                                   "segments_info": [
                                       {"id": s["id"], "category_id": s["category_id"],
                                        "iscrowd": s["iscrowd"],
                                        "area": int(np.count_nonzero(ids == s["id"]))}
                                       for s in entry["segments_info"]]})
            label = np.zeros(ids.shape, dtype=np.uint8)
            segments = []
            if image_id in submitted:
                image = submitted[image_id]
                masks = tifffile.imread(archive.open(image["seg_filename"])).astype(bool)
                masks = masks.reshape(-1, *ids.shape)
                scores = [a.get("score") for a in image["annotation"]]
                for j, (m, new) in enumerate(singlempo_merge(
                        masks, scores if None not in scores else None)):
                    label[new] = j + 1
                    segments.append({"id": j + 1,
                                     "category_id": image["annotation"][m]["category"]})
            Image.fromarray(np.stack([label, 0 * label, 0 * label], -1)).save(
                pred_dir / f"{image_id}.png")
            pred_annotations.append({"image_id": image_id, "file_name": f"{image_id}.png",
                                     "segments_info": segments})
    categories = [{"id": i, "name": name, "isthing": int(i < n_things)}
                  for i, name in enumerate(names)]
    (root / "gt.json").write_text(json.dumps({"annotations": gt_annotations,
                                              "categories": categories}))
    (root / "pred.json").write_text(json.dumps({"annotations": pred_annotations}))
    return [str(root / "gt.json"), str(root / "pred.json"), str(masks_dir), str(pred_dir)]


@pytest.fixture(scope="module")
def compared(tmp_path_factory, client):
    """sgdask's reports (every protocol) and panopticapi's results on one dataset."""
    root = tmp_path_factory.mktemp("pq")
    data = write_dataset(root / "src", n_images=36, seed=11, height=64, width=88,
                         missing_fraction=0.15, no_relation_fraction=0.05)
    psg = json.loads(data.psg_json.read_text())
    rng = np.random.default_rng(5)
    for entry in psg["data"]:
        for segment in entry.get("segments_info", []):
            segment["iscrowd"] = int(rng.random() < 0.15)
    data.psg_json.write_text(json.dumps(psg))
    gt, pred = str(root / "gt.store"), str(root / "pred.store")
    ingest_gt(str(data.psg_json), gt, str(data.masks_dir), partition_size=8)
    convert_submission(str(data.submission_zip), pred, gt, partition_size=8)
    reports = evaluate_protocols(gt, pred, "singlempo,sgbench,multimpo", client=client)
    evaluated = sorted(row["image_id"] for row in reports["singlempo"].per_image)
    args = panopticapi_files(root, psg, data.masks_dir, data.submission_zip, evaluated)
    return reports, panopticapi(args)


def panopticapi(args: list[str]) -> dict:
    """What panopticapi's ``pq_compute`` returns on these four arguments."""
    proc = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                          check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_pq_equals_panopticapi(compared):
    reports, reference = compared
    report = reports["singlempo"]
    for suffix, group in GROUPS.items():
        for name in ("PQ", "SQ", "RQ"):
            assert report.metrics[name + suffix] == pytest.approx(
                reference[group][name.lower()], abs=1e-12), name + suffix
    rows = {row["category"]: row for row in report.per_category}
    assert set(rows) == {int(c) for c in reference["per_class"]}  # the whole vocabulary
    counted = 0
    for category, values in reference["per_class"].items():
        row = rows[int(category)]
        if row["PQ"] is None:  # no segment: panopticapi's 0.0, left out of its means
            assert values == {"pq": 0.0, "sq": 0.0, "rq": 0.0}
            continue
        counted += 1
        for name in ("PQ", "SQ", "RQ"):
            assert row[name] == pytest.approx(values[name.lower()], abs=1e-12), (category, name)
    assert counted == reference["All"]["n"]
    assert reference["Things"]["n"] > 0 and reference["Stuff"]["n"] > 0


def test_the_data_reach_every_case(compared):
    """Crowd regions, images without prediction, overlapping masks, every kind of count."""
    reports, _ = compared
    report = reports["singlempo"]
    assert report.diagnostics["images_missing"] > 0
    assert report.diagnostics["masks_overlap"] > 0
    assert any("overlap" in note and "singlempo merge" in note for note in report.notes)
    totals = {k: sum(row[k] or 0 for row in report.per_category) for k in ("TP", "FP", "FN")}
    assert min(totals.values()) > 0


def test_pq_is_the_same_under_every_protocol(compared):
    reports, _ = compared
    first = reports["singlempo"]
    names = [n for n in first.metrics if n.partition("_")[0] in ("PQ", "SQ", "RQ")]
    assert len(names) == 9
    for report in reports.values():
        assert {n: report.metrics[n] for n in names} == {n: first.metrics[n] for n in names}
        assert report.per_category == first.per_category


@pytest.fixture(scope="module")
def coco(tmp_path_factory, client):
    """COCO panoptic files, sgdask's report of them through the command line (metrics.json
    and per_category.parquet) and panopticapi's results."""
    root = tmp_path_factory.mktemp("coco")
    files = write_coco_panoptic(root, n_images=30, seed=7, height=90, width=120, cell=4,
                                crowd=0.2)
    out = root / "report"
    with pytest.raises(SystemExit) as exit_code:
        main(["evaluate", "--gt", str(files.gt_json), "--gt-masks", str(files.gt_masks),
              "--pred", str(files.pred_json), "--pred-masks", str(files.pred_masks),
              "--out", str(out)])
    assert exit_code.value.code in (0, None)
    import pyarrow.parquet as pq

    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    rows = pq.read_table(out / "per_category.parquet").to_pylist()
    reference = panopticapi([str(files.gt_json), str(files.pred_json), str(files.gt_masks),
                             str(files.pred_masks)])
    return files, metrics, rows, reference


def test_coco_panoptic_pq_equals_panopticapi(coco):
    _, metrics, rows, reference = coco
    for suffix, group in GROUPS.items():
        for name in ("PQ", "SQ", "RQ"):
            assert metrics[name + suffix] == pytest.approx(reference[group][name.lower()],
                                                           abs=1e-12), name + suffix
    by_id = {row["category"]: row for row in rows}
    assert set(by_id) == {int(c) for c in reference["per_class"]}  # ids with gaps
    for category, values in reference["per_class"].items():
        row = by_id[int(category)]
        if row["PQ"] is None:
            assert values == {"pq": 0.0, "sq": 0.0, "rq": 0.0}
            continue
        for name in ("PQ", "SQ", "RQ"):
            assert row[name] == pytest.approx(values[name.lower()], abs=1e-12), (category, name)
    assert sum(row["PQ"] is not None for row in rows) == reference["All"]["n"]


def test_coco_panoptic_data_reach_every_case(coco):
    """Crowd regions, VOID pixels and every kind of count."""
    files, _, rows, _ = coco
    gt = json.loads(files.gt_json.read_text())
    assert any(s["iscrowd"] for a in gt["annotations"] for s in a["segments_info"])
    assert min(sum(row[k] for row in rows) for k in ("TP", "FP", "FN")) > 0


def test_coco_panoptic_pq_is_the_same_for_any_chunking(coco, client):
    files, metrics, _, _ = coco
    args = (str(files.gt_json), str(files.gt_masks), str(files.pred_json),
            str(files.pred_masks), client)
    one, many = evaluate_pq(*args, chunk=1000), evaluate_pq(*args, chunk=7)
    assert one.metrics == many.metrics == metrics
    assert one.per_category == many.per_category


def test_an_image_without_prediction_counts_its_segments_as_false_negatives(tmp_path, client):
    files = write_coco_panoptic(tmp_path, n_images=12, seed=3, height=40, width=48, cell=4,
                                missing=0.3)
    gt, pred = (json.loads(p.read_text()) for p in (files.gt_json, files.pred_json))
    predicted = {a["image_id"] for a in pred["annotations"]}
    missing = [a for a in gt["annotations"] if a["image_id"] not in predicted]
    assert missing
    report = evaluate_pq(str(files.gt_json), str(files.gt_masks), str(files.pred_json),
                         str(files.pred_masks), client)
    # panopticapi stops at such an image: scored on the GT without it, plus its segments
    kept = dict(gt, annotations=[a for a in gt["annotations"] if a["image_id"] in predicted])
    (tmp_path / "kept.json").write_text(json.dumps(kept))
    without = evaluate_pq(str(tmp_path / "kept.json"), str(files.gt_masks),
                          str(files.pred_json), str(files.pred_masks), client)
    fn = {row["category"]: row["FN"] for row in without.per_category}
    for a in missing:
        for s in a["segments_info"]:
            fn[s["category_id"]] += 0 if s["iscrowd"] else 1
    assert {row["category"]: row["FN"] for row in report.per_category} == fn
    assert report.diagnostics["images_missing"] == len(missing)
    assert any("no prediction" in note for note in report.notes)
