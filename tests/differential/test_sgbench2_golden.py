"""sgdask ``--protocol sgbench2`` against SGBench 2.0.0: the numbers 2.0.0 printed.

SGBench 2.0.0 (https://github.com/lorjul/sgbench, branch ``v2``, commit
26bf50e41dcc75fcb9c9628a60c16d5fa2055f58, version 2.0.0 in its ``pyproject.toml``) is not
on PyPI and CI cannot fetch it, so this file holds what it printed, run from its source
tree, on a dataset sgdask's own generator writes. ``reference_inputs(root)`` writes it::

    write_dataset(root, n_images=60, seed=SEED, height=96, width=128,
                  missing_fraction=0.15, no_relation_fraction=0.05)

and respells both submission files as file format version 2 (the only one 2.0.0 reads:
``categories`` and ``bboxes`` per image in place of ``annotation``), as
``submission_v2.zip`` and ``submission_boxes_v2.json``. sgdask converts the same two files,
so both tools read the same bytes. To re-run the reference (from the repository root, with
the dev environment's python: 2.0.0 needs only numpy, pillow and tifffile; its
``pyproject.toml`` has no build backend current setuptools accepts, so it is not
installed but put on ``PYTHONPATH``)::

    git clone https://github.com/lorjul/sgbench /tmp/sgbench-v2
    git -C /tmp/sgbench-v2 checkout 26bf50e41dcc75fcb9c9628a60c16d5fa2055f58
    PYTHONPATH=. python -c "from tests.differential.test_sgbench2_golden import reference_inputs; \\
        reference_inputs('/tmp/sgb2-data')"
    PYTHONPATH=/tmp/sgbench-v2/src python -m sgbench /tmp/sgb2-data/psg.json \\
        /tmp/sgb2-data/submission_v2.zip --gt-masks /tmp/sgb2-data/panoptic
    PYTHONPATH=/tmp/sgbench-v2/src python -m sgbench /tmp/sgb2-data/psg.json \\
        /tmp/sgb2-data/submission_boxes_v2.json

Each prints one ``name: value`` line per metric (``R@k`` and ``mR@k`` for k = 20, 50, 100,
``R@inf``, ``mR@inf``, ``InstR``, ``PRank``): ``MASKS`` and ``BOXES`` below, digit for
digit, as printed on 2026-11-25 with Python 3.11.7, numpy 1.26.4, Pillow 13.0.0 and
tifffile 2024.12.12 (sgdask agreed to 2.3e-16). The dataset has images without prediction
(7 of the 57 with relations) and duplicate masks that many-to-one matching maps onto one GT
instance, and every predicate occurs in the GT of the submitted images (2.0.0 prints NaN
for mR otherwise); the last test checks that on it 2.0.0's numbers are not 1.0.0's (R@100
is 0.041 lower), so that the golden values tell the two protocols apart.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import sgbench.file

from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate
from sgdask.testing.psg import SynthPaths, write_dataset
from tests.helpers import rewrite_zip

SEED = 0
KS = "20,50,100"

# python -m sgbench psg.json submission_v2.zip --gt-masks panoptic (SGBench 2.0.0)
MASKS = {
    "InstR": 0.6872382062743803,
    "mR@20": 0.25201512442583873,
    "R@20": 0.301489835700362,
    "mR@50": 0.37285014753764756,
    "R@50": 0.38638262322472844,
    "mR@100": 0.4007408679283679,
    "R@100": 0.4013854079643554,
    "mR@inf": 0.7021198906913193,
    "R@inf": 0.6109927596769702,
    "PRank": 0.2760770975056689,
}
# python -m sgbench psg.json submission_boxes_v2.json (SGBench 2.0.0)
BOXES = {
    "InstR": 0.6919027568367635,
    "mR@20": 0.2601996482353625,
    "R@20": 0.3085073795600112,
    "mR@50": 0.38103467134717134,
    "R@50": 0.39340016708437764,
    "mR@100": 0.4089253917378918,
    "R@100": 0.4084029518240045,
    "mR@inf": 0.7114204859294144,
    "R@inf": 0.6205165692007798,
    "PRank": 0.2772222222222222,
}
# Untouched by the new rule: they must equal sgbench 1.0.0's on the same data.
SAME_AS_1_0_0 = ("InstR", "PRank")
NEW_RULE = ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100")


def as_version_2(doc: dict) -> None:
    """A version 1 submission document respelled as version 2 (in place)."""
    doc["version"] = 2
    for image in doc["images"]:
        annotation = image.pop("annotation")
        image["categories"] = [a["category"] for a in annotation]
        image["bboxes"] = [a["bbox"][:4] for a in annotation]


def reference_inputs(root: str | Path) -> SynthPaths:
    """The generated dataset and its submissions in file format version 2."""
    data = write_dataset(root, n_images=60, seed=SEED, height=96, width=128,
                         missing_fraction=0.15, no_relation_fraction=0.05)
    rewrite_zip(data.submission_zip, data.root / "submission_v2.zip", as_version_2)
    doc = json.loads(data.submission_boxes.read_text())
    as_version_2(doc)
    (data.root / "submission_boxes_v2.json").write_text(json.dumps(doc))
    return data


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> SynthPaths:
    return reference_inputs(tmp_path_factory.mktemp("sgbench2"))


@pytest.mark.parametrize("masks", [True, False], ids=["masks", "boxes"])
def test_sgbench2_equals_what_sgbench_2_0_0_printed(data, client, tmp_path, masks):
    gt, pred = str(tmp_path / "gt"), str(tmp_path / "pred")
    ingest_gt(str(data.psg_json), gt, str(data.masks_dir) if masks else None,
              partition_size=16)
    submission = "submission_v2.zip" if masks else "submission_boxes_v2.json"
    convert_submission(str(data.root / submission), pred, gt, partition_size=16)
    report = evaluate(gt, pred, protocol="sgbench2", ks=KS, client=client)
    assert report.protocol["name"] == "sgbench2"
    assert report.diagnostics["images_missing"] > 0
    golden = MASKS if masks else BOXES
    assert set(golden) == {*NEW_RULE, *SAME_AS_1_0_0, "R@inf", "mR@inf"}
    for metric, value in golden.items():
        assert report.metrics[metric] == pytest.approx(value, abs=1e-9), metric


def test_sgbench2_notes_the_nan_sgbench_2_0_0_prints(tmp_path, client):
    """Six images cannot hold every predicate: 2.0.0 prints NaN for mR@k and mR@inf (seed 3,
    checked by running it); sgdask averages over the predicates that occur and says why."""
    small = write_dataset(tmp_path / "data", n_images=6, seed=3, height=48, width=48,
                          missing_fraction=0.35, no_relation_fraction=0.1)
    gt, pred = str(tmp_path / "gt"), str(tmp_path / "pred")
    ingest_gt(str(small.psg_json), gt, None)
    convert_submission(str(small.submission_boxes), pred, gt)
    report = evaluate(gt, pred, protocol="sgbench2", ks=KS, client=client)
    assert any("SGBench 2.0.0 prints NaN for mR@k and mR@inf" in note for note in report.notes)
    assert all(0 < report.metrics[m] < 1 for m in ("mR@50", "mR@inf"))


@pytest.mark.parametrize("masks", [True, False], ids=["masks", "boxes"])
def test_the_data_tell_sgbench_2_0_0_from_1_0_0(data, masks):
    """sgbench 1.0.0 (the installed package) on the version 1 files of the same data: the
    metrics the new rule changes differ from 2.0.0's, the others are equal."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        old = sgbench.file.evaluate(
            anno_path=str(data.psg_json),
            pred_path=str(data.submission_zip if masks else data.submission_boxes),
            gt_seg_dir=str(data.masks_dir) if masks else None, workers=0)
    golden = MASKS if masks else BOXES
    for metric in NEW_RULE:
        assert float(old[metric]) - golden[metric] > 1e-3, metric
    for metric in SAME_AS_1_0_0:
        assert float(old[metric]) == pytest.approx(golden[metric], abs=1e-12), metric
