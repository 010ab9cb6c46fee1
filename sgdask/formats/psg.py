"""Reader of OpenPSG ground truth: ``psg.json`` plus panoptic PNGs (id = R + 256 G + 65536 B)."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import imagecodecs
import numpy as np
import pyarrow as pa

from sgdask import __version__
from sgdask.errors import InputError, Option, Text
from sgdask.formats.ingest import DEFAULT_STORE_PARTITION, Progress, map_tasks, read_bytes
from sgdask.formats.registry import (
    GROUND_TRUTH,
    GT,
    MASK_ZIP,
    PASS_AS_GT,
    PNG_DIR,
    PSG,
    PSG_JSON,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.io.archive import ArchiveLimits, limit_hint
from sgdask.io.bounded_json import load_json
from sgdask.io.fs import StorageOptions, absolute, filesystem, join
from sgdask.io.units import grouped_chunks, grouping_digest, recorded_units, unit_column
from sgdask.store.store import (
    PartTables,
    StoreWriter,
    add_instance_rows,
    add_triplet_rows,
    part_name,
    write_part,
)
from sgdask.store.training_stats import STATS_FILE, train_stats, write_stats
from sgdask.types import BitMasks

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec


@dataclass
class GTRecord:
    """One GT image as psg.json describes it (masks not yet read)."""

    image_id: str
    height: int
    width: int
    categories: np.ndarray
    boxes: np.ndarray | None
    segment_ids: np.ndarray | None
    relations: np.ndarray
    pan_seg_file_name: str | None
    crowd: np.ndarray | None = None  # with masks: each segment's iscrowd (absent: false)
    units: dict[str, str] = field(default_factory=dict)  # e.g. {"video": id}: sgdask.io.units


def class_lists(doc: Any, file: str) -> dict[str, list[str]]:
    """thing/stuff/predicate class names, checked."""
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise InputError(file, "no data list", field="data", expected="OpenPSG psg.json")
    out = {}
    for key in ("thing_classes", "stuff_classes", "predicate_classes"):
        value = doc.get(key, [] if key == "stuff_classes" else None)
        if not isinstance(value, list):
            raise InputError(file, "missing or not a list", field=key)
        out[key] = [str(v) for v in value]
    return out


def _record(entry: Any, index: int, file: str, masks: bool, n_classes: int,
            n_predicates: int) -> GTRecord:
    if not isinstance(entry, dict) or "image_id" not in entry:
        raise InputError(file, "not an object with an image_id", field=f"data[{index}]")
    image_id = str(entry["image_id"])
    try:
        height, width = int(entry["height"]), int(entry["width"])
        annotations = entry.get("annotations") or []
        segments = entry.get("segments_info") if masks else None
        if masks and not isinstance(segments, list):
            raise InputError(file, "missing", image=image_id, field="segments_info",
                             expected="a list of {id, category_id} (or ingest without masks)")
        source = segments if masks else annotations
        categories = np.asarray([int(s["category_id"]) for s in source], dtype=np.int64)
        boxes = (np.asarray([a["bbox"][:4] for a in annotations], dtype=np.float64).reshape(-1, 4)
                 if len(annotations) == len(source) and annotations else None)
        relations = np.asarray(entry.get("relations") or [], dtype=np.int64).reshape(-1, 3)
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise InputError(file, f"malformed entry ({type(err).__name__}: {err})",
                         image=image_id) from err
    if not masks and boxes is None and len(categories):
        raise InputError(file, "no boxes", image=image_id, field="annotations[*].bbox")
    n = len(categories)
    if len(relations) and (relations[:, :2].min() < 0 or relations[:, :2].max() >= n):
        raise InputError(file, "instance index out of range", image=image_id,
                         field="relations", expected=f"indices in 0..{n - 1}")
    if len(relations) and (relations[:, 2].min() < 0 or relations[:, 2].max() >= n_predicates):
        raise InputError(file, "predicate out of range", image=image_id, field="relations",
                         expected=f"0..{n_predicates - 1}")
    if n and (categories.min() < 0 or categories.max() >= n_classes):
        raise InputError(file, "category out of range", image=image_id, field="category_id",
                         expected=f"0..{n_classes - 1}")
    seg_ids, crowd = None, None
    if masks and segments is not None:
        seg_ids = np.asarray([int(s["id"]) for s in segments], dtype=np.int64)
        crowd = np.asarray([_crowd_flag(s, file, image_id) for s in segments], dtype=bool)
    return GTRecord(image_id, height, width, categories, boxes, seg_ids, relations,
                    entry.get("pan_seg_file_name") if masks else None, crowd)


def _crowd_flag(segment: dict[str, Any], file: str, image_id: str) -> bool:
    """A segment's ``iscrowd`` (0 or 1, as COCO writes it; absent: not a crowd region)."""
    value = segment.get("iscrowd", 0)
    if value not in (0, 1) or isinstance(value, float):
        raise InputError(file, f"iscrowd {value!r}", image=image_id,
                         field="segments_info[*].iscrowd", expected="0 or 1")
    return bool(value)


def evaluation_records(doc: Any, file: str, masks: bool) -> list[GTRecord]:
    """The test split's images (``test_image_ids``; every image if the key is absent)."""
    names = class_lists(doc, file)
    n_classes = len(names["thing_classes"]) + len(names["stuff_classes"])
    n_predicates = len(names["predicate_classes"])
    test_ids = doc.get("test_image_ids")
    wanted = None if test_ids is None else {str(i) for i in test_ids}
    records = [_record(e, i, file, masks, n_classes, n_predicates)
               for i, e in enumerate(doc["data"])
               if wanted is None or (isinstance(e, dict) and str(e.get("image_id")) in wanted)]
    seen: set[str] = set()
    for r in records:
        if r.image_id in seen:
            raise InputError(file, "duplicate image id", image=r.image_id, field="image_id")
        seen.add(r.image_id)
    return records


def panoptic_rgb(png: bytes, record: GTRecord, file: str,
                 limits: ArchiveLimits | None = None) -> np.ndarray:
    """The (H, W, 3) uint8 pixels of a panoptic PNG, its pixel count checked against
    ``max_layer_pixels`` from its header before it is decoded, its size against psg.json.

    An 8-bit RGB PNG (what panoptic segmentations are) is decoded by libpng through
    imagecodecs, 1.7x faster than Pillow; any other kind, or one libpng refuses, is
    converted to RGB by Pillow, which also words the error of an unreadable file."""
    from PIL import Image  # here: only PSG's PNGs need it, not every process reading psg.py

    limits = limits or ArchiveLimits()
    try:
        with Image.open(io.BytesIO(png)) as img:
            if img.width * img.height > limits.max_layer_pixels:
                raise InputError(file, f"PNG is {img.width}x{img.height} pixels",
                                 image=record.image_id, field="pan_seg_file_name",
                                 expected=limit_hint(limits, "max_layer_pixels"))
            rgb = plain_rgb(png, img.height, img.width)
            if rgb is None:
                rgb = np.asarray(img.convert("RGB"))
    except InputError:
        raise
    except Exception as err:  # PIL raises many types for corrupt data
        raise InputError(file, f"not a readable PNG ({err})", image=record.image_id,
                         field="pan_seg_file_name") from err
    if rgb.shape[:2] != (record.height, record.width):
        raise InputError(file, f"PNG is {rgb.shape[1]}x{rgb.shape[0]}", image=record.image_id,
                         field="pan_seg_file_name",
                         expected=f"{record.width}x{record.height} as in psg.json")
    return rgb


PNG_RGB8 = (8, 2)  # IHDR bit depth and colour type of 8-bit RGB


def plain_rgb(png: bytes, height: int, width: int) -> np.ndarray | None:
    """The pixels of an 8-bit RGB PNG decoded by libpng, or None (another kind, or an
    error: then Pillow decodes it or names the problem)."""
    if png[12:16] != b"IHDR" or (png[24], png[25]) != PNG_RGB8:
        return None
    try:
        rgb = imagecodecs.png_decode(png)
    except imagecodecs.PngError:
        return None
    return rgb if rgb.shape == (height, width, 3) and rgb.dtype == np.uint8 else None


def panoptic_masks(png: bytes, record: GTRecord, file: str,
                   limits: ArchiveLimits | None = None) -> BitMasks:
    """The word masks of a record's instances from its panoptic PNG (instance i is the
    segment ``segment_ids[i]``; pixels of other segments belong to none)."""
    assert record.segment_ids is not None
    return BitMasks.from_panoptic(panoptic_rgb(png, record, file, limits),
                                  record.segment_ids, len(record.categories))


#: GT stores: the test image ids in psg.json's ``data`` order (model result files are
#: paired with the GT images in that order)
IMAGE_ORDER_FILE = "image_order.json"


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

# --------------------------------------------------------------------------- the format

def _ingest(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
            masks_dir: str | None = None, **kwargs: Any) -> dict[str, Any]:
    return ingest_gt(url, out, masks_dir, options, **kwargs)


FORMAT = register(Format(
    PSG, GT, lambda head, name: True,
    ("boxes", "masks", "relations", "training_stats"),
    "psg.json (OpenPSG)", _ingest, options=("masks_dir",)))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: psg.json, a directory of its panoptic PNGs,
# a ZIP of PNGs
#: psg.json's keys (its first key, ``data``, is a huge list: the first key decides)
PSG_KEYS = frozenset({"data", "thing_classes", "stuff_classes", "predicate_classes",
                      "test_image_ids"})
_PNGS_TO_INGEST: Text = ("the panoptic PNGs are the GT's masks: sgdask ingest-gt psg.json ",
                         Option("gt_masks"), " DIR ", Option("out"), " STORE")


def _psg_json_hint(role: str) -> Text | None:
    if role in ("submission file", "results"):
        return GROUND_TRUTH
    if role == "masks":
        return ("psg.json is the ground truth itself; give ", Option("gt_masks"),
                " the directory of its panoptic PNGs")
    return PASS_AS_GT if role != "psg" else None


def _png_dir_hint(role: str) -> Text | None:
    if role in ("submission file", "gt source"):
        return _PNGS_TO_INGEST
    if role == "psg":
        return "give psg.json, the annotations; the PNGs are its masks"
    return ("masks need ", Option("gt_masks"), ", with ", Option("gt"), " psg.json")


register_signature(Signature(
    PSG_JSON, "a ground-truth file (psg.json)", "keys", 10, keys=PSG_KEYS,
    accepted_as=frozenset({"gt", "gt source", "psg"}), hint=_psg_json_hint))
register_signature(Signature(
    PNG_DIR, "a directory of PNG masks", "dir", 20,
    lambda names: bool(names) and all(n.endswith(".png") for n in names),
    accepted_as=frozenset({"masks"}), hint=_png_dir_hint))
register_signature(Signature(
    MASK_ZIP, "a ZIP of PNG masks", "zip", 30,
    lambda names, files: bool(files) and all(n.endswith(".png") for n in files),
    hint=lambda role: ("masks need ", Option("gt_masks"), ": unzip it and pass the directory")))
