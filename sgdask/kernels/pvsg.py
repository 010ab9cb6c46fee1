"""One PVSG video's relation terms, as OpenPVSG's ``rel_test_full.py`` counts them, from the
word masks of its frames, one chunk of frames at a time.

A *candidate* is a (GT relation, prediction) pair of equal subject class, object class and
predicate (classes: the GT objects' categories, the predicted tubes' majority classes).
Per frame, one IoU table between the GT tubes and the predicted tubes present there (same
class only) gives every candidate's hit at once; over the chunks each candidate sums its hit
frames inside both spans, each GT relation its frames inside its span where both GT masks
are present. vIoU is their ratio (0 over no frame), computed as the reference divides.

Then each GT relation's walk over its candidates in rank order (``relation_counts``): a strong
hit (vIoU >= 0.5) at the first such rank; weak hits (vIoU >= 0.1) at that rank and before,
counted per prediction (``weak="reference"``) or once (``weak="once"``). Pure numpy + numba:
no I/O, no Dask, pyarrow or zarr.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT, cross_iou
from sgdask.types import BitMasks

STRONG, WEAK, MASK_IOU = 0.5, 0.1, 0.5


class Chunk(Protocol):
    """Decoded masks of frames ``first ..``: per frame the tube ids and their word masks
    (``sgdask.io.pvsg.FrameChunk``)."""

    first: int
    tubes: list[np.ndarray]
    masks: list[BitMasks]


@dataclass(frozen=True)
class Spans:
    """Frame spans (inclusive) of owners 0..n-1, one row per span."""

    owner: np.ndarray
    start: np.ndarray
    end: np.ndarray
    n: int

    def inside(self, first: int, frames: int) -> np.ndarray:
        """(n, frames) bool: frame ``first + j`` lies in a span of owner i."""
        out = np.zeros((self.n, frames + 1), np.int32)
        a = np.clip(self.start - first, 0, frames)
        b = np.clip(self.end + 1 - first, 0, frames)
        keep = b > a
        np.add.at(out, (self.owner[keep], a[keep]), 1)
        np.add.at(out, (self.owner[keep], b[keep]), -1)
        return np.cumsum(out, 1)[:, :frames] > 0


def candidates(gt_keys: np.ndarray, pred_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(relation, prediction) index pairs whose (subject class, object class, predicate) rows
    are equal, by relation then prediction; a prediction's key row is -1 where a tube has no
    mask (never a candidate)."""
    rel, pred = np.nonzero((gt_keys[:, None, :] == pred_keys[None, :, :]).all(-1)
                           & (pred_keys[None, :, 0] >= 0) & (pred_keys[None, :, 1] >= 0))
    return rel.astype(np.int64), pred.astype(np.int64)


def _frame_iou(gt: BitMasks, gt_classes: np.ndarray, pred: BitMasks,
               pred_classes: np.ndarray) -> np.ndarray:
    """(n_gt, n_pred) mask IoU, 0 across classes (numpy's ``intersection / union``, 0 over
    an empty union)."""
    return cross_iou(gt.boxes, gt.starts, gt.words, gt.areas(), gt_classes,
                     pred.boxes, pred.starts, pred.words, pred.areas(), pred_classes, True)


@njit(**JIT)
def _positions(ids: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Each id's position among ``present`` (its first; -1: absent). A frame holds a few
    tubes: a scan is quicker than sorting."""
    out = np.full(len(ids), -1, np.int64)
    for i in range(len(ids)):
        for j in range(len(present)):
            if present[j] == ids[i]:
                out[i] = j
                break
    return out


@dataclass
class VideoWalk:
    """What one walk over a video's chunks gives: each candidate's vIoU; per (GT object,
    track) the frames where their masks' IoU is above 0.5 (strict, as
    ``match_and_process_gt_tubes``); per track the frames where it has a mask line (where
    the tracker gave it a query feature)."""

    viou: np.ndarray
    matched: dict[tuple[int, int], list[int]]
    present: dict[int, set[int]]


def walk_video(gt_chunks: Iterable[Chunk], pred_chunks: Iterable[Chunk],
               gt_class_of: dict[int, int], pred_class_of: dict[int, int],
               rel_tubes: np.ndarray, rel_spans: Spans, pred_tubes: np.ndarray,
               pred_spans: Spans, cand_rel: np.ndarray, cand_pred: np.ndarray) -> VideoWalk:
    """The two videos' chunks walked once, in step (equal chunking), one IoU table per
    frame between the GT tubes and the tracks present there (same class only).

    ``rel_tubes`` (n_rel, 2): GT subject and object ids; ``pred_tubes`` (n_pred, 2): track
    ids; spans per relation and per prediction. A candidate's hit frames are those inside
    both spans where both pairs reach IoU >= 0.5; its relation's frames those inside its
    span where both GT masks are present; vIoU is their ratio (0 over no frame)."""
    num = np.zeros(len(cand_rel), np.int64)
    den = np.zeros(rel_spans.n, np.int64)
    matched: dict[tuple[int, int], list[int]] = {}
    present: dict[int, set[int]] = {}
    for gc, pc in zip(gt_chunks, pred_chunks, strict=True):
        frames = len(gc.tubes)
        in_s = rel_spans.inside(gc.first, frames)
        in_p = pred_spans.inside(gc.first, frames)
        for j in range(frames):
            frame, g_ids, p_ids = gc.first + j, gc.tubes[j], pc.tubes[j]
            for t in p_ids.tolist():
                present.setdefault(t, set()).add(frame)
            gs, go = (_positions(rel_tubes[:, k], g_ids) for k in (0, 1))
            den += (gs >= 0) & (go >= 0) & in_s[:, j]
            if not len(p_ids) or not len(g_ids):
                continue
            iou = _frame_iou(gc.masks[j], np.asarray([gt_class_of[t] for t in g_ids]),
                             pc.masks[j], np.asarray([pred_class_of[t] for t in p_ids]))
            for a, b in zip(*np.nonzero(iou > MASK_IOU), strict=True):
                matched.setdefault((int(g_ids[a]), int(p_ids[b])), []).append(frame)
            if not len(cand_rel):
                continue
            match = iou >= MASK_IOU
            ps, po = (_positions(pred_tubes[:, k], p_ids) for k in (0, 1))
            cs, co, cps, cpo = gs[cand_rel], go[cand_rel], ps[cand_pred], po[cand_pred]
            ok = (cs >= 0) & (co >= 0) & (cps >= 0) & (cpo >= 0)
            hit = np.zeros(len(cand_rel), bool)
            hit[ok] = match[cs[ok], cps[ok]] & match[co[ok], cpo[ok]]
            num += hit & in_s[cand_rel, j] & in_p[cand_pred, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        viou = np.where(den[cand_rel] > 0, num / np.maximum(den[cand_rel], 1), 0.0)
    return VideoWalk(viou, matched, present)


def video_viou(gt_chunks: Iterable[Chunk], pred_chunks: Iterable[Chunk],
               gt_class_of: dict[int, int], pred_class_of: dict[int, int],
               rel_tubes: np.ndarray, rel_spans: Spans, pred_tubes: np.ndarray,
               pred_spans: Spans, cand_rel: np.ndarray, cand_pred: np.ndarray) -> np.ndarray:
    """Each candidate's vIoU (``walk_video``'s)."""
    return walk_video(gt_chunks, pred_chunks, gt_class_of, pred_class_of, rel_tubes,
                      rel_spans, pred_tubes, pred_spans, cand_rel, cand_pred).viou


def relation_ranks(viou: np.ndarray, cand_rel: np.ndarray, cand_rank: np.ndarray, n_rel: int,
                   weak: str = "reference") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's walk per GT relation over its candidates in rank order, ended by the
    first strong hit (vIoU >= 0.5): each relation's strong rank (``never`` when none), and
    its weak hits (vIoU >= 0.1 at that rank and before) as (relation, rank) rows, one per
    matching prediction (``weak="reference"``) or only the first (``weak="once"``)."""
    never = np.iinfo(np.int64).max
    strong_rank = np.full(n_rel, never, np.int64)
    weak_rel: list[np.ndarray] = []
    weak_rank: list[np.ndarray] = []
    order = np.lexsort((cand_rank, cand_rel))
    rel, rank, v = cand_rel[order], cand_rank[order], viou[order]
    bounds = np.searchsorted(rel, np.arange(n_rel + 1))
    for r in range(n_rel):
        rk, vv = rank[bounds[r]:bounds[r + 1]], v[bounds[r]:bounds[r + 1]]
        strong = np.flatnonzero(vv >= STRONG)
        stop = strong[0] if len(strong) else len(vv) - 1
        if len(strong):
            strong_rank[r] = rk[stop]
        ranks = rk[: stop + 1][vv[: stop + 1] >= WEAK]
        if weak == "once":
            ranks = ranks[:1]
        weak_rel.append(np.full(len(ranks), r, np.int64))
        weak_rank.append(ranks.astype(np.int64))
    return strong_rank, _joined(weak_rel), _joined(weak_rank)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def relation_counts(viou: np.ndarray, cand_rel: np.ndarray, cand_rank: np.ndarray,
                    n_rel: int, ks: tuple[int, ...], weak: str = "reference"
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(hits, weak hits), each (n_rel, len(ks)): ``relation_ranks`` counted under each k."""
    strong_rank, weak_rel, weak_rank = relation_ranks(viou, cand_rel, cand_rank, n_rel, weak)
    kk = np.asarray(ks)
    hits = (strong_rank[:, None] < kk).astype(np.int64)
    weak_hits = np.zeros((n_rel, len(ks)), np.int64)
    np.add.at(weak_hits, weak_rel, (weak_rank[:, None] < kk).astype(np.int64))
    return hits, weak_hits


# ------------------------------------------------------------------ pair recall (rel_test.py)


def video_tube_matches(gt_chunks: Iterable[Chunk], pred_chunks: Iterable[Chunk],
                       gt_class_of: dict[int, int], pred_class_of: dict[int, int]
                       ) -> tuple[dict[tuple[int, int], list[int]], dict[int, set[int]]]:
    """``walk_video``'s tube matches and track frames alone (no candidates)."""
    none = np.zeros(0, np.int64)
    nothing = Spans(none, none, none, 0)
    walk = walk_video(gt_chunks, pred_chunks, gt_class_of, pred_class_of,
                      np.zeros((0, 2), np.int64), nothing, np.zeros((0, 2), np.int64),
                      nothing, none, none)
    return walk.matched, walk.present


def _ranges(frames: list[int], single: bool) -> list[tuple[int, int]]:
    """``compact_matching_dict``'s ranges: one (min, max) when the object matched one track,
    else runs split where the next frame is more than 5 on."""
    if single:
        return [(min(frames), max(frames))]
    frames = sorted(frames)
    out, start = [], frames[0]
    for prev, cur in pairwise(frames):
        if cur > prev + 5:
            out.append((start, prev))
            start = cur
    return [*out, (start, frames[-1])]


def gt_pairs(matched: dict[tuple[int, int], list[int]], present: dict[int, set[int]],
             relations: list[tuple[int, int, int, list[tuple[int, int]]]], frames: int
             ) -> set[tuple[int, int]]:
    """The GT relations moved onto the predicted tracks as ``prepare_rel_set.py`` does
    (``compact_matching_dict``, ``translate_gt_relations``, ``process_feats_and_relations``):
    the (track, track) pairs kept."""
    per_object: dict[int, dict[int, list[int]]] = {}
    for (oid, tid), fs in matched.items():
        per_object.setdefault(oid, {})[tid] = fs
    ranges = {oid: {tid: _ranges(fs, len(inner) == 1) for tid, fs in inner.items()
                    if len(fs) >= 5}
              for oid, inner in per_object.items()}
    ranges = {oid: inner for oid, inner in ranges.items() if inner}
    spans: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for s, o, predicate, gt_spans in relations:
        if s not in ranges or o not in ranges:
            continue
        for t0, t1 in gt_spans:
            for tid1, r1 in ranges[s].items():
                for a1, b1 in r1:
                    for tid2, r2 in ranges[o].items():
                        for a2, b2 in r2:
                            lo = max(t0, a1, a2)
                            hi = min(t1, b1 + 1, b2 + 1)
                            if lo < hi:
                                spans.setdefault((tid1, tid2, predicate), []).append((lo, hi))
    out = set()
    for (tid1, tid2, _), kept in spans.items():
        on = np.zeros(frames, bool)
        for lo, hi in kept:
            on[lo:hi] = True
        both = present.get(tid1, set()) & present.get(tid2, set())
        if sum(1 for f in np.flatnonzero(on).tolist() if f in both) >= 3:
            out.add((tid1, tid2))
    return out


def pair_hits(ranked_pairs: np.ndarray, truth: set[tuple[int, int]], k: int = 20
              ) -> tuple[int, int]:
    """(GT pairs among the top k pair proposals, GT pairs): ``pair_recall``'s two counts."""
    top = {(int(s), int(o)) for s, o in ranked_pairs[:k]}
    return len(top & truth), len(truth)


def pair_recall(ranked_pairs: np.ndarray, truth: set[tuple[int, int]], k: int = 20) -> float:
    """``calculate_pair_recall_at_k``: the share of the GT pairs among the top k (0 without
    GT pairs)."""
    found, total = pair_hits(ranked_pairs, truth, k)
    return found / total if total else 0
