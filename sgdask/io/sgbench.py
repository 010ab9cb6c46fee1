"""Reader of SGBench file format version 1: a JSON file (boxes) or a ZIP of triplets.json
plus one layered TIFF per image (masks). Validates as it parses; every error names the
file, the image and the field."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import tifffile

from sgdask.errors import InputError
from sgdask.types import EMPTY_TRIPLETS

FILE_VERSION = 1
SPELLINGS = ("instances", "bboxes+categories", "annotation")


@dataclass
class SubmissionImage:
    """One image of a submission, validated, before masks are read."""

    image_id: str
    categories: np.ndarray
    boxes: np.ndarray | None
    scores: np.ndarray | None
    graph: np.ndarray
    graph_scores: np.ndarray | None
    ng: np.ndarray
    seg_filename: str | None


def load_json(data: bytes, file: str) -> Any:
    """Parsed JSON or an InputError naming the file and position."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(file, f"not valid JSON ({err})") from None


def _instance_rows(img: dict, file: str, image_id: str) -> tuple[list, list | None, list | None]:
    """(categories, boxes or None, scores or None) from whichever spelling the image uses."""
    present = [s for s in SPELLINGS
               if (s in img if "+" not in s else "bboxes" in img or "categories" in img)]
    if len(present) != 1:
        what = "no instances" if not present else f"several instance spellings {present}"
        raise InputError(file, what, image=image_id, field="instances",
                         expected="exactly one of: instances, bboxes + categories, annotation")
    if present[0] == "bboxes+categories":
        cats, boxes = img.get("categories"), img.get("bboxes")
        if not isinstance(cats, list) or not isinstance(boxes, list) or len(cats) != len(boxes):
            raise InputError(file, "bboxes and categories must be lists of equal length",
                             image=image_id, field="bboxes")
        return cats, boxes, None
    key = present[0]
    rows = img[key]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError(file, "not a list of objects", image=image_id, field=key,
                         expected="[{bbox, category}]")
    for i, r in enumerate(rows):
        if "category" not in r:
            raise InputError(file, "missing", image=image_id, field=f"{key}[{i}].category")
    cats = [r["category"] for r in rows]
    boxes = [r.get("bbox") for r in rows]
    scores = [r.get("score") for r in rows]
    return (cats, None if all(b is None for b in boxes) else boxes,
            None if all(s is None for s in scores) else scores)


def _int_vector(values: list, file: str, image_id: str, field: str) -> np.ndarray:
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(file, f"{v!r} is not a non-negative integer", image=image_id,
                             field=f"{field}[{i}]")
    return np.asarray(values, dtype=np.int64)


def _float_vector(values: list, file: str, image_id: str, field: str, n: int) -> np.ndarray:
    if not isinstance(values, list) or len(values) != n:
        raise InputError(file, "wrong length", image=image_id, field=field,
                         expected=f"a list of {n} numbers")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(file, f"{v!r} is not a finite number", image=image_id,
                             field=f"{field}[{i}]")
    return np.asarray(values, dtype=np.float64)


def _boxes(values: list, file: str, image_id: str, field: str) -> np.ndarray:
    for i, b in enumerate(values):
        ok = (isinstance(b, list) and len(b) >= 4
              and all(isinstance(v, int | float) and not isinstance(v, bool)
                      and math.isfinite(v) for v in b[:4]))
        if not ok or b[2] < b[0] or b[3] < b[1]:
            raise InputError(file, f"{b!r} is not a box", image=image_id, field=f"{field}[{i}]",
                             expected="[x1, y1, x2, y2], finite, x2 >= x1, y2 >= y1")
    return np.asarray([b[:4] for b in values], dtype=np.float64).reshape(-1, 4)


def _triplets(values: Any, n_instances: int, file: str, image_id: str, field: str
              ) -> np.ndarray:
    if values is None:
        return EMPTY_TRIPLETS.copy()
    if not isinstance(values, list):
        raise InputError(file, "not a list", image=image_id, field=field,
                         expected="[[subject, object, predicate], ...]")
    for i, t in enumerate(values):
        if (not isinstance(t, list) or len(t) != 3
                or any(isinstance(v, bool) or not isinstance(v, int) for v in t)):
            raise InputError(file, f"{t!r} is not a triplet", image=image_id,
                             field=f"{field}[{i}]", expected="[subject, object, predicate] ints")
        s, o, p = t
        if not (0 <= s < n_instances and 0 <= o < n_instances):
            raise InputError(file, f"instance index out of range in {t}", image=image_id,
                             field=f"{field}[{i}]",
                             expected=f"subject and object in 0..{n_instances - 1}")
        if s == o:
            raise InputError(file, f"subject equals object in {t}", image=image_id,
                             field=f"{field}[{i}]")
        if p < 0:
            raise InputError(file, f"negative predicate in {t}", image=image_id,
                             field=f"{field}[{i}]")
    return np.asarray(values, dtype=np.int64).reshape(-1, 3)


def parse_image(img: Any, index: int, file: str, masks: bool) -> SubmissionImage:
    """One validated ``images[index]`` entry."""
    if not isinstance(img, dict) or "id" not in img:
        raise InputError(file, "not an object with an id", field=f"images[{index}]")
    raw_id = img["id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise InputError(file, f"{raw_id!r} is not an image id", field=f"images[{index}].id",
                         expected="a string or an integer")
    image_id = str(raw_id)
    cats, boxes, scores = _instance_rows(img, file, image_id)
    categories = _int_vector(cats, file, image_id, "category")
    n = len(categories)
    box_arr = None if boxes is None else _boxes(boxes, file, image_id, "bbox")
    if box_arr is None and not masks:
        raise InputError(file, "no boxes in a JSON (box) submission", image=image_id,
                         field="bbox", expected="[x1, y1, x2, y2] per instance")
    score_arr = None if scores is None else _float_vector(scores, file, image_id, "score", n)
    graph = _triplets(img.get("triplets", []), n, file, image_id, "triplets")
    graph_scores = img.get("scores")
    if graph_scores is not None:
        graph_scores = _float_vector(graph_scores, file, image_id, "scores", len(graph))
    ng = _triplets(img.get("ng_triplets"), n, file, image_id, "ng_triplets")
    seg = img.get("seg_filename")
    if masks and not isinstance(seg, str):
        raise InputError(file, "missing", image=image_id, field="seg_filename",
                         expected="the name of the image's layered TIFF inside the ZIP")
    return SubmissionImage(image_id, categories, box_arr, score_arr, graph, graph_scores, ng,
                           seg if masks else None)


def parse_submission(doc: Any, file: str, masks: bool) -> tuple[list[SubmissionImage], bool]:
    """All images of a submission document, and whether any image carries an NG list."""
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise InputError(file, "no images list", field="images",
                         expected='{"version": 1, "images": [...]}')
    if doc.get("version") != FILE_VERSION:
        raise InputError(file, f"unsupported version {doc.get('version')!r}", field="version",
                         expected=str(FILE_VERSION))
    images = [parse_image(img, i, file, masks) for i, img in enumerate(doc["images"])]
    seen: set[str] = set()
    for img in images:
        if img.image_id in seen:
            raise InputError(file, "duplicate image id", image=img.image_id, field="id")
        seen.add(img.image_id)
    has_ng = any(isinstance(i, dict) and i.get("ng_triplets") is not None
                 for i in doc["images"])
    return images, has_ng


def read_layered_tiff(data: bytes, file: str, image_id: str, n_instances: int) -> np.ndarray:
    """The (n, H, W) boolean stack of a layered TIFF, checked against the instance count."""
    try:
        arr = tifffile.imread(io.BytesIO(data))
    except Exception as err:  # tifffile raises many types for corrupt data
        raise InputError(file, f"not a readable TIFF ({type(err).__name__}: {err})",
                         image=image_id, field="seg_filename") from None
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise InputError(file, f"TIFF has shape {arr.shape}", image=image_id,
                         field="seg_filename", expected="layers x height x width")
    if len(arr) != n_instances:
        raise InputError(file, f"TIFF has {len(arr)} layers but the image has {n_instances} "
                         "instances", image=image_id, field="seg_filename",
                         expected="one layer per instance")
    return arr.astype(bool, copy=False)
