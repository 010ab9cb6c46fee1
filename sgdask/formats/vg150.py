"""Reader of Visual Genome ground truth in the VG150 layout of Scene-Graph-Benchmark.pytorch.

Three files: ``VG-SGG-with-attri.h5`` (boxes, labels, relations, split flags),
``VG-SGG-dicts-with-attri.json`` (class and predicate names) and ``image_data.json`` (image
ids and sizes). They are read the way that repository's ``visual_genome.py`` reads them
(``load_info``, ``load_image_filenames``, ``load_graphs``, ``get_groundtruth``):

- split flag 2 is the test split; the validation split is the first ``VAL_IMAGES`` images
  of flag 0 that pass the filters below (its training split is the rest);
- images without boxes (``img_to_first_box < 0``) or without relations
  (``img_to_first_rel < 0``) are dropped, as its loader does for relation models;
- ``boxes_1024`` (centre x, centre y, width, height at scale 1024, integers in the official
  file) become corners by its in-place arithmetic in the array's own dtype
  (``x1 = cx - w / 2`` truncated toward zero for integer arrays, ``x2 = x1 + w``), then
  ``/ 1024 * max(width, height)`` of the image, then float32 (its ``BoxList``). They are
  stored unclipped: the evaluator clips them to the image (``clip_to_image``), the
  ``sgbpytorch`` protocol does that at evaluation;
- labels and predicates are 1-based with 0 the background: stored 0-based (label - 1),
  as every sgdask store; relations are kept exactly as given (its test split keeps
  duplicates: so does the store), relationship box indices made image-relative;
- ``image_data.json`` entries of the four corrupted images it skips (``1592.jpg``,
  ``1722.jpg``, ``4616.jpg``, ``4617.jpg``) are skipped, the rest align one to one with
  the h5's images.

Training statistics (zero-shot triplets, wIMR weights) count the relations of the flag-0
images that pass the same filters and are not in the evaluated split.

The h5 file is untrusted and read only as data (``_stored_datasets``): every dataset read
must be reached by a hard link and keep its bytes in the file itself (no external raw
storage, no virtual dataset, only HDF5's built-in filters), and the sizes its metadata
declares are checked against the limits (``max_h5_dataset_size``, ``max_h5_total_size``)
before a byte of any dataset is read. So every value an error message shows (``row 3 is
[...]``) is a byte of the input file, never of another file of the host.

h5py is imported when an h5 file is read, not with this module: ingest imports it, and
ingest is loaded by runs that never read Visual Genome (every evaluation).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sgdask.errors import InputError, Option, Text
from sgdask.formats.ingest import BOX_STORE_PARTITION, Progress, read_bytes
from sgdask.formats.psg import GTRecord, write_gt_store
from sgdask.formats.registry import (
    GROUND_TRUTH,
    GT,
    VG150,
    VG_DICTS,
    VG_H5,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.io.archive import ArchiveLimits, limit_hint, printable
from sgdask.io.fs import StorageOptions, filesystem
from sgdask.store.training_stats import STATS_SCHEMA

if TYPE_CHECKING:
    import h5py

    from sgdask.cluster import ClusterSpec

H5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
BOX_SCALE = 1024
TEST_FLAG, TRAIN_FLAG = 2, 0
SPLITS = ("test", "val")
VAL_IMAGES = 5000
CORRUPTED_IMAGES = frozenset({"1592.jpg", "1722.jpg", "4616.jpg", "4617.jpg"})
BACKGROUND = "__background__"
INDEX_KEYS = ("img_to_first_box", "img_to_last_box", "img_to_first_rel", "img_to_last_rel")
INT, NUMBER = "iu", "iuf"
#: what h5py raises for damaged metadata or data (HDF5's errors map to several types)
H5_ERRORS = (OSError, RuntimeError, ValueError, KeyError, OverflowError)


@dataclass(frozen=True)
class VGFiles:
    """The three files' URLs, for error messages."""

    h5: str
    dicts: str
    image_data: str


@dataclass(frozen=True)
class VGArrays:
    """What is read from the h5 file: per image (N), per box (B), per relation (R)."""

    split: np.ndarray
    first_box: np.ndarray
    last_box: np.ndarray
    first_rel: np.ndarray
    last_rel: np.ndarray
    boxes: np.ndarray  # (B, 4) centre/size at scale 1024, the file's dtype
    labels: np.ndarray  # (B,) 1-based
    relationships: np.ndarray  # (R, 2) absolute box indices
    predicates: np.ndarray  # (R,) 1-based

    @property
    def n_images(self) -> int:
        return len(self.split)


@dataclass(frozen=True)
class ImageInfo:
    """``image_data.json`` after the corrupted images are skipped: one entry per h5 image."""

    ids: list[str]
    widths: np.ndarray
    heights: np.ndarray


@dataclass(frozen=True)
class VGGroundTruth:
    """The evaluated split as GT records (sorted by image id), training statistics, class
    names (0-based, background removed) and how many images the split's filters dropped."""

    records: list[GTRecord]
    stats: pa.Table
    names: dict[str, list[str]]
    dropped: dict[str, int]


def is_hdf5(head: bytes) -> bool:
    return head.startswith(H5_SIGNATURE)


def read_vg(h5_file: IO[bytes], dicts: bytes, image_data: bytes, files: VGFiles,
            split: str = "test", val_images: int = VAL_IMAGES,
            limits: ArchiveLimits | None = None) -> VGGroundTruth:
    """The ground truth of ``split`` ("test" or "val") from the three files' contents;
    ``limits``: the h5 datasets' declared sizes (``max_h5_dataset_size``,
    ``max_h5_total_size``)."""
    if split not in SPLITS:
        raise InputError(files.h5, f"unknown split {split!r}", field=Option("split"),
                         expected=" or ".join(SPLITS))
    classes = names_of(dicts, files.dicts, "label_to_idx")
    predicates = names_of(dicts, files.dicts, "predicate_to_idx")
    arrays = h5_arrays(h5_file, files.h5, limits)
    info = image_info(image_data, files.image_data, arrays.n_images)
    evaluated, dropped = split_images(arrays, split, val_images)
    train = training_images(arrays, evaluated)
    used = np.union1d(evaluated, train)
    check_indices(arrays, used, info, files.h5, len(classes), len(predicates))
    records = image_records(arrays, info, evaluated)
    return VGGroundTruth(sorted(records, key=lambda r: r.image_id),
                         _training_triplet_counts(arrays, train),
                         {"thing_classes": classes, "stuff_classes": [],
                          "predicate_classes": predicates}, dropped)


def split_image_ids(h5_path: str, image_data_path: str, split: str = "test",
                    val_images: int = VAL_IMAGES, limits: ArchiveLimits | None = None
                    ) -> list[str]:
    """The ids of the split's images in the order Scene-Graph-Benchmark.pytorch's dataset
    holds them (h5 order): position i of its predictions is image ``ids[i]``."""
    with open(image_data_path, "rb") as f:
        image_data = f.read()
    with open(h5_path, "rb") as f:
        arrays = h5_arrays(f, h5_path, limits)
    info = image_info(image_data, image_data_path, arrays.n_images)
    return [info.ids[i] for i in split_images(arrays, split, val_images)[0].tolist()]


# --------------------------------------------------------------------------- JSON files


def load_json_doc(data: bytes, file: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(file, f"not valid JSON ({err})") from None


def names_of(data: bytes, file: str, key: str) -> list[str]:
    """Names in index order, background removed: ``sorted(to_idx, key=to_idx.get)`` as its
    ``load_info`` does, after checking that the indices are exactly 1..K."""
    doc = load_json_doc(data, file)
    mapping = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        raise InputError(file, "missing or empty", field=key,
                         expected="an object name -> 1-based index")
    named = {name: index for name, index in mapping.items() if name != BACKGROUND}
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in named.values())
    if not integers or sorted(named.values()) != list(range(1, len(named) + 1)):
        raise InputError(file, "indices are not 1..K", field=key,
                         expected=f"each of 1..{len(named)} exactly once (0 is the background)")
    return sorted(named, key=named.__getitem__)


def image_info(data: bytes, file: str, n_images: int) -> ImageInfo:
    """ids and sizes, corrupted images skipped, checked to align with the h5's images."""
    doc = load_json_doc(data, file)
    if not isinstance(doc, list):
        raise InputError(file, "not a list", expected="a list of {image_id, width, height}")
    ids, widths, heights = [], [], []
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict) or "image_id" not in entry:
            raise InputError(file, "not an object with an image_id", field=f"[{i}]")
        if f"{entry['image_id']}.jpg" in CORRUPTED_IMAGES:
            continue
        for key, out in (("width", widths), ("height", heights)):
            value = entry.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(file, f"{value!r}", image=entry["image_id"], field=key,
                                 expected="a positive integer (pixels)")
            out.append(value)
        ids.append(str(entry["image_id"]))
    if len(ids) != n_images:
        raise InputError(file, f"{len(ids)} images (corrupted ones skipped) but the h5 file "
                         f"has {n_images}", expected="one entry per h5 image, in order")
    seen: set[str] = set()
    for image_id in ids:
        if image_id in seen:
            raise InputError(file, "duplicate image id", image=image_id, field="image_id")
        seen.add(image_id)
    return ImageInfo(ids, np.asarray(widths, dtype=np.int64),
                     np.asarray(heights, dtype=np.int64))


# --------------------------------------------------------------------------- h5 file


#: every dataset read: key, dimensions, dtype kinds, what is expected of it
H5_DATASETS = (
    ("split", 1, INT, "(N,) integer split flags"),
    *((key, 1, INT, "(N,) integer indices, -1 for none") for key in INDEX_KEYS),
    (f"boxes_{BOX_SCALE}", 2, NUMBER, "(B, 4) centre x, centre y, width, height"),
    ("labels", 2, INT, "(B, 1) 1-based labels"),
    ("relationships", 2, INT, "(R, 2) subject and object box indices"),
    ("predicates", 2, INT, "(R, 1) 1-based predicates"),
)


def h5_arrays(f: IO[bytes], file: str, limits: ArchiveLimits | None = None) -> VGArrays:
    """Every array the loader reads, with storage, declared sizes, dtype kinds and shapes
    checked (the first three before any dataset is read)."""
    import h5py

    try:
        h5 = h5py.File(f, "r")
    except H5_ERRORS as err:  # a damaged superblock may ask the file object for 2**64 bytes
        raise InputError(file, f"not a readable HDF5 file ({printable(str(err))})") from None
    with h5:
        arrays = {key: _read_dataset(obj, file, key)
                  for key, obj in _stored_datasets(h5, file, limits or ArchiveLimits()).items()}
    split = arrays["split"]
    index = {key: arrays[key] for key in INDEX_KEYS}
    boxes, labels = arrays[f"boxes_{BOX_SCALE}"], arrays["labels"]
    relationships, predicates = arrays["relationships"], arrays["predicates"]
    for key, values in index.items():
        same_length(file, key, values, len(split), "split")
    same_width(file, f"boxes_{BOX_SCALE}", boxes, 4, "(B, 4) centre x, centre y, width, height")
    same_width(file, "relationships", relationships, 2, "(R, 2) subject and object indices")
    same_length(file, "labels", labels, len(boxes), f"boxes_{BOX_SCALE}")
    same_length(file, "predicates", predicates, len(relationships), "relationships")
    for key, values in (("labels", labels), ("predicates", predicates)):
        if values.shape[1] < 1:
            raise InputError(file, f"shape {values.shape}", field=key, expected="(n, 1)")
    check_boxes(file, boxes)
    return VGArrays(split, *(index[k] for k in INDEX_KEYS), boxes, labels[:, 0],
                    relationships, predicates[:, 0])


def _stored_datasets(h5: h5py.File, file: str, limits: ArchiveLimits) -> dict[str, h5py.Dataset]:
    """The datasets of ``H5_DATASETS``, each stored in the file (``_stored_dataset``), their
    declared sizes within the limits; nothing of their data read yet."""
    datasets: dict[str, h5py.Dataset] = {}
    total = 0
    for key, ndim, kinds, expected in H5_DATASETS:
        try:
            obj = _stored_dataset(h5, key, file, limits, expected)
        except H5_ERRORS as err:
            raise InputError(file, f"unreadable HDF5 metadata ({_h5_detail(err)})",
                             field=key) from None
        if obj.ndim != ndim or obj.dtype.kind not in kinds:
            raise InputError(file, f"shape {obj.shape}, dtype {obj.dtype}", field=key,
                             expected=expected)
        total += _declared_size(obj.shape, obj.dtype)
        if total > limits.max_h5_total_size:
            raise InputError(file, f"the datasets read up to this one declare {total} bytes",
                             field=key, expected=limit_hint(limits, "max_h5_total_size"))
        datasets[key] = obj
    return datasets


def _stored_dataset(h5: h5py.File, key: str, file: str, limits: ArchiveLimits, expected: str
                   ) -> h5py.Dataset:
    """Dataset ``key`` if its bytes are in this file: reached by a hard link (an external
    link names another file, a soft link another path, possibly in a loop), no external
    raw storage, not virtual, only built-in filters, its size and its chunks' within
    ``max_h5_dataset_size``. Checked from its metadata only: the link is looked at without
    following it, the storage before the dataspace (a virtual dataset's extent may be
    computed from its source files)."""
    import h5py

    link = h5.get(key, getlink=True)
    if link is None:
        raise InputError(file, "missing", field=key, expected=expected)
    if not isinstance(link, h5py.HardLink):
        kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
        raise InputError(file, f"is {kind}", field=key,
                         expected="a dataset of this file, reached without links")
    obj = h5.get(key)
    if not isinstance(obj, h5py.Dataset):
        raise InputError(file, "not a dataset", field=key, expected=expected)
    problem = _storage_problem(obj.id.get_create_plist())
    if problem is not None:
        raise InputError(file, problem, field=key,
                         expected="a dataset stored in this file, HDF5's built-in filters only")
    if obj.shape is None:
        raise InputError(file, "has no dataspace (HDF5 null dataspace)", field=key,
                         expected=expected)
    for what, shape in (("", obj.shape), ("chunks of ", obj.chunks or ())):
        size = _declared_size(shape, obj.dtype)
        if size > limits.max_h5_dataset_size:
            raise InputError(file, f"declares {what}shape {tuple(shape)} of {obj.dtype}: "
                             f"{size} bytes", field=key,
                             expected=limit_hint(limits, "max_h5_dataset_size"))
    return obj


def _storage_problem(dcpl: h5py.h5p.PropDCID) -> str | None:
    """Why a dataset's creation properties keep its bytes outside the file or need code
    HDF5 does not have built in (None: neither)."""
    import h5py

    # the layouts that keep a dataset's bytes in the file (not VIRTUAL: in other files)
    if dcpl.get_layout() not in (h5py.h5d.COMPACT, h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED):
        return "is a virtual dataset (its data is read from other files)"
    if dcpl.get_external_count() > 0:
        return "keeps its data in external files"
    # the filters HDF5 has built in; for any other it would search its plugin directories
    # for a library to load
    builtin = {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32,
               h5py.h5z.FILTER_SZIP, h5py.h5z.FILTER_NBIT, h5py.h5z.FILTER_SCALEOFFSET}
    for i in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(i)[0]
        if code not in builtin or not h5py.h5z.filter_avail(code):
            return f"is encoded with HDF5 filter {code}, which is not built into HDF5"
    return None


def _declared_size(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes of an array of ``shape`` and ``dtype`` (Python integers: no overflow)."""
    return math.prod(int(n) for n in shape) * dtype.itemsize


def _read_dataset(obj: h5py.Dataset, file: str, key: str) -> np.ndarray:
    """The whole dataset (checked by ``_stored_dataset``) as a numpy array."""
    try:
        return obj[()]
    except H5_ERRORS as err:  # damaged chunks, a failing filter
        raise InputError(file, f"cannot be read ({_h5_detail(err)})", field=key) from None


def _h5_detail(err: BaseException) -> str:
    """An h5py error on one printable line (HDF5 says what failed and where in the file,
    not what the bytes were)."""
    return printable(" ".join(f"{type(err).__name__}: {err}".split()))[:300]


def same_length(file: str, key: str, values: np.ndarray, n: int, other: str) -> None:
    if len(values) != n:
        raise InputError(file, f"{len(values)} rows but {other} has {n}", field=key,
                         expected=f"one row per row of {other}")


def same_width(file: str, key: str, values: np.ndarray, width: int, expected: str) -> None:
    if values.shape[1] != width:
        raise InputError(file, f"shape {values.shape}", field=key, expected=expected)


def check_boxes(file: str, boxes: np.ndarray) -> None:
    """What the loader asserts of every box: centre >= 0, width and height > 0, finite.
    The bad row is shown: bytes of the input file (``_stored_dataset`` refuses data kept
    anywhere else)."""
    bad = ~(np.isfinite(boxes).all(axis=1) & (boxes[:, :2] >= 0).all(axis=1)
            & (boxes[:, 2:] > 0).all(axis=1))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(file, f"row {row} is {boxes[row].tolist()}", field=f"boxes_{BOX_SCALE}",
                         expected="centre x, centre y >= 0 and width, height > 0")


# --------------------------------------------------------------------------- splits


def split_images(arrays: VGArrays, split: str, val_images: int
                 ) -> tuple[np.ndarray, dict[str, int]]:
    """Indices of the evaluated images (``load_graphs`` with ``filter_empty_rels``) and how
    many images of the split flag were dropped for having no boxes / no relations."""
    flagged = arrays.split == (TEST_FLAG if split == "test" else TRAIN_FLAG)
    with_boxes = flagged & (arrays.first_box >= 0)
    kept = np.flatnonzero(with_boxes & (arrays.first_rel >= 0))
    if split == "val" and val_images > 0:
        kept = kept[:val_images]
    dropped = {"no_boxes": int(flagged.sum() - with_boxes.sum()),
               "no_relations": int(with_boxes.sum() - (with_boxes & (arrays.first_rel >= 0))
                                   .sum())}
    return kept, dropped


def training_images(arrays: VGArrays, evaluated: np.ndarray) -> np.ndarray:
    """Flag-0 images with boxes and relations, minus the evaluated ones (the validation
    split is carved from flag 0)."""
    train = np.flatnonzero((arrays.split == TRAIN_FLAG) & (arrays.first_box >= 0)
                           & (arrays.first_rel >= 0))
    return np.setdiff1d(train, evaluated, assume_unique=True)


def check_indices(arrays: VGArrays, images: np.ndarray, info: ImageInfo, file: str,
                  n_classes: int, n_predicates: int) -> None:
    """The box and relation ranges of ``images`` lie inside the arrays, relations name boxes
    of their own image, labels and predicates are within the dicts' classes."""
    first_box, last_box = arrays.first_box[images], arrays.last_box[images]
    first_rel, last_rel = arrays.first_rel[images], arrays.last_rel[images]
    n_boxes, n_rels = len(arrays.boxes), len(arrays.relationships)
    range_checks = (
        ("img_to_last_box", (last_box < first_box) | (last_box >= n_boxes),
         f"img_to_first_box <= img_to_last_box < {n_boxes} (boxes_{BOX_SCALE} rows)"),
        ("img_to_last_rel", (last_rel < first_rel) | (last_rel >= n_rels),
         f"img_to_first_rel <= img_to_last_rel < {n_rels} (relationships rows)"),
    )
    for key, bad, expected in range_checks:
        fail_at(file, key, images, bad, info, expected)
    box_rows, box_image = ranges(first_box, last_box)
    rel_rows, rel_image = ranges(first_rel, last_rel)
    labels = arrays.labels[box_rows]
    fail_at(file, "labels", images[box_image], (labels < 1) | (labels > n_classes), info,
            f"1..{n_classes} (the dicts' label_to_idx)")
    predicates = arrays.predicates[rel_rows]
    fail_at(file, "predicates", images[rel_image],
            (predicates < 1) | (predicates > n_predicates), info,
            f"1..{n_predicates} (the dicts' predicate_to_idx)")
    pairs = arrays.relationships[rel_rows]
    low, high = first_box[rel_image, None], last_box[rel_image, None]
    fail_at(file, "relationships", images[rel_image],
            ((pairs < low) | (pairs > high)).any(axis=1), info,
            "box indices between the image's img_to_first_box and img_to_last_box")


def fail_at(file: str, key: str, images: np.ndarray, bad: np.ndarray, info: ImageInfo,
            expected: str) -> None:
    """InputError naming the first bad entry's image and the key."""
    if bad.any():
        image = int(images[np.flatnonzero(bad)[0]])
        raise InputError(file, f"out of range (h5 image {image})", image=info.ids[image],
                         field=key, expected=expected)


def ranges(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``first[i]..last[i]`` of every i, concatenated, and the i of each row."""
    counts = last - first + 1
    owner = np.repeat(np.arange(len(first)), counts)
    starts = np.repeat(first - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return starts + np.arange(len(owner)), owner


# --------------------------------------------------------------------------- records


def corner_boxes(boxes: np.ndarray) -> np.ndarray:
    """Centre/size -> corners, exactly as ``load_graphs`` does it: in place, in the array's
    dtype (an integer array truncates ``cx - w / 2`` toward zero)."""
    out = boxes.copy()
    out[:, :2] = out[:, :2] - out[:, 2:] / 2
    out[:, 2:] = out[:, :2] + out[:, 2:]
    return out


def image_boxes(corners: np.ndarray, long_side: np.ndarray) -> np.ndarray:
    """Boxes in image pixels as ``get_groundtruth`` computes them (``box / BOX_SCALE *
    max(w, h)`` in float64, then float32 in its ``BoxList``), as float64."""
    return (corners / BOX_SCALE * long_side[:, None]).astype(np.float32).astype(np.float64)


def image_records(arrays: VGArrays, info: ImageInfo, images: np.ndarray) -> list[GTRecord]:
    """One GTRecord per image: boxes in pixels (unclipped), 0-based categories, relations
    as given with image-relative box indices and 0-based predicates."""
    first_box, last_box = arrays.first_box[images], arrays.last_box[images]
    box_rows, box_image = ranges(first_box, last_box)
    rel_rows, rel_image = ranges(arrays.first_rel[images], arrays.last_rel[images])
    long_side = np.maximum(info.widths, info.heights)[images]
    boxes = image_boxes(corner_boxes(arrays.boxes[box_rows]), long_side[box_image])
    categories = arrays.labels[box_rows].astype(np.int64) - 1
    relations = np.column_stack([
        arrays.relationships[rel_rows].astype(np.int64) - first_box[rel_image, None],
        arrays.predicates[rel_rows].astype(np.int64) - 1])
    box_cuts = np.cumsum(np.bincount(box_image, minlength=len(images)))[:-1]
    rel_cuts = np.cumsum(np.bincount(rel_image, minlength=len(images)))[:-1]
    return [GTRecord(info.ids[image], int(info.heights[image]), int(info.widths[image]),
                     cats, image_box, None, rels, None)
            for image, cats, image_box, rels in zip(
                images.tolist(), np.split(categories, box_cuts), np.split(boxes, box_cuts),
                np.split(relations, rel_cuts), strict=True)]


def _training_triplet_counts(arrays: VGArrays, images: np.ndarray) -> pa.Table:
    """(subject category, object category, predicate) counts over the images' relations,
    0-based, sorted."""
    rows, _ = ranges(arrays.first_rel[images], arrays.last_rel[images])
    pairs = arrays.relationships[rows]
    keys = np.column_stack([arrays.labels[pairs[:, 0]].astype(np.int64) - 1,
                            arrays.labels[pairs[:, 1]].astype(np.int64) - 1,
                            arrays.predicates[rows].astype(np.int64) - 1])
    types, counts = np.unique(keys.reshape(-1, 3), axis=0, return_counts=True)
    types = types.reshape(-1, 3)
    return pa.table({"subject_category": types[:, 0], "object_category": types[:, 1],
                     "predicate": types[:, 2], "count": counts}, schema=STATS_SCHEMA)


VG_FORMAT = "vg150-h5"


#: how a VG GT store's boxes relate to the images (the sgbpytorch protocol needs this)
VG_BOXES = {"coordinates": "pixels, float32 values as its loader computes them",
            "clipped": False, "image_size": "images table width and height (image_data.json)"}


def ingest_vg(h5: str, out: str, dicts: str, image_data: str, split: str = "test",
              storage_options: StorageOptions | None = None,
              partition_size: int = BOX_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              val_images: int = VAL_IMAGES, limits: ArchiveLimits | None = None
              ) -> dict[str, Any]:
    """Visual Genome in the VG150 layout (``VG-SGG-with-attri.h5``, its dicts JSON and
    ``image_data.json``) -> box GT store of ``split`` (test or val), read as
    Scene-Graph-Benchmark.pytorch reads it (``read_vg``). Returns the manifest.
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

# --------------------------------------------------------------------------- the format

def _ingest(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
            dicts: str, image_data: str, split: str = "test", **kwargs: Any
            ) -> dict[str, Any]:
    return ingest_vg(url, out, dicts, image_data, split, options, **kwargs)


FORMAT = register(Format(
    VG150, GT, lambda head, name: is_hdf5(head), ("boxes", "relations", "training_stats"),
    "VG-SGG-with-attri.h5 with its dicts and image_data JSON", _ingest,
    options=("dicts", "image_data", "split")))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: the h5 file, its dicts JSON


def _h5_hint(role: str) -> Text | None:
    if role in ("submission file", "results"):
        return GROUND_TRUTH
    return ("ingest it with sgdask ingest-gt ", Option("dicts"), " ", Option("image_data"),
            ", then pass the store as ", Option("gt"))


register_signature(Signature(
    VG_H5, "an HDF5 file (Visual Genome's VG-SGG-with-attri.h5)", "head", 10, is_hdf5,
    accepted_as=frozenset({"gt source"}), hint=_h5_hint))
register_signature(Signature(
    VG_DICTS, "Visual Genome's dicts file (VG-SGG-dicts-with-attri.json)", "keys", 30,
    keys=frozenset({"idx_to_label", "label_to_idx", "idx_to_predicate", "predicate_to_idx"}),
    hint=lambda role: ("pass it to sgdask ingest-gt as ", Option("dicts"))))
