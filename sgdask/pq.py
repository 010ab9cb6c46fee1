"""COCO panoptic predictions scored on a Dask cluster: panoptic quality (PQ, SQ, RQ; all,
things, stuff; per category) as COCO panopticapi's ``pq_compute`` computes it, from a
prediction JSON + PNG directory against a COCO panoptic GT JSON + PNG directory
(``sgdask evaluate --pred panoptic.json --pred-masks DIR --gt gt.json --gt-masks DIR``).

The driver reads the two JSONs (``sgdask.formats.coco_panoptic``), pairs their images and
plans one task per chunk of images; a task decodes each image's two PNGs to runs of
segment ids and counts it (``sgdask.kernels.panoptic.pair_runs``, ``table_hits``); the
chunks' counts fold into the panoptic family's states, finalized by
``sgdask.metrics.panoptic`` as every evaluation's PQ is. True positives are kept as
integer (intersection, union) rows and summed in one canonical order, so any chunking
gives the same bits.

Where panopticapi stops (an image without prediction), its GT segments are false
negatives (SPEC section 6) and the report says how many images had none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdask.errors import InputError
from sgdask.formats.coco_panoptic import PanopticFile, Segments, panoptic_runs, read_panoptic_json
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions
from sgdask.kernels.panoptic import pair_runs, table_hits
from sgdask.metrics import panoptic
from sgdask.metrics.base import Context, Finals
from sgdask.report import Report
from sgdask.types import PanopticHits

#: the report's protocol: panopticapi's, not one of the scene graph protocols
PROTOCOL = {"name": "coco-panoptic", "version": "1",
            "description": "COCO panopticapi's pq_compute on COCO panoptic files"}
#: images per task
CHUNK = 64


@dataclass(frozen=True)
class Chunk:
    """A task's images: (GT segments, predicted segments or None) and the PNG folders."""

    pairs: tuple[tuple[Segments, Segments | None], ...]
    gt_masks: str
    pred_masks: str
    limits: ArchiveLimits | None


@dataclass(frozen=True)
class Counts:
    """Counts of some images: per true positive (category, intersection, union); the
    categories of the false positives and of the false negatives."""

    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray

    @staticmethod
    def of(hits: list[PanopticHits]) -> Counts:
        empty = np.empty(0, dtype=np.int64)
        tp = np.stack([np.concatenate([empty, *(h.tp_category for h in hits)]),
                       np.concatenate([empty, *(h.tp_intersection for h in hits)]),
                       np.concatenate([empty, *(h.tp_union for h in hits)])], 1)
        return Counts(tp, np.concatenate([empty, *(h.fp_category for h in hits)]),
                      np.concatenate([empty, *(h.fn_category for h in hits)]))


def image_hits(gt: Segments, pred: Segments | None, chunk: Chunk,
               options: StorageOptions | None) -> PanopticHits:
    """One image's counts from its two PNGs (no prediction: its GT segments but the
    crowd regions are false negatives)."""
    empty = np.empty(0, dtype=np.int64)
    if pred is None:
        return PanopticHits(empty, empty, empty, empty, gt.categories[~gt.crowd])
    gt_shape, gt_ends, gt_runs = panoptic_runs(chunk.gt_masks, gt, options, chunk.limits)
    shape, pred_ends, pred_runs = panoptic_runs(chunk.pred_masks, pred, options, chunk.limits)
    if gt_shape != shape:
        raise InputError(pred.file_name, f"PNG is {shape[1]}x{shape[0]}",
                         image=gt.image_id, field="file_name",
                         expected=f"{gt_shape[1]}x{gt_shape[0]} as the GT's PNG")
    table, unlisted = pair_runs(gt_ends, gt_runs, gt.ids, pred_ends, pred_runs, pred.ids)
    if unlisted >= 0:
        raise InputError(pred.file_name, f"segment {unlisted} is in the PNG, not in the JSON",
                         image=gt.image_id, field="segments_info")
    absent = np.flatnonzero(table[:len(pred.ids)].sum(axis=1) == 0)
    if len(absent):
        raise InputError(pred.file_name, f"segment {pred.ids[absent[0]]} is in the JSON, "
                         "not in the PNG", image=gt.image_id, field="segments_info")
    gt_area = gt.areas if gt.areas is not None else table[:, :len(gt.ids)].sum(axis=0)
    return table_hits(table, pred.categories, gt.categories, gt_area, gt.crowd)


def chunk_counts(chunk: Chunk, options: StorageOptions | None) -> Counts:
    """A task: the counts of a chunk's images."""
    return Counts.of([image_hits(gt, pred, chunk, options) for gt, pred in chunk.pairs])


def folded(counts: list[Counts]) -> Counts:
    """The chunks' counts as one, true positives in one canonical order (sorted)."""
    tp = np.concatenate([c.tp for c in counts]) if counts else np.empty((0, 3), np.int64)
    tp = tp[np.lexsort((tp[:, 2], tp[:, 1], tp[:, 0]))]
    return Counts(tp, np.concatenate([c.fp for c in counts] or [np.empty(0, np.int64)]),
                  np.concatenate([c.fn for c in counts] or [np.empty(0, np.int64)]))


def _states(counts: Counts) -> dict[str, dict[int, tuple[float, float]]]:
    """The panoptic family's states' final forms: per category (IoU sum, TP) and (FP, FN)."""
    matches: dict[int, tuple[float, float]] = {}
    categories, starts = np.unique(counts.tp[:, 0], return_index=True)
    ends = np.r_[starts[1:], len(counts.tp)]
    ratios = (counts.tp[:, 1] / counts.tp[:, 2]).tolist()
    for c, a, b in zip(categories.tolist(), starts.tolist(), ends.tolist(), strict=True):
        matches[int(c)] = (math.fsum(ratios[a:b]), float(b - a))
    errors: dict[int, tuple[float, float]] = {}
    for c in np.union1d(counts.fp, counts.fn).tolist():
        errors[int(c)] = (float(np.count_nonzero(counts.fp == c)),
                          float(np.count_nonzero(counts.fn == c)))
    return {panoptic.MATCHES.name: matches, panoptic.ERRORS.name: errors}


def pq_report(gt: PanopticFile, counts: Counts, missing: list[str]) -> Report:
    """The report of the folded counts: the nine metrics and one row per GT category."""
    states = _states(counts)
    finals = Finals(lambda name: {}, state=states.get)
    ctx = Context(ks=(), things=frozenset(c for c, v in gt.categories.items() if v.isthing))
    metrics = panoptic.derive(finals, ctx)
    found = {row["category"]: row for row in panoptic.category_rows(finals, ctx)}
    blank = {"PQ": None, "SQ": None, "RQ": None, "TP": 0, "FP": 0, "FN": 0}
    rows = [{"category": c, "name": v.name, "isthing": v.isthing,
             **{k: found.get(c, blank)[k] for k in blank}}
            for c, v in sorted(gt.categories.items())]
    notes = [f"{len(missing)} GT image(s) have no prediction: their segments are false "
             "negatives (panopticapi stops at such an image)"] if missing else []
    per_image = [{"image_id": i, "missing": i in set(missing)} for i in gt.images]
    return Report(PROTOCOL, "per_category", [], metrics, [], per_image,
                  {"evaluated_images": len(gt.images), "images_missing": len(missing)},
                  notes=notes, per_category=rows)


def evaluate_pq(gt_json: str, gt_masks: str, pred_json: str, pred_masks: str, client: Any,
                options: StorageOptions | None = None, limits: ArchiveLimits | None = None,
                chunk: int = CHUNK) -> Report:
    """Panoptic quality of COCO panoptic predictions against a COCO panoptic GT, one Dask
    task per ``chunk`` images on ``client``."""
    gt = read_panoptic_json(gt_json, options, gt=True)
    pred = read_panoptic_json(pred_json, options, gt=False, known=gt.categories)
    pairs = [(g, pred.images.get(i)) for i, g in gt.images.items()]
    missing = [g.image_id for g, p in pairs if p is None]
    chunks = [Chunk(tuple(pairs[a:a + chunk]), gt_masks, pred_masks, limits)
              for a in range(0, len(pairs), chunk)]
    futures = client.map(chunk_counts, chunks, options=options, pure=False)
    return pq_report(gt, folded(client.gather(futures)), missing)
