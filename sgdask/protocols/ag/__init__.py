"""Action Genome (``ag-with``, ``ag-semi``, ``ag-no``; ``ag`` names all three): the video scene
graph evaluation of STTran's ``lib/evaluation_recall.py`` (R@k) and TEMPURA's
``calc_mrecall`` (mR@k), whole in this package. ``docs/video.md`` is the definition; the
per-frame work is ``sgdask.kernels.ag`` (one compiled pass per frame for its three modes, checked
against its literal twin in the tests; ``share_partition`` runs a task's frames through it in
one call, checked against the frame-by-frame call).

Each GT frame is an image of the store whose unit is its ``video``: intervals and paired
tests resample videos. A frame's hits: its three rows per predicted pair (attention,
spatial with subject and object swapped, contacting), the candidates the constraint keeps,
ranked by subject x object x predicate score (ties in candidate order), each GT relation's
first hit (classes, predicate, both boxes at IoU >= 0.5 with +1 pixels). The metrics are
recall's: R@k the mean over frames of each frame's recall, mR@k hits and GT relations
pooled over frames per predicate (the ``pooled`` aggregation, whatever is asked), averaged
over all 26 predicates (an absent one counting 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sgdask.errors import InstanceMismatch
from sgdask.protocols import GROUPS, register, register_board, register_group
from sgdask.protocols.base import Protocol, Refusal
from sgdask.types import ImageGT, ImageHits, ImagePred
from sgdask.types_ag import CONSTRAINTS, SEMI_THRESHOLD, AGFrame, AGFramePred, AGVideoPred

#: the name that stands for the three modes
GROUP = "ag"
POOLED = "pooled"
#: the key of a frame's first hits under every mode in what its protocols share
SHARED = "ag_first_hits"
#: metrics of matched instances, which this evaluation has none of
UNMATCHED = ("R@inf", "mR@inf", "InstR")


@dataclass(frozen=True)
class ActionGenomeProtocol(Protocol):
    """One constraint mode of Action Genome's evaluation (``constraint``: ``with``,
    ``semi`` or ``no``; ``semi_threshold``: the score a spatial or contacting predicate
    must exceed under ``semi``)."""

    constraint: str = "with"
    semi_threshold: float = SEMI_THRESHOLD

    def image_hits(self, gt: ImageGT, pred: ImagePred, with_ng: bool = True,
                   match_labels: bool = True, shared: dict | None = None,
                   legacy: bool = True) -> ImageHits:
        output = pred.output if isinstance(pred, AGFramePred) else None
        if output is None:
            raise InstanceMismatch("the Action Genome protocols read a video model's "
                                   "output (STTran-family pairs and distributions), which "
                                   "this prediction is not")
        relations, found = _frame_modes(gt, output, self.semi_threshold, shared)
        first, pair_first = found[self.constraint]
        return self._hits(gt, relations, first, pair_first, len(output.pairs))

    def share_partition(self, gts: Sequence[ImageGT], preds: Mapping[str, ImagePred],
                        shared: Sequence[dict]) -> None:
        """Every frame's GT relations and first hits under every mode (``_frame_modes``),
        one compiled call for the partition's frames (per dtype of their box scores)."""
        key = (SHARED, self.semi_threshold)
        groups: dict[np.dtype, list[tuple[int, ImageGT, AGVideoPred]]] = {}
        for i, gt in enumerate(gts):
            pred = preds.get(gt.image_id)
            if isinstance(pred, AGFramePred) and pred.output is not None \
                    and key not in shared[i]:
                output = pred.output
                groups.setdefault(np.asarray(output.scores).dtype, []).append((i, gt, output))
        for group in groups.values():
            _share_frames(group, self.semi_threshold, shared)

    def missing_image_hits(self, gt: ImageGT, with_ng: bool = True) -> ImageHits:
        from sgdask.kernels.ag import NEVER
        from sgdask.kernels.hits import gt_pair_rows
        from sgdask.kernels.image import gt_relations

        relations = gt_relations(gt, True)
        never = np.full(len(relations), NEVER, np.int64)
        pairs = gt_pair_rows(relations, gt.n_instances)
        hits = self._hits(gt, relations, never, never[:len(pairs)], 0)
        hits.missing = True
        return hits

    @staticmethod
    def _hits(gt: ImageGT, relations: np.ndarray, first: np.ndarray,
              pair_first: np.ndarray, pairs: int) -> ImageHits:
        n_gt = gt.n_instances
        return ImageHits(gt.image_id, False, relations, np.asarray(gt.labels),
                         np.zeros(n_gt, dtype=bool), graph_first=first,
                         pair_first=pair_first,
                         diagnostics={"gt_instances": n_gt, "pred_pairs": pairs})

    def inputs(self, with_ng: bool, has_stats: bool, legacy: bool,
               data: frozenset[str] = frozenset()) -> set[str]:
        return {"graph"}

    def aggregation_for(self, requested: str) -> str:
        return POOLED

    def board_metrics(self) -> tuple[str, ...]:
        return ("R@10", "R@20", "R@50", "mR@10", "mR@20", "mR@50")

    def notes(self, absent: int) -> list[str]:
        mode = {"with": "with constraint: each row's best predicate",
                "semi": f"semi constraint: attention rows' best predicate, spatial and "
                        f"contacting predicates scored above {self.semi_threshold}",
                "no": "no constraint: the 100 best (row, predicate) of each frame"}
        return [f"Action Genome, {mode[self.constraint]}; R@k is the mean over frames, "
                "mR@k pools each predicate's hits over frames (TEMPURA), whatever the "
                "aggregation asked"]

    def withheld(self, metrics: dict[str, float], diagnostics: dict[str, int]
                 ) -> tuple[dict[str, float], dict[str, str]]:
        kept = {n: v for n, v in metrics.items() if n not in UNMATCHED}
        return kept, dict.fromkeys(UNMATCHED, "needs an instance mapping; Action Genome "
                                   "matches each candidate's boxes per relation")

    def evaluator_refusal(self) -> Refusal | None:
        return ("the Action Genome protocols read a video model's output per frame, which "
                "update() does not take; run sgdask evaluate",)


def _frame_modes(gt: ImageGT, output: AGVideoPred, threshold: float, shared: dict | None
                 ) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The frame's GT relations and its first hits under every constraint mode, computed in
    one pass by the first mode that asks and kept in ``shared`` (what the protocols of one
    frame share) for the others."""
    key = (SHARED, threshold)
    if shared is not None and key in shared:
        return shared[key]
    from sgdask.kernels.ag import frame_first_hits_modes  # numba: loaded on first use
    from sgdask.kernels.hits import gt_pair_rows
    from sgdask.kernels.image import gt_relations

    relations = gt_relations(gt, True)
    frame = _gt_frame(gt, relations)
    pairs = gt_pair_rows(relations, gt.n_instances)
    found = (relations, dict(zip(CONSTRAINTS, frame_first_hits_modes(
        frame, output, CONSTRAINTS, threshold, pairs), strict=True)))
    if shared is not None:
        shared[key] = found
    return found


def _share_frames(group: list[tuple[int, ImageGT, AGVideoPred]], threshold: float,
                  shared: Sequence[dict]) -> None:
    """``_frame_modes`` of frames ``(i, gt, output)`` (box scores of one dtype) in one
    compiled call (``stacked_first_hits_modes``), each put in ``shared[i]``."""
    from sgdask.kernels.ag import stacked_first_hits_modes  # numba: loaded on first use
    from sgdask.kernels.image import gt_relations

    relations = [gt_relations(gt, True) for _, gt, _ in group]
    first, at, pair_first, pair_at = stacked_first_hits_modes(
        relations, [np.asarray(gt.boxes).reshape(-1, 4) for _, gt, _ in group],
        [np.asarray(gt.labels) for _, gt, _ in group], [output for _, _, output in group],
        threshold, class_offset=1)
    at, pair_at = at.tolist(), pair_at.tolist()
    for f, ((i, _, _), frame_relations) in enumerate(zip(group, relations, strict=True)):
        a, b, c, d = at[f], at[f + 1], pair_at[f], pair_at[f + 1]
        shared[i][(SHARED, threshold)] = (frame_relations, {
            mode: (first[m, a:b], pair_first[m, c:d]) for m, mode in enumerate(CONSTRAINTS)})


def _gt_frame(gt: ImageGT, relations: np.ndarray) -> AGFrame:
    """The GT image as the kernel reads a frame (classes 1-based, as the annotations)."""
    return AGFrame(gt.image_id, np.asarray(gt.boxes, dtype=np.float64).reshape(-1, 4),
                   np.asarray(gt.labels, dtype=np.int64) + 1, relations)


def _mode(constraint: str, description: str) -> ActionGenomeProtocol:
    return register(ActionGenomeProtocol(
        name=f"{GROUP}-{constraint}",
        version="1",
        normalization="none",
        matching="triplet",
        missing_counts_in_means=True,
        prank_over_cells=False,
        description=f"reproduces Action Genome's {description} (STTran's "
                    "evaluate_from_dict for R@k, TEMPURA's calc_mrecall for mR@k): frames "
                    "grouped by video",
        box_iou_inclusive=True,
        keep_duplicate_gt=True,
        mean_over_vocabulary=True,
        ks="10,20,50,100",
        unit="video",
        constraint=constraint,
    ))


AG_WITH = _mode("with", "with-constraint evaluation (each row's best predicate)")
AG_SEMI = _mode("semi", f"semi-constraint evaluation (threshold {SEMI_THRESHOLD})")
AG_NO = _mode("no", "no-constraint evaluation (the 100 best candidates of each frame)")
register_group(GROUP, (AG_WITH.name, AG_SEMI.name, AG_NO.name))
#: a leaderboard of an Action Genome GT store (its format's name) ranks by the three modes
register_board("action-genome", GROUPS[GROUP])
