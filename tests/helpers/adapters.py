"""The one place where the literal-reference tests touch sgdask's internal API.

tests/literal/spec.py (the reference) and tests/helpers/scenes.py (random inputs) know nothing of
sgdask. Everything here turns their inputs into sgdask's and sgdask's outputs back into
the literal format, so that when the kernels, the accumulator or the report change shape,
only this file changes. The functions the tests use:

- ``score_image(image, protocol, ks, ...) -> Scored``: one image through sgdask's
  per-image kernels; ``Scored.terms`` is a ``literal.ImageTerms``.
- ``report_view(scored, protocol, aggregation, ks, ...) -> DatasetView``: the images
  through sgdask's accumulators (merged in the given groups) and report.
- ``exact_snapshot(groups) -> dict``: every exact final number of the accumulators of
  ``groups`` merged in that order (partition invariance; one group: no merge at all).
- ``pipeline_views(root, images, ...) -> {(protocol, aggregation): DatasetView}``: the
  images written as psg.json + panoptic PNGs + an SGBench ZIP, ingested, converted and
  evaluated by the real Dask pipeline.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from PIL import Image as PILImage

from sgdask.core.accum import Accumulator
from sgdask.core.finalize import build_report
from sgdask.core.plan import EvalSettings
from sgdask.core.result import image_diagnostics, image_rows
from sgdask.core.settings import Settings
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.kernels.selection import parse_ks
from sgdask.metrics.base import Context
from sgdask.metrics.groups import PredicateGroups, default_groups
from sgdask.metrics.terms import batch_blocks, image_result, inputs_of, with_zero_shot
from sgdask.pipeline import evaluate_protocols
from sgdask.protocols import Protocol, get_protocol, image_hits, missing_image_hits
from sgdask.report import Report
from sgdask.store.training_stats import (
    composition_counts,
    predicate_counts,
    train_stats,
    zero_shot_from,
)
from sgdask.types import ImageGT, ImageHits, ImagePred, ImageResult, ZeroShot, as_triplets
from tests.helpers.builders import snapshot
from tests.helpers.scenes import Image
from tests.literal.spec import GT, ImageTerms, Pred, Training


@dataclass
class Scored:
    """One image as sgdask scored it: its hits (what the fast path aggregates), its terms
    by the plain path, and those terms in the literal format."""

    hits: ImageHits
    protocol: Protocol
    ks: str
    inputs: set[str]
    native: ImageResult
    terms: ImageTerms


@dataclass
class DatasetView:
    """A report in the literal format: floats where the report has floats."""

    metrics: dict[str, float]
    per_predicate: dict[int, dict[str, Any]]
    diagnostics: dict[str, int]
    per_image: dict[str, dict[str, Any]]
    notes: list[str]
    groups: dict[int, str | None] = field(default_factory=dict)  # the `group` column


# --------------------------------------------------------------------------- inputs


def ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def sgdask_gt(gt: GT) -> ImageGT:
    boxes = None if gt.boxes is None else np.asarray(gt.boxes, dtype=np.float64).reshape(-1, 4)
    label = None if gt.label_image is None else np.asarray(gt.label_image, dtype=np.int64)
    crowd = None if label is None else np.asarray(gt.crowd or [False] * len(gt.categories),
                                                  dtype=bool)
    return ImageGT(gt.image_id, ints(gt.categories), as_triplets(gt.relations), boxes=boxes,
                   label_image=label, crowd=crowd)


def data_of(image: Image) -> frozenset[str]:
    """What an image holds beyond lists (``inputs_of``): masks and crowd flags with a GT
    label image and predicted masks (or no prediction)."""
    masks = image.gt.label_image is not None and (image.pred is None
                                                  or image.pred.masks is not None)
    return frozenset({"masks", "crowd"}) if masks else frozenset()


def sgdask_pred(image_id: str, pred: Pred) -> ImagePred:
    boxes = (None if pred.boxes is None
             else np.asarray(pred.boxes, dtype=np.float64).reshape(-1, 4))
    masks = None if pred.masks is None else np.asarray(pred.masks, dtype=bool)
    scores = None if pred.scores is None else np.asarray(pred.scores, dtype=np.float64)
    return ImagePred(image_id, ints(pred.categories), as_triplets(pred.graph),
                     as_triplets(pred.ng), boxes=boxes, masks=masks, scores=scores)


def training_doc(training: Training) -> dict[str, Any]:
    """The training split as psg.json entries (only what the statistics read)."""
    ids = [f"train{i}" for i in range(len(training.images))]
    return {"train_image_ids": ids, "data": [
        {"image_id": i, "segments_info": [{"id": j + 1, "category_id": c}
                                          for j, c in enumerate(cats)],
         "relations": [list(t) for t in relations]}
        for i, (cats, relations) in zip(ids, training.images, strict=True)]}


def zero_shot_of(training: Training | None, n_classes: int, n_predicates: int
                 ) -> tuple[ZeroShot | None, dict[int, int] | None]:
    """sgdask's zero-shot look-up and wIMR composition, from the training split."""
    if training is None:
        return None, None
    table = train_stats(training_doc(training), "train.json")
    return zero_shot_from(table, n_classes, n_predicates), composition_counts(table)


def groups_of(training: Training | None, n_predicates: int) -> PredicateGroups | None:
    """sgdask's default predicate groups of the literal vocabulary (``manifest``: not
    VG150), from the training split."""
    if training is None:
        return None
    counts = predicate_counts(train_stats(training_doc(training), "train.json"))
    return default_groups(manifest(n_predicates)["predicate_classes"], counts)


# --------------------------------------------------------------------------- per image


def terms_of(result: ImageResult) -> ImageTerms:
    """sgdask's per-image result in the literal format (metrics without terms dropped;
    panoptic quality's state rows as per-category lists)."""
    states = {rows.name: rows for rows in result.states}
    matches: dict[int, list[tuple[int, int]]] = {}
    if "pq_matches" in states:
        rows = states["pq_matches"]
        for key, (num, den) in zip(rows.keys.tolist(), rows.values.tolist(), strict=True):
            matches.setdefault(key, []).append((int(num), int(den)))
    errors = {}
    if "pq_errors" in states:
        rows = states["pq_errors"]
        errors = {key: (int(fp), int(fn)) for key, (fp, fn) in
                  zip(rows.keys.tolist(), rows.values.tolist(), strict=True)}
    return ImageTerms(
        image_id=result.image_id, missing=result.missing,
        n_gt_triplets=result.n_gt_triplets, gt_per_predicate=dict(result.gt_per_predicate),
        scalars={k: (int(n), int(d)) for k, (n, d) in result.image_terms.items()},
        per_predicate={k: {int(p): (int(n), int(d)) for p, (n, d) in v.items()}
                       for k, v in result.predicate_terms.items() if v},
        pooled={k: (int(n), int(d)) for k, (n, d) in result.ratio_terms.items()},
        diagnostics={k: int(v) for k, v in result.diagnostics.items()},
        pq_matches={c: sorted(v) for c, v in matches.items()}, pq_errors=errors)


def score_image(image: Image, protocol: str, ks: Sequence[str], *, with_ng: bool = True,
                training: Training | None = None, legacy: bool = False,
                n_classes: int = 64, n_predicates: int = 64) -> Scored:
    """One image (prediction None: missing) through sgdask's per-image kernels, its terms
    by every metric family's plain function."""
    proto, kspecs = get_protocol(protocol), parse_ks(list(ks))
    zero_shot, _ = zero_shot_of(training, n_classes, n_predicates)
    gt = sgdask_gt(image.gt)
    if image.pred is None:
        hits = missing_image_hits(gt, proto, with_ng)
    else:
        hits = image_hits(gt, sgdask_pred(image.gt.image_id, image.pred), proto, with_ng)
    hits = with_zero_shot(hits, zero_shot)
    inputs = inputs_of(proto, with_ng, zero_shot is not None, legacy, data_of(image))
    result = image_result(hits, Context(kspecs), proto, inputs)
    return Scored(hits, proto, ",".join(ks), inputs, result, terms_of(result))


# --------------------------------------------------------------------------- datasets


def manifest(n_predicates: int) -> dict[str, Any]:
    return {"predicate_classes": [f"p{i}" for i in range(n_predicates)],
            "content_hash": "literal", "source": "literal"}


def view_of(report: Report) -> DatasetView:
    table, groups = {}, {}
    for row in report.per_predicate:
        row = dict(row)
        p = row.pop("predicate")
        row.pop("name")
        if "group" in row:
            groups[p] = row.pop("group")
        table[p] = row
    return DatasetView(dict(report.metrics), table, dict(report.diagnostics),
                       {row["image_id"]: row for row in report.per_image}, list(report.notes),
                       groups)


def accumulated(groups: Sequence[Sequence[Scored]]) -> Accumulator:
    """One accumulator per group (its images' terms by the fast, vectorized path, as the
    pipeline adds a partition), merged in the order of the groups; a single group is never
    merged (the reference of partition tests)."""
    parts = []
    for group in groups:
        acc = Accumulator()
        if group:
            first = group[0]
            hits = [s.hits for s in group]
            acc.add_blocks(batch_blocks(hits, Context(parse_ks(first.ks)), first.protocol,
                                        first.inputs))
            acc.add_counts(np.concatenate([h.predicates for h in hits]),
                           image_diagnostics(hits))
        parts.append(acc)
    total = parts[0]
    for acc in parts[1:]:
        total = total.merged(acc)
    return total


def report_view(scored: Sequence[Scored], protocol: str, aggregation: str, ks: Sequence[str],
                *, with_ng: bool = True, training: Training | None = None,
                legacy: bool = False, tau: float = 0.5, n_predicates: int = 64,
                groups: Sequence[Sequence[int]] | None = None) -> DatasetView:
    """The images through sgdask's accumulators (``groups``: index lists, one accumulator
    each, merged in order; default one group) and its report."""
    parts = [[scored[i] for i in g] for g in groups] if groups else [list(scored)]
    _, composition = zero_shot_of(training, 64, n_predicates)
    settings = EvalSettings(get_protocol(protocol),
                            Settings(ks=",".join(ks), aggregation=aggregation, legacy=legacy,
                                     tau=tau), with_ng, training is not None,
                            groups_of(training, n_predicates),
                            frozenset(scored[0].inputs & {"masks", "crowd"}))
    hits = [s.hits for s in scored]
    rows = image_rows(hits, batch_blocks(hits, Context(parse_ks(list(ks))),
                                         get_protocol(protocol), scored[0].inputs))
    report = build_report(accumulated(parts), rows, settings, composition,
                          manifest(n_predicates), manifest(n_predicates), {})
    return view_of(report)


def exact_snapshot(groups: Sequence[Sequence[Scored]]) -> dict:
    """Every exact final number (Fractions) of the groups' accumulators merged in order."""
    return snapshot(accumulated(groups))


# --------------------------------------------------------------------------- files + pipeline


def panoptic_png(label: np.ndarray) -> bytes:
    """Label image -> COCO panoptic PNG with segment id = index + 1 (R channel)."""
    rgb = np.zeros((*label.shape, 3), dtype=np.uint8)
    rgb[..., 0] = label
    buffer = io.BytesIO()
    PILImage.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def tiff_bytes(masks: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, masks.astype(np.uint8), compression="deflate",
                     photometric="minisblack")
    return buffer.getvalue()


def tight_box(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    if not len(ys):
        return [0.0, 0.0, 0.0, 0.0]
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


def write_files(root: Path, images: Sequence[Image], training: Training | None,
                n_categories: int, n_predicates: int, without_relations: int = 1
                ) -> tuple[Path, Path, Path]:
    """psg.json (+ ``without_relations`` extra test images without relations), panoptic
    PNGs and an SGBench ZIP (masks; images without prediction left out). Every predicted
    image needs at least one instance (a TIFF has at least one layer)."""
    masks_dir = root / "panoptic"
    masks_dir.mkdir(parents=True)
    data, submitted = [], []
    extra = [Image(GT(f"zzz{i}", im.gt.categories, [], label_image=im.gt.label_image), None)
             for i, im in enumerate(images[:without_relations])]
    with zipfile.ZipFile(root / "submission.zip", "w") as archive:
        for im in [*images, *extra]:
            gt, pred = im.gt, im.pred
            h, w = gt.label_image.shape
            (masks_dir / f"{gt.image_id}.png").write_bytes(panoptic_png(gt.label_image))
            data.append({"image_id": gt.image_id, "height": h, "width": w,
                         "pan_seg_file_name": f"{gt.image_id}.png",
                         "segments_info": [{"id": g + 1, "category_id": c}
                                           for g, c in enumerate(gt.categories)],
                         "relations": [list(t) for t in gt.relations]})
            if pred is None:
                continue
            archive.writestr(f"{gt.image_id}.tiff", tiff_bytes(pred.masks))
            scores = pred.scores or [None] * len(pred.categories)
            submitted.append({
                "id": gt.image_id, "seg_filename": f"{gt.image_id}.tiff",
                "triplets": [list(t) for t in pred.graph],
                "ng_triplets": [list(t) for t in pred.ng],
                "annotation": [{"bbox": tight_box(m), "category": c,
                                **({} if s is None else {"score": s})}
                               for m, c, s in zip(pred.masks, pred.categories, scores,
                                                  strict=True)]})
        archive.writestr("triplets.json", json.dumps({"version": 1, "images": submitted}))
    train = training_doc(training) if training is not None else {"train_image_ids": [],
                                                                    "data": []}
    psg = {"thing_classes": [f"c{i}" for i in range(n_categories)], "stuff_classes": [],
           "predicate_classes": [f"p{i}" for i in range(n_predicates)],
           "test_image_ids": [d["image_id"] for d in data],
           "train_image_ids": train["train_image_ids"], "data": data + train["data"]}
    (root / "psg.json").write_text(json.dumps(psg))
    return root / "psg.json", masks_dir, root / "submission.zip"


def pipeline_views(root: Path, images: Sequence[Image], protocols: Sequence[str],
                   ks: Sequence[str], aggregations: Sequence[str], client, *,
                   training: Training | None, n_categories: int, n_predicates: int,
                   legacy: bool = True, store_partition: int = 3
                   ) -> dict[tuple[str, str], DatasetView]:
    """The images as files -> GT and submission stores -> the Dask pipeline on ``client``,
    once per aggregation mode (every protocol in one pass)."""
    psg, masks_dir, archive = write_files(root, images, training, n_categories, n_predicates)
    gt, pred = str(root / "gt.store"), str(root / "pred.store")
    ingest_gt(str(psg), gt, str(masks_dir), partition_size=store_partition)
    convert_submission(str(archive), pred, gt, partition_size=store_partition)
    views = {}
    for aggregation in aggregations:
        reports = evaluate_protocols(gt, pred, ",".join(protocols), ks=",".join(ks),
                                     aggregation=aggregation, client=client, legacy=legacy)
        for name, report in reports.items():
            views[(name, aggregation)] = view_of(report)
    return views
