"""Reader of Open Images V6 relationship annotations as RelDN and BGNN/PySGG read them.

``vrd-{train,val,test}-anno.json``: a JSON list of images, each ``img_fn`` (the id),
``img_size`` ``[width, height]``, ``bbox`` (``[x1, y1, x2, y2]`` pixels), ``det_labels``
(0-based classes) and ``rel`` (``[subject, object, predicate]``, 0-based); beside it
``categories_dict.json`` with the names (``obj``: classes, ``rel``: predicates). As
PySGG's ``open_image.load_annotations`` does for the test split:

- images without relations or without boxes are dropped (counted in the manifest);
- relations are kept as given (duplicates count: no dedup on the test split), boxes as
  given (the ``oiv6`` protocol clips GT boxes to the image when it evaluates).

The file is recognised by its content: a JSON list (a psg.json is an object). Training
statistics (zero-shot types, wIMR weights) count the relations of
``vrd-train-anno.json`` when it lies beside the test file, or come from ``sgdask stats
vrd-train-anno.json``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sgdask.errors import InputError, Option, Text
from sgdask.formats.ingest import BOX_STORE_PARTITION, Progress, read_bytes
from sgdask.formats.psg import GTRecord, write_gt_store
from sgdask.formats.registry import (
    GROUND_TRUTH,
    GT,
    OI_ANNO,
    OI_CATEGORIES,
    OIV6,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.io.archive import ArchiveLimits, printable
from sgdask.io.bounded_json import load_json
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.store.training_stats import STATS_SCHEMA

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec

CATEGORIES_FILE = "categories_dict.json"
TRAIN_FILE = "vrd-train-anno.json"
OI_FORMAT = "oiv6-json"
#: how an Open Images V6 GT store's boxes relate to the images
OI_BOXES = {"coordinates": "pixels [x1, y1, x2, y2] as vrd-*-anno.json gives them",
            "clipped": False, "image_size": "img_size of each image"}


def is_open_images(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a JSON list (vrd-*-anno.json)."""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["


def category_names(doc: Any, file: str) -> dict[str, list[str]]:
    """categories_dict.json's names as a GT store's manifest keeps them."""
    if not isinstance(doc, dict):
        raise InputError(file, "not a JSON object", expected="{\"obj\": [...], \"rel\": [...]}")
    out = {}
    for key, field in (("obj", "thing_classes"), ("rel", "predicate_classes")):
        names = doc.get(key)
        if not isinstance(names, list) or not names:
            raise InputError(file, "missing or not a list of names", field=key)
        out[field] = [str(n) for n in names]
    return {**out, "stuff_classes": []}


def _entries(doc: Any, file: str) -> list[dict[str, Any]]:
    if not isinstance(doc, list):
        raise InputError(file, "not a JSON list of images",
                         expected="vrd-*-anno.json: [{img_fn, img_size, bbox, det_labels, rel}]")
    for index, entry in enumerate(doc):
        if not isinstance(entry, dict):
            raise InputError(file, "not an object", field=f"[{index}]")
    return doc


#: what each field must hold, for its one-line error
FIELD_SHAPES = {"bbox": "[[x1, y1, x2, y2], ...]", "det_labels": "[label, ...]",
                "rel": "[[subject, object, predicate], ...]", "img_size": "[width, height]"}
#: largest image side (pixels) and integer field value: what the store's int32 columns hold
INT32_MAX = 2**31 - 1


def _array(entry: dict[str, Any], key: str, shape: tuple[int, ...], file: str,
           image: str, dtype: type) -> np.ndarray:
    """A field as an array of ``shape`` (-1: any length), or the InputError naming it.

    Types are checked, never converted: an integer field holds JSON integers in
    0..2^31-1 (not 0.9, which numpy would truncate to 0, nor "1", 1e30, 2^63 or
    Infinity), a float field numbers (not strings, not booleans)."""
    value = entry.get(key)
    kinds = "iu" if dtype is np.int64 else "iuf"
    try:
        arr = np.asarray(value if value is not None else [])
        if arr.size == 0:
            arr = np.empty((0, *shape[1:]), dtype=dtype)
        if arr.ndim != len(shape) or any(s not in (-1, n) for s, n in zip(shape, arr.shape,
                                                                           strict=True)):
            raise ValueError(f"shape {arr.shape}")
    except (TypeError, ValueError, OverflowError) as err:
        raise InputError(file, f"malformed ({printable(str(err))})", image=image, field=key,
                         expected=FIELD_SHAPES[key]) from None
    if arr.dtype.kind not in kinds:
        raise InputError(file, f"holds {_first_not(arr, kinds)}", image=image, field=key,
                         expected=FIELD_SHAPES[key] + (" of integers" if kinds == "iu"
                                                       else " of numbers"))
    if kinds == "iu" and arr.size and (arr.min() < 0 or arr.max() > INT32_MAX):
        raise InputError(file, f"{arr.min()}..{arr.max()}", image=image, field=key,
                         expected=f"integers in 0..{INT32_MAX}")
    arr = arr.astype(dtype)
    if dtype is np.float64 and not np.isfinite(arr).all():
        raise InputError(file, "not finite", image=image, field=key)
    return arr


def _first_not(arr: np.ndarray, kinds: str) -> str:
    """The first value of a field that is not of the ``kinds`` asked for, shown short."""
    for value in arr.reshape(-1).tolist():
        bad = isinstance(value, bool | str) or (kinds == "iu" and not isinstance(value, int))
        if bad or not isinstance(value, int | float):
            return printable(repr(value))[:40]
    return f"values of type {arr.dtype}"


def _record(entry: dict[str, Any], file: str, n_classes: int, n_predicates: int
            ) -> GTRecord:
    image = entry.get("img_fn")
    if not isinstance(image, str | int) or isinstance(image, bool):
        raise InputError(file, "missing or not a string", field="img_fn")
    image = str(image)
    width, height = (int(v) for v in _array(entry, "img_size", (2,), file, image, np.int64))
    boxes = _array(entry, "bbox", (-1, 4), file, image, np.float64)
    labels = _array(entry, "det_labels", (-1,), file, image, np.int64)
    rels = _array(entry, "rel", (-1, 3), file, image, np.int64)
    checks = [
        (len(labels) != len(boxes), "det_labels", f"{len(labels)} labels for {len(boxes)} "
         "boxes", "one label per box"),
        (width <= 0 or height <= 0, "img_size", f"{width} x {height}", "positive sizes"),
        (((labels < 0) | (labels >= n_classes)).any(), "det_labels",
         f"label {labels.min(initial=0)}..{labels.max(initial=0)}",
         f"labels in 0..{n_classes - 1} (categories_dict.json's obj)"),
        (((rels[:, :2] < 0) | (rels[:, :2] >= len(boxes))).any(), "rel",
         "a box index out of range", f"indices in 0..{len(boxes) - 1}"),
        (((rels[:, 2] < 0) | (rels[:, 2] >= n_predicates)).any(), "rel",
         "a predicate out of range", f"predicates in 0..{n_predicates - 1} "
         "(categories_dict.json's rel)"),
        ((rels[:, 0] == rels[:, 1]).any(), "rel", "a relation of a box with itself",
         "subject != object"),
    ]
    for bad, field, what, expected in checks:
        if bad:
            raise InputError(file, what, image=image, field=field, expected=expected)
    return GTRecord(image, height, width, labels, boxes, None, rels, None)


def evaluated_records(doc: Any, file: str, names: dict[str, list[str]]
                 ) -> tuple[list[GTRecord], dict[str, int]]:
    """The evaluated images of a vrd-*-anno.json in file order (those with boxes and
    relations), and how many were dropped for lacking either."""
    n_classes, n_predicates = len(names["thing_classes"]), len(names["predicate_classes"])
    records, seen = [], set()
    dropped = {"no_boxes": 0, "no_relations": 0}
    for entry in _entries(doc, file):
        record = _record(entry, file, n_classes, n_predicates)
        if record.image_id in seen:
            raise InputError(file, "a second image of this img_fn", image=record.image_id,
                             field="img_fn", expected="each image once")
        seen.add(record.image_id)
        if not len(record.boxes):
            dropped["no_boxes"] += 1
        elif not len(record.relations):
            dropped["no_relations"] += 1
        else:
            records.append(record)
    return records, dropped


def oi_train_stats(doc: Any, file: str, names: dict[str, list[str]] | None = None
                   ) -> pa.Table:
    """Triplet-type counts of a vrd-train-anno.json (every relation as given); labels and
    predicates within ``names`` (categories_dict.json's) when given."""
    counts: Counter[tuple[int, int, int]] = Counter()
    n_classes = len(names["thing_classes"]) if names else INT32_MAX + 1
    n_predicates = len(names["predicate_classes"]) if names else INT32_MAX + 1
    for entry in _entries(doc, file):
        image = printable(str(entry.get("img_fn")))[:100]
        labels = _array(entry, "det_labels", (-1,), file, image, np.int64)
        rels = _array(entry, "rel", (-1, 3), file, image, np.int64)
        if ((rels[:, :2] < 0) | (rels[:, :2] >= len(labels))).any():
            raise InputError(file, "a box index out of range", image=image, field="rel")
        if (labels >= n_classes).any():
            raise InputError(file, f"label {labels.max()} out of range", image=image,
                             field="det_labels", expected=f"labels in 0..{n_classes - 1} "
                             "(categories_dict.json's obj)")
        if (rels[:, 2] >= n_predicates).any():
            raise InputError(file, f"predicate {rels[:, 2].max()} out of range", image=image,
                             field="rel", expected=f"predicates in 0..{n_predicates - 1} "
                             "(categories_dict.json's rel)")
        counts.update(zip(labels[rels[:, 0]].tolist(), labels[rels[:, 1]].tolist(),
                          rels[:, 2].tolist(), strict=True))
    rows = sorted(counts.items())
    return pa.table({"subject_category": [r[0][0] for r in rows],
                     "object_category": [r[0][1] for r in rows],
                     "predicate": [r[0][2] for r in rows],
                     "count": [r[1] for r in rows]}, schema=STATS_SCHEMA)


def ingest_oi(anno: str, out: str, categories: str | None = None,
              storage_options: StorageOptions | None = None,
              partition_size: int = BOX_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              limits: ArchiveLimits | None = None) -> dict[str, Any]:
    """Open Images V6 (``vrd-test-anno.json`` and ``categories_dict.json``, beside it
    unless ``categories`` names it) -> box GT store, read as PySGG reads it
    (``evaluated_records``); ``vrd-train-anno.json`` beside it gives the training
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

# --------------------------------------------------------------------------- the format

def _ingest(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
            categories: str | None = None, **kwargs: Any) -> dict[str, Any]:
    return ingest_oi(url, out, categories, options, **kwargs)


FORMAT = register(Format(
    OIV6, GT, lambda head, name: is_open_images(head), ("boxes", "relations", "training_stats"),
    "vrd-test-anno.json with categories_dict.json (Open Images V6, as RelDN / PySGG)",
    _ingest, options=("categories",)))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: the annotation list (a list of objects with
# these keys), its categories_dict.json (an object with these keys)
_OI_KEYS, _OI_CATEGORY_KEYS = {"img_fn", "det_labels"}, {"obj", "rel"}


def _anno_hint(role: str) -> Text | None:
    if role in ("submission file", "results"):
        return GROUND_TRUTH
    return ("ingest it with sgdask ingest-gt, then pass the store as ", Option("gt"))


register_signature(Signature(
    OI_ANNO, "Open Images V6 annotations (vrd-*-anno.json)", "list", 10,
    lambda head, keys: set(keys) >= _OI_KEYS,
    accepted_as=frozenset({"gt source", "psg"}), hint=_anno_hint))
register_signature(Signature(
    OI_CATEGORIES, "Open Images V6's categories_dict.json", "object", 30,
    lambda head, keys: set(keys) >= _OI_CATEGORY_KEYS,
    hint=lambda role: ("pass it to sgdask ingest-gt as ", Option("categories"))))
