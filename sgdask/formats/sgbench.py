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

import functools
import itertools
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import islice
from typing import TYPE_CHECKING, Any

import fastjsonschema
import numpy as np

from sgdask import __version__
from sgdask.errors import InputError, Option, SgdaskError, Text
from sgdask.formats.ingest import (
    DEFAULT_STORE_PARTITION,
    Decoded,
    Progress,
    map_tasks,
    submission_parts,
    write_decoded_part,
)
from sgdask.formats.registry import (
    OIV6,
    SGBENCH,
    SGBENCH_JSON,
    SGBENCH_ZIP,
    SUBMISSION,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.formats.scores import SubmissionInstances, load_score_lists
from sgdask.formats.validate import (
    DEFAULT_MAX_PROBLEMS,
    SHOWN_MISSING,
    ClassCounts,
    GTInfo,
    Problem,
)
from sgdask.io.archive import ArchiveLimits, SafeZip, limit_hint, read_capped
from sgdask.io.bounded_json import check_json_memory, gc_paused, load_json
from sgdask.io.fs import (
    StorageOptions,
    absolute,
    combined_digest,
    fault_detail,
    file_digest,
    filesystem,
    is_storage_fault,
)
from sgdask.io.sources import Digest, Loaded
from sgdask.io.tiff import read_tiff_masks
from sgdask.io.triplets import SUBMISSION as WORDING
from sgdask.io.triplets import row_problems
from sgdask.kernels.scores import PREDICATE, DerivedLists
from sgdask.store.store import StoreReader, StoreWriter
from sgdask.types import EMPTY_TRIPLETS, BitMasks, TopPredicates

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec

FILE_VERSIONS = (1, 2)
INT32_MAX = 2**31 - 1
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
DEFAULT_LIMITS = ArchiveLimits()
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
    for p in row_problems(t, n, n_predicates, WORDING, shown=values):
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
    is_object = isinstance(img, dict)
    rows = {key: _plain_triplet_array(img.get(key)) for key in TRIPLET_LISTS} \
        if is_object else {}
    plain = [key for key, value in rows.items() if value is not None] + \
        [key for key in INSTANCE_OBJECTS if is_object and _plain_instances(img.get(key))]
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
#: the spellings whose instances are objects ({category, bbox, score})
INSTANCE_OBJECTS = ("instances", "annotation")
_NUMBERS = (int, float)  # exact types: JSON's numbers, never a bool


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


def _plain_instances(values: Any) -> bool:
    """Whether ``values`` is a list of instance objects that the schema's ``instance``
    accepts, by a few exact type tests per instance (the generated validator makes three
    calls and a dozen tests per instance: 45,627 instances are 0.5 s of the driver's check
    of a PSG-sized ZIP). Never accepts what the schema refuses: anything unusual (a bool,
    an integral float as a category, a missing category) is left to the validator, which
    reports it."""
    if not isinstance(values, list):
        return False
    for inst in values:
        if type(inst) is not dict:
            return False
        category = inst.get("category")
        if type(category) is not int or not 0 <= category <= INT32_MAX:
            return False
        box = inst.get("bbox", _numbers_ok)
        if box is not _numbers_ok and not _numbers_ok(box, 4):
            return False
        if "score" in inst and type(inst["score"]) not in _NUMBERS:
            return False
    return True


def _numbers_ok(values: Any, least: int) -> bool:
    """A list of at least ``least`` JSON numbers (no bools)."""
    return type(values) is list and len(values) >= least and \
        all(type(v) in _NUMBERS for v in values)


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
                 limits: ArchiveLimits | None = None,
                 members: Mapping[str, zipfile.ZipInfo] | None = None) -> None:
        """``members``: the ZIP entries a task reads, as the driver's check saw them
        (``SafeZip.checked_entries``): the task reads them without the central directory."""
        self.url, self.options = str(url), storage_options
        self.limits = limits or DEFAULT_LIMITS
        self._members = members
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
            self._zip = SafeZip(self._open(), self.url, self.limits, self._members)
        return self._zip

    def members_of(self, images: Iterable[SubmissionImage]) -> dict[str, zipfile.ZipInfo] | None:
        """The checked ZIP entries of ``images``' TIFFs (None for a JSON submission)."""
        if not self.is_zip:
            return None
        return self.archive().checked_entries(img.seg_filename for img in images
                                              if img.seg_filename is not None)

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


def convert_submission(submission: str, out: str, gt: str | None = None,
                       storage_options: StorageOptions | None = None,
                       partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
                       progress: Progress = None, cluster: ClusterSpec = None,
                       limits: ArchiveLimits | None = None, from_scores: str | None = None,
                       rank_by: str = PREDICATE, ng_limit: int | None = None
                       ) -> dict[str, Any]:
    """SGBench submission (JSON or ZIP) -> submission store. Returns the manifest.

    With ``from_scores``, the triplet lists are derived from per-pair predicate score
    vectors (``schemas/scores.md``) instead of taken from the submission, ranked by
    ``rank_by`` (``predicate`` or ``triplet``), the NG list cut after ``ng_limit`` triplets
    when given. The store's content hash then covers the score file and both options too.

    The archive, the document and every image are checked first (``sgdask validate``'s
    checks, the first error raised); then one task per part reads its TIFFs (ranged reads
    from the ZIP, wherever it is; each TIFF checked before it is decoded) and writes its
    files. ``limits`` bound what the archive, its JSON and its TIFFs may hold.
    """
    submission = absolute(submission)  # read by the tasks
    source = SubmissionSource(submission, storage_options, limits)
    gt_reader = StoreReader(gt, storage_options, "gt") if gt else None
    gt_info = GTInfo.of(gt_reader) if gt_reader else None
    check = checked_submission(source, gt_info)
    images = sorted(check.images, key=lambda i: i.image_id)
    has_ng = check.has_ng
    content_hash = source.content_hash()
    if from_scores:
        instances = SubmissionInstances(
            source.label, {img.image_id: len(img.categories) for img in images},
            {img.image_id: img.scores for img in images})
        images = lists_from_scores(images, load_score_lists(
            from_scores, storage_options, ng_limit, rank_by, instances, limits,
            gt_info.classes.predicates if gt_info else None,
            unique_pairs=gt_reader is not None
            and gt_reader.manifest.get("gt_format") == OIV6))
        has_ng = True
        content_hash = derived_content_hash(content_hash, from_scores, storage_options,
                                            rank_by, ng_limit)
    sizes = gt_info.sizes if gt_info else {}
    parts = submission_parts(images, gt_reader, partition_size)
    with StoreWriter(out, "submission", storage_options, overwrite) as writer:
        tasks = [(submission, writer.write_url, storage_options, i, part,
                  {img.image_id: sizes[img.image_id] for img in part if img.image_id in sizes},
                  limits, source.members_of(part))
                 for i, part in enumerate(parts)]
        infos = map_tasks(write_submission_part, tasks, cluster,
                          (lambda info: progress(info["n_images"])) if progress else None)
        return writer.finish(
            infos, sgdask_version=__version__, content_hash=content_hash,
            source=str(submission), instances="masks" if source.is_zip else "boxes",
            has_ng=has_ng, n_images=len(images), partition_size=partition_size,
            triplets_from=from_scores, rank_by=rank_by if from_scores else None,
            ng_limit=ng_limit if from_scores else None, pair_scores=_pair_places(images))


def derived_content_hash(submission_hash: str, scores_url: str,
                         options: StorageOptions | None, rank_by: str,
                         ng_limit: int | None) -> str:
    """The content hash of a store derived from scores: the submission's hash, the score
    file's bytes and the derivation options, so that a result cache keyed on it never
    serves one derivation's numbers for another."""
    return combined_digest(submission_hash, file_digest(scores_url, options),
                           f"rank_by={rank_by};ng_limit={ng_limit}")


def lists_from_scores(images: list[SubmissionImage], lists: dict[str, DerivedLists]
                      ) -> list[SubmissionImage]:
    """Images with graph and NG lists replaced by the ones derived from score vectors
    (checked against the images by ``load_score_lists``), with each pair's best predicates;
    an image without score rows gets empty lists and no pair."""
    empty = DerivedLists(EMPTY_TRIPLETS, np.empty(0), EMPTY_TRIPLETS, np.empty(0))
    return [replace(img, graph=d.graph, graph_scores=d.graph_scores, ng=d.ng,
                    pairs=d.pairs if d.pairs is not None else _no_pairs(per_pair))
            for per_pair in [_pair_places_of(lists)]
            for img in images for d in [lists.get(img.image_id, empty)]]


def _pair_places_of(lists: dict[str, DerivedLists]) -> int:
    """Predicates kept per pair (2; 1 for a vocabulary of one predicate)."""
    return next((d.pairs.per_pair for d in lists.values() if d.pairs is not None), 2)


def _no_pairs(per_pair: int) -> TopPredicates:
    empty = np.empty(0, np.int64)
    return TopPredicates(empty, empty, empty, np.empty(0, np.float32), per_pair)


def _pair_places(images: list[SubmissionImage]) -> int | None:
    """The manifest's ``pair_scores``: predicates kept per pair when the lists were derived
    from scores (the pair rows the ``oiv6`` protocol ranks), else None."""
    return next((img.pairs.per_pair for img in images if img.pairs is not None), None)


def write_submission_part(submission: str, out: str, options: StorageOptions | None,
                          index: int, images: list[SubmissionImage],
                          sizes: dict[str, tuple[int, int]],
                          limits: ArchiveLimits | None = None,
                          members: Mapping[str, zipfile.ZipInfo] | None = None
                          ) -> dict[str, Any]:
    """One submission part (a Dask task): decodes its TIFFs (each checked against its
    image's instance count and GT size first), writes tables and masks; ``members``: as
    ``SubmissionSource``."""
    source = SubmissionSource(submission, options, limits, members)
    return write_decoded_part(out, options, index, decoded_images(source, images, sizes))


class SubmissionCheck:
    """The checks of one submission. ``problems`` yields them lazily; as it goes, it
    collects the images that parsed (``images``) and whether any has an NG list."""

    def __init__(self, source: SubmissionSource, gt: GTInfo | None) -> None:
        self.source, self.gt = source, gt
        self.images: list[SubmissionImage] = []
        self.has_ng = False

    def problems(self, decode: bool) -> Iterator[Problem]:
        """All problems; with ``decode``, every TIFF is decoded too (else only the ZIP
        members' presence is checked: conversion tasks check the TIFFs as they read them)."""
        doc, early = self.read_document()
        if early:
            yield from map(Problem, early)
            return
        label = self.source.label
        self.has_ng = has_ng(doc)
        for image, found in checked_images(doc, label, self.source.is_zip,
                                           self.gt.classes if self.gt else None,
                                           self.source.limits):
            yield from map(Problem, found)
            if image is not None:
                yield from map(Problem, self.image_problems(image, decode))
                self.images.append(image)
        yield from map(Problem, duplicate_problems(self.images, label))
        yield from self.missing_images(doc)

    def read_document(self) -> tuple[Any, list[InputError]]:
        """(the parsed document, its top-level problems), or (None, what prevents reading
        it: an unreadable file, unsafe archive entries)."""
        try:
            if self.source.is_zip and self.source.archive().problems:
                return None, self.source.archive().problems
            doc = self.source.document()
        except InputError as err:
            return None, [err]
        return doc, document_problems(doc, self.source.label)

    def image_problems(self, image: SubmissionImage, decode: bool) -> Iterator[InputError]:
        """The GT knows the image; its TIFF is in the ZIP (and, with ``decode``, readable
        and of the right layer count and size)."""
        if self.gt is not None and image.image_id not in self.gt.sizes:
            yield InputError(self.source.label, "image id not in the ground truth's test split",
                             image=image.image_id, field="id",
                             expected="an id of the GT's test images")
            return
        name = image.seg_filename
        if name is None:
            return
        if name not in self.source.archive():
            yield InputError(f"{self.source.url}:{name}", "missing from the archive",
                             image=image.image_id, field="seg_filename")
        elif decode:
            try:
                self.source.masks(image, self.gt.sizes.get(image.image_id) if self.gt else None)
            except InputError as err:
                yield err

    def missing_images(self, doc: dict) -> Iterator[Problem]:
        """A warning naming the evaluated GT images without prediction (they score 0)."""
        if self.gt is None:
            return
        submitted = {image_label(img, i)[0] for i, img in enumerate(doc["images"])}
        missing = sorted(self.gt.evaluated - submitted)
        if not missing:
            return
        shown = ", ".join(missing[:SHOWN_MISSING]) + (", ..." if len(missing) > SHOWN_MISSING
                                                      else "")
        what = (f"{len(missing)} of {len(self.gt.evaluated)} evaluated GT images have no "
                "prediction and will score 0")
        named, counted = (InputError(self.source.label, text, field="images",
                                     expected="a prediction for every GT test image")
                          for text in (f"{what}: {shown}", what))
        yield Problem(named, "warning", counted)


def validate_submission(url: str, gt: str | None = None,
                        storage_options: StorageOptions | None = None,
                        limits: ArchiveLimits | None = None,
                        max_problems: int = DEFAULT_MAX_PROBLEMS) -> list[Problem]:
    """Every problem of a submission (up to ``max_problems``), decoding every TIFF; checked
    against a GT store when ``gt`` is given. An empty list: the submission is valid."""
    gt_info = GTInfo.of(StoreReader(gt, storage_options, "gt")) if gt else None
    try:
        source = SubmissionSource(url, storage_options, limits)
    except InputError as err:
        return [Problem(err)]
    return list(islice(SubmissionCheck(source, gt_info).problems(decode=True), max_problems))


def checked_submission(source: SubmissionSource, gt: GTInfo | None) -> SubmissionCheck:
    """The checks ``validate`` runs (TIFF contents aside), raising the first error.

    The cyclic collector stays paused until the parsed document is gone (freed by its
    reference counts: it has no cycles). Re-enabled any sooner, each of its passes would walk
    the document's millions of lists and dicts again: 0.2 to 0.35 s a pass on a 15 MB
    ``triplets.json``, in the driver before the first task."""
    check = SubmissionCheck(source, gt)
    with gc_paused():
        first = next((p for p in check.problems(decode=False) if p.is_error), None)
    if first is not None:
        raise first.error
    return check


def decoded_images(source: SubmissionSource, images: list[SubmissionImage],
                   sizes: dict[str, tuple[int, int]]) -> list[Decoded]:
    """The images with their TIFF layers decoded (each checked against its instance count
    and GT size first) into word masks."""
    out = []
    for img in images:
        if source.is_zip:
            masks = source.masks(img, sizes.get(img.image_id))
            out.append(Decoded(img, masks.shape, masks))
        else:
            out.append(Decoded(img, (0, 0), None))
    return out


@dataclass(frozen=True)
class FileSlice:
    """A partition's images of a submission file, decoded by the task that scores them."""

    url: str
    images: tuple[SubmissionImage, ...]
    sizes: tuple[tuple[str, tuple[int, int]], ...]
    limits: ArchiveLimits | None
    members: tuple[zipfile.ZipInfo, ...] | None = None  # as ``SubmissionSource``

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(img.image_id for img in self.images)

    def decode(self, options: StorageOptions | None) -> list[Decoded]:
        if not self.images:
            return []
        members = None if self.members is None else {m.filename: m for m in self.members}
        source = SubmissionSource(self.url, options, self.limits, members)
        return decoded_images(source, list(self.images), dict(self.sizes))

    def read(self, options: StorageOptions | None) -> Loaded:
        decoded = self.decode(options)
        return Loaded({d.image.image_id: d.prediction() for d in decoded}, decoded=decoded)


class FileInput:
    """An SGBench submission file, checked like ``sgdask validate`` (TIFFs aside: tasks
    check each one as they decode it)."""

    keeps = True

    def __init__(self, url: str, options: StorageOptions | None, gt: GTInfo,
                 limits: ArchiveLimits | None) -> None:
        self.source = SubmissionSource(url, options, limits)
        self.url, self.limits, self.sizes = str(url), limits, gt.sizes
        check = checked_submission(self.source, gt)
        self.images = {img.image_id: img for img in check.images}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": check.has_ng,
            "instances": "masks" if self.source.is_zip else "boxes",
            "content_hash": self.source.content_hash()}

    def ids(self) -> list[str]:
        return sorted(self.images)

    def slice(self, ids: list[str]) -> FileSlice:
        images = tuple(self.images[i] for i in ids)
        members = self.source.members_of(images)
        return FileSlice(self.url, images,
                         tuple((i, self.sizes[i]) for i in ids if i in self.sizes), self.limits,
                         None if members is None else tuple(members.values()))

    def finish(self, digests: list[Digest]) -> None:
        """Nothing to complete: the file's content hash is known before the tasks run."""

# --------------------------------------------------------------------------- the format

def _opened(url: str, options: StorageOptions | None, gt_reader: StoreReader, gt_info: GTInfo,
            limits: ArchiveLimits | None, how: Any) -> FileInput:
    return FileInput(url, options, gt_info, limits)


FORMAT = register(Format(
    SGBENCH, SUBMISSION, lambda head, name: True,
    ("boxes", "masks", "instance_scores", "graph", "graph_scores", "ng"),
    "schemas/sgbench.schema.json", convert_submission, _opened, validate_submission,
    ("from_scores", "rank_by", "ng_limit")))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: a ZIP with ``triplets.json``, a JSON document
_SUBMITTED: Text = "a submission: convert it with sgdask convert"
_NOT_RESULTS: Text = ("an SGBench submission, not a model's result file: drop ",
                      Option("method"))


def _hint(role: str) -> Text | None:
    if role == "results":
        return _NOT_RESULTS
    if role in ("gt source", "psg"):
        return _SUBMITTED
    return ("pass it as ", Option("pred")) if role != "submission file" else None


register_signature(Signature(
    SGBENCH_ZIP, "an SGBench submission (ZIP)", "zip", 10,
    lambda names, files: "triplets.json" in names,
    accepted_as=frozenset({"pred", "submission file"}), hint=_hint))
register_signature(Signature(
    SGBENCH_JSON, "an SGBench submission (JSON)", "keys", 20,
    keys=frozenset({"version", "images"}),
    accepted_as=frozenset({"pred", "submission file"}), hint=_hint))
