"""The in-memory evaluator (``sgdask.Evaluator``) gives the CLI's report, to the last bit.

Hypothesis images (tests/helpers/scenes.py) go through ``update`` one by one, in shards merged in
any order, through ``state()`` / ``from_state`` with the state's plain part sent through
JSON, and through files -> stores -> the Dask pipeline (tests/helpers/adapters.py writes them as
psg.json + panoptic PNGs + an SGBench ZIP): every report is identical. Plus the input
forms (mappings, attribute objects, torch-like tensors) and one-line errors for bad input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import sgdask
from sgdask.errors import SgdaskError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate_protocols
from tests.helpers import rewrite_zip, scenes
from tests.helpers.adapters import training_doc, write_files

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])
QUICK = (Phase.explicit, Phase.reuse, Phase.generate)  # failures are reported unshrunk
PROTOCOLS = ("singlempo", "sgbench", "multimpo")
AGGREGATIONS = ("per_predicate", "pooled", "image")
CLASSES = [f"c{i}" for i in range(scenes.N_CATEGORIES)]
PREDICATES = [f"p{i}" for i in range(scenes.N_PREDICATES)]


# --------------------------------------------------------------------------- inputs


class Tensor:
    """Stands for a torch tensor: no __array__, only detach / cpu / numpy."""

    def __init__(self, array: Any) -> None:
        self.array = np.asarray(array)

    def detach(self) -> Tensor:
        return self

    def cpu(self) -> Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return self.array


def gt_fields(image: scenes.Image) -> dict[str, Any]:
    gt = image.gt
    out: dict[str, Any] = {"relations": np.asarray(gt.relations, dtype=np.int64).reshape(-1, 3),
                           "categories": np.asarray(gt.categories, dtype=np.int64)}
    if gt.label_image is not None:
        out["labels"] = np.asarray(gt.label_image, dtype=np.int64) - 1  # -1 void
    if gt.boxes is not None:
        out["boxes"] = np.asarray(gt.boxes, dtype=np.float64).reshape(-1, 4)
    return out


def pred_fields(image: scenes.Image, ng: bool = True) -> dict[str, Any] | None:
    pred = image.pred
    if pred is None:
        return None
    out: dict[str, Any] = {"categories": np.asarray(pred.categories, dtype=np.int64),
                           "triplets": np.asarray(pred.graph, dtype=np.int64).reshape(-1, 3)}
    if ng:
        out["ng_triplets"] = np.asarray(pred.ng, dtype=np.int64).reshape(-1, 3)
    if pred.scores is not None:
        out["scores"] = np.asarray(pred.scores, dtype=np.float64)
    if pred.masks is not None:
        out["masks"] = np.asarray(pred.masks, dtype=bool)
    if pred.boxes is not None:
        out["boxes"] = np.asarray(pred.boxes, dtype=np.float64).reshape(-1, 4)
    return out


def styled(fields: dict[str, Any] | None, style: str) -> Any:
    """The same fields as a dict, an attribute object, or an object of torch-like
    tensors."""
    if fields is None or style == "dict":
        return fields
    if style == "tensors":
        return SimpleNamespace(**{k: Tensor(v) for k, v in fields.items()})
    return SimpleNamespace(**fields)


def evaluator(protocol: str, ks: list[str], training=None, aggregation: str = "per_predicate",
              legacy: bool = True) -> sgdask.Evaluator:
    stats = None if training is None else training_doc(training)
    return sgdask.Evaluator(protocol=protocol, ks=",".join(ks), predicates=PREDICATES,
                            classes=CLASSES, stats=stats, aggregation=aggregation,
                            legacy=legacy, things=len(CLASSES))  # as write_files: all things


def fed(ev: sgdask.Evaluator, images: list[scenes.Image], style: str = "dict", ng: bool = True
        ) -> sgdask.Evaluator:
    for image in images:
        ev.update(image.gt.image_id, styled(gt_fields(image), style),
                  styled(pred_fields(image, ng), style))
    return ev


def comparable(report: sgdask.Report) -> dict:
    """Everything a report computes (not its provenance)."""
    return {"metrics": report.metrics, "per_predicate": report.per_predicate,
            "per_image": report.per_image, "per_category": report.per_category,
            "diagnostics": report.diagnostics,
            "left_out": report.left_out, "notes": report.notes, "ks": report.ks,
            "protocol": report.protocol, "aggregation": report.aggregation,
            "options": report.options}


def through_json(state: Any) -> Any:
    """The state with every numpy array taken out, the rest sent through JSON, the arrays
    put back: what a gather across ranks of the plain part would do."""
    arrays: list[np.ndarray] = []

    def take(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            arrays.append(value)
            return {"__array__": len(arrays) - 1}
        if isinstance(value, dict):
            return {k: take(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [take(v) for v in value]
        return value

    def put(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[value["__array__"]].copy()
            return {k: put(v) for k, v in value.items()}
        if isinstance(value, list):
            return [put(v) for v in value]
        return value

    return put(json.loads(json.dumps(take(state))))


# --------------------------------------------------------------------------- invariance


@settings(max_examples=25, phases=QUICK, **SETTINGS)
@given(scenes.datasets(max_images=6), scenes.datasets(boxes=True, max_images=6),
       scenes.k_lists(), scenes.trainings(), st.sampled_from(PROTOCOLS),
       st.sampled_from(AGGREGATIONS), st.sampled_from(("dict", "object", "tensors")),
       st.booleans(), st.randoms(use_true_random=False))
def test_updates_shards_merges_and_states_give_one_report(masks, boxes, ks, training, protocol,
                                                          aggregation, style, ng, rng):
    """One by one, in shuffled shards merged in a shuffled order, and through state() /
    from_state (JSON for the plain part): identical reports."""
    images = masks if rng.random() < 0.5 else boxes
    reference = fed(evaluator(protocol, ks, training, aggregation), images, ng=ng).compute()

    order = list(images)
    rng.shuffle(order)
    n_shards = rng.randint(1, len(order))
    shards = [order[i::n_shards] for i in range(n_shards)]
    evaluators = [fed(evaluator(protocol, ks, training, aggregation), s, style, ng)
                  for s in shards]
    states = [through_json(e.state()) for e in evaluators]
    rng.shuffle(states)
    total = sgdask.Evaluator.from_state(states[0])
    for state in states[1:]:
        total.merge(sgdask.Evaluator.from_state(state))
    assert comparable(total.compute()) == comparable(reference)

    rng.shuffle(evaluators)
    merged = evaluators[0]
    for e in evaluators[1:]:
        merged.merge(e)
    assert comparable(merged.compute()) == comparable(reference)
    with_ng = ng and any(image.pred is not None for image in images)
    assert any(name.startswith("ngR@") for name in reference.metrics) == with_ng


# --------------------------------------------------------------------------- the pipeline


@st.composite
def file_datasets(draw, max_images: int = 4) -> list[scenes.Image]:
    """Mask images that an SGBench ZIP can hold (every prediction has an instance)."""
    c = scenes.DrawChooser(draw)
    return scenes.dataset(c, c.integer(1, max_images), False, min_pred=1)


def pipeline_reports(root, images, ks, training, client, aggregation="per_predicate",
                     drop_ng: bool = False) -> dict[str, sgdask.Report]:
    """The images as files -> GT store and submission store -> the Dask pipeline."""
    psg, masks_dir, archive = write_files(root, images, training, scenes.N_CATEGORIES,
                                          scenes.N_PREDICATES)
    if drop_ng:
        def no_ng(doc):
            for img in doc["images"]:
                img.pop("ng_triplets")

        archive = rewrite_zip(archive, root / "no_ng.zip", edit_doc=no_ng)
    gt, pred = str(root / "gt.store"), str(root / "pred.store")
    ingest_gt(str(psg), gt, str(masks_dir), partition_size=2)
    convert_submission(str(archive), pred, gt, partition_size=2)
    return evaluate_protocols(gt, pred, ",".join(PROTOCOLS), ks=",".join(ks),
                              aggregation=aggregation, client=client, legacy=True)


def extra_images(images: list[scenes.Image]) -> list[scenes.Image]:
    """What write_files adds: a test image without relations (not evaluated, counted)."""
    first = images[0].gt
    return [scenes.Image(scenes.GT("zzz0", first.categories, [],
                                   label_image=first.label_image), None)]


@settings(max_examples=6, phases=QUICK, **SETTINGS)
@given(file_datasets(), scenes.k_lists(), scenes.trainings(), st.sampled_from(AGGREGATIONS))
def test_evaluator_equals_the_pipeline(client, tmp_path_factory, images, ks, training,
                                       aggregation):
    """Every protocol: the evaluator's report equals the Dask pipeline's on the same data
    written as files, ingested and converted (metrics, tables, diagnostics)."""
    root = tmp_path_factory.mktemp("files")
    reports = pipeline_reports(root, images, ks, training, client, aggregation)
    for protocol in PROTOCOLS:
        ev = fed(evaluator(protocol, ks, training, aggregation),
                 [*images, *extra_images(images)])
        assert comparable(ev.compute()) == comparable(reports[protocol]), protocol


def test_evaluator_equals_the_pipeline_without_ng_lists(client, tmp_path):
    """A model without NG lists: the NG metrics are left out, as for a ZIP without
    ng_triplets; the rest is the pipeline's."""
    chooser = scenes.RandomChooser(31)
    images = scenes.dataset(chooser, 8, boxes=False, min_pred=1)
    training = scenes.training(chooser)
    ks = ["1", "3", "20", "x0.5"]
    reports = pipeline_reports(tmp_path, images, ks, training, client, drop_ng=True)
    for protocol in PROTOCOLS:
        ev = fed(evaluator(protocol, ks, training), [*images, *extra_images(images)],
                 ng=False)
        report = ev.compute()
        assert comparable(report) == comparable(reports[protocol]), protocol
        assert "ngR@k" in report.left_out and not any(m.startswith("ng") for m in
                                                    report.metrics)
    assert reports["singlempo"].metrics["R@20"] > 0


def test_evaluator_equals_the_command_line(tmp_path):
    """`sgdask ingest-gt`, `convert` and `evaluate --out` in their own processes: the
    evaluator's metrics.json is the command's."""
    chooser = scenes.RandomChooser(5)
    images = scenes.dataset(chooser, 6, boxes=False, min_pred=1)
    psg, masks_dir, archive = write_files(tmp_path, images, None, scenes.N_CATEGORIES,
                                          scenes.N_PREDICATES)
    gt, pred, out = (str(tmp_path / n) for n in ("gt.store", "pred.store", "out"))
    for args in (("ingest-gt", str(psg), "--masks", str(masks_dir), "--out", gt),
                 ("convert", str(archive), "--gt", gt, "--out", pred, "--in-process"),
                 ("evaluate", "--gt", gt, "--pred", pred, "--k", "1,5,x1", "--workers", "1",
                  "--out", out)):
        proc = subprocess.run([sys.executable, "-m", "sgdask", *args], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    report = fed(evaluator("singlempo", ["1", "5", "x1"], legacy=False),
                 [*images, *extra_images(images)]).compute()
    assert json.loads(report.to_json())["metrics"] == written["metrics"]
    assert report.diagnostics == written["diagnostics"]


# --------------------------------------------------------------------------- input forms


def one_image() -> scenes.Image:
    return scenes.image(scenes.RandomChooser(3), "a", min_pred=2, missing=False)


def test_input_forms_give_the_same_report():
    """A dict, an attribute object, torch-like tensors and plain lists: the same report."""
    images = scenes.dataset(scenes.RandomChooser(8), 5, boxes=False, min_pred=1,
                            missing=False)
    reports = [fed(evaluator("singlempo", ["1", "20"]), images, style).compute()
               for style in ("dict", "object", "tensors")]
    as_lists = evaluator("singlempo", ["1", "20"])
    for image in images:
        gt, pred = gt_fields(image), pred_fields(image)
        as_lists.update(image.gt.image_id, {k: v.tolist() for k, v in gt.items()},
                        {k: v.tolist() for k, v in pred.items()})
    reports.append(as_lists.compute())
    assert all(comparable(r) == comparable(reports[0]) for r in reports[1:])


def test_tensor_image_ids_are_their_values():
    class ScalarTensor:
        def item(self):
            return 5

        def __str__(self):
            return "tensor(5)"

    image = one_image()
    ev = evaluator("singlempo", ["20"])
    ev.update(ScalarTensor(), gt_fields(image), pred_fields(image))
    ev.update(np.int64(6), gt_fields(image), pred_fields(image))
    assert [row["image_id"] for row in ev.compute().per_image] == ["5", "6"]


def test_statistics_as_file_table_or_psg_json(tmp_path):
    """stats: a `sgdask stats` file, its table or a parsed psg.json: the same zero-shot
    metrics."""
    from sgdask.store.training_stats import train_stats, write_stats

    chooser = scenes.RandomChooser(31)
    images = scenes.dataset(chooser, 6, boxes=False, min_pred=1)
    doc = training_doc(scenes.training(chooser))
    table = train_stats(doc, "psg.json")
    write_stats(table, str(tmp_path / "stats.parquet"))
    reports = [fed(sgdask.Evaluator("singlempo", "1,20", PREDICATES, CLASSES, stats),
                   images).compute()
               for stats in (doc, table, str(tmp_path / "stats.parquet"))]
    assert "zR@20" in reports[0].metrics and "wIMR@20" in reports[0].metrics
    assert all(comparable(r) == comparable(reports[0]) for r in reports[1:])
    with pytest.raises(SgdaskError, match="stats: int"):
        sgdask.Evaluator("singlempo", "20", PREDICATES, CLASSES, 5)


def test_missing_prediction_and_images_without_relations_are_counted():
    image = one_image()
    ev = evaluator("singlempo", ["20"])
    ev.update("a", gt_fields(image), None)
    ev.update("b", {**gt_fields(image), "relations": np.empty((0, 3), np.int64)},
              pred_fields(image))
    report = ev.compute()
    assert report.metrics["R@20"] == 0
    assert report.diagnostics["images_missing"] == 1
    assert report.diagnostics["gt_images"] == 2
    assert report.diagnostics["gt_images_without_relations"] == 1
    assert report.diagnostics["submission_images_not_evaluated"] == 1
    assert len(ev) == 2


def bad(update_args: tuple, *fragments: str) -> None:
    ev = evaluator("singlempo", ["20"])
    with pytest.raises(ValueError) as err:
        ev.update(*update_args)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(err.value, SgdaskError) and len(ev) == 0


def test_bad_input_names_image_and_field():
    image = one_image()
    gt, pred = gt_fields(image), pred_fields(image)
    h, w = gt["labels"].shape
    n = len(pred["categories"])
    bad(("img7", {k: v for k, v in gt.items() if k != "relations"}, pred),
        "image img7", "gt.relations", "missing")
    bad(("img7", {**gt, "relations": np.zeros((2, 2), np.int64)}, pred),
        "gt.relations", "shape (2, 2)")
    bad(("img7", {**gt, "relations": np.array([[0, 99, 0]])}, pred),
        "gt.relations[0]", "out of range")
    bad(("img7", {**gt, "categories": gt["categories"] + 10}, pred), "gt.categories",
        "out of range")
    bad(("img7", {**gt, "labels": gt["labels"][0]}, pred), "gt.labels", "H x W")
    bad(("img7", {"relations": gt["relations"], "categories": gt["categories"]}, pred),
        "image img7", "gt", "neither labels nor boxes")
    bad(("img7", gt, {**pred, "masks": np.zeros((n, h + 1, w), bool)}), "pred.masks",
        f"({n}, {h}, {w})")
    bad(("img7", gt, {**pred, "masks": np.full((n, h, w), 0.7)}), "pred.masks",
        "threshold")
    bad(("img7", gt, {**pred, "triplets": np.array([[0, 0, 1]])}), "pred.triplets[0]",
        "subject equals object")
    bad(("img7", gt, {**pred, "triplets": np.array([[0, 1, 99]])}), "pred.triplets[0]",
        "predicate 99")
    bad(("img7", gt, {**pred, "triplets": np.array([[0.0, 1.0, 2.0]])}), "pred.triplets",
        "integers")
    bad(("img7", gt, {**pred, "scores": np.ones(n + 1)}), "pred.scores")
    bad(("img7", gt, {**pred, "ng_triplets": [[0, 1], [1]]}), "pred.ng_triplets",
        "not an array")
    bad(("img7", gt, {k: v for k, v in pred.items() if k != "masks"}), "pred",
        "neither masks nor boxes")
    bad(("img7", gt, {**pred, "boxes": np.zeros((n, 3))}), "pred.boxes", f"({n}, 4)")

    ev = evaluator("singlempo", ["20"])
    ev.update("a", gt, pred)
    with pytest.raises(ValueError, match="image a: image_id: updated twice"):
        ev.update("a", gt, pred)


def test_merge_refuses_other_settings_and_shared_images():
    image = one_image()
    a, b = evaluator("singlempo", ["20"]), evaluator("sgbench", ["20"])
    with pytest.raises(SgdaskError, match="different settings"):
        a.merge(b)
    c = evaluator("singlempo", ["20"])
    for ev in (a, c):
        ev.update("a", gt_fields(image), pred_fields(image))
    with pytest.raises(SgdaskError, match="image a is in both"):
        a.merge(c)
    with pytest.raises(SgdaskError, match="nothing to evaluate"):
        evaluator("singlempo", ["20"]).compute()


def test_import_stays_cheap():
    """`import sgdask` loads neither Dask nor pyarrow; `sgdask.Evaluator` is loaded on
    first use."""
    code = ("import sys, sgdask; assert 'dask' not in sys.modules; "
            "assert 'pyarrow' not in sys.modules; sgdask.Evaluator")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_evaluator_runs_without_dask_pyarrow_zarr():
    """A training loop's evaluator runs on the Dask-free core: importing it, scoring an
    image and computing the report load none of Dask, pyarrow, zarr, fsspec or s3fs."""
    code = ("import sys, numpy as np, sgdask.evaluator as e; "
            "ev = e.Evaluator('singlempo', '20', 2, 2); "
            "image = {'categories': np.array([0, 1]), 'relations': np.array([[0, 1, 1]]), "
            "'boxes': np.array([[0, 0, 4, 4], [2, 2, 8, 8]])}; "
            "ev.update('a', image, {**image, 'triplets': image['relations']}); "
            "assert ev.compute().metrics['R@20'] == 1; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'dask', 'distributed', 'pyarrow', 'zarr', 'fsspec', 's3fs'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
