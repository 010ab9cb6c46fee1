"""Panoptic quality (SPEC section 6; sgdask/metrics/panoptic.py): hand cases worked out from
panopticapi's rules, the literal reference with crowd regions on hypothesis images, the
vectorized state rows against the plain ones, intervals and paired tests, and GT stores
that predate ``iscrowd``. The differential test against panopticapi itself is
tests/differential/test_pq_differential.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import sgdask
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import panoptic
from sgdask.metrics.base import Context, FinalColumns, Finals, batch_of
from sgdask.metrics.state import FloatSum
from sgdask.metrics.terms import plain_blocks
from sgdask.pipeline import evaluate, evaluate_protocols
from sgdask.protocols import SINGLEMPO
from sgdask.stats.bootstrap import count_chunks, percentile_interval
from tests.helpers import FIXTURES, scenes
from tests.helpers.adapters import report_view, score_image
from tests.literal import spec as literal

CLASSES = ["person", "dog", "grass", "sky"]  # two things, then two stuff classes
QUALITY = [f"{n}{s}" for s in ("", "_th", "_st") for n in ("PQ", "SQ", "RQ")]
FIXTURES = FIXTURES
VOID = -1


def evaluated(*images, things: int | None = 2) -> sgdask.Report:
    """Images (labels, GT categories, masks or None, predicted categories[, crowd]) through
    the Evaluator; every image has one GT relation, so every image is evaluated."""
    ev = sgdask.Evaluator("singlempo", "20", predicates=1, classes=CLASSES, things=things)
    for i, (labels, gt_cats, masks, pred_cats, *crowd) in enumerate(images):
        gt = {"labels": np.array(labels), "categories": np.array(gt_cats),
              "relations": np.array([[0, 1, 0]])}
        if crowd:
            gt["iscrowd"] = np.array(crowd[0])
        pred = None if masks is None else {
            "masks": np.array(masks, dtype=bool), "categories": np.array(pred_cats),
            "triplets": np.array([[0, 1, 0]] if len(pred_cats) > 1 else [], np.int64)}
        ev.update(f"img{i}", gt, pred)
    return ev.compute()


def rows(report: sgdask.Report) -> dict[int, dict]:
    return {row["category"]: row for row in report.per_category}


PERFECT = [[0, 0, 1, 1],
           [0, 0, 1, 1],
           [2, 2, 2, 2],
           [VOID] * 4]


def segments(labels: list[list[int]], *ids: int) -> list[np.ndarray]:
    return [np.array(labels) == i for i in ids]


def test_a_perfect_submission_has_pq_1():
    report = evaluated((PERFECT, [0, 1, 2], segments(PERFECT, 0, 1, 2), [0, 1, 2]))
    assert {n: report.metrics[n] for n in QUALITY} == dict.fromkeys(QUALITY, 1.0)
    table = rows(report)
    assert [(table[c]["TP"], table[c]["FP"], table[c]["FN"]) for c in (0, 1, 2)] == \
        [(1, 0, 0)] * 3
    assert table[3]["PQ"] is None and table[3]["name"] == "sky" and not table[3]["isthing"]
    assert table[0]["isthing"] and table[0]["name"] == "person"
    assert report.diagnostics["masks_overlap"] == 0


# Instance 0 (person, 4 px) beside 8 VOID pixels; instance 1 (grass, 12 px) below.
VOIDS = [[0, 0, VOID, VOID, VOID, VOID],
         [0, 0, VOID, VOID, VOID, VOID],
         [1, 1, 1, 1, 1, 1],
         [1, 1, 1, 1, 1, 1]]


def mask(*pixels: tuple[int, int]) -> np.ndarray:
    out = np.zeros((4, 6), dtype=bool)
    for y, x in pixels:
        out[y, x] = True
    return out


def test_void_is_left_out_of_the_union_and_a_void_heavy_prediction_is_no_fp():
    """p0 = the person + 4 VOID pixels: union 8 + 4 - 4 - 4 = 4, IoU 1. p1 (sky): 3 of its
    5 pixels VOID, more than half: not a false positive. p2 (dog): 1 of 2 VOID, not more
    than half: a false positive. The grass has no prediction: a false negative."""
    p0 = mask((0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3))
    p1 = mask((0, 4), (0, 5), (1, 4), (2, 4), (2, 5))
    p2 = mask((1, 5), (3, 5))
    report = evaluated((VOIDS, [0, 2], [p0, p1, p2], [0, 3, 1]))
    table = rows(report)
    assert (table[0]["TP"], table[0]["SQ"], table[0]["PQ"]) == (1, 1.0, 1.0)
    assert (table[1]["FP"], table[1]["PQ"]) == (1, 0.0)
    assert (table[2]["FN"], table[2]["PQ"]) == (1, 0.0)
    assert table[3]["PQ"] is None  # the ignored sky prediction counts nowhere
    assert report.metrics["PQ"] == report.metrics["SQ"] == report.metrics["RQ"] == 1 / 3
    assert (report.metrics["PQ_th"], report.metrics["PQ_st"]) == (0.5, 0.0)


# Two crowd regions of people (1 and 2; 2 is the last), a person (0), grass (3).
CROWD = [[0, 0, 1, 1],
         [0, 0, 1, 1],
         [2, 2, 3, 3],
         [2, 2, 3, 3]]


def test_crowd_regions():
    """Crowd regions are never matched nor false negatives; a prediction inside the crowd
    region of its category is no false positive, but panopticapi keeps one crowd region
    per category, the last one: a person inside the first crowd region is a false
    positive, and a dog inside the grass is one too."""
    report = evaluated((CROWD, [0, 0, 0, 2], segments(CROWD, 0, 2, 1, 3), [0, 0, 0, 1],
                        [False, True, True, False]))
    table = rows(report)
    assert (table[0]["TP"], table[0]["FP"], table[0]["FN"]) == (1, 1, 0)
    assert table[0]["PQ"] == 1 / 1.5 and table[0]["SQ"] == 1.0
    assert (table[1]["FP"], table[2]["FN"]) == (1, 1)
    assert report.metrics["PQ"] == pytest.approx((2 / 3 + 0 + 0) / 3, abs=1e-15)


def test_gt_segments_of_an_image_without_prediction_are_false_negatives():
    report = evaluated((PERFECT, [0, 1, 2], segments(PERFECT, 0, 1, 2), [0, 1, 2]),
                       (PERFECT, [0, 1, 2], None, None))
    table = rows(report)
    assert [(table[c]["TP"], table[c]["FN"]) for c in (0, 1, 2)] == [(1, 1)] * 3
    assert report.metrics["PQ"] == pytest.approx(2 / 3, abs=1e-15)
    assert report.metrics["RQ"] == pytest.approx(2 / 3, abs=1e-15)
    assert report.metrics["SQ"] == 1.0


def test_overlapping_masks_are_scored_on_their_merge_and_the_report_says_so():
    """A duplicate of the person merges into it (SPEC 5.1): one true positive, no false
    positive; a dog mask with a pixel of the person keeps only its own pixels."""
    person, dog = segments(PERFECT, 0, 1)
    wide_dog = dog.copy()
    wide_dog[0, 0] = True
    report = evaluated((PERFECT, [0, 1, 2], [person, person.copy(), wide_dog], [0, 0, 1]))
    table = rows(report)
    assert (table[0]["TP"], table[0]["FP"], table[1]["TP"]) == (1, 0, 1)
    assert report.diagnostics["masks_overlap"] == 1
    assert any("1 image(s) overlap" in note for note in report.notes)


def test_thing_stuff_split_unknown_leaves_the_groups_out():
    report = evaluated((PERFECT, [0, 1, 2], segments(PERFECT, 0, 1, 2), [0, 1, 2]),
                       things=None)
    assert report.metrics["PQ"] == 1.0 and "PQ_th" not in report.metrics
    assert "thing/stuff split" in report.left_out["PQ_th"]
    assert rows(report)[0]["isthing"] is None


# --------------------------------------------------------------------------- literal


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes.images(crowd=True), scenes.k_lists())
def test_every_image_equals_the_literal_counts_with_crowd_regions(image, ks):
    for protocol in literal.PROTOCOLS:
        expected = literal.image_terms(image.gt, image.pred, protocol, ks)
        actual = score_image(image, protocol, ks).terms
        assert (actual.pq_matches, actual.pq_errors) == \
            (expected.pq_matches, expected.pq_errors), protocol
        assert actual.diagnostics == expected.diagnostics


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes.datasets(max_images=6), scenes.k_lists())
def test_dataset_values_equal_the_literal_ones(images, ks):
    """PQ, SQ, RQ of random datasets (their exact literal values to 1e-12); the
    accumulators merged in two groups."""
    scored = [score_image(im, "singlempo", ks) for im in images]
    terms = [literal.image_terms(im.gt, im.pred, "singlempo", ks) for im in images]
    expected = literal.panoptic_values(terms, None)
    view = report_view(scored, "singlempo", "per_predicate", ks,
                       groups=[list(range(0, len(images), 2)), list(range(1, len(images), 2))])
    assert {n: v for n, v in view.metrics.items() if n in ("PQ", "SQ", "RQ")}.keys() == \
        expected.keys()
    for name, value in expected.items():
        assert view.metrics[name] == pytest.approx(float(value), abs=1e-12), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes.datasets(max_images=6))
def test_vectorized_rows_equal_the_plain_ones(images):
    """The family's batch rows (the fast path) hold what its per-image rows hold, images
    included (the bootstrap resamples them by image)."""
    hits = [score_image(im, "singlempo", ["20"]).hits for im in images]
    ctx = Context(parse_ks("20"))
    family_plain = plain_blocks(hits, ctx, SINGLEMPO, panoptic.FAMILY)
    fast = panoptic.batch_terms(batch_of(hits), ctx)

    def table(found) -> dict:
        return {r.name: sorted(zip(r.image.tolist(), r.keys.tolist(),
                                   map(tuple, r.values.tolist()), strict=True))
                for r in found}

    assert table(fast) == table(family_plain)


def test_derive_columns_equals_derive_column_by_column():
    """The bootstrap's vectorized derivation gives, per weighting, the floats of
    ``derive`` on that weighting's finals."""
    rng = np.random.default_rng(3)
    ids = np.array([0, 1, 2, 5])
    iou, tp = rng.random((4, 6)) * 3, rng.integers(0, 4, (4, 6)).astype(float)
    fp, fn = (rng.integers(0, 3, (4, 6)).astype(float) for _ in range(2))
    tp[1, 2] = fp[1, 2] = fn[1, 2] = iou[1, 2] = 0.0  # a category absent from a resample
    states = {"pq_matches": (ids, iou, tp), "pq_errors": (ids, fp, fn)}
    ctx = Context(parse_ks("20"), things=frozenset({0, 1}))
    columns = panoptic.derive_columns(
        FinalColumns(lambda _: (ids[:0], np.empty((0, 6))), state=states.get), ctx)
    for b in range(6):
        matches = {int(c): FloatSum(iou[j, b], tp[j, b]) for j, c in enumerate(ids)
                   if iou[j, b] or tp[j, b]}
        errors = {int(c): (fp[j, b], fn[j, b]) for j, c in enumerate(ids)
                  if fp[j, b] or fn[j, b]}
        finals = Finals(lambda _: {}, state={"pq_matches": matches, "pq_errors": errors}.get)
        derived = panoptic.derive(finals, ctx)
        assert {n: float(v[b]) for n, v in columns.items() if np.isfinite(v[b])} == derived


# --------------------------------------------------------------------------- intervals


def literal_pq_samples(report: sgdask.Report) -> np.ndarray:
    """PQ on every resample, from the per-image state rows written out: each image's rows
    weighted by how often the resample drew it."""
    terms = report.terms
    weights = np.concatenate(list(count_chunks(terms.n_images, report.ci["resamples"],
                                               report.ci["seed"])))
    rows_of = {name: terms.rows_of(name) for name in ("pq_matches", "pq_errors")}
    out = []
    for w in weights:
        sums: dict[int, list[float]] = {}
        for name, sel in rows_of.items():
            for image, key, num, den in zip(terms.image[sel], terms.predicate[sel],
                                            terms.num[sel], terms.den[sel], strict=True):
                row = sums.setdefault(int(key), [0.0, 0.0, 0.0, 0.0])  # iou, tp, fp, fn
                if name == "pq_matches":
                    row[0] += w[image] * num / den
                    row[1] += w[image]
                else:
                    row[2] += w[image] * num
                    row[3] += w[image] * den
        values = [iou / (tp + 0.5 * fp + 0.5 * fn) for iou, tp, fp, fn in
                  (sums[c] for c in sorted(sums)) if tp + fp + fn > 0]
        out.append(sum(values) / len(values))
    return np.array(out)


def test_pq_gets_intervals_and_paired_tests(stores, client):
    from sgdask.report.intervals import scoring_of
    from sgdask.stats.paired import Model, compare

    report = evaluate(stores.gt, stores.pred, client=client, ci=0.9, resamples=60, seed=4)
    for name in QUALITY:  # (a percentile interval need not hold the point value)
        low, high = report.intervals[name]
        assert 0 <= low <= high <= 1, name
    expected = percentile_interval(literal_pq_samples(report), 0.9)
    assert report.intervals["PQ"] == pytest.approx(list(expected), abs=1e-12)
    found = compare([Model("a", [report.terms]), Model("b", [report.terms])], [(0, 1)],
                    scoring_of(report, None), resamples=30, permutations=30)
    row = next(row for row in found.rows if row["metric"] == "PQ_th")
    assert row["delta"] == 0 and row["p_value"] == 1


# --------------------------------------------------------------------------- old stores


def test_gt_stores_before_iscrowd_leave_pq_out_with_the_reason(client):
    """Format versions 1 and 3 recorded no crowd flags: no panoptic quality, said why."""
    for version in ("store-v1", "store-v3"):
        reports = evaluate_protocols(str(FIXTURES / version / "gt"),
                                     str(FIXTURES / version / "pred"), "singlempo",
                                     client=client)
        report = reports["singlempo"]
        assert not any(n in report.metrics for n in QUALITY), version
        assert "iscrowd" in report.left_out["PQ"] and report.per_category == []
