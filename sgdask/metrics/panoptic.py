"""Panoptic quality (SPEC section 6): ``PQ``, ``SQ``, ``RQ`` over every category, the thing
categories (``PQ_th``, ``SQ_th``, ``RQ_th``) and the stuff ones (``PQ_st``...), as COCO
panopticapi's ``pq_compute`` prints them.

Per category c, over the evaluated images (``sgdask.kernels.panoptic`` counts each one;
an image without prediction adds its GT segments as false negatives):

- ``PQ_c = Σ IoU(TP) / (TP + FP/2 + FN/2)``, ``SQ_c = Σ IoU(TP) / TP`` (0 without a true
  positive), ``RQ_c = TP / (TP + FP/2 + FN/2)``;
- ``PQ``, ``SQ``, ``RQ``: the means of ``PQ_c``, ``SQ_c``, ``RQ_c`` over the categories
  with ``TP + FP + FN > 0`` (``_th``: those that are things, ``_st``: stuff).

The state is exact and partition-invariant: ``pq_matches`` (``Ratios``) holds one integer
row (intersection, union) per true positive, keyed by category, whose IoU sum is taken at
finalize with ``math.fsum`` (the same bits for any partitioning); ``pq_errors``
(``Counts``) holds per image and category its false positives and false negatives. Both
are resampled, so the bootstrap intervals and ``compare``'s paired tests cover PQ.

The means are computed with panopticapi's float operations in its order (``pq_average``:
per category in ascending id, summed in that order, divided by the count); only the IoU
sum is rounded once where panopticapi adds image by image, so the two agree to a few ulps.
PQ does not depend on the protocol (a submission whose masks overlap is scored on its
singlempo merge, every protocol alike).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sgdask.metrics.base import (
    DERIVED,
    Context,
    Family,
    FinalColumns,
    Finals,
    HitsBatch,
    Metric,
    Terms,
)
from sgdask.metrics.state import Counts, Ratios, StateRows
from sgdask.types import ImageHits, PanopticHits

MATCHES = Ratios("pq_matches")  # per true positive: (intersection, union), by category
ERRORS = Counts("pq_errors")  # per image and category: (false positives, false negatives)
GROUPS = (("", "the categories"), ("_th", "the thing categories"),
          ("_st", "the stuff categories"))
QUALITIES = (("PQ", "panoptic quality: per category sum of true positives' IoU / (TP + FP/2 "
              "+ FN/2)"),
             ("SQ", "segmentation quality: per category mean IoU of the true positives"),
             ("RQ", "recognition quality: per category TP / (TP + FP/2 + FN/2)"))
METRICS = tuple(
    Metric(name + suffix, DERIVED, f"{what}, mean over {group} with a segment (COCO "
           "panopticapi)", per_k=False, needs=("masks", "crowd") + (("things",) if suffix
                                                                 else ()),
           empty_reason=f"none of {group} has a GT segment or a counted prediction")
    for suffix, group in GROUPS for name, what in QUALITIES)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    """The image's true positives and per-category false positives and negatives."""
    if hits.panoptic is None:
        return Terms()
    return Terms(states=[state[0] for state in _image_states([hits.panoptic])])


def batch_terms(batch: HitsBatch, ctx: Context) -> list[StateRows]:
    return [rows for state in _image_states(batch.panoptic) for rows in state]


def _image_states(images: list[PanopticHits | None]) -> list[list[StateRows]]:
    """The two states' rows of images (numbered by their position), each as a list of one
    StateRows (none without an image that has counts)."""
    found = [(i, p) for i, p in enumerate(images) if p is not None]
    if not found:
        return []
    tp_image = np.concatenate([np.full(len(p.tp_category), i) for i, p in found])
    matches = MATCHES.rows(np.concatenate([p.tp_category for _, p in found]),
                           np.stack([np.concatenate([p.tp_intersection for _, p in found]),
                                     np.concatenate([p.tp_union for _, p in found])], 1),
                           tp_image)
    image = np.concatenate([np.full(len(p.fp_category) + len(p.fn_category), i)
                            for i, p in found]).astype(np.int64)
    category = np.concatenate([np.concatenate([p.fp_category, p.fn_category]) for _, p in found])
    is_fp = np.concatenate([np.arange(len(p.fp_category) + len(p.fn_category))
                            < len(p.fp_category) for _, p in found])
    top = int(category.max(initial=0)) + 1
    cells, cell = np.unique(image * top + category, return_inverse=True)
    cell = cell.reshape(-1)
    errors = ERRORS.rows(cells % top, np.stack([
        np.bincount(cell, weights=is_fp.astype(np.float64), minlength=len(cells)),
        np.bincount(cell, weights=(~is_fp).astype(np.float64), minlength=len(cells))], 1),
        cells // top)
    return [[matches], [errors]]


def _category_qualities(iou: np.ndarray, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray
                       ) -> tuple[np.ndarray, ...]:
    """Per category (rows, ascending id) and weighting (columns): whether it counts
    (TP + FP + FN > 0), PQ_c, SQ_c, RQ_c, with panopticapi's float operations."""
    present = tp + fp + fn > 0
    denominator = np.where(present, tp + 0.5 * fp + 0.5 * fn, 1.0)
    sq = np.divide(iou, tp, out=np.zeros_like(iou), where=tp != 0)
    return present, iou / denominator, sq, tp / denominator


def _qualities(ids: np.ndarray, iou: np.ndarray, tp: np.ndarray, fp: np.ndarray,
              fn: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
    """Every metric's value per weighting (NaN: no category of its group counts) from the
    per-category sums (categories x weightings, ascending id)."""
    present, pq, sq, rq = _category_qualities(iou, tp, fp, fn)
    out: dict[str, np.ndarray] = {}
    for suffix, _ in GROUPS:
        if suffix and ctx.things is None:
            continue
        things = np.isin(ids, sorted(ctx.things or ()))[:, None]
        chosen = present & {"": True, "_th": things, "_st": ~things}[suffix]
        n = chosen.sum(axis=0)
        for (name, _), values in zip(QUALITIES, (pq, sq, rq), strict=True):
            # added in category order, as panopticapi's loop adds (0.0 changes no sum)
            total = np.add.accumulate(np.where(chosen, values, 0.0), axis=0)[-1] if len(ids) \
                else np.zeros(present.shape[1])
            out[name + suffix] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return out


def _sums_of(finals: Finals) -> tuple[np.ndarray, ...] | None:
    """(ids, IoU sum, TP, FP, FN) per category (one column) from the finals."""
    matches, errors = finals.state(MATCHES.name) or {}, finals.state(ERRORS.name) or {}
    ids = np.array(sorted(set(matches) | set(errors)), dtype=np.int64)
    if not len(ids):
        return None
    none = (0.0, 0.0)
    iou = [float(matches[c][0]) if c in matches else 0.0 for c in ids.tolist()]
    tp = [float(matches[c][1]) if c in matches else 0.0 for c in ids.tolist()]
    fp = [float(errors.get(c, none)[0]) for c in ids.tolist()]
    fn = [float(errors.get(c, none)[1]) for c in ids.tolist()]
    return ids, *(np.array(v, dtype=np.float64).reshape(-1, 1) for v in (iou, tp, fp, fn))


def derive(finals: Finals, ctx: Context) -> dict[str, float]:
    sums = _sums_of(finals)
    if sums is None:
        return {}
    values = _qualities(*sums, ctx)
    return {name: float(v[0]) for name, v in values.items() if np.isfinite(v[0])}


def derive_columns(columns: FinalColumns, ctx: Context) -> dict[str, np.ndarray]:
    """``derive`` for every weighting at once: the same operations on columns."""
    matches, errors = columns.state(MATCHES.name), columns.state(ERRORS.name)
    found = [s for s in (matches, errors) if s is not None]
    if not found:
        return {}
    ids = np.unique(np.concatenate([s[0] for s in found])).astype(np.int64)
    width = found[0][1].shape[1]

    def spread(state: tuple | None, column: int) -> np.ndarray:
        out = np.zeros((len(ids), width))
        if state is not None:
            out[np.searchsorted(ids, state[0])] = state[column]
        return out

    return _qualities(ids, spread(matches, 1), spread(matches, 2), spread(errors, 1),
                     spread(errors, 2), ctx)


def category_rows(finals: Finals, ctx: Context) -> list[dict[str, Any]]:
    """Per category with a segment or a prediction: PQ, SQ, RQ (None when it does not
    count) and its TP, FP, FN."""
    sums = _sums_of(finals)
    if sums is None:
        return []
    ids, iou, tp, fp, fn = sums
    present, pq, sq, rq = _category_qualities(iou, tp, fp, fn)
    return [{"category": int(c), "PQ": float(pq[j, 0]) if present[j, 0] else None,
             "SQ": float(sq[j, 0]) if present[j, 0] else None,
             "RQ": float(rq[j, 0]) if present[j, 0] else None,
             "TP": int(tp[j, 0]), "FP": int(fp[j, 0]), "FN": int(fn[j, 0])}
            for j, c in enumerate(ids.tolist())]


def notes(diagnostics: dict[str, int]) -> list[str]:
    """The images whose predicted masks overlap: scored on their singlempo merge."""
    overlapping = diagnostics.get("masks_overlap", 0)
    if not overlapping:
        return []
    return [f"the predicted masks of {overlapping} image(s) overlap: panoptic quality (PQ, "
            "SQ, RQ) scores their singlempo merge (docs: Metrics and protocols, singlempo), one "
            "segment per pixel"]


FAMILY = Family("panoptic", METRICS, image_terms, batch_terms, derive, derive_columns,
                states=(MATCHES, ERRORS), category_rows=category_rows, notes=notes)
