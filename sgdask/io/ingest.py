"""Conversion of source formats into canonical stores: ``ingest_gt`` and ``convert_submission``.

Both validate everything before the manifest is written; any error removes the partial store.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from sgdask import __version__
from sgdask.cluster import ClusterSpec, map_tasks
from sgdask.errors import InputError, SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, combined_digest, file_digest, filesystem, join
from sgdask.io.psg import GTRecord, class_lists, evaluation_records, label_image
from sgdask.io.scores import load_score_lists
from sgdask.io.sgbench import SubmissionImage, SubmissionSource, load_json
from sgdask.io.sources import Decoded, decoded_images
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
from sgdask.kernels.scores import DerivedLists
from sgdask.types import EMPTY_TRIPLETS, BitMasks

DEFAULT_STORE_PARTITION = 64
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
        raise SgdaskError(f"{url}: cannot read ({type(err).__name__}: {err})") from err


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
    records = sorted_records(doc, psg_json, masks_dir is not None)
    stats = train_stats(doc, psg_json)
    with StoreWriter(out, "gt", storage_options, overwrite) as writer:
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
            train_stats=STATS_FILE if len(stats) else None,
            sgdask_version=__version__, content_hash="sha256:" + digest.hexdigest(),
            source=str(psg_json), instances="masks" if masks_dir else "boxes",
            n_images=len(records), partition_size=partition_size, **names)


def sorted_records(doc: Any, psg_json: str, masks: bool) -> list[GTRecord]:
    """The test split's records in store order (sorted by image id)."""
    records = sorted(evaluation_records(doc, psg_json, masks=masks), key=lambda r: r.image_id)
    if not records:
        raise InputError(psg_json, "no test images", field="test_image_ids")
    return records


def gt_records(raw: bytes, psg_json: str, masks: bool) -> list[GTRecord]:
    """The records ``ingest_gt`` writes, from psg.json's bytes."""
    return sorted_records(load_json(raw, psg_json), psg_json, masks)


def write_gt_part(out: str, options: StorageOptions | None, index: int,
                  records: list[GTRecord], masks_dir: str | None
                  ) -> tuple[dict[str, Any], list[bytes]]:
    """One GT part (a Dask task): reads its PNGs, writes tables and label images.

    Returns the part's manifest entry and the SHA-256 digest of each PNG, in order.
    """
    tables = PartTables.empty()
    digests = []
    for record in records:
        masks = None
        if masks_dir is not None:
            png_url = join(masks_dir, record.pan_seg_file_name or "")
            png = read_bytes(png_url, options, "pan_seg_file_name")
            digests.append(hashlib.sha256(png).digest())
            masks = BitMasks.from_labels(label_image(png, record, png_url),
                                         len(record.categories))
        add_gt_rows(tables, record, part_name(index), masks)
    return write_part(out, options, index, tables), digests


def add_gt_rows(tables: PartTables, record: GTRecord, part: str, masks: BitMasks | None
                ) -> None:
    relations = record.relations
    cols = tables.images
    for name, value in (("image_id", record.image_id), ("height", record.height),
                        ("width", record.width), ("n_instances", len(record.categories)),
                        ("n_graph", len(relations)), ("n_ng", 0),
                        ("mask_array", None if masks is None else part),
                        ("mask_offset", None), ("source_file", record.pan_seg_file_name)):
        cols[name].append(value)
    instance_rows(tables, record.image_id, record.categories, record.boxes, None, masks,
                  None if masks is None else masks.areas())
    triplet_rows(tables, record.image_id, "gt", relations, None)


def submission_parts(images: list[SubmissionImage], gt: StoreReader | None,
                     partition_size: int) -> list[list[SubmissionImage]]:
    """Images (sorted by id) cut like the GT's parts when a GT is given, so that an
    evaluation task reads one GT part and one submission part; else by ``partition_size``."""
    if gt is None:
        return list(chunks(images, partition_size))
    starts = [p["first_id"] for p in gt.parts]
    groups: dict[int, list[SubmissionImage]] = {}
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
            infos, sgdask_version=__version__,
            content_hash=submission_digest(source, from_scores, storage_options),
            source=str(submission), instances="masks" if source.is_zip else "boxes",
            has_ng=has_ng, n_images=len(images), partition_size=partition_size,
            triplets_from=from_scores)


def submission_digest(source: SubmissionSource, from_scores: str | None,
                      storage_options: StorageOptions | None) -> str:
    """What the store's numbers depend on: the submission file and, when the triplet lists
    are derived from scores, the scores file too (two score files, two results)."""
    digest = source.content_hash()
    if from_scores is None:
        return digest
    return combined_digest(digest, file_digest(from_scores, storage_options))


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
    image's instance count and GT size first), writes tables and masks."""
    source = SubmissionSource(submission, options, limits)
    return write_decoded_part(out, options, index, decoded_images(source, images, sizes))


def write_decoded_part(out: str, options: StorageOptions | None, index: int,
                       decoded: list[Decoded]) -> dict[str, Any]:
    """A submission store part from decoded images; returns its manifest entry."""
    tables = PartTables.empty()
    for d in decoded:
        add_submission_rows(tables, d.image, d.shape, part_name(index), d.masks)
    return write_part(out, options, index, tables)


class KeptStores:
    """Stores written while a submission file is evaluated (``evaluate --keep-store``):
    created on entry, committed (manifest written) by ``commit``, removed on failure."""

    def __init__(self, stores: dict[str, tuple[str, Any]], options: StorageOptions | None
                 ) -> None:
        self.writers = {name: (StoreWriter(url, "submission", options), given)
                        for name, (url, given) in stores.items()}

    def __enter__(self) -> KeptStores:
        for writer, _ in self.writers.values():
            writer.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for writer, _ in self.writers.values():
            writer.__exit__(*exc)

    def commit(self, parts_by_name: dict[str, list[dict[str, Any]]]) -> None:
        """Write each kept store's manifest, listing the parts its tasks wrote."""
        for name, (writer, given) in self.writers.items():
            parts = sorted(parts_by_name.get(name, []), key=lambda info: info["name"])
            manifest = given.manifest
            writer.finish(parts, sgdask_version=__version__,
                          content_hash=manifest["content_hash"], source=manifest["source"],
                          instances=manifest["instances"], has_ng=manifest["has_ng"],
                          n_images=sum(p["n_images"] for p in parts),
                          partition_size=DEFAULT_STORE_PARTITION, triplets_from=None)


def add_submission_rows(tables: PartTables, img: SubmissionImage, shape: tuple, part: str,
                        masks: BitMasks | None) -> None:
    cols = tables.images
    for name, value in (("image_id", img.image_id), ("height", int(shape[0])),
                        ("width", int(shape[1])), ("n_instances", len(img.categories)),
                        ("n_graph", len(img.graph)), ("n_ng", len(img.ng)),
                        ("mask_array", None if masks is None else part), ("mask_offset", None),
                        ("source_file", img.seg_filename)):
        cols[name].append(value)
    instance_rows(tables, img.image_id, img.categories, img.boxes, img.scores, masks)
    triplet_rows(tables, img.image_id, "graph", img.graph, img.graph_scores)
    triplet_rows(tables, img.image_id, "ng", img.ng, None)


