"""Protocols side by side on one hand-built image, and several protocols in one pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgdask.kernels.selection import parse_ks
from sgdask.metrics.terms import evaluate_image
from sgdask.pipeline import evaluate, evaluate_protocols
from sgdask.protocols import MULTIMPO, SGBENCH, SGBENCH2, SINGLEMPO, get_protocols
from sgdask.types import ImageGT, ImagePred, as_triplets
from tests.helpers import run_cli

KS = parse_ks("1,2,3")


def duplicate_mask_image() -> tuple[ImageGT, ImagePred]:
    """GT: A (cat 0, top-left 5x5) and B (cat 1, bottom-right 5x5); A-p0->B, B-p1->A.

    Prediction: a0 = A, a1 = A without its last row (IoU 20/25 = 0.8, a duplicate), b0 = B.
    Graph list: (a0, b0, p2) wrong predicate, (a1, b0, p0) via the duplicate, (b0, a0, p1).
    """
    label = np.zeros((10, 10), dtype=np.uint8)
    label[:5, :5], label[5:, 5:] = 1, 2
    gt = ImageGT("img", np.array([0, 1]), as_triplets([[0, 1, 0], [1, 0, 1]]),
                 label_image=label)
    a0, b0 = label == 1, label == 2
    a1 = a0.copy()
    a1[4] = False
    pred = ImagePred("img", np.array([0, 0, 1]), as_triplets([[0, 2, 2], [1, 2, 0], [2, 0, 1]]),
                     as_triplets([[0, 2, 2], [1, 2, 0], [2, 0, 1]]),
                     masks=np.stack([a0, a1, b0]))
    return gt, pred


def test_duplicate_masks_inflate_multimpo_over_singlempo():
    gt, pred = duplicate_mask_image()
    multi = evaluate_image(gt, pred, MULTIMPO, KS)
    single = evaluate_image(gt, pred, SINGLEMPO, KS)
    sgb = evaluate_image(gt, pred, SGBENCH, KS)
    # multimpo: (a1,b0,p0) hits A-p0-B at rank 1 through the duplicate; (b0,a0,p1) at rank 2
    assert [multi.image_terms[f"R@{k}"] for k in (1, 2, 3)] == [(0, 2), (1, 2), (2, 2)]
    assert multi.predicate_terms["mR@3"] == {0: (1, 1), 1: (1, 1)}
    # singlempo: a1 merges into a0, so (a1,b0,p0) becomes a second predicate of pair (a0,b0)
    # and the graph constraint removes it: only B-p1-A is found, now at rank 1
    assert [single.image_terms[f"R@{k}"] for k in (1, 2, 3)] == [(0, 2), (1, 2), (1, 2)]
    assert single.predicate_terms["mR@3"] == {0: (0, 1), 1: (1, 1)}
    assert single.diagnostics["masks_merged"] == 1
    assert single.diagnostics["graph_triplets_removed"] == 1
    # sgbench: many-to-one maps a0 and a1 to A; no merge, no graph constraint
    assert [sgb.image_terms[f"R@{k}"] for k in (1, 2, 3)] == [(0, 2), (1, 2), (2, 2)]
    # PRank needs an instance mapping: none under multimpo
    assert "PRank" not in multi.predicate_terms and "PRank" in single.predicate_terms
    assert multi.image_terms["InstR"] == single.image_terms["InstR"] == (2, 2)


def test_sgbench2_counts_one_triplet_per_remapped_pair():
    """SPEC 5.5 on the same image. Many-to-one maps a0 and a1 to A, so the remapped graph
    list is (A,B,p2) (A,B,p0) (B,A,p1): under sgbench2 only the first triplet of pair (A,B)
    counts, and A-p0-B, recalled at k = 2 under sgbench, is never recalled. The cut at k
    comes first: the top 2 keep one triplet after the dedup, and (B,A,p1) is not pulled in.
    Pairs, the NG list, InstR and R@inf are those of sgbench."""
    gt, pred = duplicate_mask_image()
    sgb, sgb2 = evaluate_image(gt, pred, SGBENCH, KS), evaluate_image(gt, pred, SGBENCH2, KS)
    assert [sgb.image_terms[f"R@{k}"] for k in (1, 2, 3)] == [(0, 2), (1, 2), (2, 2)]
    assert [sgb2.image_terms[f"R@{k}"] for k in (1, 2, 3)] == [(0, 2), (0, 2), (1, 2)]
    assert sgb.predicate_terms["mR@3"] == {0: (1, 1), 1: (1, 1)}
    assert sgb2.predicate_terms["mR@3"] == {0: (0, 1), 1: (1, 1)}
    for name in ("PR@1", "PR@2", "PR@3", "ngR@3", "InstR", "R@inf"):
        assert sgb2.image_terms[name] == sgb.image_terms[name], name
    assert sgb2.image_terms["ngR@3"] == sgb2.image_terms["R@inf"] == (2, 2)
    assert sgb2.predicate_terms["PRank"] == sgb.predicate_terms["PRank"]


def test_protocol_list_parsing():
    assert get_protocols("singlempo, multimpo") == (SINGLEMPO, MULTIMPO)
    assert get_protocols("sgbench,sgbench") == (SGBENCH,)


@pytest.mark.parametrize("aggregation", ["per_predicate", "pooled", "image"])
def test_several_protocols_in_one_pass_equal_separate_runs(stores, client, aggregation):
    together = evaluate_protocols(stores.gt, stores.pred, "singlempo,multimpo,sgbench,sgbench2",
                                  aggregation=aggregation, client=client)
    for name, report in together.items():
        alone = evaluate(stores.gt, stores.pred, protocol=name, aggregation=aggregation,
                         client=client)
        assert alone.metrics == report.metrics
        assert alone.per_predicate == report.per_predicate


def test_cli_side_by_side_writes_delta_and_html(stores, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--protocol",
                   "singlempo,multimpo", "--out", str(out), "--legacy-metrics")
    assert proc.returncode == 0, proc.stderr
    assert "protocol delta" in proc.stdout
    single = json.loads((out / "singlempo" / "metrics.json").read_text())
    multi = json.loads((out / "multimpo" / "metrics.json").read_text())
    delta = {row["metric"]: row for row in
             json.loads((out / "protocol_delta.json").read_text())}
    assert delta["mR@50"]["delta_multimpo"] == pytest.approx(
        multi["metrics"]["mR@50"] - single["metrics"]["mR@50"])
    assert "A@50" in single["metrics"] and "A@k" in multi["left_out"]
    assert "PRank" in multi["left_out"]
    html = (out / "report.html").read_text()
    assert "multimpo" in html and '<svg role="img"' in html
