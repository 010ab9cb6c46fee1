"""Reader of COCO panoptic files, as COCO panopticapi's ``pq_compute`` reads them: a JSON
(``annotations``: per image its ``image_id``, ``file_name`` and ``segments_info``, each
segment an ``id`` and ``category_id``; a ground truth's also ``iscrowd``, ``area`` and the
``categories`` with ``isthing``) and a directory of PNGs, the segment of a pixel being
R + 256 G + 65536 B (0: VOID).

The JSON is checked whole when read (every field of every segment, ids unique per image,
predicted categories known to the GT); a PNG is checked when its task decodes it (size,
every id it holds listed in its JSON: ``sgdask.pq``).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdask.errors import InputError, Option, SgdaskError
from sgdask.formats.psg import PSG_KEYS, plain_rgb
from sgdask.formats.registry import (
    COCO_JSON,
    COCO_PANOPTIC,
    COCO_PANOPTIC_JSON,
    SUBMISSION,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.io.archive import ArchiveLimits, limit_hint
from sgdask.io.codecs.png import png_runs
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.kernels.panoptic import rgb_runs

#: JSON keys that only a COCO panoptic file's segments have (within a sniffed head)
SEGMENT_KEYS = {"segments_info"}


@dataclass(frozen=True)
class Segments:
    """One image of a COCO panoptic JSON: its PNG and its segments in JSON order
    (``crowd`` and ``areas``: a GT's; ``areas`` None where the JSON gives none: then the
    PNG's pixel counts)."""

    image_id: str
    file_name: str
    ids: np.ndarray
    categories: np.ndarray
    crowd: np.ndarray
    areas: np.ndarray | None


@dataclass(frozen=True)
class Category:
    """A GT category: its name and whether it is a thing."""

    name: str
    isthing: bool


@dataclass(frozen=True)
class PanopticFile:
    """A COCO panoptic JSON: its images in file order, by id, and (a GT's) categories
    in file order."""

    url: str
    images: dict[str, Segments]
    categories: dict[int, Category]


def is_coco_panoptic(head: bytes) -> bool:
    """Whether a JSON head is a COCO panoptic file's: an object whose first keys include
    ``annotations`` with ``segments_info`` and not OpenPSG's ``data``."""
    stripped = head.lstrip()
    if stripped[:1] != b"{":
        return False
    return b'"segments_info"' in head and b'"annotations"' in head \
        and not stripped[1:].lstrip().startswith(b'"data"')


def read_panoptic_json(url: str, options: StorageOptions | None, gt: bool,
                       known: dict[int, Category] | None = None) -> PanopticFile:
    """The COCO panoptic JSON at ``url``, checked: a GT's (``gt``) with its categories,
    else a prediction's whose categories must be among ``known``."""
    try:
        doc = json.loads(_read(url, options, "JSON"))
    except ValueError as err:
        raise InputError(url, f"not JSON ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("annotations"), list):
        raise InputError(url, "no annotations list", field="annotations",
                         expected="a COCO panoptic JSON")
    categories = _categories(url, doc) if gt else {}
    images: dict[str, Segments] = {}
    for index, entry in enumerate(doc["annotations"]):
        segments = _segments(url, entry, index, gt, known if known is not None else categories)
        if segments.image_id in images:
            raise InputError(url, "listed twice", image=segments.image_id, field="image_id")
        images[segments.image_id] = segments
    return PanopticFile(url, images, categories)


def _categories(url: str, doc: dict[str, Any]) -> dict[int, Category]:
    raw = doc.get("categories")
    if not isinstance(raw, list) or not raw:
        raise InputError(url, "missing or empty", field="categories",
                         expected="a list of {id, name, isthing}")
    out = {}
    for i, c in enumerate(raw):
        try:
            out[int(c["id"])] = Category(str(c.get("name", c["id"])), bool(c.get("isthing", 1)))
        except (KeyError, TypeError, ValueError):
            raise InputError(url, "not an object with an integer id",
                             field=f"categories[{i}]") from None
    return out


def _segments(url: str, entry: Any, index: int, gt: bool,
              categories: dict[int, Category]) -> Segments:
    if not isinstance(entry, dict) or "image_id" not in entry:
        raise InputError(url, "not an object with an image_id", field=f"annotations[{index}]")
    image_id = str(entry["image_id"])
    info = entry.get("segments_info")
    if not isinstance(entry.get("file_name"), str) or not isinstance(info, list):
        raise InputError(url, "missing file_name or segments_info list", image=image_id,
                         field=f"annotations[{index}]")
    try:
        ids = np.array([int(s["id"]) for s in info], dtype=np.int64)
        labels = np.array([int(s["category_id"]) for s in info], dtype=np.int64)
        crowd = np.array([bool(s.get("iscrowd", 0)) for s in info], dtype=bool)
        has_area = gt and info and all("area" in s for s in info)
        areas = np.array([int(s["area"]) for s in info], dtype=np.int64) if has_area else None
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InputError(url, f"malformed segment ({type(err).__name__}: {err})",
                         image=image_id, field="segments_info") from None
    if len(ids) and (ids.min() <= 0 or ids.max() >= 1 << 24):
        raise InputError(url, "segment id out of range", image=image_id,
                         field="segments_info.id", expected="1..16777215 (0 is VOID)")
    if len(np.unique(ids)) != len(ids):
        raise InputError(url, "a segment id listed twice", image=image_id,
                         field="segments_info.id")
    unknown = [int(c) for c in labels if int(c) not in categories]
    if unknown:
        raise InputError(url, f"unknown category_id {unknown[0]}", image=image_id,
                         field="segments_info.category_id",
                         expected="a category of the GT's categories")
    return Segments(image_id, entry["file_name"], ids, labels, crowd, areas)


def _read(url: str, options: StorageOptions | None, field: str) -> bytes:
    """A file's bytes: a plain local path opened directly (fsspec's URL parsing and file
    object cost 0.15 ms a PNG, as much as decoding it), any URL through fsspec."""
    try:
        if "://" not in url and "::" not in url and not url.startswith("~"):
            with open(url, "rb") as f:
                return f.read()
        fs, path = filesystem(url, options)
        with fs.open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, IsADirectoryError):
        raise InputError(url, "file not found", field=field) from None


def panoptic_runs(masks_dir: str, segments: Segments, options: StorageOptions | None,
                  limits: ArchiveLimits | None = None) -> tuple[tuple[int, int], np.ndarray,
                                                                np.ndarray]:
    """An image's panoptic PNG as its (height, width) and its runs of segment ids in raster
    order (``ends``, ``ids``, as ``sgdask.kernels.panoptic.rgb_runs``): a plain 8-bit RGB
    PNG decoded to runs directly (``sgdask.io.codecs.png``), any other kind decoded by
    libpng or converted to RGB by Pillow."""
    url = join(masks_dir, segments.file_name)
    png = _read(url, options, "file_name")
    limits = limits or ArchiveLimits()
    try:
        height, width = int.from_bytes(png[20:24], "big"), int.from_bytes(png[16:20], "big")
        if png[12:16] == b"IHDR" and height * width > limits.max_layer_pixels:
            raise InputError(url, f"PNG is {width}x{height} pixels", image=segments.image_id,
                             expected=limit_hint(limits, "max_layer_pixels"))
        decoded = png_runs(png)
        if decoded is not None:
            return (decoded[0], decoded[1]), decoded[2], decoded[3]
        rgb = plain_rgb(png, height, width)
        if rgb is None:
            from PIL import Image

            with Image.open(io.BytesIO(png)) as img:
                rgb = np.asarray(img.convert("RGB"))
    except InputError:
        raise
    except Exception as err:  # PIL raises many types for corrupt data
        raise InputError(url, f"not a readable PNG ({type(err).__name__})",
                         image=segments.image_id) from None
    return (rgb.shape[0], rgb.shape[1]), *rgb_runs(np.ascontiguousarray(rgb))

# --------------------------------------------------------------------------- the format

def _recognised(head: bytes, name: str) -> bool:
    """A JSON object whose first key is ``annotations`` (within ``HEAD_BYTES``;
    ``sniff`` looks further, for ``segments_info``)."""
    return b"".join(head.split()).startswith(b'{"annotations"')


def _scored_as_is(url: str, *args: Any, **kwargs: Any) -> Any:
    """COCO panoptic predictions are neither converted nor opened as a scene graph
    submission: ``evaluate`` scores their panoptic quality (``sgdask.pq``)."""
    raise SgdaskError(f"{url}: COCO panoptic predictions are scored as they are, for "
                      "panoptic quality: sgdask evaluate ", Option("pred"), " with ",
                      Option("pred_masks", "DIR"), ", ", Option("gt"), " GT.json and ",
                      Option("gt_masks", "DIR"))


FORMAT = register(Format(
    COCO_PANOPTIC, SUBMISSION, _recognised, ("masks",),
    "COCO panoptic format (panopticapi): JSON + PNGs, sgdask/formats/coco_panoptic.py",
    _scored_as_is, _scored_as_is))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: segments (a prediction, or a GT whose
# ``annotations`` come first), or a COCO JSON whose image list comes first
_COCO_KEYS = {"images", "file_name"}

register_signature(Signature(
    COCO_PANOPTIC_JSON, "COCO panoptic segments (JSON)", "object", 10,
    lambda head, keys: is_coco_panoptic(head) and not set(keys) & PSG_KEYS,
    hint=lambda role: ("scored for panoptic quality by sgdask evaluate ", Option("pred"),
                       " with ", Option("pred_masks", "DIR"))))
register_signature(Signature(
    COCO_JSON, "a COCO JSON file", "object", 20,
    lambda head, keys: keys[:1] in (["info"], ["images"], ["licenses"])
    and set(keys) >= _COCO_KEYS))
