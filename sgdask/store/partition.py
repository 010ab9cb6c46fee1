"""Reading one evaluation partition from a store into kernel inputs (ImageGT, ImagePred).

Per store part, each table is read once (only the columns evaluation needs) and its rows
are sliced per image by the images table's counts (tables are grouped by image, in image
order, graph list before NG list), so no string column of the large tables is touched. A
part's masks are one contiguous read, decoded once for all its images (one compiled pass
undoing the row XOR), and an image's masks are views into that buffer.

Stores of format version 1 (GT label images, byte-packed crops) are converted on read;
stores before version 4 have no crowd flags (``ImageGT.crowd`` None). A part with a segments
table (version 7) gives its images ``ImagePred.segments``: their masks are in the part's
mask array after the instances', decoded with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sgdask.io.codecs.words import sparse_problem, unpack_sparse, v1_crop_words, xor_rows
from sgdask.io.units import unit_column
from sgdask.kernels.bits import word_layout
from sgdask.store.store import (
    CROWD_VERSION,
    PAIRS_VERSION,
    SEGMENT_SCHEMA,
    SEGMENTS,
    Corrupt,
    StoreReader,
)
from sgdask.types import BitMasks, ImageGT, ImagePred, TopPredicates

IMAGE_COLUMNS = ["image_id", "height", "width", "n_instances", "n_graph", "n_ng",
                 "mask_array", "mask_offset"]
PAIR_COLUMNS = ["subject", "object", "predicate", "score"]
INSTANCE_COLUMNS = ["category", "x1", "y1", "x2", "y2", "score", "mask_y0", "mask_x0",
                    "mask_y1", "mask_x1", "mask_offset", "area"]
TRIPLET_COLUMNS = ["subject", "object", "predicate"]
SEGMENT_BOX_COLUMNS = ["mask_y0", "mask_x0", "mask_y1", "mask_x1"]


def column(table: pa.Table, name: str, dtype: type = np.int64) -> np.ndarray:
    """A column as numpy (nulls become NaN for float dtypes)."""
    return table[name].to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def starts_of(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


@dataclass
class PartRows:
    """One part's rows as numpy, restricted to the wanted images (in part order)."""

    ids: list[str]
    height: np.ndarray
    width: np.ndarray
    n_instances: np.ndarray
    n_graph: np.ndarray
    n_ng: np.ndarray
    has_masks: np.ndarray
    label_offset: np.ndarray  # version 1 GT: the label image's offset in the mask array
    mask_array: str | None
    inst: np.ndarray  # first instance row of each image
    trip: np.ndarray  # first triplet row of each image
    category: np.ndarray
    boxes: np.ndarray
    score: np.ndarray
    mask_boxes: np.ndarray
    mask_offset: np.ndarray
    area: np.ndarray
    spo: np.ndarray
    n_pairs: np.ndarray  # pair rows after the NG list (``TopPredicates``; 0 before format 5)
    pair_scores: np.ndarray | None  # the triplet rows' scores (read when the store has pairs)
    has_boxes: np.ndarray  # per image: every instance has a box
    has_scores: np.ndarray  # per image: instances, each with a score
    has_areas: np.ndarray  # per image: every instance has an area
    crowd: np.ndarray | None  # per instance, iscrowd (version 4 on; null read as false)
    has_crowd: np.ndarray  # per image: every instance has its iscrowd
    units: dict[str, list[str]]  # per unit the store records, each image's unit id
    segments: SegmentRows | None = None  # the part's segments table (version 7)


@dataclass
class SegmentRows:
    """A part's segments table (format 7), for the wanted images: per image its first
    segment row (-1: no segments of its own, its instances are scored), per segment row its
    category, mask box (y0, x0, y1, x1) and word offset."""

    first: np.ndarray
    count: np.ndarray
    category: np.ndarray
    mask_boxes: np.ndarray
    mask_offset: np.ndarray


def segment_rows(reader: StoreReader, part: str, ids: list[str], kept: list[str],
                 masked: set[str]) -> SegmentRows | None:
    """The segments table of ``part`` (None: the part has none) for the ``kept`` images of
    its ``ids``; every image in it must be one of the part's, once, with masks."""
    if part not in reader.segmented:
        return None
    rel = f"{SEGMENTS}/{part}.parquet"
    table = reader.read_table(rel, SEGMENT_SCHEMA.names)
    seg_ids = table["image_id"].to_pylist()
    row_of = {image_id: r for r, image_id in enumerate(seg_ids)}
    lists = table[SEGMENTS].combine_chunks()
    flat = lists.flatten()
    fields = [flat.field(c) for c in ("category", *SEGMENT_BOX_COLUMNS, "mask_offset")]
    if (len(row_of) != len(seg_ids) or not set(row_of) <= set(ids) & masked
            or lists.null_count or flat.null_count or any(f.null_count for f in fields)):
        raise Corrupt(reader.url, rel, "corrupt (its images must be the part's, each once "
                      "and with masks, every segment with its category, box and offset)")
    counts = np.diff(lists.offsets.to_numpy()).astype(np.int64)
    rows = np.array([row_of.get(i, -1) for i in kept], dtype=np.int64)
    return SegmentRows(
        first=np.where(rows >= 0, starts_of(counts)[rows], -1),
        count=np.append(counts, 0)[rows],
        category=fields[0].to_numpy(zero_copy_only=False).astype(np.int64),
        mask_boxes=np.stack([f.to_numpy(zero_copy_only=False).astype(np.float64)
                             for f in fields[1:5]], 1) if len(flat) else np.empty((0, 4)),
        mask_offset=fields[5].to_numpy(zero_copy_only=False).astype(np.float64))


def part_rows(reader: StoreReader, part: str, wanted: set[str]) -> PartRows:
    """The rows of the wanted images of one part."""
    with_pairs = reader.version >= PAIRS_VERSION
    unit_columns = [unit_column(u) for u in reader.units]
    images = reader.table("images", [part], columns=IMAGE_COLUMNS + (
        ["n_pairs"] if with_pairs else []) + unit_columns)
    ids = images["image_id"].to_pylist()
    n_inst = column(images, "n_instances")
    n_pairs = column(images, "n_pairs") if with_pairs else np.zeros(len(ids), np.int64)
    n_trip = column(images, "n_graph") + column(images, "n_ng") + n_pairs
    scored = bool(reader.manifest.get("pair_scores"))
    inst_all, trip_all = starts_of(n_inst), starts_of(n_trip)
    keep = np.array([i in wanted for i in ids], dtype=bool)
    with_crowd = reader.version >= CROWD_VERSION
    instances = reader.table("instances", [part], columns=INSTANCE_COLUMNS
                             + (["iscrowd"] if with_crowd else []))
    triplets = reader.table("triplets", [part],
                            columns=PAIR_COLUMNS if scored else TRIPLET_COLUMNS)
    for name, table, starts in (("instances", instances, inst_all),
                                ("triplets", triplets, trip_all)):
        if len(table) != starts[-1]:
            raise Corrupt(reader.url, f"{name}/{part}.parquet",
                          f"corrupt ({len(table)} rows, the images table counts "
                          f"{starts[-1]})")
    n_graph, n_ng = column(images, "n_graph"), column(images, "n_ng")
    inst, trip = kept_rows(instances, inst_all, keep), kept_rows(triplets, trip_all, keep)
    arrays = images["mask_array"].to_pylist()
    n = len(inst)
    inst_starts = starts_of(n_inst[keep])
    boxes = np.stack([column(inst, c, np.float64) for c in ("x1", "y1", "x2", "y2")], 1) \
        if n else np.empty((0, 4))
    score = column(inst, "score", np.float64)
    area = column(inst, "area", np.float64)
    crowd = (inst["iscrowd"].cast(pa.float64()).to_numpy(zero_copy_only=False) if with_crowd
             else np.full(n, np.nan))  # null (a submission's): NaN
    kept = [i for i, k in zip(ids, keep, strict=True) if k]
    masked = {i for i, a in zip(ids, arrays, strict=True) if a is not None}
    return PartRows(
        ids=kept,
        height=column(images, "height")[keep], width=column(images, "width")[keep],
        n_instances=n_inst[keep], n_graph=n_graph[keep], n_ng=n_ng[keep],
        has_masks=np.array([a is not None for a in arrays], dtype=bool)[keep],
        label_offset=column(images, "mask_offset", np.float64)[keep],
        mask_array=next((a for a in arrays if a is not None), None),
        inst=inst_starts, trip=starts_of(n_trip[keep]),
        category=column(inst, "category"), boxes=boxes, score=score,
        mask_boxes=np.stack([column(inst, c, np.float64)
                             for c in ("mask_y0", "mask_x0", "mask_y1", "mask_x1")], 1)
        if n else np.empty((0, 4)),
        mask_offset=column(inst, "mask_offset", np.float64), area=area,
        spo=np.stack([column(trip, c) for c in TRIPLET_COLUMNS], 1) if len(trip)
        else np.empty((0, 3), dtype=np.int64),
        n_pairs=n_pairs[keep],
        pair_scores=column(trip, "score", np.float64) if scored else None,
        has_boxes=~any_per_image(np.isnan(boxes).any(axis=1), inst_starts),
        has_scores=~any_per_image(np.isnan(score), inst_starts) & (np.diff(inst_starts) > 0),
        has_areas=~any_per_image(np.isnan(area), inst_starts),
        crowd=np.nan_to_num(crowd).astype(bool) if with_crowd else None,
        has_crowd=~any_per_image(np.isnan(crowd), inst_starts),
        units={u: [v for v, k in zip(images[c].to_pylist(), keep, strict=True) if k]
               for u, c in zip(reader.units, unit_columns, strict=True)},
        segments=segment_rows(reader, part, ids, kept, masked))


def kept_rows(table: pa.Table, starts: np.ndarray, keep: np.ndarray) -> pa.Table:
    """The rows of the kept images (image i's rows: ``starts[i]:starts[i + 1]``)."""
    if keep.all():
        return table
    index = np.flatnonzero(keep)
    sizes = starts[index + 1] - starts[index]
    rows = np.repeat(starts[index] - starts_of(sizes)[:-1], sizes) + np.arange(sizes.sum())
    return table.take(pa.array(rows, pa.int64()))


def any_per_image(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per image, whether any of its rows (``starts[i]:starts[i + 1]``) is flagged."""
    flagged = starts_of(flags)  # flagged rows before each row
    return flagged[starts[1:]] > flagged[starts[:-1]]


class PartMasks:
    """The masks of one part's wanted images, decoded once (version 2: word masks;
    version 1 predictions: byte-packed crops converted to words; version 1 GT: label
    images, packed per image on first use). The masks of a segments table (version 7)
    follow the instances' (``segments_of``)."""

    def __init__(self, reader: StoreReader, rows: PartRows) -> None:
        self.reader, self.rows = reader, rows
        self.words = np.empty(0, dtype=np.uint64)
        self.boxes = np.empty((0, 4), dtype=np.int64)
        self.starts = np.empty(0, dtype=np.int64)
        self.labels: dict[int, tuple[int, int]] = {}
        if rows.mask_array is None:
            return
        mask_boxes, mask_offset = rows.mask_boxes, rows.mask_offset
        if rows.segments is not None:
            mask_boxes = np.concatenate([mask_boxes, rows.segments.mask_boxes])
            mask_offset = np.concatenate([mask_offset, rows.segments.mask_offset])
        with_masks = ~np.isnan(mask_offset)
        self.boxes = np.where(with_masks[:, None], mask_boxes, 0).astype(np.int64)
        if reader.version == 1 and not np.isnan(rows.label_offset).all():
            return  # version 1 GT: label images, read per image
        offsets = np.where(with_masks, mask_offset, 0).astype(np.int64)
        if reader.version == 1:
            self.v1_crops(offsets, with_masks)
        else:
            self.v2_words(offsets, with_masks)

    def v2_words(self, offsets: np.ndarray, with_masks: np.ndarray) -> None:
        if not with_masks.any():
            return
        array = self.rows.mask_array
        data = self.reader.read_masks(array)
        problem = sparse_problem(data)
        if problem is None:
            self.words = unpack_sparse(data)
            problem = layout_problem(self.boxes, offsets, with_masks, len(self.words))
        if problem is not None:
            raise Corrupt(self.reader.url, f"masks/{array}", f"corrupt ({problem})")
        self.starts = offsets
        xor_rows(self.boxes, self.starts, self.words, True)

    def v1_crops(self, offsets: np.ndarray, with_masks: np.ndarray) -> None:
        sizes = (self.boxes[:, 2] - self.boxes[:, 0]) * ((self.boxes[:, 3] - self.boxes[:, 1]
                                                          + 7) // 8)
        if not with_masks.any():
            return
        lo = int(offsets[with_masks].min())
        hi = int((offsets + sizes)[with_masks].max())
        data = self.reader.read_masks(self.rows.mask_array, lo, hi)
        self.starts, self.words = v1_crop_words(data, offsets - lo, self.boxes)

    def of(self, i: int, shape: tuple[int, int]) -> BitMasks:
        a, b = self.rows.inst[i], self.rows.inst[i + 1]
        return BitMasks(shape, self.boxes[a:b], self.starts[a:b], self.words)

    def segments_of(self, i: int, shape: tuple[int, int]
                    ) -> tuple[BitMasks, np.ndarray] | None:
        """Image i's segments and their categories (None: it has none of its own)."""
        seg = self.rows.segments
        if seg is None or seg.first[i] < 0:
            return None
        first, last = int(seg.first[i]), int(seg.first[i] + seg.count[i])
        a, b = len(self.rows.mask_offset) + first, len(self.rows.mask_offset) + last
        return (BitMasks(shape, self.boxes[a:b], self.starts[a:b], self.words),
                seg.category[first:last])

    def label_image(self, i: int) -> np.ndarray:
        """Version 1 GT: the image's label image."""
        rows = self.rows
        h, w, start = int(rows.height[i]), int(rows.width[i]), int(rows.label_offset[i])
        return self.reader.read_masks(rows.mask_array, start, start + h * w).reshape(h, w)


def layout_problem(boxes: np.ndarray, offsets: np.ndarray, with_masks: np.ndarray,
                   n_words: int) -> str | None:
    """Whether every mask (box + offset) lies inside the decoded words."""
    if not with_masks.any():
        return None
    if (boxes[with_masks] < 0).any() or (boxes[with_masks, 2:] < boxes[with_masks, :2]).any():
        return "a mask box is negative or inverted"
    sizes = np.diff(word_layout(boxes))
    ends = (offsets + sizes)[with_masks]
    if (offsets[with_masks] < 0).any() or int(ends.max()) > n_words:
        return f"mask offsets reach word {int(ends.max())} of {n_words}"
    return None


def instance_fields(rows: PartRows, i: int) -> tuple[np.ndarray, np.ndarray | None,
                                                      np.ndarray | None]:
    """(categories, boxes or None, scores or None) of image i."""
    a, b = rows.inst[i], rows.inst[i + 1]
    return (rows.category[a:b], rows.boxes[a:b] if rows.has_boxes[i] else None,
            rows.score[a:b] if rows.has_scores[i] else None)


def load_gt_images(reader: StoreReader, parts: list[str], ids: list[str]) -> Iterator[ImageGT]:
    """GT images of ``ids``, in the order of the parts (sorted ids)."""
    wanted = set(ids)
    for part in parts:
        rows = part_rows(reader, part, wanted)
        masks = PartMasks(reader, rows)
        for i, image_id in enumerate(rows.ids):
            labels, boxes, _ = instance_fields(rows, i)
            t = rows.trip[i]
            relations = rows.spo[t:t + rows.n_graph[i]]
            shape = (int(rows.height[i]), int(rows.width[i]))
            units = {u: of[i] for u, of in rows.units.items() if of[i] is not None}
            if not rows.has_masks[i]:
                yield ImageGT(image_id, labels, relations, boxes, size=shape, units=units)
                continue
            a, b = rows.inst[i], rows.inst[i + 1]
            areas = rows.area[a:b].astype(np.int64) if rows.has_areas[i] else None
            crowd = rows.crowd[a:b] if rows.crowd is not None and rows.has_crowd[i] else None
            if reader.version == 1:
                yield ImageGT(image_id, labels, relations, boxes, masks.label_image(i), areas,
                              size=shape, units=units)
            else:
                yield ImageGT(image_id, labels, relations, boxes, areas=areas,
                              masks=masks.of(i, shape), size=shape, crowd=crowd,
                              units=units)


def load_predictions(reader: StoreReader, parts: list[str], ids: list[str]
                     ) -> dict[str, ImagePred]:
    """image id -> prediction, for the images of ``ids`` the store has."""
    wanted = set(ids)
    out = {}
    for part in parts:
        rows = part_rows(reader, part, wanted)
        masks = PartMasks(reader, rows)
        for i, image_id in enumerate(rows.ids):
            labels, boxes, scores = instance_fields(rows, i)
            t, n_graph = rows.trip[i], rows.n_graph[i]
            graph = rows.spo[t:t + n_graph]
            end = rows.trip[i + 1] - rows.n_pairs[i]
            ng = rows.spo[t + n_graph:end]
            bits = (masks.of(i, (int(rows.height[i]), int(rows.width[i])))
                    if rows.has_masks[i] else None)
            out[image_id] = ImagePred(image_id, labels, graph, ng, boxes, bits, scores,
                                      _pairs_of(reader, rows, end, rows.trip[i + 1]),
                                      masks.segments_of(i, (int(rows.height[i]),
                                                            int(rows.width[i]))))
    return out


def _pairs_of(reader: StoreReader, rows: PartRows, start: int, end: int
             ) -> TopPredicates | None:
    """The pair rows ``start:end`` of a store converted ``--from-scores`` (None for a store
    without them)."""
    per_pair = reader.manifest.get("pair_scores")
    if not per_pair or rows.pair_scores is None:
        return None
    spo = rows.spo[start:end]
    return TopPredicates(np.ascontiguousarray(spo[:, 0]), np.ascontiguousarray(spo[:, 1]),
                         np.ascontiguousarray(spo[:, 2]),
                         rows.pair_scores[start:end].astype(np.float32), int(per_pair))
