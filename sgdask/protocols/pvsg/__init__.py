"""PVSG (``pvsg``, ``pvsg-oneweak``): the panoptic video scene graph evaluation of OpenPVSG's
``tools/rel_test_full.py`` (R, mR, weak R, weak mR @20/50/100 through
``utils/rel_metrics.py``) and ``tools/rel_test.py`` (pair recall@20), whole in this package.
``docs/video-pvsg.md`` is the definition; the per-video work is ``sgdask.kernels.pvsg``
(pure numpy, shared with its literal twin's tests), its metric family ``metrics``.

The evaluation unit is the whole video, and each video is one image of the GT store: a hit
needs the vIoU of two mask tubes over the video's frames, so no frame can be scored alone,
and the reference pools its counts over videos. Per video the task hands the protocol the
video's tables and two chunk walks over its masks (GT tube store and results, equally
chunked, ``sgdask.formats.pvsg``): the protocol walks them once, one IoU table per frame
giving the candidates' vIoU and the pair recall's tube matching, so a worker holds one chunk
of frames of one video at a time, whatever the video's length. The numbers are integer
counts per (video, predicate, k) and per-video pair recall counts (two resampled states), so
any partitioning gives the same sums, and intervals and paired tests resample videos.

``pvsg`` counts weak hits as the reference does: a GT relation gains one per matching
relation of vIoU >= 0.1 until the first of vIoU >= 0.5 ends its walk (weak recall can pass
1); ``pvsg-oneweak`` counts one weak hit per GT relation, at its first weak match, the
reading the metric's name suggests. Every other number is the same under both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sgdask.errors import InstanceMismatch, Text
from sgdask.kernels.selection import parse_ks
from sgdask.protocols import register, register_board
from sgdask.protocols.base import Protocol, Refusal
from sgdask.protocols.pvsg.metrics import FAMILY, INPUT
from sgdask.types import ImageGT, ImageHits, ImagePred
from sgdask.types_pvsg import PVSGVideo, PVSGVideoPred, VideoHits

POOLED = "pooled"
#: pair proposals the reference keeps before its pair recall (``pairs[:100]``)
PAIR_PROPOSALS = 100
NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class PVSGProtocol(Protocol):
    """PVSG's relation evaluation (``weak``: ``reference``, each matching relation a weak
    hit until a strong one; ``once``, one weak hit per GT relation)."""

    weak: str = "reference"

    families: ClassVar[tuple] = (FAMILY,)
    needs: ClassVar[dict[str, Text]] = {INPUT: "not part of this protocol (pvsg reports it)"}
    not_listed: ClassVar[frozenset[str]] = frozenset({INPUT})
    exclusive: ClassVar[dict[str, str]] = {
        INPUT: "not part of the PVSG protocols (OpenPVSG reports R, mR, wR, wmR @20/50/100 "
               "and PR@20)"}

    def image_hits(self, gt: ImageGT, pred: ImagePred, with_ng: bool = True,
                   match_labels: bool = True, shared: dict | None = None,
                   legacy: bool = True) -> ImageHits:
        video = pred.video if isinstance(pred, PVSGVideoPred) else None
        if video is None:
            raise InstanceMismatch("the PVSG protocols read a video's mask tubes and ranked "
                                   "relations (OpenPVSG's results), which this prediction "
                                   "is not")
        relations = np.asarray(gt.relations, np.int64).reshape(-1, 3)
        if len(relations) != len(video.rel_tubes):
            raise InstanceMismatch(f"video {video.video}: the GT store and its tube store "
                                   "disagree on the relations (ingest them together)")
        return self._video_hits(gt, relations, video)

    def _video_hits(self, gt: ImageGT, relations: np.ndarray, video: PVSGVideo) -> VideoHits:
        """One walk over the video's chunks, then the relations' ranks and the pairs."""
        from sgdask.kernels.pvsg import candidates, gt_pairs, pair_hits, relation_ranks, walk_video

        gt_class, pred_class = video.gt_classes, video.pred_classes
        rel_keys = np.stack([[gt_class[t] for t in video.rel_tubes[:, 0].tolist()],
                             [gt_class[t] for t in video.rel_tubes[:, 1].tolist()],
                             video.rel_predicates], 1).reshape(-1, 3).astype(np.int64)
        pred_keys = np.stack([[pred_class.get(t, -1) for t in video.pred_tubes[:, 0].tolist()],
                              [pred_class.get(t, -1) for t in video.pred_tubes[:, 1].tolist()],
                              video.pred_predicates], 1).reshape(-1, 3).astype(np.int64)
        cand_rel, cand_pred = candidates(rel_keys, pred_keys)
        walk = walk_video(video.gt_chunks(), video.pred_chunks(), gt_class, pred_class,
                          video.rel_tubes, video.rel_spans, video.pred_tubes, video.pred_spans,
                          cand_rel, cand_pred)
        strong, weak_relation, weak_rank = relation_ranks(walk.viou, cand_rel, cand_pred,
                                                          len(relations), self.weak)
        listed = [(int(s), int(o), int(p), video.relation_spans(r))
                  for r, (s, o, p) in enumerate(np.column_stack(
                      [video.rel_tubes, video.rel_predicates]).tolist())]
        truth = gt_pairs(walk.matched, walk.present, listed, video.frames)
        ranked = video.ranked_pairs[:PAIR_PROPOSALS]
        pairs = {j: pair_hits(ranked, truth, k.resolve(len(relations)))
                 for j, k in enumerate(parse_ks(self.ks or "20,50,100"))}
        hits = self._hits(gt, relations, strong, len(video.pred_tubes))
        hits.weak_relation, hits.weak_rank, hits.pair_hits = weak_relation, weak_rank, pairs
        return hits

    def missing_image_hits(self, gt: ImageGT, with_ng: bool = True) -> ImageHits:
        relations = np.asarray(gt.relations, np.int64).reshape(-1, 3)
        hits = self._hits(gt, relations, np.full(len(relations), NEVER, np.int64), 0)
        hits.missing = True
        return hits

    @staticmethod
    def _hits(gt: ImageGT, relations: np.ndarray, first: np.ndarray, ranked: int) -> VideoHits:
        from sgdask.kernels.hits import gt_pair_rows

        n_gt = gt.n_instances
        pairs = gt_pair_rows(relations, n_gt)
        return VideoHits(gt.image_id, False, relations, np.asarray(gt.labels),
                         np.zeros(n_gt, dtype=bool), graph_first=first,
                         pair_first=np.full(len(pairs), NEVER, np.int64),
                         diagnostics={"gt_instances": n_gt, "pred_relations": ranked})

    def inputs(self, with_ng: bool, has_stats: bool, legacy: bool,
               data: frozenset[str] = frozenset()) -> set[str]:
        return {INPUT}

    def aggregation_for(self, requested: str) -> str:
        return POOLED

    def board_metrics(self) -> tuple[str, ...]:
        return ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "wR@20", "wR@50",
                "wR@100", "PR@20")

    def notes(self, absent: int) -> list[str]:
        weak = ("weak hits counted as OpenPVSG counts them: one per matching relation of "
                "vIoU >= 0.1 until a strong match (weak recall can pass 100)"
                if self.weak == "reference" else
                "one weak hit per GT relation (pvsg counts them as OpenPVSG does)")
        return [f"PVSG: pooled over videos, mR over the predicates present in the GT; {weak}"]

    def evaluator_refusal(self) -> Refusal | None:
        return ("the PVSG protocols read a video's mask tubes chunk by chunk, which update() "
                "does not take; run sgdask evaluate",)


def _protocol(name: str, weak: str, description: str) -> PVSGProtocol:
    return register(PVSGProtocol(
        name=name,
        version="1",
        normalization="none",
        matching="triplet",
        missing_counts_in_means=True,
        prank_over_cells=False,
        description=description,
        keep_duplicate_gt=True,
        ks="20,50,100",
        unit="video",
        weak=weak,
    ))


PVSG = _protocol("pvsg", "reference", "reproduces OpenPVSG's relation evaluation "
                 "(rel_test_full.py, rel_test.py): triplet recall with vIoU >= 0.5 between "
                 "mask tubes, weak recall at 0.1 counted as the reference counts it, pooled "
                 "over videos; pair recall averaged over videos")
PVSG_ONEWEAK = _protocol("pvsg-oneweak", "once", "pvsg with one weak hit per GT relation "
                         "(weak recall at most 100); every other number as pvsg")
#: a leaderboard of a PVSG GT store (its format's name) ranks by pvsg
register_board("pvsg", (PVSG.name,))
