"""``oiv6``: the Open Images V6 relationship evaluation of RelDN / BGNN (PySGG), whole in
this package: the per-image candidates and true positives (``kernels``), the pooled R@50
and average precision over the test set (``metrics``, a metric family of its own, the only
one reported under this protocol) and the protocol itself. Deleting the package removes
the protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from sgdask.errors import Option, Text
from sgdask.protocols import register
from sgdask.protocols.base import Protocol, Refusal
from sgdask.protocols.oiv6.metrics import FAMILY
from sgdask.types import ImageGT, ImageHits, ImagePred

#: the input only this protocol's evaluations have (its metrics need it)
INPUT = "oiv6"


@dataclass(frozen=True)
class OpenImagesProtocol(Protocol):
    """Each image's candidates come from its pairs' best predicates (``ImagePred.pairs``),
    ranked by subject x object x predicate score (``kernels``); the protocol reports pooled
    R@50 and average precision (``metrics``) and nothing else."""

    families: ClassVar[tuple] = (FAMILY,)
    needs: ClassVar[dict[str, Text]] = {INPUT: "not part of this protocol (oiv6 reports it)"}
    not_listed: ClassVar[frozenset[str]] = frozenset({INPUT})
    exclusive: ClassVar[dict[str, str]] = {
        INPUT: "not part of the oiv6 protocol (Open Images V6 reports R@50, AP_rel, AP_phr, "
               "their means and score_wtd)",
    }

    def image_hits(self, gt: ImageGT, pred: ImagePred, with_ng: bool = True,
                   match_labels: bool = True, shared: dict | None = None,
                   legacy: bool = True) -> ImageHits:
        from sgdask.kernels.image import gt_relations
        from sgdask.protocols.oiv6.kernels import oiv6_hits  # numba: loaded on first use

        return oiv6_hits(gt, pred, gt_relations(gt, self.keep_duplicate_gt))

    def inputs(self, with_ng: bool, has_stats: bool, legacy: bool,
               data: frozenset[str] = frozenset()) -> set[str]:
        return {INPUT}

    def submission_refusal(self, manifest: dict[str, Any]) -> Refusal | None:
        if manifest.get("pair_scores"):
            return None
        return ("the oiv6 protocol ranks each scored pair's predicate scores, which this "
                "submission does not hold (convert it with ", Option("from_scores"), "; a "
                "store converted before store format 5 holds none: convert it again)")

    def evaluator_refusal(self) -> Refusal | None:
        return ("the oiv6 protocol ranks each pair's predicate scores, which update() does "
                "not take; convert the submission ", Option("from_scores"), " and run "
                "sgdask evaluate")

    def compare_refusal(self) -> Refusal | None:
        return ("a report read back from disk (a report directory, a cached registry "
                "result) holds no ranked detections; give the submission stores",)


OIV6 = register(OpenImagesProtocol(
    name="oiv6",
    version="1",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="reproduces the Open Images V6 evaluation of RelDN / BGNN (PySGG): the top "
                "2 predicates of each pair, top 100 candidates by subject x object x "
                "predicate score, pooled R@50, relationship and phrase AP over the test set, "
                "score_wtd",
    box_iou_inclusive=True,
    clip_gt_boxes=True,
    keep_duplicate_gt=True,
    match_boxes=True,
    open_images=True,
    ks="50",
))
