"""The inputs of one PVSG video's evaluation as the pipeline carries them: the GT video's
tables and the model's results for it (``PVSGVideo``), with the two mask tubes as chunk
iterators that the protocol walks (``sgdask.kernels.pvsg``), and what the video gives the
metric families (``VideoHits``).

numpy only: the readers (``sgdask/io/pvsg.py``) fill these, the protocol
(``sgdask/protocols/pvsg``) reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sgdask.types import ImageHits, ImagePred

if TYPE_CHECKING:
    from sgdask.kernels.pvsg import Chunk, Spans


@dataclass(frozen=True)
class PVSGVideo:
    """One video: GT objects' classes (object id -> class), its relations (subject and
    object ids, predicate, inclusive spans, in the annotation's order), the predicted tracks'
    classes (track id -> majority class), the ranked relations (subject and object track
    ids, predicate, spans, by rank), the pair proposals' ranking; ``gt_chunks`` and
    ``pred_chunks`` give the two videos' masks a chunk of frames at a time, equally
    chunked, each call a new walk."""

    video: str
    frames: int
    gt_classes: dict[int, int]
    rel_tubes: np.ndarray
    rel_predicates: np.ndarray
    rel_spans: Spans
    pred_classes: dict[int, int]
    pred_tubes: np.ndarray
    pred_predicates: np.ndarray
    pred_spans: Spans
    ranked_pairs: np.ndarray
    gt_chunks: Callable[[], Iterable[Chunk]]
    pred_chunks: Callable[[], Iterable[Chunk]]

    def relation_spans(self, r: int) -> list[tuple[int, int]]:
        """GT relation ``r``'s spans (none for a relation given without frames)."""
        s = self.rel_spans
        pick = (s.owner == r) & (s.end >= s.start)
        return list(zip(s.start[pick].tolist(), s.end[pick].tolist(), strict=True))


@dataclass
class PVSGVideoPred(ImagePred):
    """One video's results as an ``ImagePred``: ``labels`` the tracks' classes, ``graph``
    one (subject, object, 0) row per ranked pair of tracks with masks (track positions),
    which the protocol lint counts (a PVSG ranking lists a pair with many predicates and
    spans, as the reference expects: not a lint finding); ``video`` what the protocol
    evaluates."""

    video: PVSGVideo | None = None


@dataclass
class VideoHits(ImageHits):
    """A video's hits: ``graph_first`` each GT relation's strong rank; ``weak_relation`` /
    ``weak_rank`` its weak hits, one row each; ``pair_hits`` per k of the protocol, (GT pairs
    among the top k pair proposals, GT pairs)."""

    weak_relation: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    weak_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pair_hits: dict[int, tuple[int, int]] = field(default_factory=dict)
