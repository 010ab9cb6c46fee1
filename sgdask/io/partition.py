"""Reading one evaluation partition from the stores into kernel inputs (ImageGT, ImagePred).

Tables of the partition are read at once (small); masks are read one image at a time, so a
task holds the masks of a single image, whatever the partition size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from sgdask.io.store import StoreReader
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
    return table[name].to_numpy(zero_copy_only=False).astype(dtype, copy=False)


class InstanceColumns:
    """Instance table columns as numpy, sliced per image."""

    def __init__(self, table: pa.Table) -> None:
        self.ranges = row_ranges(table)
        self.category = column(table, "category")
        box_cols = [table[c].to_numpy(zero_copy_only=False).astype(np.float64)
                    for c in ("x1", "y1", "x2", "y2")]
        self.boxes = np.stack(box_cols, axis=1) if box_cols[0].size else np.empty((0, 4))
        self.has_box = ~np.isnan(self.boxes).any(axis=1)
        self.score = table["score"].to_numpy(zero_copy_only=False).astype(np.float64)

    def of(self, image_id: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(categories, boxes or None, scores or None) of one image."""
        start, stop = self.ranges.get(image_id, (0, 0))
        boxes = self.boxes[start:stop] if self.has_box[start:stop].all() else None
        scores = self.score[start:stop]
        return (self.category[start:stop], boxes,
                None if np.isnan(scores).any() or stop == start else scores)


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


def load_gt_images(reader: StoreReader, parts: list[str], ids: list[str]
                   ) -> Iterator[ImageGT]:
    """GT images of ``ids`` in order, each with its label image when the store has masks."""
    images = image_rows(reader, parts, ids)
    instances = InstanceColumns(reader.table("instances", parts, ids))
    triplets = TripletColumns(reader.table("triplets", parts, ids))
    for image_id in ids:
        labels, boxes, _ = instances.of(image_id)
        key = images[image_id]["mask_key"]
        yield ImageGT(image_id, labels, triplets.of(image_id, "gt"), boxes,
                      None if key is None else reader.read_mask(key))


def pred_loaders(reader: StoreReader, parts: list[str], ids: list[str]
                 ) -> dict[str, Callable[[], ImagePred]]:
    """image id -> function loading that image's prediction (masks read only when called)."""
    images = image_rows(reader, parts, ids)
    instances = InstanceColumns(reader.table("instances", parts, ids))
    triplets = TripletColumns(reader.table("triplets", parts, ids))

    def loader(image_id: str) -> Callable[[], ImagePred]:
        def load() -> ImagePred:
            labels, boxes, scores = instances.of(image_id)
            key = images[image_id]["mask_key"]
            masks = None if key is None else reader.read_mask(key)
            return ImagePred(image_id, labels, triplets.of(image_id, "graph"),
                             triplets.of(image_id, "ng"), boxes, masks, scores)
        return load

    return {image_id: loader(image_id) for image_id in images}
