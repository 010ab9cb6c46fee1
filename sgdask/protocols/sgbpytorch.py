"""``sgbpytorch``: Scene-Graph-Benchmark.pytorch (boxes, VG150): triplet-level matching with
inclusive box IoU, GT clipped to the image, GT duplicates kept, images without proposals
skipped, NG list cut at 100, mR over the vocabulary, the pair accuracy A@k by index and the
NG list's zero-shot recall ngzR@k."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from sgdask.errors import Text
from sgdask.protocols import register
from sgdask.protocols.base import Protocol


@dataclass(frozen=True)
class SGBPyTorchProtocol(Protocol):
    """Scene-Graph-Benchmark.pytorch's evaluation: its A@k assumes predicted boxes that are
    the GT boxes in the same order, so the report withholds A@k when some are not."""

    needs: ClassVar[dict[str, Text]] = {
        "pairs": "needs an instance mapping (or, under sgbpytorch, predicted boxes that are "
                 "the GT boxes in the same order); {protocol} matches triplets",
        "ngz": "not part of this protocol (sgbpytorch reports it)",
    }
    not_listed: ClassVar[frozenset[str]] = frozenset({"ngz"})

    def withheld(self, metrics: dict[str, float], diagnostics: dict[str, int]
                 ) -> tuple[dict[str, float], dict[str, str]]:
        not_gt = diagnostics.get("pred_boxes_not_gt", 0)
        if not not_gt:
            return metrics, {}
        kept = {n: v for n, v in metrics.items() if n.partition("@")[0] != "A"}
        return kept, {"A@k": f"the predicted boxes of {not_gt} image(s) are not their GT "
                             "boxes in the same order (sgdet): the pair accuracy of "
                             "Scene-Graph-Benchmark.pytorch assumes they are (predcls, sgcls)"}


SGBPYTORCH = register(SGBPyTorchProtocol(
    name="sgbpytorch",
    # 1.1: boxes are matched on mask stores too (1 matched their masks there)
    version="1.1",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,  # (images without proposals are skipped altogether)
    prank_over_cells=False,
    description="reproduces Scene-Graph-Benchmark.pytorch (boxes, VG150): triplet-level "
                "matching with inclusive box IoU, GT clipped to the image, GT duplicates "
                "kept, images without proposals skipped, NG list cut at 100, mR over the "
                "vocabulary",
    box_iou_inclusive=True,
    clip_gt_boxes=True,
    keep_duplicate_gt=True,
    ng_limit=100,
    skip_images_without_proposals=True,
    mean_over_vocabulary=True,
    pair_accuracy_by_index=True,
    ng_zero_shot=True,
    match_boxes=True,
))
