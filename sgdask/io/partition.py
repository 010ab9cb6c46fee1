"""Reading one evaluation partition from the stores into kernel inputs (ImageGT, ImagePred).

Tables are read once per partition; mask data is read as one contiguous slice per store
part (parts are small), and a predicted image's crops are unpacked only when it is scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from sgdask.io.store import StoreReader
from sgdask.kernels.masks import packed_size, unpack
from sgdask.types import ImageGT, ImagePred


def row_ranges(table: pa.Table) -> dict[str, tuple[int, int]]:
    """image id -> (start, stop) of its rows (tables are written grouped by image)."""
    ids = np.asarray(table["image_id"].to_pylist(), dtype=object)
    if len(ids) == 0:
        return {}
    change = np.nonzero(ids[1:] != ids[:-1])[0] + 1
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [len(ids)]])
    return {ids[s]: (int(s), int(e)) for s, e in zip(starts, stops, strict=True)}

def column(table: pa.Table, name: str, dtype: type = np.int64) -> np.ndarray:
    """A column as numpy (nulls become NaN for float dtypes)."""
    return table[name].to_numpy(zero_copy_only=False).astype(dtype, copy=False)

class InstanceColumns:
    """Instance table columns as numpy, sliced per image."""

    def __init__(self, table: pa.Table) -> None:
        self.ranges = row_ranges(table)
        self.category = column(table, "category")
        self.boxes = np.stack([column(table, c, np.float64) for c in ("x1", "y1", "x2", "y2")],
                              axis=1) if len(table) else np.empty((0, 4))
        self.has_box = ~np.isnan(self.boxes).any(axis=1)
        self.score = column(table, "score", np.float64)
        self.mask_boxes = np.stack(
            [column(table, c, np.float64) for c in ("mask_y0", "mask_x0", "mask_y1", "mask_x1")],
            axis=1) if len(table) else np.empty((0, 4))
        self.mask_offset = column(table, "mask_offset", np.float64)
        self.area = (column(table, "area", np.float64) if "area" in table.column_names
                     else np.full(len(table), np.nan))

    def of(self, image_id: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(categories, boxes or None, scores or None) of one image."""
        start, stop = self.ranges.get(image_id, (0, 0))
        boxes = self.boxes[start:stop] if self.has_box[start:stop].all() else None
        scores = self.score[start:stop]
        return (self.category[start:stop], boxes,
                None if np.isnan(scores).any() or stop == start else scores)

    def areas_of(self, image_id: str) -> np.ndarray | None:
        """GT mask areas of one image (None when the store predates them)."""
        start, stop = self.ranges.get(image_id, (0, 0))
        areas = self.area[start:stop]
        return None if np.isnan(areas).any() else areas.astype(np.int64)

    def mask_layout(self, image_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(crop boxes, absolute byte offsets with an end marker) of one image's masks."""
        start, stop = self.ranges.get(image_id, (0, 0))
        boxes = self.mask_boxes[start:stop].astype(np.int64)
        offsets = self.mask_offset[start:stop].astype(np.int64)
        end = offsets[-1] + packed_size(boxes[-1:])[0] if len(offsets) else 0
        return boxes, np.append(offsets, end)

class TripletColumns:
    """Triplet table columns as numpy, sliced per image and list."""

    def __init__(self, table: pa.Table) -> None:
        self.ranges = row_ranges(table)
        self.lists = np.asarray(table["list"].cast(pa.string()).to_pylist(), dtype=object)
        self.spo = np.stack([column(table, c) for c in ("subject", "object", "predicate")],
                            axis=1) if len(table) else np.empty((0, 3), dtype=np.int64)

    def of(self, image_id: str, list_name: str) -> np.ndarray:
        start, stop = self.ranges.get(image_id, (0, 0))
        rows = self.spo[start:stop]
        return rows[self.lists[start:stop] == list_name]

def image_rows(reader: StoreReader, parts: list[str], ids: list[str]) -> dict[str, dict]:
    table = reader.table("images", parts, ids)
    return {row["image_id"]: row for row in table.to_pylist()}

class MaskSlices:
    """One contiguous read per mask array covering the requested ranges, then slices."""

    def __init__(self, reader: StoreReader, ranges: dict[str, list[tuple[int, int]]]) -> None:
        self.buffers: dict[str, tuple[int, np.ndarray]] = {}
        for array, spans in ranges.items():
            lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
            self.buffers[array] = (lo, reader.read_masks(array, lo, hi))

    def get(self, array: str, start: int, stop: int) -> np.ndarray:
        base, data = self.buffers[array]
        return data[start - base:stop - base]

def load_gt_images(reader: StoreReader, parts: list[str], ids: list[str]
                   ) -> Iterator[ImageGT]:
    """GT images of ``ids`` in order, each with its label image when the store has masks."""
    images = image_rows(reader, parts, ids)
    instances = InstanceColumns(reader.table("instances", parts, ids))
    triplets = TripletColumns(reader.table("triplets", parts, ids))
    spans: dict[str, list[tuple[int, int]]] = {}
    for row in images.values():
        if row["mask_array"] is not None:
            start = row["mask_offset"]
            spans.setdefault(row["mask_array"], []).append(
                (start, start + row["height"] * row["width"]))
    masks = MaskSlices(reader, spans)
    for image_id in ids:
        labels, boxes, _ = instances.of(image_id)
        row = images[image_id]
        label_image = None
        if row["mask_array"] is not None:
            start = row["mask_offset"]
            label_image = masks.get(row["mask_array"], start,
                                    start + row["height"] * row["width"]
                                    ).reshape(row["height"], row["width"])
        yield ImageGT(image_id, labels, triplets.of(image_id, "gt"), boxes, label_image,
                      instances.areas_of(image_id) if label_image is not None else None)

def pred_loaders(reader: StoreReader, parts: list[str], ids: list[str]
                 ) -> dict[str, Callable[[], ImagePred]]:
    """image id -> function building that image's prediction (crops unpacked when called)."""
    images = image_rows(reader, parts, ids)
    instances = InstanceColumns(reader.table("instances", parts, ids))
    triplets = TripletColumns(reader.table("triplets", parts, ids))
    spans: dict[str, list[tuple[int, int]]] = {}
    for image_id, row in images.items():
        if row["mask_array"] is None:
            continue
        boxes, offsets = instances.mask_layout(image_id)
        if len(boxes):
            spans.setdefault(row["mask_array"], []).append((offsets[0], offsets[-1]))
    masks = MaskSlices(reader, spans)

    def loader(image_id: str) -> Callable[[], ImagePred]:
        def load() -> ImagePred:
            labels, boxes, scores = instances.of(image_id)
            row = images[image_id]
            crops = None
            if row["mask_array"] is not None:
                mask_boxes, offsets = instances.mask_layout(image_id)
                data = (masks.get(row["mask_array"], offsets[0], offsets[-1])
                        if len(mask_boxes) else np.empty(0, dtype=np.uint8))
                crops = unpack(data, offsets - offsets[0], mask_boxes,
                               (row["height"], row["width"]))
            return ImagePred(image_id, labels, triplets.of(image_id, "graph"),
                             triplets.of(image_id, "ng"), boxes, crops, scores)
        return load

    return {image_id: loader(image_id) for image_id in images}
