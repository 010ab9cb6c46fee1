"""The ``sgbpytorch`` protocol (SPEC 5.4, issue 18): hand-computed cases for each convention
of Scene-Graph-Benchmark.pytorch, and the fast path against the literal implementation
(tests/literal/sgbpytorch.py) on hypothesis box datasets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdask.core.accum import Accumulator
from sgdask.core.finalize import build_report
from sgdask.core.plan import EvalSettings
from sgdask.core.settings import Settings
from sgdask.errors import InstanceMismatch
from sgdask.kernels.selection import parse_ks
from sgdask.metrics.terms import evaluate_image, missing_image_result
from sgdask.protocols import MULTIMPO, SGBPYTORCH, SINGLEMPO, Protocol, get_protocol
from sgdask.report import Report
from sgdask.types import BitMasks, ImageGT, ImagePred, ZeroShot, as_triplets
from tests.literal import sgbpytorch as literal

N_CLASSES, N_PREDICATES = 3, 4


def fast_report(images: list[literal.VGImage], protocol: Protocol, ks: str,
                n_predicates: int = N_PREDICATES, seen: set | None = None,
                legacy: bool = True) -> Report:
    """sgdask's per-image kernels, accumulator and report on the literal's images."""
    k_specs = parse_ks(ks)
    zero_shot = None
    if seen is not None:
        keys = np.array(sorted((s * N_CLASSES + o) * n_predicates + p for s, o, p in seen),
                        dtype=np.int64)
        zero_shot = ZeroShot(keys, N_CLASSES, n_predicates)
    acc = Accumulator()
    for im in images:
        if not im.gt_rels:
            continue
        gt = ImageGT(im.image_id, np.array(im.gt_classes, dtype=np.int64),
                     as_triplets(im.gt_rels), boxes=np.array(im.gt_boxes, dtype=np.float64),
                     size=(im.height, im.width))
        if im.graph is None:
            result = missing_image_result(gt, protocol, k_specs, zero_shot=zero_shot,
                                          legacy=legacy)
        else:
            pred = ImagePred(im.image_id, np.array(im.pred_classes, dtype=np.int64),
                             as_triplets(im.graph), as_triplets(im.ng or []),
                             boxes=np.array(im.pred_boxes, dtype=np.float64).reshape(-1, 4))
            result = evaluate_image(gt, pred, protocol, k_specs, zero_shot=zero_shot,
                                    legacy=legacy)
        acc.update(result)
    names = {"predicate_classes": [f"p{i}" for i in range(n_predicates)]}
    settings_ = EvalSettings(protocol, Settings(ks=ks, legacy=legacy), True,
                             seen is not None)
    return build_report(acc, [], settings_, None, names, {}, {})


FAMILIES = ("R", "ngR", "zR", "ngzR", "mR", "mNgR", "A")


def compared(report: Report) -> dict[str, float]:
    return {n: v for n, v in report.metrics.items()
            if n.partition("@")[0] in FAMILIES and not n.endswith("@inf")}


def assert_agrees(images: list[literal.VGImage], ks: list[int], seen: set | None) -> None:
    expected = literal.evaluate(images, ks, N_PREDICATES, seen)
    report = fast_report(images, SGBPYTORCH, ",".join(map(str, ks)), seen=seen)
    actual = compared(report)
    assert set(actual) == set(expected.metrics), (sorted(actual), sorted(expected.metrics))
    for name, value in expected.metrics.items():
        assert actual[name] == pytest.approx(value, abs=1e-12), name
    if expected.metrics:
        for name, value in expected.mean_over_occurring.items():
            assert report.mean_over_occurring[name] == pytest.approx(value, abs=1e-12), name
    diag = report.diagnostics
    assert diag.get("images_skipped", 0) == expected.skipped
    assert diag.get("images_missing", 0) == expected.missing
    assert diag.get("images_without_proposals", 0) == expected.without_proposals
    assert diag["predicates_absent"] == expected.absent_predicates
    if not any(n.startswith("A@") for n in expected.metrics) and expected.metrics:
        assert "A@k" in report.left_out


# --------------------------------------------------------------------------- hypothesis


def boxes_st(width: int, height: int, n: int):
    """Integer boxes near and beyond the image (clipping matters), often touching (IoU
    exactly 0.5 under one convention or the other), zero-area ones included."""
    corner = st.tuples(st.integers(-1, width + 1), st.integers(-1, height + 1),
                       st.integers(0, 4), st.integers(0, 4))
    return st.lists(corner.map(lambda c: [c[0], c[1], c[0] + c[2], c[1] + c[3]]),
                    min_size=n, max_size=n)


def triplets_st(n: int, min_size: int, max_size: int):
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(
        lambda t: t[0] != t[1])
    return st.lists(st.tuples(pair, st.integers(0, N_PREDICATES - 1)).map(
        lambda t: (t[0][0], t[0][1], t[1])), min_size=min_size, max_size=max_size)


@st.composite
def vg_images(draw, image_id: str, predcls: bool) -> literal.VGImage:
    width, height = draw(st.integers(3, 8)), draw(st.integers(3, 8))
    n_gt = draw(st.integers(2, 4))
    gt_boxes = draw(boxes_st(width, height, n_gt))
    gt_classes = draw(st.lists(st.integers(0, N_CLASSES - 1), min_size=n_gt, max_size=n_gt))
    rels = draw(triplets_st(n_gt, 1, 4))
    if rels and draw(st.booleans()):  # duplicate GT relations
        rels = [*rels, rels[draw(st.integers(0, len(rels) - 1))]]
    image = literal.VGImage(image_id, height, width, gt_classes, gt_boxes, rels)
    kind = draw(st.sampled_from(["predict", "predict", "predict", "empty", "missing"]))
    if kind == "missing":
        return image
    if predcls:
        image.pred_classes, image.pred_boxes = list(gt_classes), [list(b) for b in gt_boxes]
    else:
        n_pred = draw(st.integers(2, 4))
        boxes = draw(boxes_st(width, height, n_pred))
        for i in range(n_pred):  # some predictions copy a GT box (shifted by 0 or 1)
            if draw(st.booleans()):
                j = draw(st.integers(0, n_gt - 1))
                shift = draw(st.integers(0, 1))
                boxes[i] = [gt_boxes[j][0], gt_boxes[j][1], gt_boxes[j][2] + shift,
                            gt_boxes[j][3]]
        image.pred_boxes = boxes
        image.pred_classes = draw(st.lists(st.integers(0, N_CLASSES - 1), min_size=n_pred,
                                           max_size=n_pred))
    n = len(image.pred_boxes)
    image.graph = [] if kind == "empty" else draw(triplets_st(n, 1, 6))
    image.ng = draw(triplets_st(n, 0, 8))
    return image


@st.composite
def vg_datasets(draw) -> list[literal.VGImage]:
    predcls = draw(st.booleans())
    n = draw(st.integers(1, 5))
    return [draw(vg_images(f"img{i}", predcls)) for i in range(n)]


ALL_TYPES = list(itertools.product(range(N_CLASSES), range(N_CLASSES), range(N_PREDICATES)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vg_datasets(), st.sets(st.sampled_from(ALL_TYPES)) | st.none(),
       st.sampled_from([[1, 2, 3], [1, 5, 20, 100], [2, 50]]))
def test_fast_path_equals_the_literal_sgbpytorch(images, seen, ks):
    assert_agrees(images, ks, seen)


# --------------------------------------------------------------------------- by hand


def image(gt_boxes, gt_classes, rels, pred_boxes=None, pred_classes=None, graph=None,
          ng=None, image_id="a", size=(20, 20)) -> literal.VGImage:
    return literal.VGImage(image_id, size[0], size[1], gt_classes, gt_boxes, rels,
                           pred_classes, pred_boxes, graph, ng)


def test_inclusive_iou_exactly_one_half():
    """Pred [0,0,9,9] vs GT [0,0,9,19]: inclusive areas 100 and 200, intersection 100:
    IoU = 1/2, a hit under sgbpytorch; continuous: 81 / 171 < 1/2, a miss under multimpo.
    R@1 = 1 (sgbpytorch), 0 (multimpo)."""
    boxes = [[0, 0, 9, 9], [10, 0, 19, 9]]
    im = image([[0, 0, 9, 19], [10, 0, 19, 9]], [0, 1], [(0, 1, 0)], boxes, [0, 1],
               [(0, 1, 0)], [(0, 1, 0)])
    assert fast_report([im], SGBPYTORCH, "1").metrics["R@1"] == 1.0
    assert fast_report([im], MULTIMPO, "1").metrics["R@1"] == 0.0
    assert literal.evaluate([im], [1], N_PREDICATES, None).metrics["R@1"] == 1.0


def test_gt_boxes_clipped_to_the_image():
    """GT subject [0,0,30,9] in an image 10 wide is [0,0,9,9] once clipped: IoU 1 with the
    prediction [0,0,9,9] (unclipped, inclusive: 100 / 310, a miss). R@1 = 1."""
    im = image([[0, 0, 30, 9], [0, 10, 9, 19]], [0, 1], [(0, 1, 0)],
               [[0, 0, 9, 9], [0, 10, 9, 19]], [0, 1], [(0, 1, 0)], [], size=(20, 10))
    assert fast_report([im], SGBPYTORCH, "1").metrics["R@1"] == 1.0
    im.width = 40  # nothing to clip: the GT box stays 31 wide
    assert fast_report([im], SGBPYTORCH, "1").metrics["R@1"] == 0.0


def test_duplicate_gt_relations_count():
    """GT relations (0,1,p0) twice and (1,0,p1); the prediction hits (0,1,p0) only.
    sgbpytorch: R@1 = 2/3 (both copies recalled); deduplicated (multimpo): 1/2.
    mR@1 over the 4-predicate vocabulary: p0 2/2, p1 0/1 -> (1 + 0) / 4 = 1/4."""
    boxes = [[0, 0, 9, 9], [10, 10, 19, 19]]
    im = image(boxes, [0, 1], [(0, 1, 0), (0, 1, 0), (1, 0, 1)], boxes, [0, 1],
               [(0, 1, 0)], [(0, 1, 0)])
    report = fast_report([im], SGBPYTORCH, "1")
    assert report.metrics["R@1"] == pytest.approx(2 / 3, abs=1e-15)
    assert report.metrics["mR@1"] == pytest.approx(1 / 4, abs=1e-15)
    assert report.mean_over_occurring["mR@1"] == pytest.approx(1 / 2, abs=1e-15)
    assert fast_report([im], MULTIMPO, "1").metrics["R@1"] == pytest.approx(1 / 2)


def test_images_without_proposals_are_skipped_and_counted():
    """a: R@1 = 1/2; b: empty graph list; c: not in the submission. sgbpytorch: R@1 = 1/2
    over 1 image (b and c skipped: images_skipped 2, images_missing 1,
    images_without_proposals 1); singlempo scores both 0: (1/2 + 0 + 0) / 3 = 1/6."""
    boxes = [[0, 0, 9, 9], [10, 10, 19, 19]]
    rels = [(0, 1, 0), (1, 0, 1)]
    a = image(boxes, [0, 1], rels, boxes, [0, 1], [(0, 1, 0)], [(0, 1, 0)], "a")
    b = image(boxes, [0, 1], rels, boxes, [0, 1], [], [(0, 1, 0)], "b")
    c = image(boxes, [0, 1], rels, image_id="c")
    report = fast_report([a, b, c], SGBPYTORCH, "1")
    assert report.metrics["R@1"] == 0.5
    assert report.diagnostics["images_skipped"] == 2
    assert report.diagnostics["images_missing"] == 1
    assert report.diagnostics["images_without_proposals"] == 1
    assert fast_report([a, b, c], SINGLEMPO, "1").metrics["R@1"] == pytest.approx(1 / 6)


def test_mean_recall_over_the_vocabulary_under_multimpo_and_sgbpytorch():
    """Vocabulary of 4 predicates, only p0 and p1 occur: p0 1/1, p1 0/1.
    Printed mR@1 = (1 + 0) / 4 = 1/4 (multimpo v2, sgbpytorch); the occurring mean 1/2 is
    kept as a diagnostic, the report says 2 predicates are absent; singlempo keeps 1/2."""
    boxes = [[0, 0, 9, 9], [10, 10, 19, 19]]
    im = image(boxes, [0, 1], [(0, 1, 0), (1, 0, 1)], boxes, [0, 1], [(0, 1, 0)],
               [(0, 1, 0)])
    for protocol in (MULTIMPO, SGBPYTORCH):
        report = fast_report([im], protocol, "1")
        assert report.metrics["mR@1"] == 0.25 and report.metrics["mNgR@1"] == 0.25
        assert report.mean_over_occurring == {"mR@1": 0.5, "mNgR@1": 0.5}
        assert report.diagnostics["predicates_absent"] == 2
        assert any("2 of them absent" in note for note in report.notes)
    single = fast_report([im], SINGLEMPO, "1")
    assert single.metrics["mR@1"] == 0.5 and single.mean_over_occurring == {}
    assert MULTIMPO.version == "2.0" and SINGLEMPO.version == "1.0"


def test_ng_list_cut_at_100_and_ng_zero_shot_recall():
    """The NG list holds 100 misses, then the hit: ngR@200 = 0 under sgbpytorch (cut at
    100), 1 under multimpo. The GT type (0, 1, p0) never seen in training: zero-shot; the
    graph list hits it first: zR@1 = 1, ngzR@1 = 0 (the NG list starts with misses)."""
    boxes = [[0, 0, 9, 9], [10, 10, 19, 19]]
    ng = [(1, 0, 2)] * 100 + [(0, 1, 0)]
    im = image(boxes, [0, 1], [(0, 1, 0)], boxes, [0, 1], [(0, 1, 0)], ng)
    report = fast_report([im], SGBPYTORCH, "1,200", seen={(1, 0, 2)})
    assert report.metrics["ngR@200"] == 0.0
    assert report.metrics["zR@1"] == 1.0 and report.metrics["ngzR@1"] == 0.0
    assert fast_report([im], MULTIMPO, "200").metrics["ngR@200"] == 1.0
    assert "ngzR@200" not in fast_report([im], MULTIMPO, "200", seen={(1, 0, 2)}).metrics


def test_pair_accuracy_only_when_predicted_boxes_are_the_gt_boxes():
    """predcls: graph (1,0,p2) [on no GT pair], (0,1,p1) [on the GT pair, wrong predicate],
    (0,1,p0) [hit]. A@1: the filtered list is (0,1,p1), (0,1,p0): 0/1; A@2 = 1/1.
    With a predicted box moved (sgdet), A@k is left out with the reason."""
    boxes = [[0, 0, 9, 9], [10, 10, 19, 19]]
    graph = [(1, 0, 2), (0, 1, 1), (0, 1, 0)]
    im = image(boxes, [0, 1], [(0, 1, 0)], [list(b) for b in boxes], [0, 1], graph, [])
    report = fast_report([im], SGBPYTORCH, "1,2")
    assert report.metrics["A@1"] == 0.0 and report.metrics["A@2"] == 1.0
    im.pred_boxes = [[0, 0, 9, 9], [10, 10, 19, 18]]
    report = fast_report([im], SGBPYTORCH, "1,2")
    assert not any(n.startswith("A@") for n in report.metrics)
    assert "not their GT boxes" in report.left_out["A@k"]


def test_protocol_is_known_by_name():
    assert get_protocol("sgbpytorch") is SGBPYTORCH
    assert SGBPYTORCH.version == "1.1" and SGBPYTORCH.ng_limit == 100


# --------------------------------------------------------------------------- end to end


def literal_images(gt_url: str, pred_url: str) -> list[literal.VGImage]:
    """The stores' contents as the literal's images (GT relations and lists as stored)."""
    from sgdask.store.store import StoreReader

    def tables(url: str, kind: str) -> tuple[list, list, list]:
        reader = StoreReader(url, kind=kind)
        parts = [p["name"] for p in reader.parts]
        return tuple(reader.table(t, parts).to_pylist()
                     for t in ("images", "instances", "triplets"))

    images, instances, triplets = tables(gt_url, "gt")
    out = {r["image_id"]: literal.VGImage(r["image_id"], r["height"], r["width"], [], [], [])
           for r in images}
    for r in instances:
        out[r["image_id"]].gt_classes.append(r["category"])
        out[r["image_id"]].gt_boxes.append([r["x1"], r["y1"], r["x2"], r["y2"]])
    for r in sorted(triplets, key=lambda r: (r["image_id"], r["rank"])):
        out[r["image_id"]].gt_rels.append((r["subject"], r["object"], r["predicate"]))
    images, instances, triplets = tables(pred_url, "submission")
    for r in images:
        im = out[r["image_id"]]
        im.pred_classes, im.pred_boxes, im.graph, im.ng = [], [], [], []
    for r in instances:
        out[r["image_id"]].pred_classes.append(r["category"])
        out[r["image_id"]].pred_boxes.append([r["x1"], r["y1"], r["x2"], r["y2"]])
    for r in sorted(triplets, key=lambda r: (r["image_id"], r["list"], r["rank"])):
        if r["list"] == "pair":
            continue  # each pair's best predicates (store format 5): what oiv6 ranks
        getattr(out[r["image_id"]], r["list"]).append(
            (r["subject"], r["object"], r["predicate"]))
    return list(out.values())


def test_cli_evaluate_sgbpytorch_equals_the_literal_on_generated_vg(tmp_path):
    """A generated VG150-layout dataset (duplicate GT relations, images without prediction
    or without pairs), ingested and converted by triplet score, evaluated by
    ``sgdask evaluate --protocol sgbpytorch``: every R, ngR, zR, ngzR, mR, mNgR value (and
    PySGG's long-tail mR@k[head|body|tail], mNgR@k[...]) equals the literal
    implementation's on the stores' contents."""
    import json
    import subprocess
    import sys

    from sgdask.formats.sgbench import convert_submission
    from sgdask.formats.vg150 import ingest_vg
    from sgdask.testing.vg import write_vg_dataset

    vg = write_vg_dataset(tmp_path / "vg", n_test=30, n_train=40, seed=5,
                          missing_fraction=0.1, no_pairs_fraction=0.1)
    gt, pred, out = tmp_path / "gt", tmp_path / "pred", tmp_path / "out"
    manifest = ingest_vg(str(vg.h5), str(gt), str(vg.dicts), str(vg.image_data),
                         partition_size=8)
    convert_submission(str(vg.submission), str(pred), str(gt), from_scores=str(vg.scores),
                       rank_by="triplet", ng_limit=100)
    proc = subprocess.run([sys.executable, "-m", "sgdask", "evaluate", "--gt", str(gt),
                           "--pred", str(pred), "--protocol", "sgbpytorch,multimpo",
                           "--k", "20,50,100",
                           "--legacy-metrics", "--out", str(out), "--ci", "0.95",
                           "--resamples", "200"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "sgbpytorch" / "metrics.json").read_text())
    multi = json.loads((out / "multimpo" / "metrics.json").read_text())
    assert multi["protocol"]["version"] == "2.0"  # one pass, the IoU rules kept apart
    assert multi["metrics"]["R@50"] != report["metrics"]["R@50"]
    assert report["protocol"]["name"] == "sgbpytorch" and report["protocol"]["version"] == "1.1"
    import pyarrow.parquet as pq

    stats = pq.read_table(gt / manifest["train_stats"]).to_pylist()
    seen = {(r["subject_category"], r["object_category"], r["predicate"]) for r in stats}
    images = literal_images(str(gt), str(pred))
    expected = literal.evaluate(images, [20, 50, 100], len(manifest["predicate_classes"]),
                                seen, literal.PYSGG_VG150)  # VG150: PySGG's long-tail parts
    actual = {n: v for n, v in report["metrics"].items()
              if n.partition("@")[0] in FAMILIES and not n.endswith("@inf")}
    assert set(actual) == set(expected.metrics)
    for name, value in expected.metrics.items():
        assert actual[name] == pytest.approx(value, abs=1e-12), name
    assert report["diagnostics"]["images_missing"] == expected.missing > 0
    assert report["diagnostics"]["images_without_proposals"] == expected.without_proposals
    assert "A@k" in report["left_out"]  # sgdet boxes: no pair accuracy
    for name in ("mR@50", "mNgR@100"):  # intervals of the vocabulary-wide means
        low, high = report["intervals"][name]
        assert low <= report["metrics"][name] <= high, (name, low, high)
        assert high < report["mean_over_occurring"][name], name


def test_predcls_boxes_outside_the_image_are_clipped_like_the_gt():
    """predcls: the predicted boxes are the stored GT boxes, one reaching far outside the
    10-pixel-wide image ([0,0,30,9]); its evaluator puts the clipped GT boxes in their place:
    IoU 1, R@1 = 1 (the raw box against the clipped GT one: 100 / 310, a miss)."""
    gt_boxes = [[0, 0, 30, 9], [0, 10, 9, 19]]
    im = image(gt_boxes, [0, 1], [(0, 1, 0)], [list(b) for b in gt_boxes], [0, 1],
               [(0, 1, 0)], [], size=(20, 10))
    assert fast_report([im], SGBPYTORCH, "1").metrics["R@1"] == 1.0
    assert literal.evaluate([im], [1], N_PREDICATES, None).metrics["R@1"] == 1.0


def test_boxes_are_matched_on_mask_images_too():
    """sgbpytorch is a box protocol: on images that also carry masks it matches the boxes.
    The prediction's boxes are the GT's, its masks are empty: R@1 = 1 under sgbpytorch
    (boxes), 0 under singlempo (masks). Without boxes, sgbpytorch says so."""
    masks = np.zeros((2, 8, 16), dtype=bool)
    masks[0, :, :8] = True
    masks[1, :, 8:] = True
    boxes = np.array([[0, 0, 7, 7], [8, 0, 15, 7]], dtype=np.float64)
    gt = ImageGT("m", np.array([0, 1]), as_triplets([(0, 1, 0)]), boxes=boxes,
                 masks=BitMasks.from_dense(masks), size=(8, 16))
    pred = ImagePred("m", np.array([0, 1]), as_triplets([(0, 1, 0)]),
                     as_triplets([(0, 1, 0)]), boxes=boxes.copy(),
                     masks=BitMasks.from_dense(np.zeros_like(masks)))
    ks = parse_ks("1")
    assert evaluate_image(gt, pred, SGBPYTORCH, ks).image_terms["R@1"] == (1, 1)
    assert evaluate_image(gt, pred, SINGLEMPO, ks).image_terms["R@1"] == (0, 1)
    no_boxes = ImagePred("m", pred.labels, pred.graph, pred.ng, masks=gt.masks)
    with pytest.raises(InstanceMismatch, match="sgbpytorch protocol matches boxes"):
        evaluate_image(gt, no_boxes, SGBPYTORCH, ks)
