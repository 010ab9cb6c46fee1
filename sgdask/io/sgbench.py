"""Reader of SGBench file format versions 1 and 2: a JSON file (boxes) or a ZIP of
triplets.json plus one layered TIFF per image (masks).

Version 2 is what SGBench's own conversion scripts write (``bboxes`` + ``categories`` beside
``seg_filename``, ``ng_triplets`` on every image); its images are read by the same rules as
version 1's (``schemas/README.md`` says what changed between the two).

Each image is checked against ``SCHEMA`` (``schemas/sgbench.schema.json``) first, then
for what a schema cannot say (indices within the instance count, subject != object, finite
and ordered boxes, list lengths, classes within the GT's lists); every problem names the
file, the image and the field. ZIP members are read through ``SafeZip``; TIFF headers are
checked (layer count, size, pixels) before any pixel is decoded.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import fastjsonschema
import numpy as np

from sgdask.errors import InputError, SgdaskError
from sgdask.io.archive import ArchiveLimits, SafeZip, limit_hint, printable, read_capped
from sgdask.io.fs import (
    StorageOptions,
    fault_detail,
    file_digest,
    filesystem,
    is_storage_fault,
)
from sgdask.io.tiff import read_tiff_masks
from sgdask.io.triplets import SUBMISSION, row_problems
from sgdask.types import EMPTY_TRIPLETS, BitMasks, TopPredicates

FILE_VERSIONS = (1, 2)
INT32_MAX = 2**31 - 1
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
DEFAULT_LIMITS = ArchiveLimits()
#: bytes of Python objects per byte of JSON, at most, by kind of document (tracemalloc's
#: peak of ``json.loads``): an upload may be built for the worst case, ``[[0],[0],...]``
#: (a list per 4 bytes: 25x); a GT file (psg.json, vrd-*-anno.json) is the maintainers',
#: objects of numbers and names (8x measured on such documents)
JSON_EXPANSION = {"submission": 26, "gt": 10}
#: spelling name -> the image keys it uses
SPELLINGS = {"instances": ("instances",), "bboxes + categories": ("bboxes", "categories"),
             "annotation": ("annotation",)}
TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string",
              "array": "a list", "object": "an object", "null": "null",
              "boolean": "true or false"}
BOX_EXPECTED = "[x1, y1, x2, y2], finite, x2 >= x1, y2 >= y1"

_INDEX = {"type": "integer", "minimum": 0, "maximum": INT32_MAX,
          "description": f"an integer in 0..{INT32_MAX}"}
_TRIPLETS = {"type": "array", "items": {"$ref": "#/definitions/triplet"},
             "description": "a list of [subject, object, predicate] triplets"}
SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "SGBench submission, file format versions 1 and 2",
    "$comment": "triplets.json of a ZIP submission (masks in layered TIFFs named by "
                "seg_filename) or a JSON submission (boxes). Instances in one of three "
                "spellings; ng_triplets, score and scores are optional. Versions 1 and 2 "
                "are read alike: version 2 is the number SGBench's conversion scripts "
                "write, with bboxes + categories beside seg_filename and ng_triplets.",
    "description": '{"version": 1 or 2, "images": [...]}',
    "type": "object",
    "required": ["version", "images"],
    "properties": {
        "version": {"enum": list(FILE_VERSIONS),
                    "description": "1 or 2, the file format version"},
        "images": {"type": "array", "items": {"$ref": "#/definitions/image"},
                   "description": "a list of image objects"},
    },
    "definitions": {
        "index": _INDEX,
        "box": {"type": "array", "minItems": 4, "items": {"type": "number"},
                "description": "[x1, y1, x2, y2] in pixels"},
        "instance": {
            "type": "object", "required": ["category"],
            "properties": {
                "category": {"$ref": "#/definitions/index"},
                "bbox": {"$ref": "#/definitions/box"},
                "score": {"type": "number", "description": "a number (instance confidence)"},
            },
            "description": "an object {category, bbox, score}",
        },
        "instance_list": {"type": "array", "items": {"$ref": "#/definitions/instance"},
                          "description": "a list of {category, bbox, score} objects"},
        "triplet": {"type": "array", "minItems": 3, "maxItems": 3,
                    "items": {"$ref": "#/definitions/index"},
                    "description": "[subject, object, predicate]: three integers >= 0"},
        "triplets": _TRIPLETS,
        "one_spelling": {
            "oneOf": [{"required": list(keys)} for keys in SPELLINGS.values()],
            "description": "exactly one of: " + ", ".join(SPELLINGS),
        },
        "image": {
            "type": "object",
            "required": ["id", "triplets"],
            "allOf": [{"$ref": "#/definitions/one_spelling"}],
            "properties": {
                "id": {"type": ["string", "integer"],
                       "description": "the image id: a string or an integer"},
                "instances": {"$ref": "#/definitions/instance_list"},
                "annotation": {"$ref": "#/definitions/instance_list"},
                "bboxes": {"type": "array", "items": {"$ref": "#/definitions/box"},
                           "description": "a list of [x1, y1, x2, y2] boxes"},
                "categories": {"type": "array", "items": {"$ref": "#/definitions/index"},
                               "description": "a list of category indices"},
                "triplets": {"$ref": "#/definitions/triplets"},
                "ng_triplets": {**_TRIPLETS, "type": ["array", "null"]},
                "scores": {"type": "array", "items": {"type": "number"},
                           "description": "one number per triplet"},
                "seg_filename": {"type": "string",
                                 "description": "the name of the image's layered TIFF "
                                                "inside the ZIP"},
            },
            "description": "an image object {id, triplets, instances...}",
        },
    },
}


class ClassCounts(NamedTuple):
    """Sizes of the GT's class lists (thing + stuff categories, predicates)."""

    categories: int
    predicates: int


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
    pairs: TopPredicates | None = None  # derived --from-scores: each pair's best predicates


# --------------------------------------------------------------------------- JSON


def load_json(data: bytes, file: str, limits: ArchiveLimits = DEFAULT_LIMITS,
              kind: str = "submission") -> Any:
    """Parsed JSON within the size, memory (``kind``: ``JSON_EXPANSION``) and depth
    limits, or an InputError naming the file."""
    if len(data) > limits.max_json_size:
        raise InputError(file, f"is {len(data)} bytes", expected=limit_hint(limits,
                                                                             "max_json_size"))
    check_json_memory(len(data), file, limits, kind)
    too_deep = InputError(file, "JSON nested too deeply",
                          expected=limit_hint(limits, "max_json_depth"))
    try:
        with gc_paused():
            doc = json.loads(data)
    except RecursionError:
        raise too_deep from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InputError(file, f"not valid JSON ({printable(str(err))})") from err
    if isinstance(data, bytes) and json.detect_encoding(data) == "utf-8":
        deeper = bracket_depth(data) > limits.max_json_depth
    else:
        deeper = nested_deeper(doc, limits.max_json_depth)
    if deeper:
        raise too_deep
    return doc


def check_json_memory(size: int, file: str, limits: ArchiveLimits, kind: str) -> None:
    """InputError when a JSON document of ``size`` bytes of ``kind`` could take more memory
    parsed than ``max_json_memory``: its size times the kind's expansion factor."""
    estimate = size * JSON_EXPANSION[kind]
    if estimate > limits.max_json_memory:
        raise InputError(file, f"is {size} bytes, up to {estimate} bytes once parsed "
                         f"({JSON_EXPANSION[kind]} x its size)",
                         expected=limit_hint(limits, "max_json_memory"))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block. A parsed document is millions of
    small lists without cycles; the collector's passes while they are made (each one walks
    every container made so far) cost more than the parse itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def bracket_depth(data: bytes) -> int:
    """How deep lists and objects nest in a UTF-8 JSON text that parses: the most open
    brackets outside strings at any point, in numpy (``nested_deeper`` walks the parsed
    document in Python, half a second for a 15 MB submission). Escaped backslashes, then
    escaped quotes, are dropped first, so that every quote left opens or closes a string."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    text = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(text == ord('"'))

    def outside_strings(positions: np.ndarray) -> np.ndarray:
        return positions[np.searchsorted(quotes, positions) % 2 == 0]

    opens = outside_strings(np.flatnonzero((text == ord("[")) | (text == ord("{"))))
    closes = outside_strings(np.flatnonzero((text == ord("]")) | (text == ord("}"))))
    # right after the k-th open bracket, k + 1 are open and the closes before it are shut
    depths = np.arange(1, len(opens) + 1) - np.searchsorted(closes, opens)
    return int(depths.max(initial=0))


def nested_deeper(doc: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels (iterative, no recursion)."""
    level = [doc] if isinstance(doc, dict | list) else []
    for _ in range(limit):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
        if not level:
            return False
    return bool(level)


# --------------------------------------------------------------------------- schema


@functools.cache
def validators() -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(document, image) validators compiled from SCHEMA: the document without the images'
    content, and one image (so that each image reports its own first problem)."""
    top = {**SCHEMA, "properties": {**SCHEMA["properties"], "images": {
        k: v for k, v in SCHEMA["properties"]["images"].items() if k != "items"}}}
    image = {"$schema": SCHEMA["$schema"], "definitions": SCHEMA["definitions"],
             "$ref": "#/definitions/image"}
    handlers = dict.fromkeys(("http", "https", "ftp", "file", "data"), no_remote)
    return (fastjsonschema.compile(top, handlers=handlers),
            fastjsonschema.compile(image, handlers=handlers))


def no_remote(uri: str) -> Any:
    """fastjsonschema's fetcher for remote ``$ref``s: the schema has none, never fetch."""
    raise ValueError(f"the SGBench schema refers to {uri}: remote references are not allowed")


def short(value: Any) -> str:
    """A value as JSON, cut to 60 characters."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def dotted(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def field_name(root: Any, path: list[str], prefix: str) -> str:
    """``triplets[2][1]``-style name of a fastjsonschema path (``data`` first) in ``root``."""
    name, node = prefix, root
    for step in path[1:]:
        if isinstance(node, list):
            name, node = f"{name}[{step}]", node[int(step)]
        else:
            name, node = dotted(name, step), node.get(step) if isinstance(node, dict) else None
    return name


def spelling_problem(img: dict) -> str:
    """What is wrong with an image's instance spelling."""
    present = [name for name, keys in SPELLINGS.items() if any(k in img for k in keys)]
    if not present:
        return "no instances"
    if len(present) > 1:
        return f"several instance spellings: {', '.join(present)}"
    given = [k for k in SPELLINGS[present[0]] if k in img]
    missing = [k for k in SPELLINGS[present[0]] if k not in img]
    return f"{given[0]} without {missing[0]}"


def type_names(kinds: str | list[str]) -> str:
    return " or ".join(TYPE_NAMES[k] for k in ([kinds] if isinstance(kinds, str) else kinds))


#: schema rule -> what is wrong with the value that broke it
WHAT: dict[str, Callable[[fastjsonschema.JsonSchemaValueException], str]] = {
    "type": lambda err: f"{short(err.value)} is not {type_names(err.rule_definition)}",
    "minItems": lambda err: f"{short(err.value)} has {len(err.value)} items",
    "maxItems": lambda err: f"{short(err.value)} has {len(err.value)} items",
    "minimum": lambda err: f"{short(err.value)} is out of range",
    "maximum": lambda err: f"{short(err.value)} is out of range",
    "const": lambda err: f"{short(err.value)} is not supported",
    "enum": lambda err: f"{short(err.value)} is not supported",
    "oneOf": lambda err: spelling_problem(err.value),
}


def schema_problem(err: fastjsonschema.JsonSchemaValueException, root: Any, file: str,
                   image: str | None, prefix: str) -> InputError:
    """A schema violation as an InputError: field path, what is wrong, what was expected
    (the description of the schema the value broke)."""
    field = field_name(root, err.path, prefix)
    expected = err.definition.get("description")
    if err.rule == "required":
        missing = next(k for k in err.rule_definition if k not in err.value)
        field, what = dotted(field, missing), "missing"
        expected = err.definition.get("properties", {}).get(missing, {}).get("description")
    elif err.rule == "oneOf":
        field, what = dotted(field, "instances"), WHAT["oneOf"](err)
    else:
        what = WHAT.get(err.rule, lambda e: e.message.removeprefix("data").strip())(err)
    return InputError(file, what, image=image, field=field or None, expected=expected)


def document_problems(doc: Any, file: str) -> list[InputError]:
    """Problems of the document around the images (version, the images list)."""
    try:
        validators()[0](doc)
    except fastjsonschema.JsonSchemaValueException as err:
        return [schema_problem(err, doc, file, None, "")]
    return []


# --------------------------------------------------------------------------- one image


def image_label(img: Any, index: int) -> tuple[str | None, str]:
    """(image id for messages, field prefix): the id when it is usable (a printable string
    or an integer), else ``images[i]``."""
    raw = img.get("id") if isinstance(img, dict) else None
    if (isinstance(raw, str) and raw.isprintable()) or (isinstance(raw, int)
                                                        and not isinstance(raw, bool)):
        return str(raw), ""
    return None, f"images[{index}]"


def instance_key(img: dict) -> str:
    """The key holding an image's instance objects (``bboxes`` for the third spelling)."""
    return next((k for k in ("instances", "annotation") if k in img), "bboxes")


def instance_values(img: dict, name: str) -> list:
    """``category``, ``bbox`` or ``score`` of every instance (None where absent)."""
    key = instance_key(img)
    if key == "bboxes":
        return {"category": img["categories"], "bbox": img["bboxes"],
                "score": [None] * len(img["bboxes"])}[name]
    return [row.get(name) for row in img[key]]


def instance_field(img: dict, i: int, name: str) -> str:
    key = instance_key(img)
    if key == "bboxes":
        return f"bboxes[{i}]" if name == "bbox" else f"categories[{i}]"
    return f"{key}[{i}].{name}"


def floats(values: list) -> np.ndarray:
    """JSON numbers (or lists of them) as float64; integers beyond the float range become
    +-inf."""
    try:
        return np.asarray(values, dtype=np.float64)
    except OverflowError:
        return np.asarray([floats(v) if isinstance(v, list) else huge_int(v) for v in values],
                          dtype=np.float64)


def huge_int(value: float) -> float:
    try:
        return float(value)
    except OverflowError:
        return np.inf if value > 0 else -np.inf


def optional_column(values: list) -> list | None:
    return None if all(v is None for v in values) else values


def box_array(boxes: list) -> np.ndarray:
    return floats([b[:4] for b in boxes]).reshape(-1, 4)


def box_problems(img: dict, file: str, image: str, masks: bool) -> Iterator[InputError]:
    """Every instance has a box or none has (a JSON submission needs them); boxes are finite
    with x2 >= x1 and y2 >= y1."""
    boxes = instance_values(img, "bbox")
    missing = [i for i, b in enumerate(boxes) if b is None]
    if boxes and len(missing) == len(boxes):
        if not masks:
            yield InputError(file, "missing", image=image, field=instance_field(img, 0, "bbox"),
                             expected="[x1, y1, x2, y2] per instance in a JSON (box) submission")
        return
    for i in missing:
        yield InputError(file, "missing", image=image, field=instance_field(img, i, "bbox"),
                         expected="a box for every instance or for none")
    if missing or not boxes:
        return
    arr = box_array(boxes)
    bad = ~np.isfinite(arr).all(axis=1) | (arr[:, 2] < arr[:, 0]) | (arr[:, 3] < arr[:, 1])
    for i in np.flatnonzero(bad).tolist():
        yield InputError(file, f"{short(boxes[i])} is not a box", image=image,
                         field=instance_field(img, i, "bbox"), expected=BOX_EXPECTED)


def score_problems(img: dict, file: str, image: str) -> Iterator[InputError]:
    """Instance scores (for every instance or for none) and triplet scores (one per
    triplet) are finite."""
    scores = instance_values(img, "score")
    if optional_column(scores) is not None:
        arr = floats([np.nan if v is None else v for v in scores])
        for i in np.flatnonzero(~np.isfinite(arr)).tolist():
            yield InputError(file, "missing" if scores[i] is None else
                             f"{short(scores[i])} is not a finite number", image=image,
                             field=instance_field(img, i, "score"),
                             expected="a finite score for every instance, or none")
    scores = img.get("scores")
    if scores is None:
        return
    if len(scores) != len(img["triplets"]):
        yield InputError(file, f"{len(scores)} scores for {len(img['triplets'])} triplets",
                         image=image, field="scores", expected="one score per triplet")
        return
    for i in np.flatnonzero(~np.isfinite(floats(scores))).tolist():
        yield InputError(file, f"{short(scores[i])} is not a finite number", image=image,
                         field=f"scores[{i}]", expected="a finite score per triplet")


def triplet_problems(values: list | None, t: np.ndarray, n: int, file: str, image: str,
                     field: str, n_predicates: int | None) -> Iterator[InputError]:
    """The shared triplet rule (``sgdask.io.triplets``) on one list (``t``: the list
    ``values`` as rows)."""
    for p in row_problems(t, n, n_predicates, SUBMISSION, shown=values):
        yield InputError(file, p.what, image=image, field=f"{field}[{p.row}]",
                         expected=p.expected)


def category_problems(img: dict, file: str, image: str, n_categories: int
                      ) -> Iterator[InputError]:
    for i, c in enumerate(instance_values(img, "category")):
        if c >= n_categories:
            yield InputError(file, f"category {c} out of range", image=image,
                             field=instance_field(img, i, "category"),
                             expected=f"0..{n_categories - 1} as in the GT")


def semantic_problems(img: dict, index: int, file: str, masks: bool,
                      classes: ClassCounts | None, rows: dict[str, np.ndarray]
                      ) -> Iterator[InputError]:
    """What a schema cannot check, on a schema-valid image (``rows``: its triplet lists
    as arrays)."""
    image, prefix = image_label(img, index)
    if image is None:
        yield InputError(file, f"{short(img['id'])} is not an image id", field=prefix + ".id",
                         expected="a printable string or an integer")
        return
    seg = img.get("seg_filename")
    if isinstance(seg, str) and not seg.isprintable():
        yield InputError(file, f"{short(seg)} has unprintable characters", image=image,
                         field="seg_filename", expected="a file name inside the ZIP")
    n = len(instance_values(img, "category"))
    if "bboxes" in img and len(img["bboxes"]) != len(img["categories"]):
        yield InputError(file, f"{len(img['bboxes'])} boxes for {len(img['categories'])} "
                         "categories", image=image, field="bboxes",
                         expected="one box per category")
        return
    yield from box_problems(img, file, image, masks)
    yield from score_problems(img, file, image)
    if classes is not None:
        yield from category_problems(img, file, image, classes.categories)
    n_predicates = None if classes is None else classes.predicates
    for name in ("triplets", "ng_triplets"):
        yield from triplet_problems(img.get(name), rows[name], n, file, image, name,
                                    n_predicates)
    if masks and n and not isinstance(img.get("seg_filename"), str):
        yield InputError(file, "missing", image=image, field="seg_filename",
                         expected="the name of the image's layered TIFF inside the ZIP")


def checked_image(img: Any, index: int, file: str, masks: bool,
                  classes: ClassCounts | None = None, limits: ArchiveLimits = DEFAULT_LIMITS
                  ) -> tuple[SubmissionImage | None, list[InputError]]:
    """``images[index]`` (None when it has a problem) and every problem: its first schema
    violation, or else every semantic problem. Each triplet list is made an array once,
    after its length is checked against the limits (as are the instances)."""
    image, prefix = image_label(img, index)
    over = size_problem(img, file, image or prefix, limits)
    if over is not None:
        return None, [over]
    rows = {key: _plain_triplet_array(img.get(key)) for key in TRIPLET_LISTS} \
        if isinstance(img, dict) else {}
    plain = [key for key, value in rows.items() if value is not None]
    try:
        validators()[1]({**img, **{key: [] for key in plain}} if plain else img)
    except fastjsonschema.JsonSchemaValueException as err:
        return None, [schema_problem(err, img, file, image, prefix)]
    arrays = {key: triplet_array(img.get(key)) if value is None else value
              for key, value in rows.items()}
    found = list(semantic_problems(img, index, file, masks, classes, arrays))
    return (None if found else to_image(img, masks, arrays)), found


TRIPLET_LISTS = ("triplets", "ng_triplets")
#: the instance fields of each spelling of an image (``SPELLINGS``)
INSTANCE_LISTS = ("instances", "categories", "annotation")


def size_problem(img: Any, file: str, image: str, limits: ArchiveLimits
                 ) -> InputError | None:
    """An image with more instances or triplets in one list than the limits allow, before
    anything is made of them (the kernels' work grows with both)."""
    if not isinstance(img, dict):
        return None
    for key, limit in ((k, "max_triplets_per_image") for k in TRIPLET_LISTS):
        value = img.get(key)
        if isinstance(value, list) and len(value) > getattr(limits, limit):
            return InputError(file, f"{len(value)} triplets", image=image, field=key,
                              expected=limit_hint(limits, limit))
    for key in INSTANCE_LISTS:
        value = img.get(key)
        if isinstance(value, list) and len(value) > limits.max_instances_per_image:
            return InputError(file, f"{len(value)} instances", image=image, field=key,
                              expected=limit_hint(limits, "max_instances_per_image"))
    return None
INT32_MAX = 2**31 - 1


def _plain_triplet_array(values: Any) -> np.ndarray | None:
    """``values`` as (n, 3) int64 rows when it is a non-empty list of [int, int, int] rows
    in 0..2^31-1, no booleans: exactly what the schema's triplet lists accept, checked in
    numpy (the generated validator walks each of the hundreds of rows in Python); else
    None."""
    if not isinstance(values, list) or not values:
        return None
    try:
        arr = np.asarray(values)
    except ValueError:
        return None
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[1] != 3:
        return None
    if arr.min() < 0 or arr.max() > INT32_MAX:
        return None
    if bool in set(map(type, itertools.chain.from_iterable(values))):
        return None
    return arr.astype(np.int64, copy=False)


def to_image(img: dict, masks: bool, rows: dict[str, np.ndarray]) -> SubmissionImage:
    """The SubmissionImage of an image that passed its checks (``rows``: its triplet
    lists as arrays)."""
    boxes = optional_column(instance_values(img, "bbox"))
    scores = optional_column(instance_values(img, "score"))
    graph_scores = img.get("scores")
    return SubmissionImage(
        image_id=str(img["id"]),
        categories=np.asarray(instance_values(img, "category"), dtype=np.int64),
        boxes=None if boxes is None else box_array(boxes),
        scores=None if scores is None else floats(scores),
        graph=rows["triplets"],
        graph_scores=None if graph_scores is None else floats(graph_scores),
        ng=rows["ng_triplets"],
        seg_filename=img.get("seg_filename") if masks else None)


def triplet_array(values: list | None) -> np.ndarray:
    if not values:
        return EMPTY_TRIPLETS.copy()
    return np.asarray(values, dtype=np.int64).reshape(-1, 3)


def checked_images(doc: dict, file: str, masks: bool, classes: ClassCounts | None = None,
                   limits: ArchiveLimits = DEFAULT_LIMITS
                   ) -> Iterator[tuple[SubmissionImage | None, list[InputError]]]:
    """Per image of a document without ``document_problems``: the image (None when it has
    problems) and its problems."""
    for index, img in enumerate(doc["images"]):
        yield checked_image(img, index, file, masks, classes, limits)


def duplicate_problems(images: list[SubmissionImage], file: str) -> Iterator[InputError]:
    seen: set[str] = set()
    for img in images:
        if img.image_id in seen:
            yield InputError(file, "duplicate image id", image=img.image_id, field="id",
                             expected="each image once")
        seen.add(img.image_id)


def has_ng(doc: dict) -> bool:
    """Whether any image carries an NG list."""
    return any(isinstance(i, dict) and i.get("ng_triplets") is not None for i in doc["images"])


def parse_submission(doc: Any, file: str, masks: bool) -> tuple[list[SubmissionImage], bool]:
    """All images of a submission document, and whether any image carries an NG list.

    Raises the first problem found.
    """
    raise_first(document_problems(doc, file))
    images = []
    for image, found in checked_images(doc, file, masks):
        raise_first(found)
        images.append(image)
    raise_first(duplicate_problems(images, file))
    return images, has_ng(doc)


def raise_first(problems: Iterable[InputError]) -> None:
    first = next(iter(problems), None)
    if first is not None:
        raise first


# --------------------------------------------------------------------------- files


class SubmissionSource:
    """A submission file: JSON (boxes) or ZIP (triplets.json + layered TIFFs), via fsspec."""

    def __init__(self, url: str, storage_options: StorageOptions | None,
                 limits: ArchiveLimits | None = None) -> None:
        self.url, self.options = str(url), storage_options
        self.limits = limits or DEFAULT_LIMITS
        self.fs, self.path = filesystem(self.url, storage_options)
        try:
            if not self.fs.exists(self.path):
                raise InputError(self.url, "file not found")
            if self.fs.isdir(self.path):
                raise InputError(self.url, "is a directory",
                                 expected="an SGBench JSON or ZIP file")
            with self._open() as f:
                self.is_zip = f.read(4) in ZIP_MAGIC
        except Exception as err:
            if isinstance(err, SgdaskError) or not is_storage_fault(err):
                raise
            raise self._unreadable(err) from err
        self.label = f"{self.url}:triplets.json" if self.is_zip else self.url
        self._zip: SafeZip | None = None

    def _open(self) -> Any:
        try:
            return self.fs.open(self.path, "rb")
        except Exception as err:
            if not is_storage_fault(err):
                raise
            raise self._unreadable(err) from err

    def _unreadable(self, err: BaseException) -> SgdaskError:
        return SgdaskError(f"{self.url}: cannot read ({fault_detail(err)})")

    def archive(self) -> SafeZip:
        """The ZIP, its entries checked (raises the first unsafe entry)."""
        if self._zip is None:
            self._zip = SafeZip(self._open(), self.url, self.limits)
        return self._zip

    def document(self) -> Any:
        """The parsed triplets document (``triplets.json`` of a ZIP, or the JSON file)."""
        if self.is_zip:
            info = self.archive().entries.get("triplets.json")
            if info is not None:
                check_json_memory(info.file_size, self.label, self.limits, "submission")
            data = self.archive().read("triplets.json", "max_json_size")
        else:
            data = self._read_json_file()
        return load_json(data, self.label, self.limits)

    def _read_json_file(self) -> bytes:
        try:
            with self._open() as f:
                return read_capped(f, self.limits.max_json_size)
        except ValueError:
            raise InputError(self.url, "too large", expected=limit_hint(
                self.limits, "max_json_size")) from None
        except Exception as err:
            if not is_storage_fault(err):
                raise
            raise self._unreadable(err) from err

    def content_hash(self) -> str:
        try:
            return file_digest(self.url, self.options)
        except Exception as err:
            if not is_storage_fault(err):
                raise
            raise self._unreadable(err) from err

    def masks(self, img: SubmissionImage, shape: tuple[int, int] | None = None) -> BitMasks:
        """The image's word masks; an image without instances needs no TIFF."""
        if img.seg_filename is None and not len(img.categories):
            return BitMasks.empty(shape or (0, 0))
        assert img.seg_filename is not None
        data = self.archive().read(img.seg_filename, image=img.image_id, field="seg_filename")
        return read_tiff_masks(data, f"{self.url}:{img.seg_filename}", img.image_id,
                               len(img.categories), shape, self.limits)
