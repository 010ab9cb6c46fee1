"""The ``oiv6`` protocol (SPEC 5.6): average precision cases computed by hand, the fast path
(compiled per-image kernel, state merged across partitions) against the literal
per-image-then-global implementation (``tests/literal/oiv6.py``) on random data,
partition and merge-order invariance, and the conditions it refuses."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sgdask.testing.oi
from sgdask.batch.compare import CompareJob, run_compare
from sgdask.core.finalize import report_of
from sgdask.core.partition import scored_partition
from sgdask.core.plan import EvalSettings
from sgdask.core.result import PartitionResult
from sgdask.core.settings import ScoringSettings, Settings, Submission
from sgdask.errors import InputError, SgdaskError
from sgdask.formats.oiv6 import ingest_oi, is_open_images, oi_train_stats
from sgdask.formats.sgbench import convert_submission
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import FAMILIES
from sgdask.metrics.base import Context
from sgdask.pipeline import evaluate
from sgdask.protocols import OIV6
from sgdask.protocols.oiv6.metrics import samples, swapped
from sgdask.report import Report
from sgdask.store.partition import load_predictions
from sgdask.store.store import StoreReader
from sgdask.testing.oi import write_oi_dataset
from sgdask.types import ImageGT, ImagePred, TopPredicates
from tests.helpers import FIXTURES
from tests.literal import oiv6 as literal_oiv6

SUB = Submission("model", "model.store", (OIV6,))
SCORING = ScoringSettings(Settings(protocols="oiv6"), None, tuple(FAMILIES))
NAMES = ("R@50", "mAP_rel", "wmAP_rel", "mAP_phr", "wmAP_phr", "score_wtd")


def gt_image(image_id: str, boxes: list, labels: list, relations: list,
             size: tuple[int, int] = (100, 100)) -> ImageGT:
    return ImageGT(image_id, np.array(labels, np.int64), np.array(relations, np.int64),
                   np.array(boxes, np.float64), size=size)


def pred_image(image_id: str, boxes: list, labels: list, scores: list | None,
               pairs: list[tuple[int, int, list[tuple[int, float]]]], per_pair: int = 2
               ) -> ImagePred:
    """``pairs``: (subject, object, [(predicate, score), ...] best first)."""
    rows = [(s, o, p, score) for s, o, places in pairs for p, score in places]
    s, o, p, score = (np.array([r[i] for r in rows]) for i in range(4)) if rows else \
        (np.zeros(0, np.int64),) * 3 + (np.zeros(0),)
    return ImagePred(image_id, np.array(labels, np.int64), np.zeros((0, 3), np.int64),
                     boxes=np.array(boxes, np.float64),
                     scores=None if scores is None else np.array(scores, np.float64),
                     pairs=TopPredicates(s.astype(np.int64), o.astype(np.int64),
                                         p.astype(np.int64), score.astype(np.float32),
                                         per_pair))


def scored(parts: list[list[tuple[ImageGT, ImagePred | None]]]) -> PartitionResult:
    """Each part scored as a pipeline task scores its partition, the results merged."""
    result = PartitionResult()
    for part in parts:
        preds = {pred.image_id: pred for _, pred in part if pred is not None}
        result = result.merged(scored_partition([gt for gt, _ in part], [(SUB, preds)],
                                                SCORING))
    return result


def report(images: list[tuple[ImageGT, ImagePred | None]], n_predicates: int,
           parts: list[list[int]] | None = None) -> Report:
    """The oiv6 report of the images (scored in ``parts``: lists of image positions)."""
    parts = parts or [list(range(len(images)))]
    result = scored([[images[i] for i in part] for part in parts])
    settings = EvalSettings(OIV6, SCORING.settings, True, False)
    manifest = {"predicate_classes": [f"p{i}" for i in range(n_predicates)]}
    return report_of(result, ("model", "oiv6"), settings, None, manifest, {}, {})


def ap_column(rep: Report, kind: str) -> list[float]:
    return [row[f"AP_{kind}"] for row in sorted(rep.per_predicate, key=lambda r: r["predicate"])]


def bits(values: dict[str, float] | list[float]) -> list[bytes]:
    items = values if isinstance(values, list) else [values[n] for n in NAMES]
    return [struct.pack("<d", v) for v in items]


# --------------------------------------------------------------------------- by hand

SQUARE, RIGHT, FAR = [0, 0, 9, 9], [20, 0, 29, 9], [60, 60, 69, 69]


def test_two_predicates_by_hand():
    """Predicate 0: GT in images a and b; detections a TP 0.9, b FP 0.8 (wrong subject
    box), b TP 0.7: precision 1 and 2/3 at the two recall steps, AP = (1 + 2/3) / 2.
    Predicate 1: one GT, no detection: AP 0, counted in mAP; weights 2/3 and 1/3."""
    a = (gt_image("a", [SQUARE, RIGHT], [0, 1], [[0, 1, 0]]),
         pred_image("a", [SQUARE, RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.9), (1, 0)])]))
    b = (gt_image("b", [SQUARE, RIGHT, FAR], [0, 1, 0], [[0, 1, 0], [2, 1, 1]]),
         pred_image("b", [SQUARE, RIGHT, FAR], [0, 1, 0], [1.0, 1.0, 1.0],
                    [(2, 1, [(0, 0.8), (1, 0)]), (0, 1, [(0, 0.7), (1, 0)])]))
    rep = report([a, b], 2)
    ap0 = (1 + 2 / 3) / 2
    assert rep.metrics["mAP_rel"] == pytest.approx(ap0 / 2, abs=1e-9)
    assert rep.metrics["wmAP_rel"] == pytest.approx(ap0 * 2 / 3, abs=1e-9)
    assert ap_column(rep, "rel") == pytest.approx([ap0, 0.0], abs=1e-9)
    assert rep.metrics["R@50"] == pytest.approx(2 / 3, abs=1e-9)
    assert rep.metrics["score_wtd"] == pytest.approx(
        0.4 * rep.metrics["wmAP_rel"] + 0.2 * rep.metrics["R@50"]
        + 0.4 * rep.metrics["wmAP_phr"], abs=1e-15)
    assert [r["gt_count"] for r in rep.per_predicate] == [2, 1]
    expected = literal_oiv6.evaluate([a, b], 2)
    assert bits(rep.metrics) == bits(expected["metrics"])


def test_tied_scores_put_false_positives_first_and_are_counted():
    """A true positive in a and a false positive in b score 0.5 both: false positive
    first, so AP = 1/2 (true positive first would give 1), and both count as tied."""
    a = (gt_image("a", [SQUARE, RIGHT], [0, 1], [[0, 1, 0]]),
         pred_image("a", [SQUARE, RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.5)])], 1))
    b = (gt_image("b", [SQUARE, RIGHT], [0, 1], [[1, 0, 0]]),
         pred_image("b", [SQUARE, RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.5)])], 1))
    for order in ([a, b], [b, a]):
        rep = report(order, 1)
        assert ap_column(rep, "rel") == pytest.approx([0.5 * 0.5], abs=1e-9)  # recall 1/2
        assert rep.diagnostics["ap_tied_rel"] == 2
        assert bits(rep.metrics) == bits(literal_oiv6.evaluate(order, 1)["metrics"])


def test_iou_of_exactly_one_half_hits_recall_but_is_no_true_positive():
    """Subject IoU 50 / 100 = 0.5 exactly: a recall hit (>= 0.5), not a relationship true
    positive (> 0.5); the union boxes coincide, so it is a phrase true positive."""
    half = [0, 0, 9, 4]
    a = (gt_image("a", [SQUARE, RIGHT], [0, 1], [[0, 1, 0]]),
         pred_image("a", [half, RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.9)])], 1))
    rep = report([a], 1)
    assert rep.metrics["R@50"] == pytest.approx(1.0, abs=1e-9)
    assert ap_column(rep, "rel") == [0.0]
    assert ap_column(rep, "phr") == pytest.approx([1.0], abs=1e-9)


def test_predicate_without_gt_counts_zero_in_the_plain_mean():
    a = (gt_image("a", [SQUARE, RIGHT], [0, 1], [[0, 1, 0]]),
         pred_image("a", [SQUARE, RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.9), (2, 0.5)])]))
    rep = report([a], 3)
    assert ap_column(rep, "rel") == pytest.approx([1.0, 0.0, 0.0], abs=1e-9)
    assert rep.metrics["mAP_rel"] == pytest.approx(1 / 3, abs=1e-9)
    assert rep.metrics["wmAP_rel"] == pytest.approx(1.0, abs=1e-9)
    assert [r["gt_count"] for r in rep.per_predicate] == [1, 0, 0]


def test_candidates_are_cut_at_100_and_then_at_1e5():
    """101 candidates: the hit ranks last and is cut; with instance scores 1e-3 the
    product 1e-6 is dropped after the cut, even when it ranks first."""
    boxes = [SQUARE, RIGHT] + [[40 + i, 40, 45 + i, 45] for i in range(50)]
    pairs = [(2 + i, 2 + (i + 1) % 50, [(0, 0.9), (1, 0.8)]) for i in range(50)]
    pairs += [(0, 1, [(0, 0.1), (1, 0.05)])]
    a = (gt_image("a", boxes[:2], [0, 1], [[0, 1, 0]]),
         pred_image("a", boxes, [0, 1] + [0] * 50, [1.0] * 52, pairs))
    assert report([a], 2).metrics["R@50"] == 0.0
    b = (a[0], pred_image("b", boxes[:2], [0, 1], [1e-3, 1e-3], [(0, 1, [(0, 1.0)])], 1))
    b[0].image_id = "b"
    rep = report([b], 2)
    assert rep.metrics["R@50"] == 0.0 and rep.diagnostics["candidates"] == 0


def test_gt_boxes_are_clipped_and_duplicates_count():
    """The GT subject reaches past the image (clipped to 0..99 it equals the prediction);
    the relation is given twice: one candidate hits both for recall, claims one for AP."""
    a = (gt_image("a", [[90, 0, 120, 9], RIGHT], [0, 1], [[0, 1, 0], [0, 1, 0]]),
         pred_image("a", [[90, 0, 99, 9], RIGHT], [0, 1], [1.0, 1.0], [(0, 1, [(0, 0.9)])],
                    1))
    rep = report([a], 1)
    assert rep.metrics["R@50"] == pytest.approx(1.0, abs=1e-9)
    assert ap_column(rep, "rel") == pytest.approx([0.5], abs=1e-9)
    assert rep.per_predicate[0]["gt_count"] == 2


# --------------------------------------------------------------------------- refusals


def test_duplicate_pairs_and_missing_instance_scores_are_one_line_errors():
    gt = gt_image("a", [SQUARE, RIGHT], [0, 1], [[0, 1, 0]])
    twice = pred_image("a", [SQUARE, RIGHT], [0, 1], [1.0, 1.0],
                       [(0, 1, [(0, 0.9)]), (0, 1, [(0, 0.2)])], 1)
    with pytest.raises(InputError, match=r"image a.*pair \(0, 1\) is scored twice"):
        report([(gt, twice)], 1)
    unscored = pred_image("a", [SQUARE, RIGHT], [0, 1], None, [(0, 1, [(0, 0.9)])], 1)
    with pytest.raises(InputError, match=r"image a.*instances have none"):
        report([(gt, unscored)], 1)


def test_k_is_refused_under_oiv6():
    with pytest.raises(SgdaskError, match="ks: the oiv6 protocol has its own ks") as err:
        Settings(protocols="oiv6", ks="20,50").checked()
    assert err.value.render("cli") == ("--k: the oiv6 protocol has its own ks (50); "
                                       "leave --k out")
    assert Settings(protocols="oiv6").checked().protocols == "oiv6"


# --------------------------------------------------------------------------- random data

BOX = st.tuples(st.integers(0, 24), st.integers(0, 24), st.integers(0, 9),
                st.integers(0, 9)).map(lambda t: [t[0], t[1], t[0] + t[2], t[1] + t[3]])
SCORE = st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0])


@st.composite
def images(draw, image_id: str, n_predicates: int) -> tuple[ImageGT, ImagePred | None]:
    n = draw(st.integers(2, 4))
    boxes = draw(st.lists(BOX, min_size=n, max_size=n))
    labels = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    pairs = [(s, o) for s in range(n) for o in range(n) if s != o]
    rels = draw(st.lists(st.tuples(st.sampled_from(pairs), st.integers(0, n_predicates - 1)),
                         min_size=1, max_size=4))
    size = (draw(st.integers(12, 30)), draw(st.integers(12, 30)))
    gt = gt_image(image_id, boxes, labels, [[s, o, p] for (s, o), p in rels], size)
    if draw(st.booleans()) and draw(st.booleans()):
        return gt, None
    m = draw(st.integers(2, 4))
    pboxes = [boxes[i] if i < n and draw(st.booleans()) else draw(BOX) for i in range(m)]
    plabels = draw(st.lists(st.integers(0, 1), min_size=m, max_size=m))
    inst = draw(st.lists(SCORE, min_size=m, max_size=m))
    ppairs = draw(st.lists(st.sampled_from([(s, o) for s in range(m) for o in range(m)
                                            if s != o]), unique=True, max_size=6))
    k = min(2, n_predicates)
    scored_pairs = []
    for s, o in ppairs:
        predicates = draw(st.permutations(range(n_predicates)))[:k]
        values = sorted(draw(st.lists(SCORE, min_size=k, max_size=k)), reverse=True)
        scored_pairs.append((s, o, list(zip(predicates, values, strict=True))))
    return gt, pred_image(image_id, pboxes, plabels, inst, scored_pairs, k)


@st.composite
def datasets(draw):
    n_predicates = draw(st.integers(1, 3))
    data = [draw(images(f"img{i:02d}", n_predicates)) for i in range(draw(st.integers(1, 7)))]
    order = draw(st.permutations(range(len(data))))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=3)))
    parts = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return data, n_predicates, [p for p in parts if p]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_fast_path_on_any_partitioning_equals_the_literal_evaluation(data):
    """Bit-identical dataset values and per-predicate APs, whatever the partitioning and
    the order the partitions are merged in (ties included: scores come from six values)."""
    images_, n_predicates, parts = data
    expected = literal_oiv6.evaluate(images_, n_predicates)
    rep = report(images_, n_predicates, parts)
    assert bits(rep.metrics) == bits(expected["metrics"])
    assert bits(ap_column(rep, "rel")) == bits(expected["AP_rel"])
    assert bits(ap_column(rep, "phr")) == bits(expected["AP_phr"])
    whole = report(images_, n_predicates)
    assert bits(whole.metrics) == bits(rep.metrics)
    assert whole.diagnostics == rep.diagnostics


# --------------------------------------------------------------------------- stores

GOLDEN = FIXTURES / "oiv6_golden.json"


@pytest.fixture(scope="module")
def oi(tmp_path_factory) -> dict[str, str]:
    """The golden dataset (``oiv6_golden.json``'s generator call), ingested and converted."""
    root = tmp_path_factory.mktemp("oi")
    paths = write_oi_dataset(root / "raw", n_test=300, seed=1)
    gt, pred = str(root / "gt"), str(root / "pred")
    ingest_oi(str(paths.anno), gt, partition_size=64)
    convert_submission(str(paths.submission), pred, gt, from_scores=str(paths.scores))
    return {"gt": gt, "pred": pred, "raw": str(root / "raw"), "root": str(root)}


def test_reference_golden_values_on_any_partitioning(oi, client):
    """PySGG's own code printed these numbers for this dataset (``oiv6_golden.json``:
    seed, generator call and command beside them); sgdask gives them to the last bit on
    a two-worker cluster, cut into tasks of 7 images or by store part."""
    golden = json.loads(GOLDEN.read_text())
    synth = hashlib.sha256(Path(sgdask.testing.oi.__file__).read_bytes()).hexdigest()
    assert golden["synth_oi_sha256"] == synth, "synth_oi changed: regenerate the golden file"
    for size in (7, None):
        rep = evaluate(oi["gt"], oi["pred"], "oiv6", client=client, partition_size=size)
        assert bits(rep.metrics) == bits(golden["metrics"])
        assert bits(ap_column(rep, "rel")) == bits(golden["AP_rel"])
        assert bits(ap_column(rep, "phr")) == bits(golden["AP_phr"])
        assert rep.diagnostics["evaluated_images"] == golden["images"]
        assert rep.diagnostics["ap_tied_rel"] == rep.diagnostics["ap_tied_phr"] == 0


def test_reader_keeps_what_pysgg_reads(oi):
    manifest = StoreReader(oi["gt"]).manifest
    assert manifest["gt_format"] == "oiv6-json" and manifest["instances"] == "boxes"
    assert manifest["dropped_images"] == {"no_boxes": 1, "no_relations": 1}
    assert len(manifest["predicate_classes"]) == 30 and len(manifest["thing_classes"]) == 300
    assert manifest["train_stats"] == "train_stats.parquet"
    assert manifest["sources"]["train"].endswith("vrd-train-anno.json")
    pred = StoreReader(oi["pred"]).manifest
    assert pred["pair_scores"] == 2 and pred["format_version"] == 5
    preds = load_predictions(StoreReader(oi["pred"]), [p["name"] for p in pred["parts"]],
                             ["t0000000"])
    pairs = preds["t0000000"].pairs
    npz = np.load(Path(oi["raw"]) / "scores.npz")
    rows = np.flatnonzero(npz["image_id"] == "t0000000")
    best = np.argsort(-npz["scores"][rows][:, 1:], axis=1, kind="stable")[:, :2]
    assert pairs.predicates.tolist() == best.reshape(-1).tolist()  # background dropped
    assert pairs.subjects[::2].tolist() == npz["subject"][rows].tolist()


def test_a_store_without_pair_scores_is_refused(oi, client):
    pred = str(Path(oi["root"]) / "plain")
    convert_submission(str(Path(oi["raw"]) / "submission.json"), pred, oi["gt"])
    with pytest.raises(SgdaskError, match="oiv6 protocol ranks each scored pair's"):
        evaluate(oi["gt"], pred, "oiv6", client=client)


# --------------------------------------------------------------------------- intervals


def copies(image: tuple[ImageGT, ImagePred | None], n: int) -> list[tuple]:
    """``n`` copies of an image under new ids (a bootstrap resample draws it n times)."""
    gt, pred = image
    return [(replace(gt, image_id=f"{gt.image_id}#{c}"),
             None if pred is None else replace(pred, image_id=f"{gt.image_id}#{c}"))
            for c in range(n)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.data())
def test_weighting_the_fixed_order_equals_evaluating_the_resample(data, draw):
    """The bootstrap's values under image weights (``samples``: the ranked runs weighted,
    never sorted again) are the values of the resample itself: every image copied as
    often as it was drawn, evaluated by the literal implementation."""
    images_, n_predicates, _ = data
    weights = draw.draw(st.lists(st.integers(0, 3), min_size=len(images_),
                                 max_size=len(images_)).filter(lambda w: any(w)))
    rep = report(images_, n_predicates)
    ids = [str(i) for i in rep.terms.image_ids]
    by_id = {gt.image_id: (gt, pred) for gt, pred in images_}
    ctx = Context(parse_ks("50"), n_predicates=n_predicates)
    under = samples(rep.states, ids, ctx)
    w = np.array([[weights[[gt.image_id for gt, _ in images_].index(i)] for i in ids]], float)
    values, per_predicate = under(w)
    resample = [c for i in ids for c in copies(by_id[i], int(w[0, ids.index(i)]))]
    expected = literal_oiv6.evaluate(resample, n_predicates)
    for name in NAMES:
        assert values[name][0] == pytest.approx(expected["metrics"][name], abs=1e-12), name
    assert per_predicate["AP_rel"][:, 0] == pytest.approx(expected["AP_rel"], abs=1e-12)
    assert per_predicate["AP_phr"][:, 0] == pytest.approx(expected["AP_phr"], abs=1e-12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.data())
def test_weights_beyond_a_byte_give_the_values_of_their_proportions(data, draw):
    """Weights above 255 (past the uint8 weights the fast path reads) count as that many
    copies: weights ``300 w`` give ``w``'s values (every metric is a ratio of weighted
    counts); a weight that is not a whole number of copies is refused."""
    images_, n_predicates, _ = data
    rep = report(images_, n_predicates)
    ids = [str(i) for i in rep.terms.image_ids]
    w = np.array([draw.draw(st.lists(st.integers(0, 3), min_size=len(ids),
                                     max_size=len(ids)).filter(any))], float)
    under = samples(rep.states, ids, Context(parse_ks("50"), n_predicates=n_predicates))
    (small, small_ap), (large, large_ap) = under(w), under(300 * w)
    for name in NAMES:
        assert large[name] == pytest.approx(small[name], abs=1e-12), name
    for kind in ("AP_rel", "AP_phr"):
        assert large_ap[kind] == pytest.approx(small_ap[kind], abs=1e-12)
    with pytest.raises(ValueError, match="non-negative integers"):
        under(w / 2 + 0.25)

def test_intervals_for_every_oiv6_metric_and_predicate(oi):
    """evaluate --ci: an interval for R@50, the AP means and score_wtd, per-predicate AP
    bounds; R@50's holds its value (a ratio of sums, unlike AP, is not skewed)."""
    rep = evaluate(oi["gt"], oi["pred"], "oiv6", ci=0.9, resamples=200, seed=5)
    assert set(rep.intervals) == set(NAMES)
    low, high = rep.intervals["R@50"]
    assert low < rep.metrics["R@50"] < high
    assert all(lo <= hi for lo, hi in rep.intervals.values())
    assert any(row["AP_rel_lo"] is not None for row in rep.per_predicate)
    again = evaluate(oi["gt"], oi["pred"], "oiv6", ci=0.9, resamples=200, seed=5)
    assert again.intervals == rep.intervals


def test_the_report_explains_only_the_units_it_shows(oi):
    """No rank metric under oiv6: the units line does not explain ranks (the CLI prints
    the same line under its table)."""
    text = str(evaluate(oi["gt"], oi["pred"], "oiv6"))
    assert [line for line in text.splitlines() if line.startswith("recalls in %")] == \
        ["recalls in %"]


def test_states_stay_on_the_worker_unless_the_driver_reads_them(oi):
    """states=False (what ``sgdask evaluate`` asks): the report comes back without the
    candidates' final states and with the same numbers; intervals still get them."""
    full = evaluate(oi["gt"], oi["pred"], "oiv6")
    light = evaluate(oi["gt"], oi["pred"], "oiv6", states=False)
    assert full.states is not None and light.states is None
    assert light.metrics == full.metrics and light.per_predicate == full.per_predicate
    assert evaluate(oi["gt"], oi["pred"], "oiv6", states=False, ci=0.9, resamples=50
                    ).intervals


FIXTURE_V3 = FIXTURES / "store-v3-boxes"


def test_a_format_3_store_reads_as_before_and_oiv6_asks_to_convert_again(client):
    """Stores written before format 5 (the pair rows) give the numbers they gave then
    (recorded by the sgdask that wrote them), and oiv6 on them says what to do."""
    expected = json.loads((FIXTURE_V3 / "expected_metrics.json").read_text())["boxes"]
    gt, pred = str(FIXTURE_V3 / "gt_boxes"), str(FIXTURE_V3 / "pred_boxes")
    assert StoreReader(pred).version == 3
    from sgdask.pipeline import evaluate_protocols

    reports = evaluate_protocols(gt, pred, ",".join(expected), client=client)
    for protocol, metrics in expected.items():
        got = reports[protocol].metrics
        newer = {name for name in set(got) - set(metrics)  # metrics added since (issue 26)
                 if name.split("@")[0] not in ("F", "ngF") and "[" not in name}
        assert not newer, (protocol, newer)
        assert {name: got[name] for name in metrics} == metrics
    with pytest.raises(SgdaskError, match="converted before store format 5"):
        evaluate(gt, pred, "oiv6", client=client)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets(), st.data())
def test_swapping_images_between_models_equals_evaluating_the_swap(data, draw):
    """compare's randomization (``swapped``: two models' runs merged in one fixed order,
    each detection weighing 1 in the model it goes to) gives the values of the swapped
    models themselves, evaluated literally."""
    images_, n_predicates, _ = data
    other = []
    for gt, pred in images_:
        if pred is not None:
            order = draw.draw(st.permutations(range(len(pred.pairs))))
            pred = replace(pred, pairs=replace(pred.pairs,
                                               scores=pred.pairs.scores[list(order)]))
        other.append((gt, pred))
    a, b = report(images_, n_predicates), report(other, n_predicates)
    ids = [str(i) for i in a.terms.image_ids]
    mask = draw.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    ctx = Context(parse_ks("50"), n_predicates=n_predicates)
    va, vb = swapped(a.states, b.states, ids, ctx)(np.array([mask], float))
    by_id = {gt.image_id: i for i, (gt, _) in enumerate(images_)}
    swap = {i: m for i, m in zip(ids, mask, strict=True)}
    mixed_a = [other[by_id[i]] if swap[i] else images_[by_id[i]] for i in ids]
    mixed_b = [images_[by_id[i]] if swap[i] else other[by_id[i]] for i in ids]
    for values, mixed in ((va, mixed_a), (vb, mixed_b)):
        expected = literal_oiv6.evaluate(mixed, n_predicates)["metrics"]
        for name in NAMES:
            assert values[name][0] == pytest.approx(expected[name], abs=1e-12), name


def test_compare_a_model_with_itself_and_another(oi, tmp_path):
    """compare on oiv6: every AP metric compared; a model against itself differs by 0
    with p = 1."""
    comparison = run_compare(CompareJob(oi["gt"], [("a", [oi["pred"]]), ("b", [oi["pred"]])],
                                        protocol="oiv6", options=Settings(protocols="oiv6"),
                                        resamples=50, permutations=50))
    rows = {r["metric"]: r for r in comparison.rows}
    assert set(rows) == set(NAMES)
    assert all(r["delta"] == 0 and r["p_value"] == 1 for r in rows.values())
    assert {r["metric"] for r in comparison.per_predicate} == {"AP_rel", "AP_phr"}


def test_malformed_annotations_are_one_line_naming_image_and_field(tmp_path):
    (tmp_path / "cats.json").write_text(json.dumps({"obj": ["a", "b"], "rel": ["on"]}))
    good = {"img_fn": "x1", "img_size": [20, 10], "bbox": [[0, 0, 4, 4], [5, 5, 9, 9]],
            "det_labels": [0, 1], "rel": [[0, 1, 0]]}
    cases = [({"det_labels": [0, 2]}, "det_labels"), ({"rel": [[0, 2, 0]]}, "rel"),
             ({"rel": [[0, 1, 1]]}, "rel"), ({"rel": [[1, 1, 0]]}, "rel"),
             ({"bbox": [[0, 0, 4], [5, 5, 9, 9]]}, "bbox"), ({"img_size": [20]}, "img_size")]
    for change, field_name in cases:
        (tmp_path / "anno.json").write_text(json.dumps([{**good, **change}]))
        with pytest.raises(InputError, match=rf"image x1.*{field_name}"):
            ingest_oi(str(tmp_path / "anno.json"), str(tmp_path / "gt"),
                      str(tmp_path / "cats.json"))
    (tmp_path / "anno.json").write_text(json.dumps([good, good]))
    with pytest.raises(InputError, match="a second image of this img_fn"):
        ingest_oi(str(tmp_path / "anno.json"), str(tmp_path / "gt"), str(tmp_path / "cats.json"))
    assert is_open_images(b" \n[{\"img_fn\"") and not is_open_images(b"{\"data\": [")
    assert oi_train_stats([good], "train").to_pylist() == [
        {"subject_category": 0, "object_category": 1, "predicate": 0, "count": 1}]
