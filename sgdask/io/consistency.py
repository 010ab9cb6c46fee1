"""The GT decides: a submission store checked against the GT store from the tables alone,
before any kernel runs (``evaluate``, ``evaluate-many``, ``rerank``, ``compare``).

Image ids among the GT's, each image's height and width equal to the GT image's (when the
submission records a size), category ids within the GT's classes, predicate ids within
its predicates, subject and object indices within the image's instances, one mask crop per
instance of an image with masks, and every crop box inside its image. Vectorized over
the Parquet columns: a few milliseconds per thousand images. The first problem found is
raised as one ``InputError`` naming the store, the image and the field.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sgdask.errors import InputError
from sgdask.io.store import Corrupt, StoreReader

INSTANCE_CHECK_COLUMNS = ["category", "mask_y0", "mask_x0", "mask_y1", "mask_x1",
                          "mask_offset"]
TRIPLET_CHECK_COLUMNS = ["subject", "object", "predicate"]


def ints(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as int64 (nulls as -1)."""
    column = table[name]
    if column.null_count:
        column = pc.fill_null(column, -1)
    return column.to_numpy().astype(np.int64, copy=False)


def first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def below(count: int | None) -> int:
    return np.iinfo(np.int64).max if count is None else count


def in_range(count: int | None, what: str) -> str:
    return "at least 0" if count is None else f"0 to {count - 1}, the GT's {what} classes"


def check_against_gt(sub: StoreReader, gt: StoreReader) -> None:
    """Raise the first inconsistency of submission store ``sub`` with GT store ``gt``."""
    manifest = gt.manifest
    n_classes = len(manifest["thing_classes"]) + len(manifest["stuff_classes"])
    n_predicates = len(manifest["predicate_classes"])
    gt_images = gt.images()
    images = sub.images()
    ids = images["image_id"]
    url = sub.url
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
    check_contents(sub, n_classes, n_predicates)


def check_contents(sub: StoreReader, n_classes: int | None, n_predicates: int | None) -> None:
    """The store's tables against each other: row counts, instance indices, mask crops
    inside their images, and category and predicate ids within the given class counts
    (None: not checked)."""
    images = sub.images()
    ids = images["image_id"]
    url = sub.url
    height, width = ints(images, "height"), ints(images, "width")
    # images with one mask crop per instance (version 1 GT images hold a label image)
    has_masks = (images["mask_array"].is_valid().to_numpy(zero_copy_only=False)
                 & images["mask_offset"].is_null().to_numpy(zero_copy_only=False))
    parts = [p["name"] for p in sub.parts]
    n_inst = ints(images, "n_instances")
    instances = sub.table("instances", parts, columns=INSTANCE_CHECK_COLUMNS)
    check_instances(sub, ids, instances, n_inst, has_masks, height, width, n_classes)
    n_trip = ints(images, "n_graph") + ints(images, "n_ng")
    triplets = sub.table("triplets", parts, columns=TRIPLET_CHECK_COLUMNS)
    if len(triplets) != n_trip.sum():
        raise Corrupt(url, "triplets/", f"corrupt ({len(triplets)} triplet rows, the images "
                      f"table counts {int(n_trip.sum())})")
    owner = np.repeat(np.arange(len(images)), n_trip)
    predicate = ints(triplets, "predicate")
    bad = first((predicate < 0) | (predicate >= below(n_predicates)))
    if bad is not None:
        raise InputError(url, f"predicate {predicate[bad]}", image=ids[owner[bad]].as_py(),
                         field="triplets", expected=in_range(n_predicates, "predicate"))
    for name in ("subject", "object"):
        index = ints(triplets, name)
        bad = first((index < 0) | (index >= n_inst[owner]))
        if bad is not None:
            raise InputError(url, f"{name} {index[bad]}", image=ids[owner[bad]].as_py(),
                             field="triplets",
                             expected=f"an instance index below {n_inst[owner[bad]]}")


def check_instances(sub: StoreReader, ids: pa.ChunkedArray, instances: pa.Table,
                    n_inst: np.ndarray, has_masks: np.ndarray, height: np.ndarray,
                    width: np.ndarray, n_classes: int | None) -> None:
    url = sub.url
    if len(instances) != n_inst.sum():
        raise Corrupt(url, "instances/", f"corrupt ({len(instances)} instance rows, the "
                      f"images table counts {int(n_inst.sum())})")
    owner = np.repeat(np.arange(len(n_inst)), n_inst)
    category = ints(instances, "category")
    bad = first((category < 0) | (category >= below(n_classes)))
    if bad is not None:
        raise InputError(url, f"category {category[bad]}", image=ids[owner[bad]].as_py(),
                         field="instances", expected=in_range(n_classes, "thing and stuff"))
    masked = has_masks[owner]
    offset = ints(instances, "mask_offset")
    box = np.stack([ints(instances, c) for c in ("mask_y0", "mask_x0", "mask_y1",
                                                 "mask_x1")], 1) if len(instances) \
        else np.zeros((0, 4), np.int64)
    missing = masked & ((offset < 0) | instances["mask_y0"].is_null().to_numpy(
        zero_copy_only=False))
    bad = first(missing)
    if bad is not None:
        raise InputError(url, "an instance without its mask crop", image=ids[owner[bad]].as_py(),
                         field="instances",
                         expected="one mask crop per instance of an image with masks")
    h, w = height[owner], width[owner]
    outside = masked & ((box[:, 0] < 0) | (box[:, 1] < 0) | (box[:, 2] > h) | (box[:, 3] > w)
                        | (box[:, 2] < box[:, 0]) | (box[:, 3] < box[:, 1]))
    bad = first(outside)
    if bad is not None:
        y0, x0, y1, x1 = box[bad].tolist()
        raise InputError(url, f"mask crop rows {y0}:{y1}, columns {x0}:{x1}",
                         image=ids[owner[bad]].as_py(), field="instances",
                         expected=f"inside the {h[bad]}x{w[bad]} image")
