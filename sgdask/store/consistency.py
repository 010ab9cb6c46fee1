"""The GT decides: a submission store checked against the GT store from the tables alone,
before any kernel runs (``evaluate``, ``evaluate-many``, ``rerank``, ``compare``).

Image ids among the GT's, each image's height and width equal to the GT image's (when the
submission records a size), category ids within the GT's classes, predicate ids within
its predicates, subject and object indices within the image's instances, one mask crop per
instance of an image with masks, and every crop box inside its image.

Cheap by construction: the tables' files are read by a thread pool (reading a file, its
SHA-256 and Parquet decoding release the GIL; on S3 the requests overlap); only the columns
the checks need are decoded, not even those whose bounds the footer statistics prove (in a
store whose files are hash-checked); every check runs over a part's whole columns (a
part at a time, a few decoded ahead: memory does not grow with the store's images):
bounds through ``pyarrow.compute.min_max``, per-image bounds as
``np.maximum.reduceat`` over the image groups (rows of an image are contiguous, in
images-table order). Only when a check fails are its rows looked at one by one, to name
the first problem: one ``InputError`` naming the store, the image and the field (the same
problem the row-by-row order would name first).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sgdask.errors import InputError
from sgdask.io.fs import is_local
from sgdask.store.store import DECODE_ERRORS, Corrupt, StoreReader, decode_detail

BOX_COLUMNS = ["mask_y0", "mask_x0", "mask_y1", "mask_x1"]
#: threads reading a store's files: enough to overlap S3 round trips, few enough for a laptop
READ_THREADS = 8


def ints(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as a numpy array of its own integer type (nulls as -1): no copy
    into int64, numpy widens where a comparison or a sum needs it."""
    column = table[name]
    if column.null_count:
        column = pc.fill_null(column, -1)
    return column.to_numpy()


def first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def below(count: int | None) -> int:
    return np.iinfo(np.int64).max if count is None else count


def in_range(count: int | None, what: str) -> str:
    return "at least 0" if count is None else f"0 to {count - 1}, the GT's {what} classes"


def within(column: pa.ChunkedArray, count: int | None) -> bool:
    """Whether every value of an integer column is in [0, count) (no nulls)."""
    if column.null_count:
        return False
    if len(column) == 0:
        return True
    bounds = pc.min_max(column)
    return bounds["min"].as_py() >= 0 and bounds["max"].as_py() < below(count)


def group_max(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The maximum of each group of consecutive rows (``counts[i]`` rows in group i);
    -1 for an empty group."""
    out = np.full(len(counts), -1, np.int64)
    filled = counts > 0
    if values.size:
        starts = np.cumsum(counts) - counts
        out[filled] = np.maximum.reduceat(values, starts[filled])
    return out


def read_threads(reader: StoreReader) -> int:
    """Threads for reading a store's files: ``READ_THREADS`` to overlap object-store round
    trips; on a local disk no more than the cores (reads and hashing there are CPU-bound,
    and more threads only contend for them)."""
    if not is_local(reader.fs):
        return READ_THREADS
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return max(1, min(READ_THREADS, cores))


@contextmanager
def reading_pool(reader: StoreReader) -> Iterator[ThreadPoolExecutor]:
    """A thread pool whose unfinished reads are dropped when a check fails early."""
    pool = ThreadPoolExecutor(read_threads(reader), thread_name_prefix="sgdask-check")
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def check_against_gt(sub: StoreReader, gt: StoreReader) -> dict[str, int]:
    """Raise the first inconsistency of submission store ``sub`` with GT store ``gt``;
    returns what the protocol lint reads from the footers on the way (``score_spread``)."""
    manifest = gt.manifest
    n_classes = len(manifest["thing_classes"]) + len(manifest["stuff_classes"])
    n_predicates = len(manifest["predicate_classes"])
    with reading_pool(sub) as pool:
        gt_read, sub_read = pool.submit(gt.images), pool.submit(sub.images)
        tables = PartTables(sub, pool)
        gt_images = gt_read.result()
        check_ids_and_sizes(sub.url, sub_read.result(), gt_images)
        return check_tables(sub, tables, n_classes, n_predicates)


def check_ids_and_sizes(url: str, images: pa.Table, gt_images: pa.Table) -> None:
    """Every image id among the GT's; every image's size the GT image's (images without
    masks may leave it 0)."""
    ids = images["image_id"]
    pos = pc.index_in(ids, value_set=gt_images["image_id"])
    unknown = first(pos.is_null().to_numpy(zero_copy_only=False))
    if unknown is not None:
        raise InputError(url, "not among the ground truth's test images",
                         image=ids[unknown].as_py(), field="id",
                         expected="an id of the GT's test images")
    pos = pos.to_numpy()
    height, width = ints(images, "height"), ints(images, "width")
    gt_h, gt_w = ints(gt_images, "height")[pos], ints(gt_images, "width")[pos]
    has_masks = images["mask_array"].is_valid().to_numpy(zero_copy_only=False)
    sized = has_masks | (height != 0) | (width != 0)
    bad = first(sized & ((height != gt_h) | (width != gt_w)))
    if bad is not None:
        raise InputError(url, f"{height[bad]}x{width[bad]}", image=ids[bad].as_py(),
                         field="height x width",
                         expected=f"{gt_h[bad]}x{gt_w[bad]}, the GT image's size")


def opened(reader: StoreReader, rel: str) -> pq.ParquetFile:
    """A Parquet file of the store, its bytes checked (size, SHA-256) and its footer read;
    its columns are decoded later, page checksums verified, only those still needed."""
    data = reader.read_file(rel)
    try:
        return pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
    except DECODE_ERRORS as err:
        raise Corrupt(reader.url, rel, f"corrupt (not a readable Parquet file: "
                      f"{decode_detail(err)})") from None


def decoded(url: str, rel: str, file: pq.ParquetFile, columns: list[str]) -> pa.Table:
    try:
        table = file.read(columns=columns, use_threads=False)
    except DECODE_ERRORS as err:
        raise Corrupt(url, rel, f"corrupt (not a readable Parquet file: "
                      f"{decode_detail(err)})") from None
    if table.column_names != columns:
        raise Corrupt(url, rel, f"corrupt (columns {table.column_names}, expected {columns})")
    return table


def proven(files: list[pq.ParquetFile], column: str, count: int | None) -> bool:
    """Whether the footer statistics of every file show ``column`` without nulls and within
    [0, count): then its values need no decoding. Only for files whose bytes were checked
    against the manifest's SHA-256 (the footer is part of them)."""
    for file in files:
        meta = file.metadata
        leaves = meta.schema.names  # the Parquet leaf columns, as row groups index them
        if column not in leaves:
            return False
        index = leaves.index(column)  # (not schema_arrow: 70 us per file to convert)
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(index).statistics
            if (stats is None or not stats.has_min_max or not stats.has_null_count
                    or stats.null_count or stats.min < 0 or stats.max >= below(count)):
                return False
    return True


class PartTables:
    """The instances and triplets files of every part of a store, read and opened in a
    pool (``files``), then the columns the checks still need decoded in the pool, part by
    part (``tables``). Results are taken in part order, so the first damaged file named is
    the one a sequential read would name."""

    def __init__(self, reader: StoreReader, pool: ThreadPoolExecutor) -> None:
        self.reader, self.pool = reader, pool
        self.ahead = read_threads(reader)  # parts decoded ahead of the one being checked
        self.parts = [p["name"] for p in reader.parts]
        self.opening: dict[str, list[Future[pq.ParquetFile]]] = {
            name: [pool.submit(opened, reader, f"{name}/{part}.parquet")
                   for part in self.parts]
            for name in ("instances", "triplets")}

    def files(self, name: str, expected_rows: np.ndarray, what: str) -> list[pq.ParquetFile]:
        """The opened files of table ``name``, each part's row count checked against the
        images table's (``expected_rows``, per part)."""
        files = [opening.result() for opening in self.opening.pop(name)]
        for part, file, rows in zip(self.parts, files, expected_rows.tolist(), strict=True):
            if file.metadata.num_rows != rows:
                raise Corrupt(self.reader.url, f"{name}/{part}.parquet",
                              f"corrupt ({file.metadata.num_rows} {what} rows, the images "
                              f"table counts {rows})")
        return files

    def tables(self, name: str, files: list[pq.ParquetFile], columns: list[str]
               ) -> Iterator[tuple[slice, pa.Table]]:
        """``columns`` of table ``name``, part by part in part order, each with its images'
        rows of the images table: decoded by the pool a few parts ahead, so that a check
        holds a few parts' columns at a time, however many images the store has (``files``
        is consumed: each part's file is let go once it is decoded)."""
        url = self.reader.url
        starts = np.cumsum([0, *(p["n_images"] for p in self.reader.parts)]).tolist()
        reads: deque[tuple[int, Future[pa.Table]]] = deque()
        for i, part in enumerate(self.parts):
            reads.append((i, self.pool.submit(decoded, url, f"{name}/{part}.parquet",
                                              files[i], columns)))
            files[i] = None  # type: ignore[call-overload]  # its bytes go with its decoding
            if len(reads) > self.ahead:
                yield _taken(reads, starts)
        while reads:
            yield _taken(reads, starts)


def _taken(reads: deque[tuple[int, Future[pa.Table]]], starts: list[int]
           ) -> tuple[slice, pa.Table]:
    """The first read part's images (rows of the images table) and decoded table."""
    i, read = reads.popleft()
    return slice(starts[i], starts[i + 1]), read.result()


def check_contents(sub: StoreReader, n_classes: int | None, n_predicates: int | None) -> None:
    """The store's tables against each other: row counts, instance indices, mask crops
    inside their images, and category and predicate ids within the given class counts
    (None: not checked)."""
    with reading_pool(sub) as pool:
        tables = PartTables(sub, pool)
        check_tables(sub, tables, n_classes, n_predicates)


def per_part(sub: StoreReader, per_image: np.ndarray) -> np.ndarray:
    """Sums of a per-image count over each part's images (images-table order)."""
    sizes = np.array([p["n_images"] for p in sub.parts], np.int64)
    out = np.zeros(len(sizes), np.int64)
    filled = sizes > 0
    if per_image.size:
        out[filled] = np.add.reduceat(per_image, (np.cumsum(sizes) - sizes)[filled])
    return out


def check_tables(sub: StoreReader, tables: PartTables, n_classes: int | None,
                 n_predicates: int | None) -> dict[str, int]:
    """Instances, then triplets, of every part against the images table. Columns whose
    bounds the (hash-checked) footer statistics prove are not decoded. Returns the
    triplet scores' ``score_spread``."""
    images = sub.images()
    n_inst = ints(images, "n_instances")
    files = tables.files("instances", per_part(sub, n_inst), "instance")
    masked = masked_images(images)
    columns = [c for c, bound in (("category", n_classes), ("mask_offset", None))
               if not (sub.checksummed and proven(files, c, bound))
               and (c == "category" or masked.any())]
    columns += BOX_COLUMNS if masked.any() else []
    for rows, instances in tables.tables("instances", files, columns):
        check_instances(sub.url, images.slice(rows.start, rows.stop - rows.start), instances,
                        n_inst[rows], masked[rows], n_classes)
    n_trip = ints(images, "n_graph") + ints(images, "n_ng")
    if "n_pairs" in images.column_names:
        n_trip = n_trip + ints(images, "n_pairs")
    files = tables.files("triplets", per_part(sub, n_trip), "triplet")
    spread = score_spread(files)
    columns = ([] if sub.checksummed and proven(files, "predicate", n_predicates)
               else ["predicate"]) + ["subject", "object"]
    ids = images["image_id"]
    for rows, triplets in tables.tables("triplets", files, columns):
        check_triplets(sub.url, ids[rows], triplets, n_inst[rows], n_trip[rows],
                       n_predicates)
    return spread


def score_spread(files: list[pq.ParquetFile]) -> dict[str, int]:
    """The protocol lint's facts about the triplet scores, from the footer statistics the
    check has read anyway (no column decoded): ``lint_triplet_scores``, the rows with a
    score, and ``lint_triplet_scores_equal``, 1 when two or more have one and all are
    equal; empty when a footer cannot tell (no score column, no statistics)."""
    scored, low, high = 0, None, None
    for file in files:
        meta = file.metadata
        if "score" not in meta.schema.names:
            return {}
        index = meta.schema.names.index("score")
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(index).statistics
            if stats is None or not stats.has_null_count:
                return {}
            rows = meta.row_group(group).num_rows - stats.null_count
            if rows == 0:
                continue
            if not stats.has_min_max:
                return {}
            scored += rows
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
    return {"lint_triplet_scores": scored,
            "lint_triplet_scores_equal": int(scored > 1 and low == high)}


def masked_images(images: pa.Table) -> np.ndarray:
    """Which images hold one mask crop per instance (version 1 GT images hold a label image
    instead)."""
    return (images["mask_array"].is_valid().to_numpy(zero_copy_only=False)
            & images["mask_offset"].is_null().to_numpy(zero_copy_only=False))


def check_triplets(url: str, ids: pa.ChunkedArray, triplets: pa.Table, n_inst: np.ndarray,
                   n_trip: np.ndarray, n_predicates: int | None) -> None:
    """Predicates within the GT's; subject and object indices within their image's
    instances. Bounds over whole columns, the rows of one image only to name a problem
    (no predicate column: its bounds are proven already)."""
    if "predicate" in triplets.column_names and not within(triplets["predicate"],
                                                             n_predicates):
        predicate = ints(triplets, "predicate")
        wrong = (predicate < 0) | (predicate >= below(n_predicates))
        owner = np.repeat(np.arange(len(n_trip)), n_trip)
        bad = first(wrong)
        raise InputError(url, f"predicate {predicate[bad]}", image=ids[owner[bad]].as_py(),
                         field="triplets", expected=in_range(n_predicates, "predicate"))
    for name in ("subject", "object"):
        column = triplets[name]
        if within(column, None) and not np.any(group_max(column.to_numpy(), n_trip) >= n_inst):
            continue
        index = ints(triplets, name)
        bound = np.repeat(n_inst, n_trip)
        bad = first((index < 0) | (index >= bound))
        owner = np.repeat(np.arange(len(n_trip)), n_trip)
        raise InputError(url, f"{name} {index[bad]}", image=ids[owner[bad]].as_py(),
                         field="triplets", expected=f"an instance index below {bound[bad]}")


def check_instances(url: str, images: pa.Table, instances: pa.Table, n_inst: np.ndarray,
                    masked_image: np.ndarray, n_classes: int | None) -> None:
    """Categories within the GT's classes; for images with one mask crop per instance,
    every instance's crop present and inside its image. A column ``instances`` lacks is
    proven already (category, mask_offset) or not needed (no image with crops)."""
    ids = images["image_id"]
    owner = np.repeat(np.arange(len(n_inst)), n_inst)
    if "category" in instances.column_names and not within(instances["category"], n_classes):
        category = ints(instances, "category")
        bad = first((category < 0) | (category >= below(n_classes)))
        raise InputError(url, f"category {category[bad]}", image=ids[owner[bad]].as_py(),
                         field="instances", expected=in_range(n_classes, "thing and stuff"))
    if not masked_image.any():
        return
    masked = masked_image[owner]
    missing = instances["mask_y0"].is_null().to_numpy(zero_copy_only=False)
    if "mask_offset" in instances.column_names:
        missing = missing | (ints(instances, "mask_offset") < 0)
    bad = first(masked & missing)
    if bad is not None:
        raise InputError(url, "an instance without its mask crop", image=ids[owner[bad]].as_py(),
                         field="instances",
                         expected="one mask crop per instance of an image with masks")
    y0, x0, y1, x1 = (ints(instances, c) for c in BOX_COLUMNS)
    h, w = ints(images, "height")[owner], ints(images, "width")[owner]
    outside = masked & ((y0 < 0) | (x0 < 0) | (y1 > h) | (x1 > w) | (y1 < y0) | (x1 < x0))
    bad = first(outside)
    if bad is not None:
        raise InputError(url, f"mask crop rows {y0[bad]}:{y1[bad]}, columns "
                         f"{x0[bad]}:{x1[bad]}", image=ids[owner[bad]].as_py(),
                         field="instances", expected=f"inside the {h[bad]}x{w[bad]} image")
