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
import pyarrow as pa

from sgdask import __version__
from sgdask.cluster import ClusterSpec, map_tasks
from sgdask.errors import InputError, Option, SgdaskError
from sgdask.io.archive import ArchiveLimits, limit_hint
from sgdask.io.fs import (
    StorageOptions,
    absolute,
    combined_digest,
    file_digest,
    filesystem,
    join,
    unreadable,
)
from sgdask.io.openimages import (
    CATEGORIES_FILE,
    OI_BOXES,
    OI_FORMAT,
    TRAIN_FILE,
    category_names,
    evaluated_records,
    oi_train_stats,
)
from sgdask.io.psg import GTRecord, class_lists, evaluation_records, panoptic_masks
from sgdask.io.results import ResultEntry, ResultSource, loaded_pickle
from sgdask.io.scores import SubmissionInstances, load_score_lists
from sgdask.io.sgbench import ClassCounts, SubmissionImage, SubmissionSource, load_json
from sgdask.io.sources import Decoded, decoded_images, evaluated_order
from sgdask.io.store import (
    PartTables,
    StoreReader,
    StoreWriter,
    add_instance_rows,
    add_triplet_rows,
    part_name,
    write_part,
)
from sgdask.io.training_stats import STATS_FILE, STATS_SCHEMA, train_stats, write_stats
from sgdask.io.units import grouped_chunks, grouping_digest, recorded_units, unit_column
from sgdask.io.validate import GTInfo, checked_submission
from sgdask.io.vg import VAL_IMAGES, VGFiles, read_vg
from sgdask.kernels.scores import PREDICATE, DerivedLists
from sgdask.types import EMPTY_TRIPLETS, BitMasks, TopPredicates

DEFAULT_STORE_PARTITION = 64
# Box-only images are ~100 times smaller than mask images: larger parts keep a task's
# fixed cost (three Parquet reads per store, the fold) small against its kernels.
BOX_STORE_PARTITION = 1024
VG_FORMAT = "vg150-h5"
#: how a VG GT store's boxes relate to the images (the sgbpytorch protocol needs this)
VG_BOXES = {"coordinates": "pixels, float32 values as its loader computes them",
            "clipped": False, "image_size": "images table width and height (image_data.json)"}
Item = TypeVar("Item", SubmissionImage, ResultEntry)
#: GT stores: the test image ids in psg.json's ``data`` order (model result files are
#: paired with the GT images in that order)
IMAGE_ORDER_FILE = "image_order.json"
Progress = Callable[[int], None] | None


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def read_bytes(url: str, options: StorageOptions | None, what: str | Option,
               cap: tuple[ArchiveLimits, str] | None = None) -> bytes:
    """A file's bytes; with ``cap`` (limits, name of a size limit), refused past that
    size before it is read."""
    fs, path = filesystem(url, options)
    try:
        if cap is not None:
            limits, name = cap
            size = fs.size(path)
            if size is not None and size > getattr(limits, name):
                raise InputError(url, f"is {size} bytes", field=what,
                                 expected=limit_hint(limits, name))
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(url, "file not found", field=what) from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from err


def ingest_gt(psg_json: str, out: str, masks_dir: str | None = None,
              storage_options: StorageOptions | None = None,
              partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              limits: ArchiveLimits | None = None) -> dict[str, Any]:
    """psg.json (+ panoptic PNGs) -> GT store of the test split. Returns the manifest.

    One task per part of ``partition_size`` images (on ``cluster`` when given).
    ``limits``: psg.json's size and depth (``max_json_size``, ``max_json_depth``) and each
    PNG's pixel count (``max_layer_pixels``).
    """
    limits = limits or ArchiveLimits()
    raw = read_bytes(psg_json, storage_options, "psg.json", (limits, "max_json_size"))
    doc = load_json(raw, psg_json, limits, "gt")
    names = class_lists(doc, psg_json)
    in_data_order = evaluation_records(doc, psg_json, masks=masks_dir is not None)
    records = sorted_records(in_data_order, psg_json)
    stats = train_stats(doc, psg_json)
    masks_dir = None if masks_dir is None else absolute(masks_dir)  # read by the tasks
    return write_gt_store(out, storage_options, overwrite, records, stats, partition_size,
                          masks_dir, progress, cluster, hashlib.sha256(raw),
                          [r.image_id for r in in_data_order], limits=limits,
                          source=str(psg_json), instances="masks" if masks_dir else "boxes",
                          **names)


def write_gt_store(out: str, options: StorageOptions | None, overwrite: bool,
                   records: list[GTRecord], stats: pa.Table, partition_size: int,
                   masks_dir: str | None, progress: Progress, cluster: ClusterSpec,
                   digest: Any, image_order: list[str] | None = None,
                   limits: ArchiveLimits | None = None, **fields: Any) -> dict[str, Any]:
    """A GT store of ``records`` (sorted by id): one task per part, then the training
    statistics, then the manifest. ``digest`` (a hashlib object over the sources read so
    far) is completed with every PNG read and becomes the content hash; ``image_order``:
    the test ids in the source's order (psg.json's ``data``), for pairing model results.
    Records that name units (``GTRecord.units``: a frame's video) make a store that
    records them (``sgdask.io.units``; the grouping is part of the content hash)."""
    grouped = [(r.image_id, r.units) for r in records]
    units = recorded_units(grouped, str(fields.get("source", out)))
    if units:
        fields["units"] = list(units)
    with StoreWriter(out, "gt", options, overwrite) as writer:
        if image_order is not None:
            write_image_order(writer.write_url, options, image_order)
            fields["image_order"] = IMAGE_ORDER_FILE
        cut = grouped_chunks(records, [r.units[units[0]] for r in records] if units else None,
                             partition_size)  # a video's frames in one part
        tasks = [(writer.write_url, options, i, part, masks_dir, limits)
                 for i, part in enumerate(cut)]
        done = map_tasks(write_gt_part, tasks, cluster,
                         (lambda r: progress(r[0]["n_images"])) if progress else None)
        if len(stats):
            write_stats(stats, join(writer.write_url, STATS_FILE), options)
        for _, png_digests in done:
            for d in png_digests:
                digest.update(d)
        if units:
            digest.update(grouping_digest(grouped))
        return writer.finish(
            [info for info, _ in done], train_stats=STATS_FILE if len(stats) else None,
            sgdask_version=__version__, content_hash="sha256:" + digest.hexdigest(),
            n_images=len(records), partition_size=partition_size, **fields)


def ingest_vg(h5: str, out: str, dicts: str, image_data: str, split: str = "test",
              storage_options: StorageOptions | None = None,
              partition_size: int = BOX_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              val_images: int = VAL_IMAGES, limits: ArchiveLimits | None = None
              ) -> dict[str, Any]:
    """Visual Genome in the VG150 layout (``VG-SGG-with-attri.h5``, its dicts JSON and
    ``image_data.json``) -> box GT store of ``split`` (test or val), read as
    Scene-Graph-Benchmark.pytorch reads it (``sgdask.io.vg``). Returns the manifest.
    ``limits``: the h5 datasets' declared sizes (``max_h5_dataset_size``,
    ``max_h5_total_size``)."""
    files = VGFiles(str(h5), str(dicts), str(image_data))
    dict_bytes = read_bytes(dicts, storage_options, Option("dicts"))
    image_bytes = read_bytes(image_data, storage_options, Option("image_data"))
    digest = hashlib.sha256()
    fs, path = filesystem(h5, storage_options)
    try:
        with fs.open(path, "rb") as f:
            for block in iter(lambda: f.read(4 << 20), b""):
                digest.update(block)
            f.seek(0)
            gt = read_vg(f, dict_bytes, image_bytes, files, split, val_images, limits)
    except FileNotFoundError:
        raise InputError(str(h5), "file not found") from None
    for part in (dict_bytes, image_bytes, f"split={split};val_images={val_images}".encode()):
        digest.update(hashlib.sha256(part).digest())
    if not gt.records:
        raise InputError(str(h5), f"no {split} image with boxes and relations", field="split")
    return write_gt_store(
        out, storage_options, overwrite, gt.records, gt.stats, partition_size, None,
        progress, cluster, digest, source=str(h5), instances="boxes", gt_format=VG_FORMAT,
        sources={"dicts": str(dicts), "image_data": str(image_data)}, split=split,
        dropped_images=gt.dropped, boxes=VG_BOXES, **gt.names)


def ingest_oi(anno: str, out: str, categories: str | None = None,
              storage_options: StorageOptions | None = None,
              partition_size: int = BOX_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              limits: ArchiveLimits | None = None) -> dict[str, Any]:
    """Open Images V6 (``vrd-test-anno.json`` and ``categories_dict.json``, beside it
    unless ``categories`` names it) -> box GT store, read as PySGG reads it
    (``sgdask.io.openimages``); ``vrd-train-anno.json`` beside it gives the training
    statistics. Returns the manifest."""
    limits = limits or ArchiveLimits()
    folder = str(anno).rstrip("/").rsplit("/", 1)[0] if "/" in str(anno) else "."
    categories = categories or join(folder, CATEGORIES_FILE)
    raw = read_bytes(anno, storage_options, "vrd-test-anno.json", (limits, "max_json_size"))
    cat_bytes = read_bytes(categories, storage_options, "--categories",
                           (limits, "max_json_size"))
    names = category_names(load_json(cat_bytes, categories, limits, "gt"), categories)
    records, dropped = evaluated_records(load_json(raw, anno, limits, "gt"), anno, names)
    if not records:
        raise InputError(str(anno), "no image with boxes and relations", field="rel")
    digest = hashlib.sha256(raw)
    digest.update(hashlib.sha256(cat_bytes).digest())
    train = join(folder, TRAIN_FILE)
    fs, path = filesystem(train, storage_options)
    stats = STATS_SCHEMA.empty_table()
    if str(anno).rstrip("/").rsplit("/", 1)[-1] != TRAIN_FILE and fs.exists(path):
        train_bytes = read_bytes(train, storage_options, TRAIN_FILE,
                                 (limits, "max_json_size"))
        stats = oi_train_stats(load_json(train_bytes, train, limits, "gt"), train, names)
        digest.update(hashlib.sha256(train_bytes).digest())
    else:
        train = None
    return write_gt_store(
        out, storage_options, overwrite, sorted(records, key=lambda r: r.image_id), stats,
        partition_size, None, progress, cluster, digest, [r.image_id for r in records],
        limits=limits, source=str(anno), instances="boxes", gt_format=OI_FORMAT,
        sources={"categories": str(categories), "train": train}, dropped_images=dropped,
        boxes=OI_BOXES, **names)


def write_image_order(out: str, options: StorageOptions | None, ids: list[str]) -> None:
    """The GT store's ``image_order.json``: every test image id in psg.json's order."""
    fs, path = filesystem(out, options)
    with fs.open(join(path, IMAGE_ORDER_FILE), "w") as f:
        json.dump({"image_ids": ids}, f)


def sorted_records(records: list[GTRecord], psg_json: str) -> list[GTRecord]:
    """The test split's records in store order (sorted by image id)."""
    if not records:
        raise InputError(psg_json, "no test images", field="test_image_ids")
    return sorted(records, key=lambda r: r.image_id)


def gt_records(raw: bytes, psg_json: str, masks: bool) -> list[GTRecord]:
    """The records ``ingest_gt`` writes, in store order, from psg.json's bytes."""
    return sorted_records(evaluation_records(load_json(raw, psg_json, kind="gt"), psg_json, masks),
                          psg_json)


def write_gt_part(out: str, options: StorageOptions | None, index: int,
                  records: list[GTRecord], masks_dir: str | None,
                  limits: ArchiveLimits | None = None) -> tuple[dict[str, Any], list[bytes]]:
    """One GT part (a Dask task): reads its PNGs, writes tables and label images.

    Returns the part's manifest entry and the SHA-256 digest of each PNG, in order.
    """
    tables = PartTables.empty(tuple(sorted(records[0].units)) if records else ())
    digests = []
    for record in records:
        masks = None
        if masks_dir is not None:
            png_url = join(masks_dir, record.pan_seg_file_name or "")
            png = read_bytes(png_url, options, "pan_seg_file_name")
            digests.append(hashlib.sha256(png).digest())
            masks = panoptic_masks(png, record, png_url, limits)
        add_gt_rows(tables, record, part_name(index), masks)
    return write_part(out, options, index, tables), digests


def add_gt_rows(tables: PartTables, record: GTRecord, part: str, masks: BitMasks | None
                ) -> None:
    relations = record.relations
    cols = tables.images
    for name, value in (("image_id", record.image_id), ("height", record.height),
                        ("width", record.width), ("n_instances", len(record.categories)),
                        ("n_graph", len(relations)), ("n_ng", 0), ("n_pairs", 0),
                        ("mask_array", None if masks is None else part),
                        ("mask_offset", None), ("source_file", record.pan_seg_file_name),
                        *((unit_column(u), record.units[u]) for u in tables.units)):
        cols[name].append(value)
    add_instance_rows(tables, record.image_id, record.categories, record.boxes, None, masks,
                      None if masks is None else masks.areas(),
                      None if masks is None else record.crowd)
    add_triplet_rows(tables, record.image_id, "gt", relations, None)


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
                       limits: ArchiveLimits | None = None, from_scores: str | None = None,
                       rank_by: str = PREDICATE, ng_limit: int | None = None
                       ) -> dict[str, Any]:
    """SGBench submission (JSON or ZIP) -> submission store. Returns the manifest.

    With ``from_scores``, the triplet lists are derived from per-pair predicate score
    vectors (``schemas/scores.md``) instead of taken from the submission, ranked by
    ``rank_by`` (``predicate`` or ``triplet``), the NG list cut after ``ng_limit`` triplets
    when given. The store's content hash then covers the score file and both options too.

    The archive, the document and every image are checked first (``sgdask validate``'s
    checks, the first error raised); then one task per part reads its TIFFs (ranged reads
    from the ZIP, wherever it is; each TIFF checked before it is decoded) and writes its
    files. ``limits`` bound what the archive, its JSON and its TIFFs may hold.
    """
    submission = absolute(submission)  # read by the tasks
    source = SubmissionSource(submission, storage_options, limits)
    gt_reader = StoreReader(gt, storage_options, "gt") if gt else None
    gt_info = GTInfo.of(gt_reader) if gt_reader else None
    check = checked_submission(source, gt_info)
    images = sorted(check.images, key=lambda i: i.image_id)
    has_ng = check.has_ng
    content_hash = source.content_hash()
    if from_scores:
        instances = SubmissionInstances(
            source.label, {img.image_id: len(img.categories) for img in images},
            {img.image_id: img.scores for img in images})
        images = lists_from_scores(images, load_score_lists(
            from_scores, storage_options, ng_limit, rank_by, instances, limits,
            gt_info.classes.predicates if gt_info else None,
            unique_pairs=gt_reader is not None
            and gt_reader.manifest.get("gt_format") == OI_FORMAT))
        has_ng = True
        content_hash = derived_content_hash(content_hash, from_scores, storage_options,
                                            rank_by, ng_limit)
    sizes = gt_info.sizes if gt_info else {}
    parts = submission_parts(images, gt_reader, partition_size)
    with StoreWriter(out, "submission", storage_options, overwrite) as writer:
        tasks = [(submission, writer.write_url, storage_options, i, part,
                  {img.image_id: sizes[img.image_id] for img in part if img.image_id in sizes},
                  limits)
                 for i, part in enumerate(parts)]
        infos = map_tasks(write_submission_part, tasks, cluster,
                          (lambda info: progress(info["n_images"])) if progress else None)
        return writer.finish(
            infos, sgdask_version=__version__, content_hash=content_hash,
            source=str(submission), instances="masks" if source.is_zip else "boxes",
            has_ng=has_ng, n_images=len(images), partition_size=partition_size,
            triplets_from=from_scores, rank_by=rank_by if from_scores else None,
            ng_limit=ng_limit if from_scores else None, pair_scores=_pair_places(images))


def convert_images(images: list[SubmissionImage], out: str, gt: str | None,
                   storage_options: StorageOptions | None, *, source: str, has_ng: bool,
                   overwrite: bool = False, progress: Progress = None,
                   cluster: ClusterSpec = None,
                   partition_size: int = DEFAULT_STORE_PARTITION) -> dict[str, Any]:
    """Box images a format read and checked on the client -> submission store (what a
    registered format's ``convert`` calls, ``docs/development.md``); cut like the GT's
    parts when ``gt`` is given. The content hash is the file's."""
    gt_reader = StoreReader(gt, storage_options, "gt") if gt else None
    parts = submission_parts(sorted(images, key=lambda i: i.image_id), gt_reader,
                             partition_size)
    with StoreWriter(out, "submission", storage_options, overwrite) as writer:
        tasks = [(writer.write_url, storage_options, i,
                  [Decoded(img, (0, 0), None) for img in part]) for i, part in enumerate(parts)]
        infos = map_tasks(write_decoded_part, tasks, cluster,
                          (lambda info: progress(info["n_images"])) if progress else None)
        return writer.finish(
            infos, sgdask_version=__version__, content_hash=file_digest(source, storage_options),
            source=source, instances="boxes", has_ng=has_ng, n_images=len(images),
            partition_size=partition_size, triplets_from=None)


def derived_content_hash(submission_hash: str, scores_url: str,
                         options: StorageOptions | None, rank_by: str,
                         ng_limit: int | None) -> str:
    """The content hash of a store derived from scores: the submission's hash, the score
    file's bytes and the derivation options, so that a result cache keyed on it never
    serves one derivation's numbers for another."""
    return combined_digest(submission_hash, file_digest(scores_url, options),
                           f"rank_by={rank_by};ng_limit={ng_limit}")


def lists_from_scores(images: list[SubmissionImage], lists: dict[str, DerivedLists]
                      ) -> list[SubmissionImage]:
    """Images with graph and NG lists replaced by the ones derived from score vectors
    (checked against the images by ``load_score_lists``), with each pair's best predicates;
    an image without score rows gets empty lists and no pair."""
    empty = DerivedLists(EMPTY_TRIPLETS, np.empty(0), EMPTY_TRIPLETS, np.empty(0))
    return [replace(img, graph=d.graph, graph_scores=d.graph_scores, ng=d.ng,
                    pairs=d.pairs if d.pairs is not None else _no_pairs(per_pair))
            for per_pair in [_pair_places_of(lists)]
            for img in images for d in [lists.get(img.image_id, empty)]]


def _pair_places_of(lists: dict[str, DerivedLists]) -> int:
    """Predicates kept per pair (2; 1 for a vocabulary of one predicate)."""
    return next((d.pairs.per_pair for d in lists.values() if d.pairs is not None), 2)


def _no_pairs(per_pair: int) -> TopPredicates:
    empty = np.empty(0, np.int64)
    return TopPredicates(empty, empty, empty, np.empty(0, np.float32), per_pair)


def _pair_places(images: list[SubmissionImage]) -> int | None:
    """The manifest's ``pair_scores``: predicates kept per pair when the lists were derived
    from scores (the pair rows the ``oiv6`` protocol ranks), else None."""
    return next((img.pairs.per_pair for img in images if img.pairs is not None), None)


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
                        ("n_pairs", 0 if img.pairs is None else len(img.pairs)),
                        ("mask_array", None if masks is None else part), ("mask_offset", None),
                        ("source_file", img.seg_filename)):
        cols[name].append(value)
    add_instance_rows(tables, img.image_id, img.categories, img.boxes, img.scores, masks)
    add_triplet_rows(tables, img.image_id, "graph", img.graph, img.graph_scores)
    add_triplet_rows(tables, img.image_id, "ng", img.ng, None)
    if img.pairs is not None:
        pairs = img.pairs
        add_triplet_rows(tables, img.image_id, "pair",
                         np.stack([pairs.subjects, pairs.objects, pairs.predicates], 1),
                         pairs.scores.astype(np.float64))


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
    results = absolute(results)  # read by the tasks
    source = ResultSource(results, method, storage_options, limits, instance_scores)
    entries = source.images(evaluated_order(gt_reader, gt_info))
    parts = submission_parts(sorted(entries, key=lambda e: e.image_id), gt_reader,
                             partition_size)
    try:
        with StoreWriter(out, "submission", storage_options, overwrite) as writer:
            tasks = [(results, method, instance_scores, writer.write_url, storage_options, i,
                      part, {e.image_id: gt_info.sizes[e.image_id] for e in part},
                      gt_info.classes, limits)
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
                                part_name(index), BitMasks.from_dense(img.masks))
        return PartOutcome(write_part(out, options, index, tables), digests)
    except SgdaskError as err:
        return PartOutcome(None, [], err)
