"""Property tests of the SPEC section 6 invariants under ``singlempo`` (hypothesis).

Scenes are tiny: a random 6x6 GT label image with 2-4 instances, predicted masks that are
GT masks with a few pixels flipped (so some match and some do not), random categories,
optional scores, and random graph / NG lists over the predicted instances.

sgdask is reached through tests/helpers/adapters.py; every expected value (the instance mapping,
the merge's kept instances, the GT set) comes from the literal reference implementation
(tests/literal/spec.py), never from the sgdask functions under test.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.helpers.adapters import exact_snapshot, score_image
from tests.helpers.scenes import Image
from tests.literal import spec as literal
from tests.literal.spec import GT, ImageTerms, Pred

H = W = 6
N_PREDICATES = 3
N_CATEGORIES = 2
# absolute ks in increasing order, and relative ks in increasing order
ABSOLUTE = ["1", "2", "3", "5", "8", "13"]
RELATIVE = ["x0.5", "x1", "x2", "x4"]
KS = ABSOLUTE + RELATIVE

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@dataclass
class Scene:
    gt: GT
    pred: Pred


def triplets_over(n: int, min_size: int = 0, max_size: int = 10, distinct: bool = False):
    """Lists of (s, o, p) over n instances; ``distinct``: s != o (o skips over s)."""
    predicate = st.integers(0, N_PREDICATES - 1)
    if distinct:
        s = st.tuples(st.integers(0, n - 1), st.integers(0, n - 2), predicate).map(
            lambda t: (t[0], t[1] + (t[1] >= t[0]), t[2]))
    else:
        s = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), predicate)
    return st.lists(s, min_size=min_size, max_size=max_size)


@st.composite
def scenes(draw, image_id: str = "img") -> Scene:
    n_gt = draw(st.integers(2, 4))
    # every GT instance (and the background) gets an equal share of randomly placed pixels
    pixels = np.asarray(draw(st.permutations(range(H * W)))) % (n_gt + 1)
    label_image = pixels.astype(np.int64).reshape(H, W)
    gt_labels = np.asarray(draw(st.lists(st.integers(0, N_CATEGORIES - 1), min_size=n_gt,
                                         max_size=n_gt)), dtype=np.int64)
    relations = draw(triplets_over(n_gt, min_size=1, max_size=5, distinct=True))
    # pairs with several GT predicates (what the graph constraint is about)
    relations += [(s, o, p) for (s, o, _), p in draw(st.lists(
        st.tuples(st.sampled_from(relations), st.integers(0, N_PREDICATES - 1)), max_size=3))]
    # one prediction derived from each GT instance (random order) plus a few more
    extra_sources = draw(st.lists(st.integers(0, n_gt - 1), max_size=3))
    sources = draw(st.permutations([*range(n_gt), *extra_sources]))
    n_pred = len(sources)
    masks, labels = [], []
    for source in sources:
        flips = sorted(draw(st.sets(st.integers(0, H * W - 1), max_size=4)))
        mask = (label_image == source + 1).reshape(-1)
        mask[flips] = ~mask[flips]
        masks.append(mask.reshape(H, W))
        right = int(gt_labels[source])
        labels.append(draw(st.sampled_from([right, right, right, 1 - right])))
    scores = draw(st.none() | st.lists(st.floats(0, 1), min_size=n_pred, max_size=n_pred))
    # likely hits: GT pairs expressed through predictions derived from their instances, with
    # any predicate (so that a pair often gets several)
    likely = sorted({(i, j, p) for gs, go, _ in relations for i in range(n_pred)
                     if sources[i] == gs for j in range(n_pred) if sources[j] == go
                     for p in range(N_PREDICATES)})
    extra = st.lists(st.sampled_from(likely), min_size=1, max_size=6) if likely else st.just([])
    graph = draw(st.permutations(draw(triplets_over(n_pred, max_size=6)) + draw(extra)))
    ng = draw(st.permutations(draw(triplets_over(n_pred)) + draw(extra)))
    gt = GT(image_id, gt_labels.tolist(), relations, label_image=label_image)
    pred = Pred(labels, graph, ng, masks=np.stack(masks), scores=scores)
    return Scene(gt, pred)


def scored(scene: Scene):
    return score_image(Image(scene.gt, scene.pred), "singlempo", KS)


def evaluate(scene: Scene) -> ImageTerms:
    return scored(scene).terms


def singlempo_mapping(scene: Scene) -> np.ndarray:
    """kept instance -> GT index (-1 unmatched), from the literal SPEC 5.1 merge and 4."""
    return np.asarray(literal.instance_mapping(scene.gt, scene.pred, "singlempo")[1],
                      dtype=np.int64).reshape(-1)


def gt_set(scene: Scene) -> np.ndarray:
    return np.asarray(literal.gt_set(scene.gt.relations), dtype=np.int64).reshape(-1, 3)


def values(result: ImageTerms, family: str, ks) -> list[Fraction]:
    return [Fraction(*result.scalars[f"{family}@{k}"]) for k in ks]


def per_predicate(result: ImageTerms, family: str, ks) -> list[dict[int, Fraction]]:
    return [{p: Fraction(*t) for p, t in result.per_predicate[f"{family}@{k}"].items()}
            for k in ks]


def non_decreasing(seq) -> bool:
    return all(a <= b for a, b in itertools.pairwise(seq))


@SETTINGS
@given(scenes())
def test_recalls_are_monotone_in_k_and_within_bounds(scene):
    res = evaluate(scene)
    n_gt = len(gt_set(scene))
    for family, mean in (("R", "mR"), ("ngR", "mNgR")):
        for ks in (ABSOLUTE, RELATIVE):
            assert non_decreasing(values(res, family, ks))
            per_k = per_predicate(res, mean, ks)
            for p in per_k[0]:
                assert non_decreasing([v[p] for v in per_k])
        # relative ks resolve to ceil(F * |G|): order them with the absolute ones by k
        by_k = sorted(KS, key=lambda k: literal.resolve(k, n_gt))
        resolved = [literal.resolve(k, n_gt) for k in by_k]
        vals = values(res, family, by_k)
        assert non_decreasing(vals)
        assert all(vals[i] == vals[i + 1] for i in range(len(by_k) - 1)
                   if resolved[i] == resolved[i + 1])
    if "PR@1" in res.scalars:
        # one triplet per pair in the graph list: R@k <= PR@k; PR@k monotone in k
        for ks in (ABSOLUTE, RELATIVE):
            assert non_decreasing(values(res, "PR", ks))
        for r, pr in zip(values(res, "R", KS), values(res, "PR", KS), strict=True):
            assert r <= pr
    for name, (num, den) in res.scalars.items():
        if name != "PRank":
            assert 0 <= num <= den, name
    for name, terms in res.per_predicate.items():
        if name != "PRank":
            assert all(0 <= num <= den for num, den in terms.values()), name


@SETTINGS
@given(scenes())
def test_recall_is_bounded_by_matched_instances(scene):
    """R@k <= |{t in G: subject and object matched}| / |G| (SPEC: R@k <= R@inf), per
    predicate too, for the graph and the NG list; InstR is the matched GT fraction."""
    res = evaluate(scene)
    mapping = singlempo_mapping(scene)
    matched = np.zeros(len(scene.gt.categories), dtype=bool)
    matched[mapping[mapping >= 0]] = True
    relations = gt_set(scene)
    reachable = matched[relations[:, 0]] & matched[relations[:, 1]]
    bound = int(reachable.sum())
    assert res.scalars["InstR"] == (int(matched.sum()), len(scene.gt.categories))
    if "R@inf" in res.scalars:
        assert res.scalars["R@inf"] == (bound, len(relations))
    for family, mean in (("R", "mR"), ("ngR", "mNgR")):
        for k in KS:
            assert res.scalars[f"{family}@{k}"] == (res.scalars[f"{family}@{k}"][0],
                                                    len(relations))
            assert res.scalars[f"{family}@{k}"][0] <= bound
            for p, (hits, count) in res.per_predicate[f"{mean}@{k}"].items():
                sel = relations[:, 2] == p
                assert count == int(sel.sum())
                assert hits <= int(reachable[sel].sum())


@SETTINGS
@given(scenes(), st.data())
def test_a_correct_triplet_at_rank_zero_never_lowers_recall(scene, data):
    """Prepend a GT triplet expressed through the predicted instances matched to its subject
    and object (original indices, via the literal merge's kept instances): no R@k / ngR@k
    goes down, and the triplet itself is recalled at k = 1."""
    norm, mapping = literal.instance_mapping(scene.gt, scene.pred, "singlempo")
    owner = {g: norm.sources[i] for i, g in enumerate(mapping) if g >= 0}
    relations = gt_set(scene)
    candidates = [t for t in relations.tolist() if t[0] in owner and t[1] in owner]
    assume(candidates)
    s, o, p = data.draw(st.sampled_from(candidates))
    correct = [(owner[s], owner[o], p)]
    before = evaluate(scene)
    pred = scene.pred
    better = Pred(pred.categories, correct + list(pred.graph), correct + list(pred.ng),
                  masks=pred.masks, scores=pred.scores)
    after = evaluate(Scene(scene.gt, better))
    for family in ("R", "ngR"):
        for k in KS:
            name = f"{family}@{k}"
            assert after.scalars[name][0] >= before.scalars[name][0], name
        assert after.scalars[f"{family}@1"][0] == 1


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.lists(scenes(), min_size=2, max_size=5), st.data())
def test_image_order_and_partitioning_change_nothing(scene_list, data):
    results = [scored(s) for s in scene_list]
    reference = exact_snapshot([results])
    order = data.draw(st.permutations(range(len(results))))
    cut = data.draw(st.integers(0, len(results)))
    left = [results[i] for i in order[:cut]]
    right = [results[i] for i in order[cut:]]
    assert exact_snapshot([right, left]) == reference
    singles = [[results[i]] for i in reversed(order)]
    assert exact_snapshot(singles) == reference
