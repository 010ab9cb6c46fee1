"""sgdask against the literal reference implementation (tests/literal/spec.py), exactly.

Per image: every term and diagnostic of every metric under every protocol, on hypothesis
images (tests/helpers/scenes.py). Per dataset: every reported number under every aggregation mode
through sgdask's accumulators (merged in random groups) and report, and once through the
real Dask pipeline from files. sgdask is reached only through tests/helpers/adapters.py.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import scenes
from tests.helpers.adapters import DatasetView, pipeline_views, report_view, score_image
from tests.literal import spec as literal

PROTOCOLS = tuple(literal.PROTOCOLS)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def differences(expected: literal.ImageTerms, actual: literal.ImageTerms) -> list[str]:
    """Readable differences between two images' terms (empty when equal)."""
    out = []
    a, b = asdict(expected), asdict(actual)
    for key in a:
        if isinstance(a[key], dict):
            for name in sorted(set(a[key]) | set(b[key]), key=str):
                if a[key].get(name) != b[key].get(name):
                    out.append(f"{key}[{name}]: literal {a[key].get(name)} "
                               f"sgdask {b[key].get(name)}")
        elif a[key] != b[key]:
            out.append(f"{key}: literal {a[key]} sgdask {b[key]}")
    return out


def check_image(image: scenes.Image, ks: list[str], training, with_ng: bool, legacy: bool
                ) -> None:
    for protocol in PROTOCOLS:
        expected = literal.image_terms(image.gt, image.pred, protocol, ks, with_ng=with_ng,
                                       training=training, legacy=legacy)
        actual = score_image(image, protocol, ks, with_ng=with_ng, training=training,
                             legacy=legacy).terms
        assert expected == actual, (protocol, differences(expected, actual))


@settings(max_examples=250, **SETTINGS)
@given(scenes.images(), scenes.k_lists(), scenes.trainings(), st.booleans(), st.booleans())
def test_every_image_term_equals_the_literal_one_masks(image, ks, training, with_ng, legacy):
    check_image(image, ks, training, with_ng, legacy)


@settings(max_examples=200, **SETTINGS)
@given(scenes.images(boxes=True), scenes.k_lists(), scenes.trainings(), st.booleans(),
       st.booleans())
def test_every_image_term_equals_the_literal_one_boxes(image, ks, training, with_ng, legacy):
    check_image(image, ks, training, with_ng, legacy)


# --------------------------------------------------------------------------- datasets


def as_float(value) -> float | None:
    return None if value is None else float(value)


def assert_same_dataset(expected: literal.Dataset, images: list[literal.ImageTerms],
                        view: DatasetView, what: str) -> None:
    """Every metric (exact: float of the same rational; wIMR and panoptic quality, whose
    IoU sums are float sums, to 1e-12), the per-predicate table (with its predicate groups),
    the diagnostic totals and the per-image table."""
    assert set(view.metrics) == set(expected.metrics), what
    for name, value in expected.metrics.items():
        if name.startswith("wIMR@") or name.partition("_")[0] in ("PQ", "SQ", "RQ"):
            assert view.metrics[name] == pytest.approx(value, abs=1e-12), (what, name)
        else:
            assert view.metrics[name] == float(value), (what, name)
    assert set(view.per_predicate) == set(expected.per_predicate), what
    assert view.groups == expected.groups, what
    for p, row in expected.per_predicate.items():
        assert {k: as_float(v) for k, v in row.items()} == view.per_predicate[p], (what, p)
    for key, value in expected.diagnostics.items():
        assert view.diagnostics[key] == value, (what, key)
    assert set(view.per_image) == {image.image_id for image in images}, what
    for image in images:
        row = view.per_image[image.image_id]
        assert row["missing"] == image.missing and row["gt_triplets"] == image.n_gt_triplets
        for name, (num, den) in image.scalars.items():
            assert row[name] == num / den, (what, image.image_id, name)
        for key, value in image.diagnostics.items():
            assert row[key] == value, (what, image.image_id, key)


@st.composite
def groups_of(draw, n: int) -> list[list[int]]:
    """The indices 0..n-1 shuffled and cut into 1-3 groups (accumulators to merge)."""
    order = draw(st.permutations(range(n)))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=2)))
    bounds = [0, *cuts, n]
    return [list(order[a:b]) for a, b in itertools.pairwise(bounds)]


@settings(max_examples=60, **SETTINGS)
@given(st.booleans().flatmap(lambda boxes: scenes.datasets(boxes=boxes)), scenes.k_lists(),
       scenes.trainings(), st.booleans(), st.booleans(), st.sampled_from([0.5, 1.0]),
       st.data())
def test_dataset_scores_equal_the_literal_aggregation(images, ks, training, with_ng, legacy,
                                                      tau, data):
    groups = data.draw(groups_of(len(images)))
    for protocol in PROTOCOLS:
        scored = [score_image(im, protocol, ks, with_ng=with_ng, training=training,
                              legacy=legacy) for im in images]
        terms = [literal.image_terms(im.gt, im.pred, protocol, ks, with_ng=with_ng,
                                     training=training, legacy=legacy) for im in images]
        assert [s.terms for s in scored] == terms, protocol
        for aggregation in literal.AGGREGATIONS:
            expected = literal.aggregate(terms, protocol, aggregation, ks, training=training,
                                         tau=tau, n_predicates=scenes.N_PREDICATES)
            view = report_view(scored, protocol, aggregation, ks, with_ng=with_ng,
                               training=training, legacy=legacy, tau=tau,
                               n_predicates=scenes.N_PREDICATES, groups=groups)
            assert_same_dataset(expected, terms, view, f"{protocol}/{aggregation}")


def test_pipeline_scores_equal_the_literal_aggregation(client, tmp_path):
    """Seeded images written as psg.json + PNGs + SGBench ZIP, ingested and converted into
    stores of 3-image parts, evaluated by the Dask pipeline (every protocol in one pass, once
    per aggregation mode): every number equals the literal aggregation of the literal terms.
    """
    chooser = scenes.RandomChooser(31)  # a seed whose data reach every metric family
    images = scenes.dataset(chooser, 9, boxes=False, min_pred=1)
    training = scenes.training(chooser)
    ks = ["1", "3", "20", "x0.5", "x2"]
    views = pipeline_views(tmp_path, images, PROTOCOLS, ks, literal.AGGREGATIONS, client,
                           training=training, n_categories=scenes.N_CATEGORIES,
                           n_predicates=scenes.N_PREDICATES, legacy=True)
    for protocol in PROTOCOLS:
        terms = [literal.image_terms(im.gt, im.pred, protocol, ks, training=training,
                                     legacy=True) for im in images]
        for aggregation in literal.AGGREGATIONS:
            view = views[(protocol, aggregation)]
            assert view.diagnostics["evaluated_images"] == len(images)
            assert view.diagnostics["gt_images_without_relations"] == 1
            expected = literal.aggregate(terms, protocol, aggregation, ks, training=training,
                                         n_predicates=scenes.N_PREDICATES,
                                         things=set(range(scenes.N_CATEGORIES)))
            assert_same_dataset(expected, terms, view, f"{protocol}/{aggregation}")
    single = views[("singlempo", "per_predicate")]
    for name in ("R@3", "ngR@3", "zR@20", "IMR@3", "wIMR@3", "PRank", "A@3", "PQ"):
        assert single.metrics[name] > 0, name  # the data exercise every family
    assert single.diagnostics["images_missing"] > 0 and single.diagnostics["masks_merged"] > 0


def test_literal_aggregation_on_a_hand_example():
    """The literal aggregation itself, on terms worked out by hand (so that a mistake in it
    cannot pass as agreement). Two images, predicate 0 in both, predicate 1 in b only:
    a: mR@1 {0: 1/2}; b: mR@1 {0: 0/1, 1: 2/2}.
    per_predicate: p0 mean(1/2, 0) = 1/4, p1 1 -> (1/4 + 1) / 2 = 5/8.
    pooled: p0 1/3, p1 1 -> 2/3. image: a 1/2, b mean(0, 1) = 1/2 -> 1/2.
    """
    a = literal.ImageTerms("a", False, 2, {0: 2}, {"R@1": (1, 2)}, {"mR@1": {0: (1, 2)}})
    b = literal.ImageTerms("b", False, 3, {0: 1, 1: 2}, {"R@1": (2, 3)},
                           {"mR@1": {0: (0, 1), 1: (2, 2)}})
    values = {agg: literal.aggregate([a, b], "singlempo", agg, ["1"]).metrics
              for agg in literal.AGGREGATIONS}
    assert values["per_predicate"]["mR@1"] == Fraction(5, 8)
    assert values["pooled"]["mR@1"] == Fraction(2, 3)
    assert values["image"]["mR@1"] == Fraction(1, 2)
    assert values["image"]["R@1"] == Fraction(7, 12)
