"""Hand-computed cases for the per-image kernels (SPEC sections 3-6).

Every expected value below is worked out by hand from the SPEC; the computation is written
next to the assertion. Images are tiny: 4x4 masks drawn as strings, or 10x10 boxes in a row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sgdask.errors import SgdaskError
from sgdask.kernels import (
    box_iou_matrix,
    dedup_triplets,
    mask_iou_matrix,
    match_instances,
    match_many_to_one,
    match_one_to_one,
    merge_masks,
    normalize_prediction,
    pairwise_mask_iou,
)
from sgdask.kernels.lists import clipped_to_image, first_of_remapped_pair_only, same_boxes
from sgdask.kernels.matching import hit_coverage
from sgdask.kernels.selection import KSpec, parse_ks
from sgdask.metrics.terms import (
    evaluate_image,
    missing_image_result,
    with_zero_shot,
    with_zero_shot_all,
)
from sgdask.protocols import SGBENCH, SINGLEMPO
from sgdask.store.partition import any_per_image, kept_rows
from sgdask.types import ImageGT, ImageHits, ImagePred, ZeroShot, as_triplets
from tests.helpers.builders import box, labels_of, mask_of

# --------------------------------------------------------------------------- helpers


def dense(masks) -> np.ndarray:
    """A boolean (n, H, W) stack from a dense stack or a crop representation."""
    return masks.dense() if hasattr(masks, "dense") else np.asarray(masks, dtype=bool)


def ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def box_gt(labels, relations, boxes=None) -> ImageGT:
    boxes = boxes if boxes is not None else [box(i) for i in range(len(labels))]
    return ImageGT("img", ints(labels), as_triplets(relations),
                   boxes=np.asarray(boxes, dtype=np.float64))


def box_pred(labels, boxes, graph, ng=()) -> ImagePred:
    return ImagePred("img", ints(labels), as_triplets(graph), as_triplets(ng),
                     boxes=np.asarray(boxes, dtype=np.float64).reshape(-1, 4))


def mask_gt(labels, relations, label_image) -> ImageGT:
    return ImageGT("img", ints(labels), as_triplets(relations), label_image=label_image)


def mask_pred(labels, masks, graph, ng=(), scores=None) -> ImagePred:
    return ImagePred("img", ints(labels), as_triplets(graph), as_triplets(ng),
                     masks=np.stack(masks).astype(bool) if len(masks) else
                     np.zeros((0, 4, 4), dtype=bool),
                     scores=None if scores is None else np.asarray(scores, dtype=np.float64))


# Two GT instances side by side: GT0 = columns 0-1 (8 px), GT1 = columns 2-3 (8 px).
HALVES = labels_of("1122", "1122", "1122", "1122")


# --------------------------------------------------------------------------- IoU


def direct_mask_iou(masks: np.ndarray, label_image: np.ndarray, n_gt: int) -> np.ndarray:
    """The reference definition: |A & B| / |A | B| per pair, 0 on an empty union."""
    out = np.zeros((len(masks), n_gt))
    for i, m in enumerate(masks):
        for g in range(n_gt):
            gt = label_image == g + 1
            union = (m | gt).sum()
            out[i, g] = (m & gt).sum() / union if union else 0.0
    return out


def test_mask_iou_matrix_hand_values():
    """GT0 = top-left 2x2 (4 px), GT1 = bottom-right 2x2 (4 px).

    A = rows 0-1, cols 0-2 (6 px): A&GT0 = 4, union 6 -> 2/3; A&GT1 = 0.
    B = rows 1-3, cols 1-3 (9 px): B&GT0 = pixel (1,1) -> 1/(9+4-1) = 1/12;
        B&GT1 = 4, union 9 -> 4/9.
    C = empty: 0 everywhere (the union with GT is the GT area, the intersection 0).
    """
    label_image = labels_of("1100", "1100", "0022", "0022")
    a = mask_of("###.", "###.", "....", "....")
    b = mask_of("....", ".###", ".###", ".###")
    c = mask_of("....", "....", "....", "....")
    masks = np.stack([a, b, c])
    iou = mask_iou_matrix(masks, label_image, 2)
    expected = np.array([[2 / 3, 0.0], [1 / 12, 4 / 9], [0.0, 0.0]])
    assert iou.shape == (3, 2)
    assert (iou == expected).all()
    assert (iou == direct_mask_iou(masks, label_image, 2)).all()


def test_mask_iou_matrix_gt_instance_without_pixels():
    """A GT instance (index 2) with no pixel: area 0, IoU = 0 with everything."""
    masks = np.stack([mask_of("##..", "##..", "##..", "##..")])
    iou = mask_iou_matrix(masks, HALVES, 3)
    assert (iou == np.array([[1.0, 0.0, 0.0]])).all()


def test_mask_iou_matrix_no_prediction():
    """Zero predicted layers (e.g. every mask dropped by the merge): a (0, n_gt) matrix."""
    iou = mask_iou_matrix(np.zeros((0, 4, 4), dtype=bool), HALVES, 2)
    assert iou.shape == (0, 2)


def test_pairwise_mask_iou_hand_values():
    """A (6 px) and B (9 px) of the test above share row 1 cols 1-2: 2 / (6+9-2) = 2/13.

    The diagonal is 1 for non-empty layers; the empty layer has IoU 0 with everything
    (empty union -> 0), itself included.
    """
    a = mask_of("###.", "###.", "....", "....")
    b = mask_of("....", ".###", ".###", ".###")
    c = mask_of("....", "....", "....", "....")
    iou = pairwise_mask_iou(np.stack([a, b, c]))
    expected = np.array([[1.0, 2 / 13, 0.0], [2 / 13, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert (iou == expected).all()


def test_box_iou_matrix_no_plus_one():
    """Pred [0,0,2,2] has area 2*2 = 4 (with a +1 convention it would be 9).

    vs [1,1,3,3] (area 4): intersection [1,1,2,2] = 1, union 7 -> 1/7 (+1 would give 4/14).
    vs [0,0,4,1] (area 4): intersection [0,0,2,1] = 2, union 6 -> 1/3.
    vs [2,0,4,2]: touches at x = 2, intersection width 0 -> 0 (+1 would give > 0).
    vs itself: 1.
    """
    pred = [[0, 0, 2, 2]]
    gt = [[1, 1, 3, 3], [0, 0, 4, 1], [2, 0, 4, 2], [0, 0, 2, 2]]
    iou = box_iou_matrix(np.asarray(pred), np.asarray(gt))
    assert (iou == np.array([[1 / 7, 1 / 3, 0.0, 1.0]])).all()


def test_box_iou_matrix_empty_sides():
    assert box_iou_matrix(np.zeros((0, 4)), np.asarray([box(0)])).shape == (0, 1)
    assert box_iou_matrix(np.asarray([box(0)]), np.zeros((0, 4))).shape == (1, 0)


# --------------------------------------------------------------------------- matching


def test_many_to_one_ties_threshold_and_sharing():
    """Row by row: argmax, lowest GT index on ties, -1 below 0.5, 0.5 itself matches.

    pred0 [0.6, 0.6] -> tie -> GT0; pred1 [0.7, 0.2] -> GT0 (shared with pred0);
    pred2 [0.4, 0.49] -> best 0.49 < 0.5 -> -1; pred3 [0.5, 0.1] -> GT0 (0.5 >= t).
    """
    iou = np.array([[0.6, 0.6], [0.7, 0.2], [0.4, 0.49], [0.5, 0.1]])
    assert match_many_to_one(iou).tolist() == [0, 0, -1, 0]
    same = ints([0, 0, 0, 0])
    assert match_instances(iou, same, ints([0, 0]), one_to_one=False).tolist() == [0, 0, -1, 0]


def test_one_to_one_stealing_and_ties():
    """SPEC 4 one-to-one, predictions in index order.

    pred0 -> GT0 at 0.6 (unclaimed: J[0] = 0).
    pred1 -> GT0 at 0.8 > 0.6: steals, pred0 becomes unmatched (J[0] = 1).
    pred2 -> GT0 at 0.8, not strictly greater than 0.8: pred1 keeps it, pred2 unmatched.
    pred3 -> GT1 at 0.7 (J[1] = 3); pred4 -> GT1 at 0.7, tie: the earlier pred3 wins.
    L (pred -> GT) is the inverse of J: pred1 -> GT0, pred3 -> GT1, the others -1.
    """
    iou = np.array([[0.6, 0.0], [0.8, 0.0], [0.8, 0.0], [0.0, 0.7], [0.0, 0.7]])
    assert match_one_to_one(iou).tolist() == [-1, 0, -1, 1, -1]
    assert match_many_to_one(iou).tolist() == [0, 0, 0, 1, 1]


def test_one_to_one_does_not_fall_back_to_second_best():
    """Only x = argmax is considered: pred1's argmax GT0 is held by pred0 at 0.95 > 0.9,
    so pred1 stays unmatched although GT1 (0.6) is free."""
    iou = np.array([[0.95, 0.0], [0.9, 0.6]])
    assert match_one_to_one(iou).tolist() == [0, -1]


def test_category_mismatch_never_matches():
    """pred labels [1, 1], GT labels [0, 1]: GT0 is not allowed for either prediction.

    pred0: allowed [-, 0.6] -> GT1. pred1: allowed [-, 0.3] -> -1 (GT0's 0.9 is ignored).
    match_labels=False: both take GT0 at 0.9 (many-to-one); one-to-one: pred0 claims GT0,
    pred1 ties at 0.9 and loses.
    """
    iou = np.array([[0.9, 0.6], [0.9, 0.3]])
    pred_labels, gt_labels = ints([1, 1]), ints([0, 1])
    for one_to_one in (False, True):
        got = match_instances(iou, pred_labels, gt_labels, one_to_one=one_to_one)
        assert got.tolist() == [1, -1]
    loose = match_instances(iou, pred_labels, gt_labels, one_to_one=False, match_labels=False)
    assert loose.tolist() == [0, 0]
    loose = match_instances(iou, pred_labels, gt_labels, one_to_one=True, match_labels=False)
    assert loose.tolist() == [0, -1]


def test_matching_without_gt_instances():
    iou = np.zeros((2, 0))
    assert match_many_to_one(iou).tolist() == [-1, -1]
    assert match_one_to_one(iou).tolist() == [-1, -1]


# --------------------------------------------------------------------------- normalization

# Five 4x4 masks used by the merge tests. Pairwise IoU (hand):
#   m0 rows 0-1 (8 px)        m1 rows 0-1 cols 0-2 (6)  m2 rows 1-2 (8)
#   m3 row 1 cols 0-1 (2)     m4 row 3 (4)
#   IoU(m0,m1) = 6/8 = 0.75   IoU(m0,m2) = 4/12        IoU(m0,m3) = 2/8
#   IoU(m1,m2) = 3/11         IoU(m1,m3) = 2/6         IoU(m2,m3) = 2/8     m4: 0 with all
M0 = mask_of("####", "####", "....", "....")
M1 = mask_of("###.", "###.", "....", "....")
M2 = mask_of("....", "####", "####", "....")
M3 = mask_of("....", "##..", "....", "....")
M4 = mask_of("....", "....", "....", "####")
FIVE = np.stack([M0, M1, M2, M3, M4])


def test_dedup_keeps_first_occurrence_in_order():
    triplets = as_triplets([[0, 1, 2], [1, 0, 2], [0, 1, 2], [2, 1, 0], [1, 0, 2], [0, 1, 3]])
    expected = [[0, 1, 2], [1, 0, 2], [2, 1, 0], [0, 1, 3]]
    assert dedup_triplets(triplets).tolist() == expected
    assert dedup_triplets(as_triplets([])).shape == (0, 3)


def test_merge_masks_by_index():
    """No scores: walk 0..4.

    m0 kept #0 (claims rows 0-1); later m1 has IoU 0.75 >= 0.5 -> merged into #0.
    m1 skipped (merged). m2: new = row 2 (non-empty) -> kept #1 (m3: 2/8, m4: 0, no merge).
    m3: new = m3 minus rows 0-2 = empty -> dropped. m4: new = row 3 -> kept #2.
    """
    merge = merge_masks(FIVE)
    assert merge.kept.tolist() == [0, 2, 4]
    assert merge.instance_map.tolist() == [0, 0, 1, -1, 2]
    assert (merge.n_merged, merge.n_dropped) == (1, 1)
    expected = np.stack([M0, mask_of("....", "....", "####", "...."), M4])
    assert (dense(merge.masks) == expected).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.data())
def test_merge_of_masks_inside_a_shared_buffer_is_the_merge_of_their_own(before, after, data):
    """A store part's masks are views into one buffer of every image's words: the merge
    reads only the image's own range and gives what it gives on a compact copy, with the
    kept masks' areas counted from their new words."""
    from sgdask.types import BitMasks

    n = data.draw(st.integers(1, 6))
    stack = data.draw(arrays(np.bool_, (n, 6, 70)))
    scores = data.draw(st.none() | arrays(np.float64, n, elements=st.floats(0, 1)))
    own = BitMasks.from_dense(stack)
    noise = np.random.default_rng(before * 41 + after).integers(
        0, 2**63, before + len(own.words) + after, dtype=np.uint64)
    noise[before:before + len(own.words)] = own.words
    shared = BitMasks(own.shape, own.boxes, own.starts + before, noise)
    compact, inside = merge_masks(own, scores), merge_masks(shared, scores)
    assert inside.kept.tolist() == compact.kept.tolist()
    assert inside.instance_map.tolist() == compact.instance_map.tolist()
    assert (inside.n_merged, inside.n_dropped) == (compact.n_merged, compact.n_dropped)
    assert (dense(inside.masks) == dense(compact.masks)).all()
    assert inside.areas.tolist() == dense(compact.masks).sum(axis=(1, 2)).tolist()


def test_merge_masks_by_score():
    """Scores [0.1, 0.2, 0.9, 0.5, 0.3] -> walk order 2, 3, 4, 1, 0.

    m2 kept #0 (rows 1-2); no later mask has IoU >= 0.5 with m2 (m3 2/8, m1 3/11, m0 4/12).
    m3 lies inside rows 1-2 -> new empty -> dropped.
    m4 kept #1 (row 3).
    m1: new = row 0 cols 0-2 -> kept #2; later m0 has IoU(m1, m0) = 0.75 -> merged into #2.
    """
    merge = merge_masks(FIVE, np.array([0.1, 0.2, 0.9, 0.5, 0.3]))
    assert merge.kept.tolist() == [2, 4, 1]
    assert merge.instance_map.tolist() == [2, 2, 0, -1, 1]
    assert (merge.n_merged, merge.n_dropped) == (1, 1)
    expected = np.stack([M2, M4, mask_of("###.", "....", "....", "....")])
    assert (dense(merge.masks) == expected).all()


def test_merge_masks_score_ties_keep_index_order():
    """Equal scores: stable order, i.e. by index -> same result as without scores."""
    merge = merge_masks(FIVE, np.full(5, 0.5))
    assert merge.kept.tolist() == [0, 2, 4]
    assert merge.instance_map.tolist() == [0, 0, 1, -1, 2]


def test_normalize_singlempo_remaps_and_constrains():
    """instance_map [0, 0, 1, -1, 2] (merge by index, see above); labels -> labels[[0, 2, 4]].

    graph [1,2,5] [0,2,6] [3,4,1] [0,1,2] [2,4,3] [1,2,5]
      dedup  -> drops the last [1,2,5]
      remap  -> [0,1,5] [0,1,6] (3 dropped: gone) ([0,0,2]: s == o, gone) [1,2,3]
      graph constraint (first per pair) -> [0,1,5] [1,2,3]; removed 6 - 2 = 4.
    ng    [0,2,6] [1,2,5] [1,2,6] [0,2,6] [4,2,0] [3,0,1]
      dedup  -> [0,2,6] [1,2,5] [1,2,6] [4,2,0] [3,0,1]
      remap  -> [0,1,6] [0,1,5] [0,1,6] [2,1,0] (3 dropped: gone)
      dedup of (s,o,p) -> [0,1,6] [0,1,5] [2,1,0]; removed 6 - 3 = 3.
    """
    pred = mask_pred([0, 0, 1, 2, 1], list(FIVE),
                     graph=[[1, 2, 5], [0, 2, 6], [3, 4, 1], [0, 1, 2], [2, 4, 3], [1, 2, 5]],
                     ng=[[0, 2, 6], [1, 2, 5], [1, 2, 6], [0, 2, 6], [4, 2, 0], [3, 0, 1]])
    norm = normalize_prediction(pred, "singlempo")
    assert norm.graph.tolist() == [[0, 1, 5], [1, 2, 3]]
    assert norm.ng.tolist() == [[0, 1, 6], [0, 1, 5], [2, 1, 0]]
    assert norm.labels.tolist() == [0, 1, 1]
    assert (dense(norm.masks) == np.stack([M0, mask_of("....", "....", "####", "...."), M4])).all()
    assert norm.diagnostics == {"masks_merged": 1, "masks_dropped": 1,
                                "graph_triplets_removed": 4, "ng_triplets_removed": 3}


def test_normalize_singlempo_uses_scores_for_the_merge():
    """With the scores of test_merge_masks_by_score: instance_map [2, 2, 0, -1, 1].

    graph [0,1,0] -> [2,2,0] (s == o after the merge: removed); [2,4,1] -> [0,1,1];
    [1,2,2] -> [2,0,2]. labels -> labels[[2, 4, 1]] = [12, 14, 11].
    """
    pred = mask_pred([10, 11, 12, 13, 14], list(FIVE),
                     graph=[[0, 1, 0], [2, 4, 1], [1, 2, 2]],
                     scores=[0.1, 0.2, 0.9, 0.5, 0.3])
    norm = normalize_prediction(pred, "singlempo")
    assert norm.graph.tolist() == [[0, 1, 1], [2, 0, 2]]
    assert norm.labels.tolist() == [12, 14, 11]
    assert norm.diagnostics["graph_triplets_removed"] == 1


def test_normalize_singlempo_boxes_no_merge_but_graph_constraint():
    """Boxes: no merge (even identical boxes stay), the graph constraint still applies.

    graph [0,1,2] [0,1,3] [1,0,2] [0,1,2] -> dedup -> [0,1,2] [0,1,3] [1,0,2]
    -> first per ordered pair -> [0,1,2] [1,0,2]. ng keeps both predicates of (0,1).
    """
    pred = box_pred([0, 0], [box(0), box(0)],
                    graph=[[0, 1, 2], [0, 1, 3], [1, 0, 2], [0, 1, 2]],
                    ng=[[0, 1, 2], [0, 1, 3], [0, 1, 2]])
    norm = normalize_prediction(pred, "singlempo")
    assert norm.graph.tolist() == [[0, 1, 2], [1, 0, 2]]
    assert norm.ng.tolist() == [[0, 1, 2], [0, 1, 3]]
    assert norm.labels.tolist() == [0, 0]
    assert norm.diagnostics == {"masks_merged": 0, "masks_dropped": 0,
                                "graph_triplets_removed": 2, "ng_triplets_removed": 1}


def test_normalize_dedup_only_removes_exact_duplicates():
    """sgbench: [0,1,2] [0,1,3] [0,1,2] -> [0,1,2] [0,1,3] (no graph constraint, no merge)."""
    pred = mask_pred([0, 0, 1, 2, 1], list(FIVE), graph=[[0, 1, 2], [0, 1, 3], [0, 1, 2]])
    norm = normalize_prediction(pred, "dedup")
    assert norm.graph.tolist() == [[0, 1, 2], [0, 1, 3]]
    assert (dense(norm.masks) == FIVE).all()
    assert norm.diagnostics == {"masks_merged": 0, "masks_dropped": 0,
                                "graph_triplets_removed": 1, "ng_triplets_removed": 0}


# --------------------------------------------------------------------------- selection


def test_parse_ks_and_resolve():
    """x1 with |G| = 3 -> ceil(3) = 3; x0.5 -> ceil(1.5) = 2; x10 -> 30; 20 -> 20."""
    ks = parse_ks("20, 50,x1,20,x0.5,x10")
    assert [k.label for k in ks] == ["20", "50", "x1", "x0.5", "x10"]
    assert [k.resolve(3) for k in ks] == [20, 50, 3, 2, 30]
    assert KSpec("x0.5", factor=parse_ks("x0.5")[0].factor).resolve(1) == 1
    for bad in ("0", "-3", "x0", "abc", ""):
        with pytest.raises(SgdaskError):
            parse_ks(bad)


# --------------------------------------------------------------------------- metrics


def test_k_counts_triplets_before_matching():
    """GT: 3 boxes, relations (0,1,0) (1,2,1). pred3 is a far box that matches nothing.

    graph (3,0,0) (0,1,0) (1,2,1): rank 0 is unmatched but still takes a slot.
    R@1 = 0/2, R@2 = 1/2 (only (0,1,0)), R@3 = 2/2.
    """
    gt = box_gt([0, 0, 0], [[0, 1, 0], [1, 2, 1]])
    pred = box_pred([0, 0, 0, 0], [box(0), box(1), box(2), box(9)],
                    graph=[[3, 0, 0], [0, 1, 0], [1, 2, 1]])
    for protocol in (SINGLEMPO, SGBENCH):
        res = evaluate_image(gt, pred, protocol, parse_ks("1,2,3"))
        assert res.image_terms["R@1"] == (0, 2)
        assert res.image_terms["R@2"] == (1, 2)
        assert res.image_terms["R@3"] == (2, 2)
        assert res.predicate_terms["mR@2"] == {0: (1, 1), 1: (0, 1)}
        # empty NG list: nothing recalled, PRank undefined for every predicate
        assert res.image_terms["ngR@3"] == (0, 2)
        assert res.predicate_terms["PRank"] == {}
        assert res.diagnostics["pred_unmatched"] == 1


def test_gt_triplet_with_unmatched_instance():
    """pred2 has category 1, GT2 has category 0: GT2 stays unmatched.

    GT (0,1,0) (0,2,1); graph (0,1,0) (0,2,1) -> R@20 = 1/2; mR: p0 1/1, p1 0/1.
    InstR = 2 matched of 3 GT instances.
    """
    gt = box_gt([0, 0, 0], [[0, 1, 0], [0, 2, 1]])
    pred = box_pred([0, 0, 1], [box(0), box(1), box(2)], graph=[[0, 1, 0], [0, 2, 1]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("20"))
    assert res.image_terms["R@20"] == (1, 2)
    assert res.predicate_terms["mR@20"] == {0: (1, 1), 1: (0, 1)}
    assert res.image_terms["InstR"] == (2, 3)
    assert res.diagnostics["gt_unmatched"] == 1
    assert res.diagnostics["pred_unmatched"] == 1


# GT0 = cols 0-1, GT1 = cols 2-3. d0 = GT0 exactly, d1 = rows 0-2 of cols 0-1 (6 px),
# d2 = GT1 exactly. IoU(d0, d1) = 6/8 -> merged under singlempo; IoU(d1, GT0) = 6/8 -> under
# many-to-one both d0 and d1 map to GT0.
D0 = mask_of("##..", "##..", "##..", "##..")
D1 = mask_of("##..", "##..", "##..", "....")
D2 = mask_of("..##", "..##", "..##", "..##")


def test_exact_duplicates_free_no_slot_under_sgbench():
    """graph (0,2,0) (0,2,0) (2,0,1): exact duplicates removed first -> (0,1,0) (1,0,1)
    after remapping -> R@2 = 2/2."""
    gt = mask_gt([0, 0], [[0, 1, 0], [1, 0, 1]], HALVES)
    pred = mask_pred([0, 0, 0], [D0, D1, D2], graph=[[0, 2, 0], [0, 2, 0], [2, 0, 1]])
    res = evaluate_image(gt, pred, SGBENCH, parse_ks("2"))
    assert res.image_terms["R@2"] == (2, 2)
    assert res.diagnostics["graph_triplets_removed"] == 1


def test_duplicate_masks_sgbench_vs_singlempo():
    """graph (0,2,0) (1,2,0) (2,0,1); GT (0,1,0) (1,0,1).

    sgbench: mapping [0, 0, 1] -> (0,1,0) (0,1,0) (1,0,1): the repeat takes slot 1,
      R@2 = 1/2, R@3 = 2/2.
    singlempo: d1 merged into d0, instance_map [0, 0, 1] -> (0,1,0) (0,1,0) (1,0,1) over kept
      instances -> graph constraint drops the repeat -> (0,1,0) (1,0,1): R@2 = 2/2.
    """
    gt = mask_gt([0, 0], [[0, 1, 0], [1, 0, 1]], HALVES)
    pred = mask_pred([0, 0, 0], [D0, D1, D2], graph=[[0, 2, 0], [1, 2, 0], [2, 0, 1]])
    ks = parse_ks("2,3")
    sgb = evaluate_image(gt, pred, SGBENCH, ks)
    assert (sgb.image_terms["R@2"], sgb.image_terms["R@3"]) == ((1, 2), (2, 2))
    assert sgb.image_terms["InstR"] == (2, 2)
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert (single.image_terms["R@2"], single.image_terms["R@3"]) == ((2, 2), (2, 2))
    assert single.diagnostics["masks_merged"] == 1
    assert single.diagnostics["masks_dropped"] == 0
    assert single.diagnostics["graph_triplets_removed"] == 1


def test_pair_with_two_gt_predicates():
    """GT (0,1,0) (0,1,1); graph and NG both (0,1,0) (0,1,1).

    singlempo graph constraint keeps (0,1,0) only: R@20 = 1/2, mR p0 1/1, p1 0/1;
    NG keeps both: ngR@20 = 2/2. sgbench trusts the graph list: R@20 = 2/2.
    """
    gt = box_gt([0, 0], [[0, 1, 0], [0, 1, 1]])
    pred = box_pred([0, 0], [box(0), box(1)], graph=[[0, 1, 0], [0, 1, 1]],
                    ng=[[0, 1, 0], [0, 1, 1]])
    ks = parse_ks("20")
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert single.image_terms["R@20"] == (1, 2)
    assert single.predicate_terms["mR@20"] == {0: (1, 1), 1: (0, 1)}
    assert single.image_terms["ngR@20"] == (2, 2)
    assert single.predicate_terms["mNgR@20"] == {0: (1, 1), 1: (1, 1)}
    assert evaluate_image(gt, pred, SGBENCH, ks).image_terms["R@20"] == (2, 2)


def test_relative_k():
    """|G| = 3; graph (4,0,0) [unmatched] (0,1,0) (1,2,0) (2,3,0): hits at positions 1, 2, 3.

    x0.5 -> k = ceil(1.5) = 2 -> 1 hit; x1 -> k = 3 -> 2 hits; x2 -> k = 6 -> 3 hits.
    """
    gt = box_gt([0, 0, 0, 0], [[0, 1, 0], [1, 2, 0], [2, 3, 0]])
    pred = box_pred([0] * 5, [box(0), box(1), box(2), box(3), box(9)],
                    graph=[[4, 0, 0], [0, 1, 0], [1, 2, 0], [2, 3, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("x0.5,x1,x2"))
    assert res.image_terms["R@x0.5"] == (1, 3)
    assert res.image_terms["R@x1"] == (2, 3)
    assert res.image_terms["R@x2"] == (3, 3)
    assert res.predicate_terms["mR@x1"] == {0: (2, 3)}


def test_mean_recall_per_predicate_and_gt_set():
    """GT relations with a repeat: (0,1,0) (1,2,0) (0,1,0) (2,0,1) -> the set has 3 triplets.

    graph (0,1,0) (2,0,1) (0,2,0): R@2 = 2/3; mR@2: p0 1/2, p1 1/1; R@1 = 1/3, mR@1 p1 0/1.
    """
    gt = box_gt([0, 0, 0], [[0, 1, 0], [1, 2, 0], [0, 1, 0], [2, 0, 1]])
    pred = box_pred([0, 0, 0], [box(0), box(1), box(2)],
                    graph=[[0, 1, 0], [2, 0, 1], [0, 2, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("1,2"))
    assert res.n_gt_triplets == 3
    assert res.gt_per_predicate == {0: 2, 1: 1}
    assert res.image_terms["R@2"] == (2, 3)
    assert res.predicate_terms["mR@2"] == {0: (1, 2), 1: (1, 1)}
    assert res.image_terms["R@1"] == (1, 3)
    assert res.predicate_terms["mR@1"] == {0: (1, 2), 1: (0, 1)}


def test_ng_recall_can_be_below_graph_recall():
    """SPEC 6 counterexample: pairs A = (0,1), B = (1,2); only B-p1 is in GT.

    graph A-p1, B-p1 -> R@2 = 1/1. NG A-p1, A-p2, B-p1 -> ngR@2 = 0/1, ngR@3 = 1/1.
    """
    gt = box_gt([0, 0, 0], [[1, 2, 1]])
    pred = box_pred([0, 0, 0], [box(0), box(1), box(2)], graph=[[0, 1, 1], [1, 2, 1]],
                    ng=[[0, 1, 1], [0, 1, 2], [1, 2, 1]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("2,3"))
    assert res.image_terms["R@2"] == (1, 1)
    assert res.image_terms["ngR@2"] == (0, 1)
    assert res.image_terms["ngR@3"] == (1, 1)
    # B-p1 is the first predicate of pair B in the NG list: rank 0
    assert res.predicate_terms["PRank"] == {1: (0, 1)}


def test_instance_recall_after_mask_merge_claims_pixels():
    """GT0 = cols 0-1 (label 0), GT1 = cols 2-3 (label 1); GT relation (0,1,0).

    p0 (label 0) = cols 0-2 plus pixel (0,3): 13 px, IoU(p0, GT0) = 8/13 >= 0.5.
    p1 (label 1) = cols 2-3 = GT1; IoU(p0, p1) = 5/16 -> not merged.
    singlempo: p1's new mask = col 3 rows 1-3 (3 px) -> IoU 3/8 < 0.5 -> unmatched:
      InstR 1/2, R@20 0/1. sgbench (original masks): InstR 2/2, R@20 1/1.
    """
    p0 = mask_of("####", "###.", "###.", "###.")
    gt = mask_gt([0, 1], [[0, 1, 0]], HALVES)
    pred = mask_pred([0, 1], [p0, D2], graph=[[0, 1, 0]])
    ks = parse_ks("20")
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert single.image_terms["InstR"] == (1, 2)
    assert single.image_terms["R@20"] == (0, 1)
    sgb = evaluate_image(gt, pred, SGBENCH, ks)
    assert sgb.image_terms["InstR"] == (2, 2)
    assert sgb.image_terms["R@20"] == (1, 1)


def test_instance_recall_threshold_is_inclusive_after_merge():
    """As above with p0 = cols 0-2 (12 px): p1's new mask = col 3 (4 px), IoU 4/8 = 0.5,
    which matches (IoU >= t): InstR 2/2, R@20 1/1 under singlempo."""
    p0 = mask_of("###.", "###.", "###.", "###.")
    gt = mask_gt([0, 1], [[0, 1, 0]], HALVES)
    pred = mask_pred([0, 1], [p0, D2], graph=[[0, 1, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("20"))
    assert res.image_terms["InstR"] == (2, 2)
    assert res.image_terms["R@20"] == (1, 1)


def test_one_to_one_vs_many_to_one_triplets():
    """GT boxes box(0), box(1); GT (0,1,0). p0 = [0,0,10,6] (IoU 60/100 with GT0),
    p1 = box(0) (IoU 1), p2 = box(1). graph (0,2,0) uses the weak duplicate p0.

    many-to-one (sgbench): [0, 0, 1] -> (0,1,0) hits: R 1/1.
    one-to-one (singlempo): p1 steals GT0 from p0 (1 > 0.6) -> p0 unmatched: R 0/1.
    The set of matched GT instances is the same: InstR 2/2 for both.
    """
    gt = box_gt([0, 0], [[0, 1, 0]])
    pred = box_pred([0, 0, 0], [[0, 0, 10, 6], box(0), box(1)], graph=[[0, 2, 0]])
    ks = parse_ks("20")
    sgb = evaluate_image(gt, pred, SGBENCH, ks)
    single = evaluate_image(gt, pred, SINGLEMPO, ks)
    assert sgb.image_terms["R@20"] == (1, 1)
    assert single.image_terms["R@20"] == (0, 1)
    assert sgb.image_terms["InstR"] == single.image_terms["InstR"] == (2, 2)
    assert sgb.diagnostics["pred_unmatched"] == 0
    assert single.diagnostics["pred_unmatched"] == 1


def test_box_matching_threshold():
    """GT0 = [0,0,10,10]. [0,0,10,5]: inter 50, union 100 -> IoU 0.5 -> matched;
    [0,0,10,4]: 40/100 -> unmatched."""
    gt = box_gt([0, 0], [[0, 1, 0]])
    ks = parse_ks("20")
    for protocol in (SINGLEMPO, SGBENCH):
        hit = evaluate_image(gt, box_pred([0, 0], [[0, 0, 10, 5], box(1)], [[0, 1, 0]]),
                             protocol, ks)
        assert hit.image_terms["R@20"] == (1, 1)
        assert hit.image_terms["InstR"] == (2, 2)
        miss = evaluate_image(gt, box_pred([0, 0], [[0, 0, 10, 4], box(1)], [[0, 1, 0]]),
                              protocol, ks)
        assert miss.image_terms["R@20"] == (0, 1)
        assert miss.image_terms["InstR"] == (1, 2)


def test_prank_sgbench():
    """GT boxes 0..2; GT (0,1,0) (0,1,2) (1,2,1) (2,0,3).
    pred: p0..p2 = GT boxes, p3 far away (unmatched), p4 = [0,0,10,8] (IoU 0.8 with GT0).

    sgbench mapping [0, 1, 2, -1, 0]; NG after remap:
      (0,1,2) (-1,1,0) (0,1,2) (0,1,5) (0,1,0) (1,2,1) (2,-1,3)
    distinct predicates of pair (0,1) in order: 2 (rank 0), 5 (rank 1), 0 (rank 2): the
    unmatched (-1,1,0) and the repeat of (0,1,2) do not count. Pair (1,2): 1 (rank 0).
    PRank: p0 (2, 1), p1 (0, 1), p2 (0, 1); p3 not found (only via unmatched p3): absent.
    First positions: (0,1,2)@0, (0,1,0)@4, (1,2,1)@5 -> ngR@3 1/4, ngR@5 2/4, ngR@6 3/4.
    """
    gt = box_gt([0, 0, 0], [[0, 1, 0], [0, 1, 2], [1, 2, 1], [2, 0, 3]])
    ng = [[0, 1, 2], [3, 1, 0], [4, 1, 2], [0, 1, 5], [0, 1, 0], [1, 2, 1], [2, 3, 3]]
    pred = box_pred([0] * 5, [box(0), box(1), box(2), box(9), [0, 0, 10, 8]], graph=[], ng=ng)
    res = evaluate_image(gt, pred, SGBENCH, parse_ks("3,5,6"))
    assert res.predicate_terms["PRank"] == {0: (2, 1), 1: (0, 1), 2: (0, 1)}
    assert res.image_terms["ngR@3"] == (1, 4)
    assert res.image_terms["ngR@5"] == (2, 4)
    assert res.image_terms["ngR@6"] == (3, 4)
    assert res.predicate_terms["mNgR@6"] == {0: (1, 1), 1: (1, 1), 2: (1, 1), 3: (0, 1)}
    assert res.image_terms["R@6"] == (0, 4)


def test_prank_sums_ranks_of_a_predicate():
    """GT (0,1,0) (1,2,0); NG (0,1,1) (0,1,0) (1,2,2) (1,2,3) (1,2,0).
    Ranks: (0,1,0) is the 2nd predicate of its pair -> 1; (1,2,0) the 3rd -> 2.
    PRank p0 = (1 + 2, 2 found)."""
    gt = box_gt([0, 0, 0], [[0, 1, 0], [1, 2, 0]])
    pred = box_pred([0, 0, 0], [box(0), box(1), box(2)], graph=[],
                    ng=[[0, 1, 1], [0, 1, 0], [1, 2, 2], [1, 2, 3], [1, 2, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("20"))
    assert res.predicate_terms["PRank"] == {0: (3, 2)}


def test_without_ng_list():
    gt = box_gt([0, 0], [[0, 1, 0]])
    pred = box_pred([0, 0], [box(0), box(1)], graph=[[0, 1, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("20"), with_ng=False)
    assert res.image_terms["R@20"] == (1, 1)
    assert res.predicate_terms["mR@20"] == {0: (1, 1)}
    ng_names = [n for n in [*res.image_terms, *res.predicate_terms]
                if n.startswith(("ngR", "mNgR", "PRank"))]
    assert ng_names == []


def test_prediction_whose_masks_are_all_dropped():
    """Both predicted masks are empty: the merge drops both (new = empty), matching runs on
    zero kept instances, every triplet touches a dropped instance: all zeros, no crash."""
    empty = mask_of("....", "....", "....", "....")
    gt = mask_gt([0, 0], [[0, 1, 0]], HALVES)
    pred = mask_pred([0, 0], [empty, empty], graph=[[0, 1, 0]], ng=[[0, 1, 0]])
    res = evaluate_image(gt, pred, SINGLEMPO, parse_ks("20"))
    assert (res.image_terms["R@20"], res.image_terms["ngR@20"]) == ((0, 1), (0, 1))
    assert res.image_terms["InstR"] == (0, 2)
    assert res.predicate_terms["mR@20"] == res.predicate_terms["mNgR@20"] == {0: (0, 1)}
    assert res.predicate_terms["PRank"] == {}
    assert res.diagnostics["masks_dropped"] == 2
    assert res.diagnostics["graph_triplets_removed"] == 1


@pytest.mark.parametrize("protocol", [SINGLEMPO, SGBENCH], ids=lambda p: p.name)
def test_prediction_without_instances(protocol):
    gt = mask_gt([0, 0], [[0, 1, 0]], HALVES)
    pred = mask_pred([], [], graph=[])
    res = evaluate_image(gt, pred, protocol, parse_ks("20"))
    assert (res.image_terms["R@20"], res.image_terms["ngR@20"]) == ((0, 1), (0, 1))
    assert res.image_terms["InstR"] == (0, 2)
    assert all(num == 0 for num, _ in res.image_terms.values())


MISSING_GT = box_gt([0, 1, 0], [[0, 1, 0], [1, 0, 0], [0, 1, 2], [0, 1, 0]])


def test_missing_image_singlempo():
    """GT set: (0,1,0) (1,0,0) (0,1,2) -> 3 triplets, p0: 2, p2: 1; 3 GT instances.
    Zeros everywhere, per-predicate recall terms present (they count in the means), no PRank.
    """
    res = missing_image_result(MISSING_GT, SINGLEMPO, parse_ks("20,x1"))
    assert res.missing
    assert res.n_gt_triplets == 3
    assert res.gt_per_predicate == {0: 2, 2: 1}
    expected = {"R@20": (0, 3), "R@x1": (0, 3), "ngR@20": (0, 3), "ngR@x1": (0, 3),
                "InstR": (0, 3)}
    assert {name: res.image_terms[name] for name in expected} == expected
    assert all(num == 0 for num, _ in res.image_terms.values())
    zeros = {0: (0, 2), 2: (0, 1)}
    for name in ("mR@20", "mR@x1", "mNgR@20", "mNgR@x1"):
        assert res.predicate_terms[name] == zeros
    assert "PRank" not in res.predicate_terms
    assert all(num == 0 for terms in res.predicate_terms.values() for num, _ in terms.values())


def test_missing_image_sgbench():
    """Same GT under sgbench: zeros for R, ngR, InstR; left out of every mean metric."""
    res = missing_image_result(MISSING_GT, SGBENCH, parse_ks("20,x1"))
    expected = {"R@20": (0, 3), "R@x1": (0, 3), "ngR@20": (0, 3), "ngR@x1": (0, 3),
                "InstR": (0, 3)}
    assert {name: res.image_terms[name] for name in expected} == expected
    assert all(num == 0 for num, _ in res.image_terms.values())
    assert res.predicate_terms == {}


@settings(deadline=None)  # the first call loads the compiled kernel
@given(arrays(np.bool_, st.tuples(st.integers(0, 6), st.integers(0, 6))))
def test_hit_coverage_equals_numpy(hit):
    matched, unmatched = hit_coverage(hit)
    assert matched.tolist() == hit.any(axis=0).tolist()
    assert unmatched == int((~hit.any(axis=1)).sum())


@settings(deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-1, 3), min_size=n, max_size=n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 4)),
             max_size=12))))
def test_first_of_remapped_pair_equals_a_loop(case):
    """The compiled sgbench2 rule equals SPEC 5.5 read literally: walking the graph list,
    a triplet whose remapped (subject, object) pair (-1 for an unmatched side) was seen
    before gets predicate -1 (never hits); the others and every position stay."""
    mapping, graph = case
    seen, expected = set(), []
    for s, o, p in graph:
        pair = (mapping[s], mapping[o])
        expected.append([s, o, p if pair not in seen else -1])
        seen.add(pair)
    got = first_of_remapped_pair_only(as_triplets(graph), ints(mapping))
    assert got.tolist() == expected


@settings(deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(0, 5), st.just(4)),
              elements=st.floats(-50, 700, allow_nan=False)),
       st.integers(1, 640), st.integers(1, 640))
def test_box_clipping_equals_numpy(boxes, height, width):
    """The compiled clipping equals maskrcnn_benchmark's rule written with numpy."""
    literal = boxes.astype(np.float32)
    literal[:, 0::2] = np.clip(literal[:, 0::2], np.float32(0), np.float32(width - 1))
    literal[:, 1::2] = np.clip(literal[:, 1::2], np.float32(0), np.float32(height - 1))
    clipped = clipped_to_image(np.ascontiguousarray(boxes), height, width)
    assert clipped.dtype == np.float32 and np.array_equal(clipped, literal)
    assert same_boxes(clipped, literal, 0.0)
    assert same_boxes(boxes, boxes + 0.005, 0.01)
    assert not len(boxes) or not same_boxes(boxes, boxes + 0.02, 0.01)


@settings(deadline=None, max_examples=50)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 6)), min_size=1, max_size=6),
       st.sets(st.integers(0, 3 * 3 * 4 - 1), max_size=20), st.randoms())
def test_zero_shot_flags_of_many_images_equal_one_by_one(shapes, seen, rnd):
    """``with_zero_shot_all`` (one look-up for a partition) flags exactly what
    ``with_zero_shot`` flags image by image."""
    zero_shot = ZeroShot(np.array(sorted(seen), dtype=np.int64), 3, 4)
    batch, single = [], []
    for n, r in shapes:
        labels = np.array([rnd.randrange(3) for _ in range(n)], dtype=np.int64)
        relations = np.array([[rnd.randrange(n), rnd.randrange(n), rnd.randrange(4)]
                              for _ in range(r)], dtype=np.int64).reshape(-1, 3)
        for out in (batch, single):
            out.append(ImageHits("i", False, relations, labels, np.zeros(n, bool),
                                 np.zeros(r, np.int64), np.zeros(0, np.int64), None, None,
                                 None, None))
    with_zero_shot_all(batch, zero_shot)
    for b, s in zip(batch, single, strict=True):
        assert b.zero_shot.tolist() == with_zero_shot(s, zero_shot).zero_shot.tolist()


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=8),
       st.randoms())
def test_part_row_selection_equals_a_loop(images, rnd):
    """The vectorized row selection of a part (rows of the kept images, per-image 'any
    flagged row') equals a loop over the images."""
    sizes = np.array([n for n, _ in images], dtype=np.int64)
    keep = np.array([k for _, k in images], dtype=bool)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    table = pa.table({"row": np.arange(starts[-1])})
    expected = [r for i, (n, k) in enumerate(images) if k
                for r in range(starts[i], starts[i] + n)]
    assert kept_rows(table, starts, keep)["row"].to_pylist() == expected
    flags = np.array([rnd.random() < 0.3 for _ in range(starts[-1])], dtype=bool)
    assert any_per_image(flags, starts).tolist() == [
        bool(flags[starts[i]:starts[i + 1]].any()) for i in range(len(images))]
