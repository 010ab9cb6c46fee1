"""Differential test: sgdask --protocol sgbench against the real sgbench==1.0.0 package.

Three levels: per image, sgdask's terms against sgbench's own per-image functions
(``match_instances``, ``remap_triplets``, ``recall``, ``instance_recall``,
``predicate_rank``, combined as ``sgbench/file.py`` combines them) on hypothesis images;
whole generated datasets through ``sgbench.file.evaluate`` and ``sgdask.evaluate``; and
both command lines, their printed output parsed.

sgbench 1.0.0 prints NaN for mR@k when a predicate of its vocabulary never occurs in the
GT of the images with a prediction; sgdask averages over the predicates that occur and
says so in the report's notes (docs/metrics.md, "Decisions where the specification is
silent"). Only finite values are compared.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import sgbench.file
from hypothesis import HealthCheck, given, settings
from sgbench.file import _missing_values
from sgbench.match import match_instances, remap_triplets
from sgbench.metrics import instance_recall, predicate_rank, recall
from sgbench.pred import deduplicate

from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate
from sgdask.testing.psg import write_dataset
from tests.helpers import scenes
from tests.helpers.adapters import score_image
from tests.literal.spec import GT, Pred

COMPARED = ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "InstR", "PRank")
KS = "20,50,100"
NAN_NOTE = "sgbench 1.0.0 prints NaN"


def reference(dataset, masks: bool) -> dict[str, float]:
    """sgbench 1.0.0's own numbers on the raw files."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # its nanmean of all-NaN columns
        out = sgbench.file.evaluate(
            anno_path=str(dataset.psg_json),
            pred_path=str(dataset.submission_zip if masks else dataset.submission_boxes),
            gt_seg_dir=str(dataset.masks_dir) if masks else None,
            workers=0,
        )
    return {k: float(v) for k, v in out.items()}


@pytest.mark.parametrize("masks", [True, False], ids=["masks", "boxes"])
def test_sgbench_protocol_matches_reference(dataset, stores, client, masks):
    ref = reference(dataset, masks)
    assert all(math.isfinite(ref[m]) for m in COMPARED), ref
    gt, pred = (stores.gt, stores.pred) if masks else (stores.gt_boxes, stores.pred_boxes)
    report = evaluate(gt, pred, protocol="sgbench", ks=KS, client=client)
    assert report.diagnostics["images_missing"] > 0  # the data has images without prediction
    for metric in COMPARED:
        assert report.metrics[metric] == pytest.approx(ref[metric], abs=1e-9), metric


# --------------------------------------------------------------------------- command lines


def parse_sgbench_output(text: str) -> dict[str, float]:
    """``python -m sgbench`` prints one ``key: value`` line per metric (its __main__)."""
    values = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(\S+): (\S+)", line.strip())
        assert match, f"unexpected sgbench output line {line!r}"
        values[match[1]] = float(match[2])
    return values


def parse_sgdask_table(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """``sgdask evaluate``'s printed table (rows ``│ family │ v@k ...``, header ``┃``) and
    scalar line (``name value  name value``), as {metric@k: value} and {name: value}."""
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    ks = [cell.strip() for cell in header.strip("┃").split("┃")][1:]
    grid = {}
    for line in lines:
        if line.startswith("│"):
            family, *cells = [cell.strip() for cell in line.strip("│").split("│")]
            grid.update({f"{family}@{k}": float(c) for k, c in zip(ks, cells, strict=True)
                         if c != "-"})
    scalar_line = next(line for line in lines if "InstR " in line)
    scalars = {name: float(value) for name, value in
               re.findall(r"(\S+) (-?\d+\.\d+)", scalar_line)}
    return grid, scalars


def test_sgbench_protocol_through_the_cli(dataset, stores, tmp_path):
    """The `sgdask evaluate` command (own LocalCluster) writes the same numbers to metrics.json
    and prints them; `python -m sgbench` run on the raw files prints the reference."""
    ref = reference(dataset, masks=True)
    out = tmp_path / "out"
    sgbench_cli = subprocess.Popen(
        [sys.executable, "-m", "sgbench", str(dataset.psg_json), str(dataset.submission_zip),
         "--gt-masks", str(dataset.masks_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(
        [sys.executable, "-m", "sgdask", "evaluate", "--gt", stores.gt, "--pred", stores.pred,
         "--protocol", "sgbench", "--k", KS, "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    printed_ref, sgbench_err = sgbench_cli.communicate(timeout=300)
    assert sgbench_cli.returncode == 0, sgbench_err
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["protocol"]["name"] == "sgbench"
    for metric in COMPARED:
        assert metrics["metrics"][metric] == pytest.approx(ref[metric], abs=1e-9), metric
    assert (out / "per_predicate.parquet").exists() and (out / "per_image.parquet").exists()
    cli_ref = parse_sgbench_output(printed_ref)
    assert set(cli_ref) == set(COMPARED)
    for metric in COMPARED:  # the printed reference is the in-process one, digit for digit
        assert cli_ref[metric] == ref[metric], metric
        assert metrics["metrics"][metric] == pytest.approx(cli_ref[metric], abs=1e-9), metric
    grid, scalars = parse_sgdask_table(proc.stdout)  # printed in percent, 2 decimals
    for metric in ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100"):
        assert grid[metric] == pytest.approx(100 * cli_ref[metric], abs=0.005 + 1e-9), metric
    assert scalars["InstR"] == pytest.approx(100 * cli_ref["InstR"], abs=0.005 + 1e-9)
    assert scalars["PRank"] == pytest.approx(cli_ref["PRank"], abs=0.005 + 1e-9)


# --------------------------------------------------------------------------- per image

N_PREDICATES = scenes.N_PREDICATES
IMAGE_KS = (1, 2, 3, 5, 20, 50, 100)


def sgbench_triplets(rows) -> np.ndarray:
    """A triplet list as sgbench's parse_pred reads it (deduplicate, order kept)."""
    return np.empty((0, 3), dtype=int) if len(rows) == 0 else deduplicate(np.array(rows))


def sgbench_instances(image: scenes.Image) -> tuple[np.ndarray, np.ndarray]:
    """(GT instances, predicted instances) as sgbench.file._work loads them: boxes, or
    (n, H, W) masks (the GT from its panoptic ids: one layer per segment)."""
    gt, pred = image.gt, image.pred
    if gt.boxes is not None:
        return (np.array(gt.boxes, dtype=np.float64),
                np.array(pred.boxes, dtype=np.float64).reshape(-1, 4))
    seg_ids = np.arange(1, len(gt.categories) + 1)
    return gt.label_image[None] == seg_ids[:, None, None], np.asarray(pred.masks, dtype=bool)


def sgbench_image(image: scenes.Image) -> dict:
    """sgbench 1.0.0's per-image values, combined as its file.py combines them (with more
    ks: its functions take any k)."""
    gt_triplets = np.unique(np.array(image.gt.relations), axis=0)
    if image.pred is None:
        return _missing_values(np.array(image.gt.relations), N_PREDICATES)
    gt_instances, pred_instances = sgbench_instances(image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0 / 0 box IoU: NaN, on purpose
        mapping = match_instances(gt_instances=gt_instances,
                                  gt_labels=np.array(image.gt.categories),
                                  pred_instances=pred_instances,
                                  pred_labels=np.array(image.pred.categories))
    graph = remap_triplets(mapping, sgbench_triplets(image.pred.graph))
    ng = remap_triplets(mapping, sgbench_triplets(image.pred.ng))
    out = {}
    for k in IMAGE_KS:
        for mean, name in ((True, f"mR@{k}"), (False, f"R@{k}")):
            out[name] = recall(k=k, mean=mean, gt_triplets=gt_triplets,
                               matched_triplets=graph, num_predicates=N_PREDICATES)
    out["InstR"] = instance_recall(num_gt_instances=len(gt_instances), inst_pred2gt=mapping)
    out["PRank"] = predicate_rank(gt_triplets=gt_triplets, matched_triplets=ng,
                                  num_predicates=N_PREDICATES)
    return out


def defined(values) -> dict[int, float]:
    """sgbench's per-predicate array (NaN = undefined) as {predicate: value}."""
    return {p: float(v) for p, v in enumerate(values) if not math.isnan(v)}


def check_against_sgbench(image: scenes.Image) -> None:
    ref = sgbench_image(image)
    terms = score_image(image, "sgbench", [str(k) for k in IMAGE_KS]).terms
    for name, value in ref.items():
        if name.startswith("mR@") or name == "PRank":
            got = {p: n / d for p, (n, d) in terms.per_predicate.get(name, {}).items()}
            expected = defined(value)
            assert set(got) == set(expected), (name, got, expected)
            for p in got:
                assert got[p] == pytest.approx(expected[p], abs=1e-12), (name, p)
        else:
            num, den = terms.scalars[name]
            assert num / den == pytest.approx(value, abs=1e-12), name
    if image.pred is None:  # left out of every mean metric, no PRank (sgbench: NaN)
        assert terms.per_predicate == {} and "PRank" not in ref


PER_IMAGE = settings(max_examples=200, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@PER_IMAGE
@given(scenes.images())
def test_per_image_terms_equal_sgbench_functions_masks(image):
    check_against_sgbench(image)


@PER_IMAGE
@given(scenes.images(boxes=True, min_pred=1))
def test_per_image_terms_equal_sgbench_functions_boxes(image):
    """At least one predicted box: sgbench 1.0.0 itself crashes on an image with none (its
    box IoU indexes a 1-D empty array)."""
    check_against_sgbench(image)


def test_zero_area_boxes_match_as_in_sgbench():
    """sgbench 1.0.0 computes the IoU of two zero-area boxes as 0 / 0 = NaN; its argmax
    takes NaN as the maximum and its ``IoU < 0.5`` test lets it through, so a zero-area
    predicted box matches the first zero-area GT box of its category (here GT 0, not GT 1,
    and never GT 2 of another category). The sgbench protocol reproduces it; singlempo
    matches nothing to a zero-area box."""
    gt = GT("flat", [0, 0, 1], [(0, 2, 1), (1, 2, 1)],
            boxes=[[2, 2, 2, 5], [6, 0, 6, 9], [4, 4, 8, 8]])
    pred = Pred([0, 1], [(0, 1, 1)], [(0, 1, 1)], boxes=[[7, 1, 7, 3], [4, 4, 8, 8]])
    image = scenes.Image(gt, pred)
    check_against_sgbench(image)
    sgb = score_image(image, "sgbench", ["20"]).terms
    assert sgb.scalars["R@20"] == (1, 2) and sgb.scalars["InstR"] == (2, 3)
    single = score_image(image, "singlempo", ["20"]).terms
    assert single.scalars["R@20"] == (0, 2) and single.scalars["InstR"] == (1, 3)


# --------------------------------------------------------------------------- whole datasets


@pytest.mark.parametrize(("seed", "n_images", "height", "width", "missing", "nan_mr"), [
    (1, 14, 48, 64, 0.0, False),
    (2, 24, 64, 48, 0.25, False),
    (3, 6, 48, 48, 0.35, True),  # too few images for every predicate: sgbench's mR is NaN
], ids=["complete", "missing", "few-images"])
def test_generated_datasets_match_sgbench(tmp_path, client, seed, n_images, height, width,
                                          missing, nan_mr):
    """sgbench.file.evaluate vs sgdask.evaluate(protocol="sgbench") on synthetic datasets of
    different seeds, sizes and missing fractions, masks and boxes, to 1e-9."""
    data = write_dataset(tmp_path / "data", n_images=n_images, seed=seed, height=height,
                         width=width, missing_fraction=missing, no_relation_fraction=0.1)
    for masks in (True, False):
        gt, pred = str(tmp_path / f"gt{masks}"), str(tmp_path / f"pred{masks}")
        ingest_gt(str(data.psg_json), gt, str(data.masks_dir) if masks else None,
                  partition_size=5)
        convert_submission(str(data.submission_zip if masks else data.submission_boxes),
                           pred, gt, partition_size=5)
        ref = reference(data, masks)
        report = evaluate(gt, pred, protocol="sgbench", ks=KS, client=client)
        assert (report.diagnostics["images_missing"] > 0) == (missing > 0)
        finite = [m for m in COMPARED if math.isfinite(ref[m])]
        assert ("mR@50" not in finite) == nan_mr, ref
        assert {"R@20", "InstR", "PRank"} <= set(finite)
        for metric in finite:
            assert report.metrics[metric] == pytest.approx(ref[metric], abs=1e-9), metric
        if nan_mr:  # sgdask reports a number and says why it differs
            assert math.isfinite(report.metrics["mR@50"])
            assert any(NAN_NOTE in note for note in report.notes), report.notes
