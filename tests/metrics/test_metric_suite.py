"""Hand-computed cases for the metric suite (SPEC sections 3-7): PR@k, R@inf, zR@k, IMR@k,
wIMR@k, legacy A@k and the report's left-out metrics.

Every expected value is worked out by hand in the docstring, and each case is built so that
a plausible wrong reading of the SPEC gives a different number (named in the docstring).
Images are tiny: 4x4 label images / masks drawn as strings, or 10x10 boxes in a row.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from sgdask.core.accum import Accumulator
from sgdask.core.finalize import build_report, derived_metrics
from sgdask.core.plan import EvalSettings
from sgdask.core.settings import Settings
from sgdask.kernels.selection import parse_ks
from sgdask.metrics.terms import evaluate_image, missing_image_result
from sgdask.protocols import MULTIMPO, SGBENCH, SINGLEMPO, Protocol
from sgdask.report import Report
from sgdask.store.training_stats import composition_counts, train_stats, zero_shot_from
from sgdask.types import ImageGT, ImagePred, ImageResult, ZeroShot, as_triplets
from tests.helpers.builders import box, labels_of, mask_of

# --------------------------------------------------------------------------- helpers


def ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def box_gt(labels, relations, image_id: str = "img") -> ImageGT:
    boxes = [box(i) for i in range(len(labels))]
    return ImageGT(image_id, ints(labels), as_triplets(relations),
                   boxes=np.asarray(boxes, dtype=np.float64))


def box_pred(labels, boxes, graph, ng=(), image_id: str = "img") -> ImagePred:
    return ImagePred(image_id, ints(labels), as_triplets(graph), as_triplets(ng),
                     boxes=np.asarray(boxes, dtype=np.float64).reshape(-1, 4))


def mask_gt(labels, relations, label_image) -> ImageGT:
    return ImageGT("img", ints(labels), as_triplets(relations), label_image=label_image)


def mask_pred(labels, masks, graph, ng=()) -> ImagePred:
    return ImagePred("img", ints(labels), as_triplets(graph), as_triplets(ng),
                     masks=np.stack(masks).astype(bool))


def seen_types(types, n_classes: int, n_predicates: int) -> ZeroShot:
    """A ZeroShot look-up from (subject category, object category, predicate) types."""
    arr = ints(types).reshape(-1, 3)
    probe = ZeroShot(np.empty(0, dtype=np.int64), n_classes, n_predicates)
    return ZeroShot(np.unique(probe.key(arr[:, 0], arr[:, 1], arr[:, 2])), n_classes,
                    n_predicates)


def accumulate(*results: ImageResult) -> Accumulator:
    acc = Accumulator()
    for res in results:
        acc.update(res)
    return acc


def manifest(n_predicates: int = 4, n_things: int = 4) -> dict:
    return {"predicate_classes": [f"p{i}" for i in range(n_predicates)],
            "thing_classes": [f"c{i}" for i in range(n_things)], "stuff_classes": [],
            "content_hash": "x", "source": "x"}


def report_of(results: list[ImageResult], protocol: Protocol, ks: str, *, with_ng: bool = True,
              has_stats: bool = False, legacy: bool = False, tau: float = 0.5,
              composition: dict[int, int] | None = None,
              aggregation: str = "per_predicate") -> Report:
    settings = EvalSettings(protocol, Settings(ks=ks, aggregation=aggregation, legacy=legacy,
                                               tau=tau), with_ng, has_stats)
    rows = [{"image_id": r.image_id, "missing": r.missing} for r in results]
    return build_report(accumulate(*results), rows, settings, composition, manifest(),
                        manifest(), {"evaluated_images": len(results)})


def family_keys(metrics: dict, *families: str) -> list[str]:
    """Metric names of the given families (``ngR`` matches ``ngR@20``, ``PRank`` itself)."""
    return [m for m in metrics if m.partition("@")[0] in families]


# --------------------------------------------------------------------------- 1. PR@k


def test_pair_recall_counts_pairs_not_triplets():
    """GT boxes 0..3, all category 0; pred3 = box(9) matches nothing (pred i = GT i, i<3).

    GT (0,1,0) (0,1,1) (1,2,0): |G| = 3, pairs(G) = {(0,1), (1,2)}: |pairs(G)| = 2.
    graph (3,0,0) (0,1,5) (0,1,0) (1,2,1)
      singlempo: graph constraint drops (0,1,0) (second triplet of pair (0,1))
        -> normalized list (3,0,0) (0,1,5) (1,2,1); (3,0,0) is unmatched but keeps slot 0.
        pair first hits: (0,1) at 1 (wrong predicate 5 still counts), (1,2) at 2.
        PR@1 = 0/2, PR@2 = 1/2, PR@3 = 2/2, PR@x1 (k = ceil(1 * |G|) = 3) = 2/2.
        R@3 = 0/3 (no predicate right).
      sgbench (no graph constraint): (3,0,0) (0,1,5) (0,1,0) (1,2,1): (1,2) first at 3
        -> PR@3 = 1/2, PR@4 = 2/2.
    Wrong readings caught: denominator |G| = 3 (pair (0,1) counted twice) -> 2/3 or 3/3;
    requiring the predicate -> PR@3 = 0; k on the raw list (before the graph constraint)
    -> singlempo PR@3 = 1/2; skipping the unmatched triplet before k -> PR@1 = 1/2;
    relative k from |pairs(G)| = 2 -> PR@x1 = 1/2.
    """
    gt = box_gt([0, 0, 0, 0], [[0, 1, 0], [0, 1, 1], [1, 2, 0]])
    pred = box_pred([0, 0, 0, 0], [box(0), box(1), box(2), box(9)],
                    graph=[[3, 0, 0], [0, 1, 5], [0, 1, 0], [1, 2, 1]])
    ks = parse_ks("1,2,3,4,x1")
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert single.image_terms["PR@1"] == (0, 2)
    assert single.image_terms["PR@2"] == (1, 2)
    assert single.image_terms["PR@3"] == (2, 2)
    assert single.image_terms["PR@x1"] == (2, 2)
    assert single.image_terms["R@3"] == (0, 3)
    sgb = evaluate_image(gt, pred, SGBENCH, ks)
    assert sgb.image_terms["PR@3"] == (1, 2)
    assert sgb.image_terms["PR@4"] == (2, 2)


def test_pair_recall_two_predicates_on_one_pair_count_once():
    """GT (0,1,0) (0,1,1): two triplets, one pair. graph (0,1,0) -> PR@1 = 1/1, R@1 = 1/2.

    Wrong reading (pairs of G not deduplicated): PR@1 = 2/2 over 2 or 1/2.
    Two images in the report: image b has GT (0,1,0) (1,2,0) and graph (0,1,3) -> PR = 1/2.
    Dataset PR@1 = mean over images (1 + 1/2) / 2 = 3/4 (pooled would be 2/3).
    """
    a_gt = box_gt([0, 0], [[0, 1, 0], [0, 1, 1]], image_id="a")
    a_pred = box_pred([0, 0], [box(0), box(1)], graph=[[0, 1, 0]], image_id="a")
    b_gt = box_gt([0, 0, 0], [[0, 1, 0], [1, 2, 0]], image_id="b")
    b_pred = box_pred([0, 0, 0], [box(0), box(1), box(2)], graph=[[0, 1, 3]], image_id="b")
    ks = parse_ks("1")
    a = evaluate_image(a_gt, a_pred, SINGLEMPO, ks)
    b = evaluate_image(b_gt, b_pred, SINGLEMPO, ks)
    assert a.image_terms["PR@1"] == (1, 1)
    assert a.image_terms["R@1"] == (1, 2)
    assert b.image_terms["PR@1"] == (1, 2)
    report = report_of([a, b], SINGLEMPO, "1")
    assert report.metrics["PR@1"] == pytest.approx(0.75, abs=1e-12)


# --------------------------------------------------------------------------- 2. R@inf


def test_recall_at_inf_needs_both_instances_and_ignores_the_lists():
    """GT boxes 0..3, categories [0, 0, 0, 1]; GT (0,1,0) (1,2,1) (2,3,1).
    pred boxes = GT boxes, categories [0, 0, 0, 0]: pred3 has the wrong category -> GT3
    unmatched; GT0..GT2 matched.

    Reachable: (0,1,0) yes, (1,2,1) yes, (2,3,1) no (object GT3 unmatched).
    R@inf = 2/3; mR@inf: p0 1/1, p1 1/2. Same for an empty graph list and a list that hits
    everything it can: R@inf does not look at the lists (R@1 differs: 0/3 vs 1/3).
    InstR = 3/4.
    Wrong readings caught: needs a hit in the list -> 0/3 for the empty list; subject OR object
    matched -> 3/3; InstR (instances, not triplets) -> 3/4; mR@inf over all predicates
    pooled (2/3 for both).
    """
    gt = box_gt([0, 0, 0, 1], [[0, 1, 0], [1, 2, 1], [2, 3, 1]])
    boxes = [box(0), box(1), box(2), box(3)]
    ks = parse_ks("1")
    for graph, r_at_1 in (([], (0, 3)), ([[0, 1, 0], [1, 2, 1], [2, 3, 1]], (1, 3))):
        for protocol in (SINGLEMPO, SGBENCH, MULTIMPO):
            res = evaluate_image(gt, box_pred([0, 0, 0, 0], boxes, graph), protocol, ks)
            assert res.image_terms["R@inf"] == (2, 3), protocol.name
            assert res.predicate_terms["mR@inf"] == {0: (1, 1), 1: (1, 2)}, protocol.name
            assert res.image_terms["InstR"] == (3, 4), protocol.name
            assert res.image_terms["R@1"] == r_at_1, protocol.name


def test_recall_at_inf_duplicate_merged_away_adds_no_match():
    """GT (HALVES): GT0 = cols 0-1 (8 px), GT1 = cols 2-3 (8 px), both category 0; GT (0,1,0).
    pred m = cols 0-2 (12 px), n = cols 1-3 (12 px), both category 0.
    IoU(m, n) = 8 / 16 = 0.5 -> under singlempo n is merged into m (kept: m, new mask = m).
    IoU(m, GT0) = 8/12, IoU(m, GT1) = 4/16 -> m matches GT0; GT1 has no kept instance.

    singlempo: R@inf = 0/1, InstR = 1/2, mR@inf p0 = 0/1.
    sgbench (no merge, many-to-one): n -> GT1 (8/12 vs 4/16) -> R@inf = 1/1, InstR = 2/2.
    Wrong reading caught: matching the original masks (before the merge) under singlempo
    -> R@inf = 1/1.
    """
    gt = mask_gt([0, 0], [[0, 1, 0]], labels_of("1122", "1122", "1122", "1122"))
    m = mask_of("###.", "###.", "###.", "###.")
    n = mask_of(".###", ".###", ".###", ".###")
    pred = mask_pred([0, 0], [m, n], graph=[[0, 1, 0]])
    ks = parse_ks("20")
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert single.diagnostics["masks_merged"] == 1
    assert single.image_terms["R@inf"] == (0, 1)
    assert single.predicate_terms["mR@inf"] == {0: (0, 1)}
    assert single.image_terms["InstR"] == (1, 2)
    sgb = evaluate_image(gt, pred, SGBENCH, ks)
    assert sgb.image_terms["R@inf"] == (1, 1)
    assert sgb.image_terms["InstR"] == (2, 2)


def test_recall_at_inf_multimpo_any_same_category_overlap():
    """GT label image: GT0 = rows 0-1 cols 0-1 (4 px, cat 0), GT1 = rows 0-1 cols 2-3 (4 px,
    cat 0), GT2 = rows 2-3 (8 px, cat 1). GT (0,1,0) (1,2,1).
    pred0 = rows 0-1 (8 px, cat 0): IoU 4/8 = 0.5 with GT0 and with GT1 (tie).
    pred1 = rows 2-3 (8 px, cat 0): IoU 1 with GT2 but the wrong category.

    multimpo: matched = some same-category prediction with IoU >= 0.5 -> GT0 and GT1 (both by
      pred0), not GT2. R@inf = 1/2 ((0,1,0) reachable, (1,2,1) not); mR@inf p0 1/1, p1 0/1.
    singlempo (one-to-one): pred0 -> GT0 only (tie -> lowest index): R@inf = 0/2.
    Wrong readings caught: one GT per prediction under multimpo -> 0/2; ignoring categories
    -> 2/2; IoU > 0.5 (strict) -> 0/2.
    """
    gt = mask_gt([0, 0, 1], [[0, 1, 0], [1, 2, 1]], labels_of("1122", "1122", "3333", "3333"))
    p0 = mask_of("####", "####", "....", "....")
    p1 = mask_of("....", "....", "####", "####")
    pred = mask_pred([0, 0], [p0, p1], graph=[[0, 1, 0]])
    ks = parse_ks("20")
    multi = evaluate_image(gt, pred, MULTIMPO, ks)
    assert multi.image_terms["R@inf"] == (1, 2)
    assert multi.predicate_terms["mR@inf"] == {0: (1, 1), 1: (0, 1)}
    assert multi.image_terms["InstR"] == (2, 3)
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert single.image_terms["R@inf"] == (0, 2)
    assert single.image_terms["InstR"] == (1, 3)


# --------------------------------------------------------------------------- 3. zR@k


# Categories of GT instances 0..3: [0, 1, 2, 0]. GT triplets and their types:
#   T0 (0,1,0): (0,1,0) seen        T1 (1,2,0): (1,2,0) seen
#   T2 (2,3,1): (2,0,1) unseen      T3 (3,1,2): (0,1,2) unseen
# Seen also holds (2,0,2) (same categories as T2, other predicate) and (1,0,2) (T3's
# categories reversed): neither makes T2 or T3 seen.
ZS_LABELS = [0, 1, 2, 0]
ZS_RELATIONS = [[0, 1, 0], [1, 2, 0], [2, 3, 1], [3, 1, 2]]
ZS = seen_types([[0, 1, 0], [1, 2, 0], [2, 0, 2], [1, 0, 2]], n_classes=3, n_predicates=3)


def zs_image(image_id: str = "img") -> ImageResult:
    gt = box_gt(ZS_LABELS, ZS_RELATIONS, image_id=image_id)
    pred = box_pred(ZS_LABELS, [box(i) for i in range(4)], graph=ZS_RELATIONS,
                    image_id=image_id)
    return evaluate_image(gt, pred, SINGLEMPO, parse_ks("2,3,x1"), zero_shot=ZS)


def test_zero_shot_recall_counts_unseen_triplets_with_relative_k_of_all_gt():
    """graph = T0 T1 T2 T3 (first hits at 0, 1, 2, 3); zero-shot: T2 (p1), T3 (p2).

    zR@2 = 0/2, zR@3 = 1/2 (T2 at 2), zR@x1: k = ceil(1 * |G|) = 4 (all 4 GT triplets)
    -> 2/2. mzR@3: p1 1/1, p2 0/1, no p0 entry (p0 has no zero-shot triplet).
    Wrong readings caught: relative k from the zero-shot count (k = 2) -> zR@x1 = 0/2;
    counting seen triplets -> zR@3 = 3/4 and a p0 entry; flags by predicate only or by
    unordered categories -> T3 or T2 counted as seen.
    """
    res = zs_image()
    assert res.image_terms["zR@2"] == (0, 2)
    assert res.image_terms["zR@3"] == (1, 2)
    assert res.image_terms["zR@x1"] == (2, 2)
    assert res.image_terms["R@3"] == (3, 4)
    assert res.predicate_terms["mzR@3"] == {1: (1, 1), 2: (0, 1)}
    assert res.predicate_terms["mzR@x1"] == {1: (1, 1), 2: (1, 1)}


def test_zero_shot_from_training_stats_table():
    """The same seen set built the way the pipeline builds it: train_stats over a tiny
    psg.json (train image t1 has the four seen types; test image x is not in train_ids)
    -> zero_shot_from gives the same flags: T2 and T3 unseen."""
    doc = {"train_image_ids": ["t1"], "data": [
        {"image_id": "t1", "segments_info": [{"category_id": c} for c in (0, 1, 2)],
         "relations": [[0, 1, 0], [1, 2, 0], [2, 0, 2], [1, 0, 2]]},
        {"image_id": "x", "segments_info": [{"category_id": c} for c in (0, 1)],
         "relations": [[0, 1, 1]]},
    ]}
    zero_shot = zero_shot_from(train_stats(doc, "psg.json"), 3, 3)
    flags = zero_shot.flags(as_triplets(ZS_RELATIONS), ints(ZS_LABELS))
    assert flags.tolist() == [False, False, True, True]


def test_zero_shot_dataset_mean_skips_images_without_zero_shot_triplets():
    """Image a: zs_image (zR@3 = 1/2, zR@x1 = 2/2, R@3 = 3/4).
    Image b: GT categories [0, 1], GT (0,1,0) (seen), graph empty: no zero-shot triplet,
    R@3 = 0/1, no zR term at all.

    Dataset zR@3 = mean over images with zero-shot triplets = 1/2 (1 image counted);
    R@3 = (3/4 + 0) / 2 = 3/8 (both images). mzR@3 = mean(p1 1, p2 0) = 1/2.
    Wrong readings caught: b counted as 0 -> zR@3 = 1/4; b counted as a vacuous 1 -> 3/4.
    """
    a = zs_image("a")
    b_gt = box_gt([0, 1], [[0, 1, 0]], image_id="b")
    b = evaluate_image(b_gt, box_pred([0, 1], [box(0), box(1)], graph=[], image_id="b"),
                       SINGLEMPO, parse_ks("2,3,x1"), zero_shot=ZS)
    assert not any(name.startswith(("zR", "mzR")) for name in [*b.image_terms, *b.predicate_terms])
    acc = accumulate(a, b)
    assert acc.image_count("zR@3") == 1
    assert acc.image_value("zR@3") == Fraction(1, 2)
    assert acc.image_value("R@3") == Fraction(3, 8)
    report = report_of([a, b], SINGLEMPO, "2,3,x1", has_stats=True)
    assert report.metrics["zR@3"] == pytest.approx(0.5, abs=1e-12)
    assert report.metrics["zR@x1"] == pytest.approx(1.0, abs=1e-12)
    assert report.metrics["mzR@3"] == pytest.approx(0.5, abs=1e-12)
    assert report.metrics["R@3"] == pytest.approx(0.375, abs=1e-12)
    assert "zR@k" not in report.left_out


def test_zero_shot_missing_image_counts_zero():
    """A GT image without prediction that has zero-shot triplets scores 0 on zR (SPEC 7):
    zs_image GT missing -> zR@3 = 0/2, mzR@3 p1 0/1, p2 0/1."""
    gt = box_gt(ZS_LABELS, ZS_RELATIONS)
    res = missing_image_result(gt, SINGLEMPO, parse_ks("3"), zero_shot=ZS)
    assert res.image_terms["zR@3"] == (0, 2)
    assert res.predicate_terms["mzR@3"] == {1: (0, 1), 2: (0, 1)}


# --------------------------------------------------------------------------- 4. IMR@k


def test_imr_ranks_each_predicate_on_its_own():
    """Boxes 0..4 (category 0); pairs A = (0,1), B = (1,2), C = (2,3), D = (3,4).
    NG list: A-p1, B-p1, C-p1, D-p2. GT {D-p2, B-p1}.

    Per-predicate ranks: p1: A 0, B 1, C 2; p2: D 0.
    IMR@1: p1 0/1 (B is the 2nd p1 triplet), p2 1/1 (D is the 1st p2 triplet).
    IMR@2: p1 1/1, p2 1/1.
    Plain first-k of the NG list: mNgR@1 p1 0/1, p2 0/1; mNgR@2 p1 1/1, p2 0/1;
    mNgR@4 p1 1/1, p2 1/1.
    Wrong reading caught: IMR as the first k of the whole NG list (ranking across predicates)
    -> IMR@1 p2 = 0, IMR@2 p2 = 0.
    """
    gt = box_gt([0] * 5, [[3, 4, 2], [1, 2, 1]])
    ng = [[0, 1, 1], [1, 2, 1], [2, 3, 1], [3, 4, 2]]
    pred = box_pred([0] * 5, [box(i) for i in range(5)], graph=[], ng=ng)
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("1,2,4"))
    assert res.predicate_terms["IMR@1"] == {1: (0, 1), 2: (1, 1)}
    assert res.predicate_terms["IMR@2"] == {1: (1, 1), 2: (1, 1)}
    assert res.predicate_terms["mNgR@1"] == {1: (0, 1), 2: (0, 1)}
    assert res.predicate_terms["mNgR@2"] == {1: (1, 1), 2: (0, 1)}
    assert res.predicate_terms["mNgR@4"] == {1: (1, 1), 2: (1, 1)}
    assert "IMR@1" not in res.image_terms
    report = report_of([res], SINGLEMPO, "1,2,4")
    assert report.metrics["IMR@1"] == pytest.approx(0.5, abs=1e-12)
    assert report.metrics["mNgR@1"] == 0.0


def test_imr_unmatched_triplet_takes_a_slot_of_its_predicate():
    """Selection before matching (SPEC 3): pred5 = box(9) matches nothing.
    NG list: (5,0,2) [unmatched, p2], (0,1,1), (3,4,2). GT {(3,4,2)}.

    p2 ranks: (5,0,2) 0, (3,4,2) 1 -> IMR@1 p2 = 0/1, IMR@2 p2 = 1/1.
    Wrong reading caught: dropping unmatched triplets before ranking -> IMR@1 = 1/1.
    """
    gt = box_gt([0] * 5, [[3, 4, 2]])
    pred = box_pred([0] * 6, [*(box(i) for i in range(5)), box(9)], graph=[],
                    ng=[[5, 0, 2], [0, 1, 1], [3, 4, 2]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("1,2"))
    assert res.predicate_terms["IMR@1"] == {2: (0, 1)}
    assert res.predicate_terms["IMR@2"] == {2: (1, 1)}


# --------------------------------------------------------------------------- 5. wIMR@k

# Boxes 0..4, category 0. GT (0,1,0) (1,2,0) (2,3,1) (3,4,2): predicates 0, 1, 2 present.
# NG list (0,1,0) (2,3,1) (3,4,2) (1,2,0): per-predicate ranks p0: (0,1,0) 0, (1,2,0) 1;
# p1: 0; p2: 0. IMR@1: p0 1/2, p1 1/1, p2 1/1 (mean over predicates 5/6).
# Training composition n_c (distinct (subject, object) category pairs): p0 4, p1 1, p3 16;
# p2 absent from training (weight 0), p3 absent from the evaluated GT (no weight).
WIMR_COMPOSITION = {0: 4, 1: 1, 3: 16}


def wimr_result() -> ImageResult:
    gt = box_gt([0] * 5, [[0, 1, 0], [1, 2, 0], [2, 3, 1], [3, 4, 2]])
    pred = box_pred([0] * 5, [box(i) for i in range(5)], graph=[],
                    ng=[[0, 1, 0], [2, 3, 1], [3, 4, 2], [1, 2, 0]])
    return evaluate_image(gt, pred, SINGLEMPO, parse_ks("1"))


@pytest.mark.parametrize(("tau", "expected", "wrong_with_p3"), [
    (0.5, 2 / 3, 2 / 7),
    (1.0, 3 / 5, 1 / 7),
])
def test_weighted_imr_weights_over_predicates_of_the_evaluated_gt(tau, expected, wrong_with_p3):
    """wIMR@1 = sum_c n_c^tau IMR_c / sum_c n_c^tau over c in {p0, p1, p2} (the GT's).

    tau = 0.5: weights sqrt(4) = 2, sqrt(1) = 1, p2: 0 -> (2 * 1/2 + 1 * 1 + 0 * 1) / 3 = 2/3.
      Wrong: p3 in the denominator (sqrt(16) = 4) -> (1 + 1) / 7 = 2/7.
    tau = 1.0: weights 4, 1, 0 -> (4 * 1/2 + 1) / 5 = 3/5.
      Wrong: with p3 -> 3 / 21 = 1/7.
    Other wrong readings: unweighted mean 5/6; p2 given weight 1 (tau 0.5) -> 3/4.
    """
    res = wimr_result()
    assert res.predicate_terms["IMR@1"] == {0: (1, 2), 1: (1, 1), 2: (1, 1)}
    report = report_of([res], SINGLEMPO, "1", has_stats=True, tau=tau,
                       composition=WIMR_COMPOSITION)
    assert report.metrics["IMR@1"] == pytest.approx(5 / 6, abs=1e-12)
    assert report.metrics["wIMR@1"] == pytest.approx(expected, abs=1e-12)
    assert report.metrics["wIMR@1"] != pytest.approx(wrong_with_p3, abs=1e-6)
    settings = EvalSettings(SINGLEMPO, Settings(ks="1", tau=tau), True, True)
    direct = derived_metrics(accumulate(res), settings, WIMR_COMPOSITION)
    assert direct["wIMR@1"] == pytest.approx(expected, abs=1e-12)


def test_weighted_imr_predicate_absent_from_training_has_no_weight():
    """Only p2 changes: its IMR@1 is 1 here; with composition {0: 4, 1: 1} vs {0: 4, 1: 1,
    2: 0} the value is the same 2/3 (tau 0.5), and a composition without any GT predicate
    has no positive weight -> no wIMR key (never 0 filled in)."""
    acc = accumulate(wimr_result())
    settings = EvalSettings(SINGLEMPO, Settings(ks="1"), True, True)
    a = derived_metrics(acc, settings, {0: 4, 1: 1})["wIMR@1"]
    b = derived_metrics(acc, settings, {0: 4, 1: 1, 2: 0})["wIMR@1"]
    assert a == pytest.approx(2 / 3, abs=1e-12)
    assert b == pytest.approx(2 / 3, abs=1e-12)
    # no wIMR key (the derived metrics besides it, F@1 and ngF@1, need no weights)
    assert set(derived_metrics(acc, settings, {3: 16})) == {"F@1", "ngF@1"}
    assert set(derived_metrics(acc, settings, None)) == {"F@1", "ngF@1"}


def test_composition_counts_are_distinct_category_pairs():
    """Training relations: p0 on category pairs (0,1) x3, (0,2) x1, (1,1) x1 -> n_0 = 3;
    p1 on (2,0) x2 -> n_1 = 1. Wrong reading (triplet counts) -> {0: 5, 1: 2}."""
    doc = {"train_image_ids": ["t1", "t2"], "data": [
        {"image_id": "t1", "segments_info": [{"category_id": c} for c in (0, 1, 2, 1)],
         "relations": [[0, 1, 0], [0, 3, 0], [0, 2, 0], [1, 3, 0], [2, 0, 1]]},
        {"image_id": "t2", "segments_info": [{"category_id": c} for c in (0, 1, 2)],
         "relations": [[0, 1, 0], [2, 0, 1]]},
    ]}
    assert composition_counts(train_stats(doc, "psg.json")) == {0: 3, 1: 1}


# --------------------------------------------------------------------------- 6. A@k (legacy)


def legacy_results(protocol: Protocol = SINGLEMPO) -> list[ImageResult]:
    """Image a: GT (0,1,0) (|G| = 1); graph (1,0,3) [pair (1,0) not a GT pair], (0,1,0).
    Image b: boxes 0..3, GT (0,1,0) (1,2,0) (2,3,0) (|G| = 3);
      graph (3,0,1) [not a GT pair], (0,1,1) [GT pair, wrong predicate], (1,2,0), (2,3,0)."""
    ks = parse_ks("1,2,3")
    a = evaluate_image(box_gt([0, 0], [[0, 1, 0]], image_id="a"),
                       box_pred([0, 0], [box(0), box(1)], graph=[[1, 0, 3], [0, 1, 0]],
                                image_id="a"), protocol, ks, legacy=True)
    b = evaluate_image(box_gt([0] * 4, [[0, 1, 0], [1, 2, 0], [2, 3, 0]], image_id="b"),
                       box_pred([0] * 4, [box(i) for i in range(4)],
                                graph=[[3, 0, 1], [0, 1, 1], [1, 2, 0], [2, 3, 0]],
                                image_id="b"), protocol, ks, legacy=True)
    return [a, b]


def test_legacy_pair_accuracy_pooled_over_gt_pairs_only():
    """Only predictions on GT pairs count, top-k of those:
    a: kept list (0,1,0) -> A@1 = 1/1 (while R@1 = 0/1: slot 0 holds (1,0,3)).
    b: kept list (0,1,1) (1,2,0) (2,3,0) -> A@1 0/3, A@2 1/3, A@3 2/3.
    Pooled (sum hits / sum |G|): A@1 = 1/4, A@2 = 2/4, A@3 = 3/4.
    Wrong readings caught: mean of per-image ratios -> A@1 1/2, A@2 2/3, A@3 5/6; top-k of
    all predictions (a recall) -> A@1 = 0/4, A@2 = 1/4.
    """
    a, b = legacy_results()
    assert a.ratio_terms["A@1"] == (1, 1)
    assert a.image_terms["R@1"] == (0, 1)
    assert (b.ratio_terms["A@1"], b.ratio_terms["A@2"], b.ratio_terms["A@3"]) == \
        ((0, 3), (1, 3), (2, 3))
    report = report_of([a, b], SINGLEMPO, "1,2,3", legacy=True)
    assert report.metrics["A@1"] == pytest.approx(1 / 4, abs=1e-12)
    assert report.metrics["A@2"] == pytest.approx(2 / 4, abs=1e-12)
    assert report.metrics["A@3"] == pytest.approx(3 / 4, abs=1e-12)
    assert "A@k" not in report.left_out
    assert any("not a recall" in note for note in report.notes)


def test_legacy_pair_accuracy_off_by_default():
    """legacy=False: no A@ term per image, no A@ key in the report, left out with a reason."""
    ks = parse_ks("1")
    res = evaluate_image(box_gt([0, 0], [[0, 1, 0]]),
                         box_pred([0, 0], [box(0), box(1)], graph=[[0, 1, 0]]), SINGLEMPO, ks)
    assert res.ratio_terms == {}
    report = report_of([res], SINGLEMPO, "1")
    assert family_keys(report.metrics, "A") == []
    assert report.left_out["A@k"]
    assert not any("not a recall" in note for note in report.notes)


def test_legacy_pair_accuracy_left_out_under_multimpo():
    """multimpo has no instance mapping: A@k is left out with a reason, no A@ key."""
    results = legacy_results(MULTIMPO)
    assert all(r.ratio_terms == {} for r in results)
    report = report_of(results, MULTIMPO, "1,2,3", legacy=True)
    assert family_keys(report.metrics, "A") == []
    assert "instance mapping" in report.left_out["A@k"]


def test_legacy_pair_accuracy_multimpo_with_a_missing_image_stays_left_out():
    """Same as above plus a GT image without prediction: A@k must stay out of the report
    under multimpo (SPEC: left out with a reason, never filled with zeros)."""
    missing = missing_image_result(box_gt([0, 0], [[0, 1, 0]], image_id="c"), MULTIMPO,
                                   parse_ks("1,2,3"), legacy=True)
    report = report_of([*legacy_results(MULTIMPO), missing], MULTIMPO, "1,2,3", legacy=True)
    assert family_keys(report.metrics, "A") == []
    assert "instance mapping" in report.left_out["A@k"]


def test_legacy_pair_accuracy_missing_image_counts_its_gt():
    """singlempo: a missing image c with |G| = 2 adds (0, 2): A@1 = (1 + 0 + 0) / (1 + 3 + 2)
    = 1/6 (a mean of ratios would give 1/3)."""
    missing = missing_image_result(box_gt([0, 0, 0], [[0, 1, 0], [1, 2, 0]], image_id="c"),
                                   SINGLEMPO, parse_ks("1,2,3"), legacy=True)
    assert missing.ratio_terms["A@1"] == (0, 2)
    report = report_of([*legacy_results(), missing], SINGLEMPO, "1,2,3", legacy=True)
    assert report.metrics["A@1"] == pytest.approx(1 / 6, abs=1e-12)


# --------------------------------------------------------------------------- 7. left out


NG_FAMILIES = ("ngR", "mNgR", "PRank", "IMR", "wIMR")
STATS_FAMILIES = ("zR", "mzR", "wIMR")


def test_without_ng_list_ng_metrics_are_left_out():
    """with_ng=False (and training stats present): no ngR/mNgR/PRank/IMR/wIMR key, each
    left out with a reason naming the NG list; zR (stats only) is still reported:
    zs_image's GT with graph T0..T3 -> zR@3 = 1/2, R@3 = 3/4."""
    gt = box_gt(ZS_LABELS, ZS_RELATIONS)
    pred = box_pred(ZS_LABELS, [box(i) for i in range(4)], graph=ZS_RELATIONS)
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("3"), with_ng=False, zero_shot=ZS)
    report = report_of([res], SINGLEMPO, "3", with_ng=False, has_stats=True,
                       composition=WIMR_COMPOSITION)
    assert family_keys(report.metrics, *NG_FAMILIES) == []
    for name in ("ngR@k", "mNgR@k", "PRank", "IMR@k", "wIMR@k"):
        assert "NG list" in report.left_out[name], name
    assert report.metrics["zR@3"] == pytest.approx(0.5, abs=1e-12)
    assert report.metrics["R@3"] == pytest.approx(0.75, abs=1e-12)


def test_without_training_stats_zero_shot_and_wimr_are_left_out():
    """No training stats (zero_shot None, composition None): no zR/mzR/wIMR key, each left
    out with a reason; IMR (NG list only) is still reported (wimr_result: 5/6)."""
    report = report_of([wimr_result()], SINGLEMPO, "1", has_stats=False, composition=None)
    assert family_keys(report.metrics, *STATS_FAMILIES) == []
    for name in ("zR@k", "mzR@k", "wIMR@k"):
        assert "training statistics" in report.left_out[name], name
    assert report.metrics["IMR@1"] == pytest.approx(5 / 6, abs=1e-12)
    assert "ngR@k" not in report.left_out


def test_stats_without_zero_shot_triplets_leave_zr_out_with_a_reason():
    """Training stats given, but every evaluated GT triplet is seen: no zR/mzR key (never a
    0 filled in) and a reason saying there is no zero-shot triplet; wIMR is reported."""
    gt = box_gt([0, 1], [[0, 1, 0]])
    res = evaluate_image(gt, box_pred([0, 1], [box(0), box(1)], graph=[[0, 1, 0]],
                                      ng=[[0, 1, 0]]),
                         SINGLEMPO, parse_ks("1"), zero_shot=ZS)
    report = report_of([res], SINGLEMPO, "1", has_stats=True, composition={0: 4})
    assert family_keys(report.metrics, "zR", "mzR") == []
    assert "zero-shot" in report.left_out["zR@k"]
    assert "zero-shot" in report.left_out["mzR@k"]
    assert report.metrics["wIMR@1"] == pytest.approx(1.0, abs=1e-12)
