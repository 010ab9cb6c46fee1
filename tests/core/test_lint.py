"""The protocol lint (docs: Trust, "Protocol lint"): one hand case per warning, scored
through the real per-partition loop; counts that merge by addition (any split of the
images gives the same); and every place an evaluation reports it (metrics.json, report.md,
report.html, the console)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgdask.core.lint import (
    KNOWN_TEST_SETS,
    LintCounts,
    _extra_predicates,
    lint_report,
    lint_warnings,
    partition_lint,
)
from sgdask.core.partition import scored_partition
from sgdask.core.settings import ScoringSettings, Settings, Submission
from sgdask.metrics import FAMILIES
from sgdask.protocols import get_protocols
from sgdask.testing.psg import PREDICATE_CLASSES
from sgdask.testing.vg import VG150_PREDICATES
from sgdask.types import ImageGT, ImagePred, as_triplets

H, W = 8, 8


def _label_image(n: int) -> np.ndarray:
    """n instances side by side, each a 2-column stripe."""
    out = np.zeros((H, W), dtype=np.int64)
    for i in range(n):
        out[:, 2 * i:2 * i + 2] = i + 1
    return out


def _boxes(stripes: list[int]) -> np.ndarray:
    """Each stripe's box, [x1, y1, x2, y2]."""
    return np.array([[2 * s, 0, 2 * s + 2, H] for s in stripes], dtype=np.float64)


def _gt(image_id: str, relations: list[list[int]], n: int = 3) -> ImageGT:
    return ImageGT(image_id, np.arange(n, dtype=np.int64), as_triplets(relations),
                   boxes=_boxes(list(range(n))), label_image=_label_image(n), size=(H, W))


def _masks(stripes: list[int]) -> np.ndarray:
    """One mask per entry: the stripe of that GT instance."""
    labels = _label_image(max(stripes) + 1)
    return np.stack([labels == s + 1 for s in stripes])


def _pred(image_id: str, graph: list[list[int]], stripes: list[int] | None = None,
          scores: list[float] | None = None) -> ImagePred:
    stripes = [0, 1, 2] if stripes is None else stripes
    return ImagePred(image_id, np.array(stripes, dtype=np.int64), as_triplets(graph),
                     boxes=_boxes(stripes), masks=_masks(stripes),
                     scores=None if scores is None else np.array(scores, dtype=np.float64))


def _scored(gts: list[ImageGT], preds: dict[str, ImagePred],
            protocols: str = "singlempo") -> LintCounts:
    """The lint counts the real per-partition scoring loop adds."""
    sub = Submission("s", "s.zip", get_protocols(protocols), False)
    result = scored_partition(gts, [(sub, preds)],
                              ScoringSettings(Settings(), None, tuple(FAMILIES)))
    return result.lint["s"]


def _codes(counts: LintCounts, **kw) -> list[str]:
    return [w["code"] for w in lint_warnings(counts, **kw)]


CLEAN_GTS = [_gt("a", [[0, 1, 0], [1, 2, 3]]), _gt("b", [[2, 0, 5]])]


def test_a_clean_submission_has_no_warning():
    preds = {"a": _pred("a", [[0, 1, 0], [1, 2, 3]], scores=[0.9, 0.8, 0.7]),
             "b": _pred("b", [[2, 0, 5], [0, 1, 1]])}
    counts = _scored(CLEAN_GTS, preds)
    assert counts == LintCounts(images=2, gt_relations=3, mask_images=2, scored_images=1)
    assert _codes(counts) == []


def test_several_predicates_for_one_pair():
    # image a: pair (0, 1) with predicates 0, 4 and 0 again (an exact repeat is no extra
    # predicate), pair (1, 2) with 3 and 7; image b: one predicate per pair
    preds = {"a": _pred("a", [[0, 1, 0], [0, 1, 4], [1, 2, 3], [0, 1, 0], [1, 2, 7]]),
             "b": _pred("b", [[2, 0, 5], [0, 2, 5]])}
    counts = _scored(CLEAN_GTS, preds)
    assert (counts.multi_predicate_images, counts.multi_predicate_entries) == (1, 2)
    [warning] = lint_warnings(counts)
    assert warning["code"] == "several-predicates-per-pair"
    assert warning["message"].startswith("1 of 2 images list several predicates for one "
                                         "(subject, object) pair")
    assert "(2 entries beyond a pair's first predicate)" in warning["message"]


def test_duplicate_masks_counted_from_the_singlempo_merge():
    # image a: instance 3 repeats instance 0's mask, instance 4 repeats instance 1's
    preds = {"a": _pred("a", [[0, 1, 0]], stripes=[0, 1, 2, 0, 1],
                        scores=[0.9, 0.8, 0.7, 0.6, 0.5]),
             "b": _pred("b", [[2, 0, 5]])}
    counts = _scored(CLEAN_GTS, preds)
    assert (counts.mask_images, counts.duplicate_mask_images, counts.duplicate_masks) == \
        (2, 1, 2)
    assert _codes(counts) == ["duplicate-masks"]
    assert lint_warnings(counts)[0]["message"].startswith("2 predicted masks in 1 of 2 images")
    # a protocol that does not merge: duplicates are not looked for (not counted again)
    alone = _scored(CLEAN_GTS, preds, "sgbench")
    assert (alone.mask_images, alone.duplicate_masks) == (0, 0)
    assert _scored(CLEAN_GTS, preds, "sgbench,singlempo").duplicate_masks == 2


def test_missing_images_with_their_gt_relations():
    counts = _scored(CLEAN_GTS, {"b": _pred("b", [[2, 0, 5]])})
    assert (counts.missing_images, counts.missing_relations, counts.gt_relations) == (1, 2, 3)
    [warning] = lint_warnings(counts)
    assert warning["code"] == "missing-images"
    assert warning["message"].startswith("1 of 2 evaluated images have no prediction, "
                                         "holding 2 of 3 GT relations (66.7%)")


def test_empty_graph_lists_under_every_protocol():
    preds = {"a": _pred("a", []), "b": _pred("b", [[2, 0, 5]])}
    for protocols in ("singlempo", "sgbpytorch"):  # sgbpytorch leaves the image out
        counts = _scored(CLEAN_GTS, preds, protocols)
        assert (counts.empty_images, counts.empty_relations) == (1, 2)
        assert _codes(counts) == ["empty-graph-lists"]


def test_tied_instance_scores():
    preds = {"a": _pred("a", [[0, 1, 0]], scores=[0.5, 0.5, 0.5]),
             "b": _pred("b", [[2, 0, 5]], scores=[0.5, 0.4, 0.5])}
    counts = _scored(CLEAN_GTS, preds)
    assert (counts.scored_images, counts.tied_score_images) == (2, 1)
    assert _codes(counts) == ["tied-scores"]
    # one instance has nothing to rank: not counted
    one = _scored([_gt("c", [[0, 0, 1]], 1)], {"c": _pred("c", [[0, 0, 1]], [0], [0.3])})
    assert (one.scored_images, one.tied_score_images) == (0, 0)


@pytest.mark.parametrize("known", KNOWN_TEST_SETS, ids=lambda k: k.name)
def test_a_subset_of_a_known_test_set(known):
    names = PREDICATE_CLASSES if known.name == "PSG" else VG150_PREDICATES
    assert len(names) == known.n_predicates
    counts = LintCounts(images=10, gt_relations=10)
    [warning] = lint_warnings(counts, gt_images=1000, predicates=names)
    assert warning == {"code": "test-subset", "message":
                       f"the GT has 1000 images; the {known.name} test set it looks like has "
                       f"{known.n_images}: numbers on a subset are not comparable with "
                       "numbers on the whole test set"}
    assert _codes(counts, gt_images=known.n_images, predicates=names) == []
    assert _codes(counts, gt_images=1000, predicates=["a", *names[1:]]) == []  # unknown
    assert _codes(counts, gt_images=1000) == []


def test_counts_merge_by_addition_for_any_split():
    rng = np.random.default_rng(3)
    gts, preds = [], {}
    for i in range(30):
        n = int(rng.integers(1, 5))
        gts.append(ImageGT(f"{i:02d}", np.zeros(n, np.int64),
                           rng.integers(0, n, (int(rng.integers(1, 4)), 3)) % [n, n, 3]))
        if rng.random() < 0.8:
            graph = rng.integers(0, n, (int(rng.integers(0, 8)), 3)) % [n, n, 4]
            scores = rng.choice([0.5, 0.7], n) if rng.random() < 0.5 else None
            preds[f"{i:02d}"] = ImagePred(f"{i:02d}", np.zeros(n, np.int64), graph,
                                          scores=scores)
    whole = partition_lint(gts, preds)
    for cuts in ([10, 20], [1], [7, 8, 29]):
        parts = np.split(np.arange(30), cuts)
        summed = LintCounts()
        for part in parts:
            summed = summed.merged(partition_lint([gts[i] for i in part], preds))
        assert summed == whole
    assert whole.missing_images and whole.multi_predicate_images and whole.tied_score_images


def test_wide_indices_fall_back_to_sorting_columns():
    graphs = [np.array([[0, 2**40, 1], [0, 2**40, 2], [5, 6, 1]]), np.array([[1, 1, 1]])]
    assert _extra_predicates(graphs).tolist() == [1, 0]
    small = [np.array([[0, 3, 1], [0, 3, 2], [5, 6, 1]]), np.array([[1, 1, 1]])]
    assert _extra_predicates(small).tolist() == [1, 0]


def test_every_evaluation_reports_the_lint(stores, client, tmp_path, capsys):
    """The synthetic stores miss some images; the lint is in metrics.json, report.md,
    report.html and on the console, the same under every protocol (and, tests/
    test_invariance.py, for every partitioning and worker count)."""
    from sgdask.cli import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        main(["evaluate", "--gt", stores.gt, "--pred", stores.pred, "--out", str(out),
              "--protocol", "singlempo,sgbench", "--scheduler", client.scheduler.address])
    assert done.value.code in (0, None)
    lints = [json.loads((out / p / "metrics.json").read_text())["lint"]
             for p in ("singlempo", "sgbench")]
    assert lints[0] == lints[1] and lints[0]["counts"]["missing_images"] > 0
    assert lints[0] == lint_report(LintCounts(**lints[0]["counts"]), 40, PREDICATE_CLASSES)
    codes = [w["code"] for w in lints[0]["warnings"]]
    assert {"missing-images", "test-subset"} <= set(codes)
    err = capsys.readouterr().err
    for code in codes:
        assert err.count(f"warning (lint {code}):") == 1  # once, not per protocol
    assert "- lint warning (missing-images): " in (out / "sgbench" / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert '<h2 id="lint">Protocol lint</h2>' in html and "missing-images: " in html


def test_tied_triplet_scores_from_the_footers(tiny, client, tmp_path):
    """Every triplet score equal: the first-wave check's footer statistics say so (no
    column decoded), and the report warns; the synthetic scores differ: no warning."""
    from sgdask.formats.sgbench import convert_submission
    from sgdask.pipeline import evaluate
    from sgdask.store.consistency import check_against_gt
    from sgdask.store.store import StoreReader
    from tests.helpers import rewrite_zip

    def tie(doc):
        for img in doc["images"]:
            img["scores"] = [0.25] * len(img["triplets"])

    tied = str(tmp_path / "tied")
    convert_submission(str(rewrite_zip(tiny.paths.submission_zip, tmp_path / "tied.zip", tie)),
                       tied, tiny.gt, partition_size=4)
    gt = StoreReader(tiny.gt)
    facts = check_against_gt(StoreReader(tied), gt)
    n = facts["lint_triplet_scores"]
    assert n > 1 and facts["lint_triplet_scores_equal"] == 1
    report = evaluate(tiny.gt, tied, client=client)
    assert "lint_triplet_scores" not in report.diagnostics
    assert report.lint["counts"]["triplet_scores"] == n
    [warning] = [w for w in report.lint["warnings"] if w["code"] == "tied-triplet-scores"]
    assert warning["message"].startswith(f"all {n} triplet scores of the submission are "
                                         "equal")
    plain = str(tmp_path / "plain")
    convert_submission(str(tiny.paths.submission_zip), plain, tiny.gt)
    assert check_against_gt(StoreReader(plain), gt)["lint_triplet_scores_equal"] == 0
