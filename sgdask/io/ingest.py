"""Conversion of source formats into canonical stores: ``ingest_gt`` and ``convert_submission``.

Both validate everything before the manifest is written; any error removes the partial store.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from sgdask import __version__
from sgdask.cluster import ClusterSpec, map_tasks
from sgdask.errors import InputError, SgdaskError, StoreError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.psg import GTRecord, class_lists, evaluation_records, label_image
from sgdask.io.results import ResultEntry, ResultSource, loaded_pickle
from sgdask.io.scores import load_score_lists
from sgdask.io.sgbench import ClassCounts, SubmissionImage, SubmissionSource, load_json
from sgdask.io.stats import STATS_FILE, train_stats, write_stats
from sgdask.io.store import (
    PartTables,
    StoreReader,
    StoreWriter,
    instance_rows,
    part_name,
    triplet_rows,
    write_part,
)
from sgdask.io.validate import GTInfo, checked_submission
from sgdask.kernels.masks import CropMasks
from sgdask.kernels.scores import DerivedLists
from sgdask.types import EMPTY_TRIPLETS

DEFAULT_STORE_PARTITION = 64
Item = TypeVar("Item", SubmissionImage, ResultEntry)
#: GT stores: the test image ids in psg.json's ``data`` order (model result files are
#: paired with the GT images in that order)
IMAGE_ORDER_FILE = "image_order.json"
Progress = Callable[[int], None] | None


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def read_bytes(url: str, options: StorageOptions | None, what: str) -> bytes:
    fs, path = filesystem(url, options)
    try:
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(url, "file not found", field=what) from None
    except OSError as err:
        raise SgdaskError(f"{url}: cannot read ({type(err).__name__}: {err})") from None


def ingest_gt(psg_json: str, out: str, masks_dir: str | None = None,
              storage_options: StorageOptions | None = None,
              partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None) -> dict[str, Any]:
    """psg.json (+ panoptic PNGs) -> GT store of the test split. Returns the manifest.

    One task per part of ``partition_size`` images (on ``cluster`` when given).
    """
    raw = read_bytes(psg_json, storage_options, "psg.json")
    doc = load_json(raw, psg_json)
    names = class_lists(doc, psg_json)
    in_data_order = evaluation_records(doc, psg_json, masks=masks_dir is not None)
    records = sorted(in_data_order, key=lambda r: r.image_id)
    if not records:
        raise InputError(psg_json, "no test images", field="test_image_ids")
    stats = train_stats(doc, psg_json)
    with StoreWriter(out, "gt", storage_options, overwrite) as writer:
        write_image_order(out, storage_options, [r.image_id for r in in_data_order])
        tasks = [(out, storage_options, i, part, masks_dir)
                 for i, part in enumerate(chunks(records, partition_size))]
        done = map_tasks(write_gt_part, tasks, cluster,
                         (lambda r: progress(r[0]["n_images"])) if progress else None)
        if len(stats):
            write_stats(stats, join(out, STATS_FILE), storage_options)
        digest = hashlib.sha256(raw)
        for _, png_digests in done:
            for d in png_digests:
                digest.update(d)
        return writer.finish(
            [info for info, _ in done],
            train_stats=STATS_FILE if len(stats) else None, image_order=IMAGE_ORDER_FILE,
            sgdask_version=__version__, content_hash="sha256:" + digest.hexdigest(),
            source=str(psg_json), instances="masks" if masks_dir else "boxes",
            n_images=len(records), partition_size=partition_size, **names)


def write_image_order(out: str, options: StorageOptions | None, ids: list[str]) -> None:
    """The GT store's ``image_order.json``: every test image id in psg.json's order."""
    fs, path = filesystem(out, options)
    with fs.open(join(path, IMAGE_ORDER_FILE), "w") as f:
        json.dump({"image_ids": ids}, f)


def evaluated_order(gt: StoreReader, gt_info: GTInfo) -> list[str]:
    """The GT's test images with relations, in psg.json's ``data`` order."""
    name = gt.manifest.get("image_order")
    if not name:
        raise StoreError(f"{gt.url}: the GT store does not record psg.json's image order, "
                         "which result files are paired by (written by an older sgdask: "
                         "run sgdask ingest-gt again)")
    try:
        with gt.fs.open(join(gt.path, name), "r") as f:
            ids = json.load(f)["image_ids"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{gt.url}/{name}: unreadable ({type(err).__name__}: {err})") from None
    return [i for i in ids if i in gt_info.evaluated]


def write_gt_part(out: str, options: StorageOptions | None, index: int,
                  records: list[GTRecord], masks_dir: str | None
                  ) -> tuple[dict[str, Any], list[bytes]]:
    """One GT part (a Dask task): reads its PNGs, writes tables and label images.

    Returns the part's manifest entry and the SHA-256 digest of each PNG, in order.
    """
    tables = PartTables.empty()
    digests = []
    for record in records:
        offset, areas = None, None
        if masks_dir is not None:
            png_url = join(masks_dir, record.pan_seg_file_name or "")
            png = read_bytes(png_url, options, "pan_seg_file_name")
            digests.append(hashlib.sha256(png).digest())
            labels = label_image(png, record, png_url).reshape(-1)
            offset = tables.add_masks(labels)
            areas = np.bincount(labels, minlength=len(record.categories) + 1)[1:]
        add_gt_rows(tables, record, part_name(index), offset, areas)
    return write_part(out, options, index, tables), digests


def add_gt_rows(tables: PartTables, record: GTRecord, part: str, offset: int | None,
                areas: np.ndarray | None) -> None:
    relations = record.relations
    cols = tables.images
    for name, value in (("image_id", record.image_id), ("height", record.height),
                        ("width", record.width), ("n_instances", len(record.categories)),
                        ("n_graph", len(relations)), ("n_ng", 0),
                        ("mask_array", None if offset is None else part),
                        ("mask_offset", offset), ("source_file", record.pan_seg_file_name)):
        cols[name].append(value)
    instance_rows(tables, record.image_id, record.categories, record.boxes, None,
                  areas=areas)
    triplet_rows(tables, record.image_id, "gt", relations, None)


def submission_parts(images: list[Item], gt: StoreReader | None,
                     partition_size: int) -> list[list[Item]]:
    """Images (anything with an ``image_id``, sorted by it) cut like the GT's parts when a
    GT is given, so that an evaluation task reads one GT part and one submission part; else
    by ``partition_size``."""
    if gt is None:
        return list(chunks(images, partition_size))
    starts = [p["first_id"] for p in gt.parts]
    groups: dict[int, list[Item]] = {}
    for img in images:
        groups.setdefault(max(bisect.bisect_right(starts, img.image_id) - 1, 0), []).append(img)
    return [groups[k] for k in sorted(groups)]


def convert_submission(submission: str, out: str, gt: str | None = None,
                       storage_options: StorageOptions | None = None,
                       partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
                       progress: Progress = None, cluster: ClusterSpec = None,
                       limits: ArchiveLimits | None = None, from_scores: str | None = None
                       ) -> dict[str, Any]:
    """SGBench submission (JSON or ZIP) -> submission store. Returns the manifest.

    With ``from_scores``, the triplet lists are derived from per-pair predicate score
    vectors (``schemas/scores.md``) instead of taken from the submission.

    The archive, the document and every image are checked first (``sgdask validate``'s
    checks, the first error raised); then one task per part reads its TIFFs (ranged reads
    from the ZIP, wherever it is; each TIFF checked before it is decoded) and writes its
    files. ``limits`` bound what the archive, its JSON and its TIFFs may hold.
    """
    source = SubmissionSource(submission, storage_options, limits)
    gt_reader = StoreReader(gt, storage_options, "gt") if gt else None
    gt_info = GTInfo.of(gt_reader) if gt_reader else None
    check = checked_submission(source, gt_info)
    images = sorted(check.images, key=lambda i: i.image_id)
    has_ng = check.has_ng
    if from_scores:
        images = lists_from_scores(images, load_score_lists(from_scores, storage_options),
                                   from_scores)
        has_ng = True
    sizes = gt_info.sizes if gt_info else {}
    parts = submission_parts(images, gt_reader, partition_size)
    with StoreWriter(out, "submission", storage_options, overwrite) as writer:
        tasks = [(submission, out, storage_options, i, part,
                  {img.image_id: sizes[img.image_id] for img in part if img.image_id in sizes},
                  limits)
                 for i, part in enumerate(parts)]
        infos = map_tasks(write_submission_part, tasks, cluster,
                          (lambda info: progress(info["n_images"])) if progress else None)
        return writer.finish(
            infos, sgdask_version=__version__, content_hash=source.content_hash(),
            source=str(submission), instances="masks" if source.is_zip else "boxes",
            has_ng=has_ng, n_images=len(images), partition_size=partition_size,
            triplets_from=from_scores)


def lists_from_scores(images: list[SubmissionImage], lists: dict[str, DerivedLists],
                      url: str) -> list[SubmissionImage]:
    """Images with graph and NG lists replaced by the ones derived from score vectors.

    An image without score rows gets empty lists; score rows of an image the submission
    lacks, or naming an instance it does not have, are errors.
    """
    by_id = {img.image_id: img for img in images}
    for image_id, derived in lists.items():
        img = by_id.get(image_id)
        if img is None:
            raise InputError(url, "no such image in the submission", image=image_id,
                             field="image_id")
        n = len(img.categories)
        for triplets in (derived.graph, derived.ng):
            if len(triplets) and triplets[:, :2].max() >= n:
                raise InputError(url, f"instance index {int(triplets[:, :2].max())} out of "
                                 "range", image=image_id, field="subject/object",
                                 expected=f"indices in 0..{n - 1}")
    empty = DerivedLists(EMPTY_TRIPLETS, np.empty(0), EMPTY_TRIPLETS, np.empty(0))
    return [replace(img, graph=d.graph, graph_scores=d.graph_scores, ng=d.ng)
            for img in images for d in [lists.get(img.image_id, empty)]]


def write_submission_part(submission: str, out: str, options: StorageOptions | None,
                          index: int, images: list[SubmissionImage],
                          sizes: dict[str, tuple[int, int]],
                          limits: ArchiveLimits | None = None) -> dict[str, Any]:
    """One submission part (a Dask task): decodes its TIFFs (each checked against its
    image's instance count and GT size first), writes tables and mask crops."""
    source = SubmissionSource(submission, options, limits)
    tables = PartTables.empty()
    for img in images:
        shape, crops = (0, 0), None
        if source.is_zip:
            masks = source.masks(img, sizes.get(img.image_id))
            shape = masks.shape[1:]
            crops = CropMasks.from_dense(masks)
        add_submission_rows(tables, img, shape, part_name(index), crops)
    return write_part(out, options, index, tables)


def add_submission_rows(tables: PartTables, img: SubmissionImage, shape: tuple, part: str,
                        crops: CropMasks | None) -> None:
    cols = tables.images
    for name, value in (("image_id", img.image_id), ("height", int(shape[0])),
                        ("width", int(shape[1])), ("n_instances", len(img.categories)),
                        ("n_graph", len(img.graph)), ("n_ng", len(img.ng)),
                        ("mask_array", None if crops is None else part), ("mask_offset", None),
                        ("source_file", img.seg_filename)):
        cols[name].append(value)
    instance_rows(tables, img.image_id, img.categories, img.boxes, img.scores, crops)
    triplet_rows(tables, img.image_id, "graph", img.graph, img.graph_scores)
    triplet_rows(tables, img.image_id, "ng", img.ng, None)


def convert_results(results: str, out: str, gt: str, method: str,
                    storage_options: StorageOptions | None = None,
                    partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
                    progress: Progress = None, cluster: ClusterSpec = None,
                    limits: ArchiveLimits | None = None, instance_scores: bool = False
                    ) -> dict[str, Any]:
    """OpenPSG-family result file or directory -> submission store (``convert --method``).

    Results are paired with the GT's test images that have relations, in psg.json's order;
    each part's task decodes its images' masks straight into crops (no TIFF) and derives
    the lists by ``method``'s rules (``schemas/results.md``). A problem in any image fails
    the whole conversion, after every task has finished, so no store is left behind.
    """
    gt_reader = StoreReader(gt, storage_options, "gt")
    gt_info = GTInfo.of(gt_reader)
    source = ResultSource(results, method, storage_options, limits, instance_scores)
    entries = source.images(evaluated_order(gt_reader, gt_info))
    parts = submission_parts(sorted(entries, key=lambda e: e.image_id), gt_reader,
                             partition_size)
    try:
        with StoreWriter(out, "submission", storage_options, overwrite) as writer:
            tasks = [(results, method, instance_scores, out, storage_options, i, part,
                      {e.image_id: gt_info.sizes[e.image_id] for e in part}, gt_info.classes,
                      limits)
                     for i, part in enumerate(parts)]
            outcomes = map_tasks(write_result_part, tasks, cluster,
                                 (lambda o: progress(len(o.digests))) if progress else None)
            raise_first(o.error for o in outcomes)
            digests = {e.position: d for part, o in zip(parts, outcomes, strict=True)
                       for e, d in zip(part, o.digests, strict=True)}
            return writer.finish(
                [o.info for o in outcomes], sgdask_version=__version__,
                content_hash=source.content_hash(entries, [digests[e.position]
                                                           for e in entries]),
                source=str(results), instances="masks", has_ng=True,
                n_images=len(entries), partition_size=partition_size, triplets_from=None,
                method=method, instance_scores=instance_scores)
    finally:
        loaded_pickle.cache_clear()


@dataclass
class PartOutcome:
    """What a result part's task returns: its manifest entry and file digests, or the
    first problem it found (returned, not raised, so that the driver removes the store only
    once no task writes into it any more)."""

    info: dict[str, Any] | None
    digests: list[str | None]
    error: SgdaskError | None = None


def raise_first(errors: Iterable[SgdaskError | None]) -> None:
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def write_result_part(results: str, method: str, instance_scores: bool, out: str,
                      options: StorageOptions | None, index: int, entries: list[ResultEntry],
                      sizes: dict[str, tuple[int, int]], classes: ClassCounts,
                      limits: ArchiveLimits | None) -> PartOutcome:
    """One part of a result conversion (a Dask task): decodes and checks its images, crops
    their masks and writes the part."""
    try:
        source = ResultSource(results, method, options, limits, instance_scores)
        tables = PartTables.empty()
        digests = []
        for entry in entries:
            img, digest = source.image_and_digest(entry, sizes[entry.image_id], classes)
            digests.append(digest)
            add_submission_rows(tables, img.submission_image(), img.masks.shape[1:],
                                part_name(index), CropMasks.from_dense(img.masks))
        return PartOutcome(write_part(out, options, index, tables), digests)
    except SgdaskError as err:
        return PartOutcome(None, [], err)
