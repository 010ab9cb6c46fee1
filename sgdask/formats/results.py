"""Result files of OpenPSG-family models (``convert --method``): a pickled list of ``Result``
objects, or a directory of per-image ``.npz`` files, as SGBench's conversion scripts read
them (``schemas/results.md``).

``ResultSource.images(ids)`` pairs the results with the GT's test images that have
relations, in psg.json's ``data`` order, as SGBench's scripts pair them (cheap: a directory
listing, or the pickle parsed once per process); ``ResultSource.image(entry)`` checks and
decodes one image into categories, boxes, masks and the two triplet lists, so that any task
can read just the images it needs. Pickles go through ``sgdask.io.unpickle`` (nothing in
the file is run); ``.npz`` members are read as raw ``.npy`` arrays (no pickled objects)
through ``SafeZip``, under the same ``ArchiveLimits`` as SGBench ZIPs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sgdask import __version__
from sgdask.errors import Fix, InputError, Option, SgdaskError, StoreError, Text, checked_choice
from sgdask.formats.ingest import (
    DEFAULT_STORE_PARTITION,
    Progress,
    add_submission_rows,
    map_tasks,
    submission_parts,
)
from sgdask.formats.methods import METHODS, ResultsMethod, fields_of, lists_for
from sgdask.formats.registry import (
    NPZ,
    NPZ_DIR,
    PICKLE,
    RESULTS,
    SUBMISSION,
    Format,
    Signature,
    register,
    register_signature,
)
from sgdask.formats.sgbench import BOX_EXPECTED, SubmissionImage
from sgdask.formats.validate import ClassCounts, GTInfo
from sgdask.io.archive import ArchiveLimits, SafeZip, limit_hint, printable, read_capped
from sgdask.io.fs import StorageOptions, absolute, filesystem, join, unreadable
from sgdask.io.sources import Digest, Loaded
from sgdask.io.triplets import PAIRS, row_problems
from sgdask.io.unpickle import (
    ALLOWED_KINDS,
    TORCH_HINT,
    OverLimit,
    Record,
    Refused,
    restricted_loads,
)
from sgdask.store.store import PartTables, StoreReader, StoreWriter, part_name, write_part
from sgdask.types import BitMasks, ImagePred

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec

DEFAULT_LIMITS = ArchiveLimits()
ZIP_MAGIC = b"PK\x03\x04"
#: bytes that hold any ``.npy`` header numpy reads (it refuses headers past 10000 bytes)
NPY_HEAD = 12 + 10_000
#: ``.npz`` members up to this size are inflated whole before their header is read (a
#: header read first costs more than inflating them); larger ones header first
INFLATE_FIRST = 1 << 20
HASH_HEADER = b"sgdask results v1\n"
PAIRING = "one result per GT test image with at least one relation, in psg.json's data order"
#: Result attribute -> the numpy dtype kinds it may have
KINDS = {"masks": "biuf", "labels": "iu", "refine_bboxes": "iuf", "rel_pair_idxes": "iu",
         "rel_dists": "iuf", "refine_scores": "f", "rels": "iu"}


@dataclass(frozen=True)
class ResultEntry:
    """One result, paired with its GT image: ``position`` in the pickled list or in the
    directory's numeric order, ``name`` its ``.npz`` file (None in a pickle)."""

    image_id: str
    position: int
    name: str | None


@dataclass
class ResultImage:
    """One decoded, checked image: what the store needs."""

    image_id: str
    categories: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray | None
    masks: np.ndarray
    graph: np.ndarray
    ng: np.ndarray
    source_file: str

    def submission_image(self) -> SubmissionImage:
        """The image as the SGBench reader would give it (no ZIP member)."""
        return SubmissionImage(self.image_id, self.categories, self.boxes, self.scores,
                               self.graph, None, self.ng, self.source_file)

    def prediction(self) -> ImagePred:
        """The image as a task scores it, as a store written from it would load it (an
        image without instances has no scores there)."""
        scores = self.scores if self.scores is not None and len(self.scores) else None
        return ImagePred(self.image_id, self.categories, self.graph, self.ng, self.boxes,
                         BitMasks.from_dense(self.masks), scores)


@dataclass(frozen=True)
class Where:
    """How problems of one result are named: file, image id, field prefix; ``label`` names
    the result in the store (``results[i]`` or the ``.npz`` file name)."""

    file: str
    image: str
    prefix: str
    label: str

    def error(self, field: str, what: str, expected: Text | Fix | None = None) -> InputError:
        return InputError(self.file, what, image=self.image, field=self.prefix + field,
                          expected=expected)


# --------------------------------------------------------------------------- pickle


@functools.lru_cache(maxsize=1)
def loaded_pickle(url: str, options: str, key: str, limits: ArchiveLimits
                  ) -> tuple[tuple[Any, ...], str]:
    """(the pickled list, SHA-256 hex of the file), parsed once per process and file
    version (``key``: fsspec's ukey); ``options`` is the storage options as JSON."""
    fs, path = filesystem(url, json.loads(options))
    size = fs.size(path)
    if size is not None and size > limits.max_pickle_size:
        raise InputError(url, f"is {size} bytes", expected=limit_hint(limits, "max_pickle_size"))
    try:
        with fs.open(path, "rb") as f:
            data = read_capped(f, limits.max_pickle_size)
    except ValueError:
        raise InputError(url, "too large", expected=limit_hint(limits, "max_pickle_size")) \
            from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from None
    if data.startswith(ZIP_MAGIC):
        raise InputError(url, f"is a ZIP archive, as torch.save writes: {TORCH_HINT}")
    try:
        obj = restricted_loads(data, limits.max_pickle_objects, limits.max_pickle_depth)
    except OverLimit as err:
        raise InputError(url, str(err), expected=limit_hint(limits, err.limit)) from None
    except Refused as err:
        raise InputError(url, str(err)) from None
    except Exception as err:  # the unpickler raises many types for truncated or corrupt data
        raise InputError(url, f"not a readable pickle ({type(err).__name__}: "
                         f"{printable(str(err))})") from None
    if not isinstance(obj, list | tuple):
        raise InputError(url, f"holds a {type(obj).__name__}",
                         expected="a list of Result objects: " + PAIRING)
    return tuple(obj), hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- npz


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header declares: the array's layout and where its data starts."""

    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def layout(self) -> str:
        """``shape (3, 64, 96) of bool``, the shape cut short (a header may list thousands
        of dimensions)."""
        shape = str(self.shape)
        return f"shape {shape if len(shape) <= 60 else shape[:57] + '...'} of {self.dtype}"

    def placeholder(self, fail: Any) -> np.ndarray:
        """An array of the declared shape and dtype that holds no memory (every element is
        the same zero): what the shape checks need, before anything is inflated."""
        try:
            return np.broadcast_to(np.zeros((), self.dtype), self.shape)
        except ValueError:
            raise fail(f"{self.layout}: not a valid array shape") from None


def npy_header(head: bytes, fail: Any) -> NpyHeader:
    """The header at the start of a ``.npy`` member (``NPY_HEAD`` bytes hold any header
    numpy reads), with a dtype of booleans, integers or floats."""
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise fail(f".npy format version {version}", "1.0 or 2.0, as numpy.savez writes")
    except InputError:
        raise
    except Exception as err:  # numpy raises ValueError and others for a malformed header
        raise fail(f"not a readable .npy array ({type(err).__name__}: "
                   f"{printable(str(err))})") from None
    if dtype.hasobject or dtype.names or dtype.subdtype or dtype.kind not in ALLOWED_KINDS:
        raise fail(f"dtype {dtype}", "booleans, integers or floats (no object arrays)")
    return NpyHeader(shape, fortran, dtype, f.tell())


def npy_array(data: bytes, header: NpyHeader, fail: Any) -> np.ndarray:
    """The array of one ``.npy`` member (read-only view of ``data``) as its ``header``
    (``npz_header``, read from the member's first bytes) declares it, without pickles."""
    if len(data) - header.offset != header.nbytes:
        raise fail(f"holds {len(data) - header.offset} bytes for {header.layout}",
                   "a complete .npy array")
    return np.frombuffer(data, dtype=header.dtype, count=math.prod(header.shape),
                         offset=header.offset).reshape(header.shape,
                                                       order="F" if header.fortran else "C")


def npz_member(archive: SafeZip, name: str, image: str, fail: Any
               ) -> tuple[NpyHeader, bytes | None]:
    """The header of the member ``name.npy``, which must declare exactly the data the ZIP
    directory says the member holds, and the member's bytes when it is small enough to
    inflate before that check (``INFLATE_FIRST``); a larger member's header is read from
    its first bytes, and the member inflated only once its declared shape has passed the
    checks."""
    member = name + ".npy"
    size = archive.entries[member].file_size
    data = archive.read(member, image=image, field=name) if size <= INFLATE_FIRST else None
    header = npy_header(data if data is not None else
                        archive.head(member, NPY_HEAD, image=image, field=name), fail)
    if header.offset + header.nbytes != size:
        raise fail(f"declares {header.nbytes} bytes ({header.layout}) in a member of {size} "
                   "bytes", "a complete .npy array")
    return header, data


def npz_stem(name: str) -> int | None:
    """The integer a result file is ordered by (``12.npz`` -> 12), or None."""
    try:
        return int(name.removesuffix(".npz"))
    except ValueError:
        return None


# --------------------------------------------------------------------------- checks


def field_arrays(fields: dict[str, Any], method: str, where: Where) -> dict[str, np.ndarray]:
    """The attributes ``method`` reads, each present and a numpy array of an allowed kind."""
    out = {}
    for name in fields_of(method):
        value = fields.get(name)
        if value is None:
            raise where.error(name, "missing", ("a numpy array: ", Option("method", method),
                                                " reads it"))
        if not isinstance(value, np.ndarray):
            raise where.error(name, f"a {type(value).__name__}", "a numpy array")
        if value.dtype.kind not in KINDS[name]:
            kinds = {"b": "booleans", "i": "integers", "u": "integers", "f": "floats"}
            wanted = " or ".join(dict.fromkeys(kinds[k] for k in KINDS[name]))
            raise where.error(name, f"dtype {value.dtype}", wanted)
        out[name] = value
    return out


def check_shapes(f: dict[str, np.ndarray], where: Where, shape: tuple[int, int] | None,
                 classes: ClassCounts | None, instance_scores: bool,
                 limits: ArchiveLimits) -> None:
    """Every array's shape agrees with the masks' instance count and the GT."""
    masks = f["masks"]
    if masks.ndim != 3:
        raise where.error("masks", f"shape {masks.shape}", "instances x height x width")
    n, h, w = masks.shape
    if n > limits.max_tiff_layers:
        raise where.error("masks", f"{n} masks", limit_hint(limits, "max_tiff_layers"))
    if h * w > limits.max_layer_pixels:
        raise where.error("masks", f"masks are {w}x{h} pixels",
                          limit_hint(limits, "max_layer_pixels"))
    if shape is not None and (h, w) != tuple(shape):
        raise where.error("masks", f"masks are {w}x{h}", f"{shape[1]}x{shape[0]} as the GT image")
    columns = 5 if instance_scores else 4
    n_pred = None if classes is None else classes.predicates + 1
    wanted = {
        "labels": ((n,), f"({n},): one label per mask"),
        "refine_bboxes": ((n, columns), (f"({n}, {columns}+): x1, y1, x2, y2",
                                         *((", score (", Option("instance_scores", True), ")")
                                           if instance_scores else ()))),
        "rel_pair_idxes": ((None, 2), "(R, 2): subject and object per row"),
        "rel_dists": ((len(f["rel_pair_idxes"]), n_pred),
                      f"({len(f['rel_pair_idxes'])}, {n_pred or 'P + 1'}): per row of "
                      "rel_pair_idxes, the no-relation score then one per predicate"),
        "refine_scores": ((n, 2), f"({n}, C): class logits per mask, background first"),
        "rels": ((None, 3), "(R, 3): subject, object, 1-based predicate"),
    }
    for name, (dims, text) in wanted.items():
        if name in f and not shape_fits(f[name].shape, dims, name):
            raise where.error(name, f"shape {f[name].shape}", text)


def shape_fits(actual: tuple[int, ...], dims: tuple[int | None, ...], name: str) -> bool:
    """``actual`` matches ``dims`` (None: any); the last dimension of boxes and class logits
    is a minimum, and ``rel_dists`` needs at least two columns when the GT is unknown."""
    if len(actual) != len(dims):
        return False
    minimum = name in ("refine_bboxes", "refine_scores") or (name == "rel_dists"
                                                             and dims[-1] is None)
    for i, (a, d) in enumerate(zip(actual, dims, strict=True)):
        last = i == len(dims) - 1
        if last and minimum:
            if a < (d if d is not None else 2):
                return False
        elif d is not None and a != d:
            return False
    return True


def first_bad(rows: np.ndarray) -> int | None:
    hits = np.flatnonzero(rows)
    return int(hits[0]) if len(hits) else None


def check_values(f: dict[str, np.ndarray], where: Where, classes: ClassCounts | None,
                 instance_scores: bool) -> None:
    """Labels, indices and scores within range, boxes finite and ordered."""
    n = len(f["labels"])
    labels = f["labels"]
    top = None if classes is None else classes.categories
    bad = first_bad((labels < 1) | (labels > top if top is not None else False))
    if bad is not None:
        raise where.error(f"labels[{bad}]", f"{labels[bad]} out of range",
                          f"1..{top}: 1-based categories" if top else "1-based categories")
    boxes = f["refine_bboxes"][:, :4].astype(np.float64)
    bad = first_bad(~np.isfinite(boxes).all(axis=1) | (boxes[:, 2] < boxes[:, 0])
                    | (boxes[:, 3] < boxes[:, 1]))
    if bad is not None:
        raise where.error(f"refine_bboxes[{bad}]", f"{boxes[bad].tolist()} is not a box",
                          BOX_EXPECTED)
    if instance_scores:
        bad = first_bad(~np.isfinite(f["refine_bboxes"][:, 4].astype(np.float64)))
        if bad is not None:
            raise where.error(f"refine_bboxes[{bad}][4]", "not a finite score",
                              ("a finite instance score (", Option("instance_scores", True), ")"))
    for name in ("rel_dists", "refine_scores"):
        if name in f:
            bad = first_bad(~np.isfinite(f[name]).all(axis=1))
            if bad is not None:
                raise where.error(f"{name}[{bad}]", "not finite", "finite scores")
    check_pairs(f["rel_pair_idxes"], n, where, "rel_pair_idxes")
    if "rels" in f:
        rels = f["rels"]
        check_pairs(rels[:, :2], n, where, "rels")
        top = None if classes is None else classes.predicates
        bad = first_bad((rels[:, 2] < 1) | (rels[:, 2] > top if top is not None else False))
        if bad is not None:
            raise where.error(f"rels[{bad}]", f"predicate {rels[bad, 2]} out of range",
                              f"1..{top}: 1-based predicates" if top else "1-based predicates")


def check_pairs(pairs: np.ndarray, n: int, where: Where, name: str) -> None:
    """The shared rule (``sgdask.io.triplets``) on (subject, object) pairs: the first bad
    index, else the first pair on one instance."""
    for p in row_problems(pairs, n, None, PAIRS, by_kind=True):
        raise where.error(f"{name}[{p.row}]", p.what, p.expected)


def boolean_masks(masks: np.ndarray, where: Where) -> np.ndarray:
    """The masks as booleans, as SGBench's scripts store them (cast to uint8): integers must
    lie in 0..255 and floats be 0 or 1, so that the cast changes nothing."""
    if masks.dtype == bool:
        return masks
    if masks.dtype.kind == "f":
        if not np.isin(masks, (0.0, 1.0)).all():
            raise where.error("masks", "holds values other than 0 and 1",
                              "boolean masks: threshold soft masks first")
    elif masks.dtype != np.uint8 and masks.size and (masks.min() < 0 or masks.max() > 255):
        raise where.error("masks", "holds values outside 0..255",
                          "boolean masks, or integers in 0..255 (non-zero = inside)")
    return masks != 0


def decoded(fields: dict[str, Any], method: str, where: Where, shape: tuple[int, int] | None,
            classes: ClassCounts | None, instance_scores: bool, limits: ArchiveLimits
            ) -> ResultImage:
    """One result's fields, checked, turned into the image's instances and lists."""
    f = field_arrays(fields, method, where)
    check_shapes(f, where, shape, classes, instance_scores, limits)
    check_values(f, where, classes, instance_scores)
    lists = lists_for(method)(f)
    boxes = f["refine_bboxes"]
    return ResultImage(
        image_id=where.image, categories=f["labels"].astype(np.int64) - 1,
        boxes=boxes[:, :4].astype(np.float64),
        scores=boxes[:, 4].astype(np.float64) if instance_scores else None,
        masks=boolean_masks(f["masks"], where), graph=lists.graph, ng=lists.ng,
        source_file=where.label)


# --------------------------------------------------------------------------- source


class ResultSource:
    """A result file (pickle) or directory (``.npz`` per image), via fsspec."""

    def __init__(self, url: str, method: str, storage_options: StorageOptions | None = None,
                 limits: ArchiveLimits | None = None, instance_scores: bool = False) -> None:
        checked_choice("method", method, tuple(METHODS), "method")
        self.url, self.method, self.options = str(url).rstrip("/"), method, storage_options
        self.limits = limits or DEFAULT_LIMITS
        self.instance_scores = instance_scores
        self.fs, self.path = filesystem(self.url, storage_options)
        if not self.fs.exists(self.path):
            raise InputError(self.url, "file not found")
        self.is_dir = self.fs.isdir(self.path)
        #: boolean mask stacks compress far beyond ``max_ratio``; an .npz member is bounded
        #: by ``max_member_size`` instead, like a decoded TIFF
        self.npz_limits = dataclasses.replace(self.limits, max_ratio=math.inf)

    # -- listing

    def images(self, image_ids: Sequence[str]) -> list[ResultEntry]:
        """The results paired with ``image_ids`` (the GT's test images with relations, in
        psg.json's ``data`` order); the counts must agree."""
        names = self.npz_names() if self.is_dir else [None] * len(self.records())
        if len(names) != len(image_ids):
            raise InputError(self.url, f"{len(names)} results for {len(image_ids)} GT test "
                             "images with relations", expected=PAIRING)
        return [ResultEntry(str(i), k, name)
                for k, (i, name) in enumerate(zip(image_ids, names, strict=True))]

    def records(self) -> tuple[Any, ...]:
        """The pickled list (parsed once per process)."""
        return self.loaded()[0]

    def loaded(self) -> tuple[tuple[Any, ...], str]:
        """(the pickled list, the pickle's SHA-256 hex)."""
        return loaded_pickle(self.url, json.dumps(self.options or {}, sort_keys=True),
                             str(self.fs.ukey(self.path)), self.limits)

    def npz_names(self) -> list[str]:
        """The directory's ``.npz`` files, in the numeric order of their names."""
        names = [p.rsplit("/", 1)[-1] for p in self.fs.ls(self.path, detail=False)]
        names = [n for n in names if n.endswith(".npz")]
        if len(names) > self.limits.max_entries:
            raise InputError(self.url, f"holds {len(names)} .npz files",
                             expected=limit_hint(self.limits, "max_entries"))
        seen: dict[int, str] = {}
        for name in names:
            stem = npz_stem(name)
            if stem is None:
                raise InputError(join(self.url, printable(name)), "name is not a number",
                                 expected="N.npz: results are paired with the GT images in "
                                 "the order of N")
            if stem in seen:
                raise InputError(join(self.url, printable(name)), f"same number as {seen[stem]}",
                                 expected="one file per number")
            seen[stem] = name
        return [seen[k] for k in sorted(seen)]

    # -- one image

    def fields(self, entry: ResultEntry, shape: tuple[int, int] | None = None,
               classes: ClassCounts | None = None
               ) -> tuple[dict[str, Any], Where, str | None]:
        """(the result's attributes, how to name its problems, SHA-256 hex of its file
        for a directory entry); an ``.npz`` file's arrays pass the shape checks (against
        ``shape`` and ``classes`` when given) on their headers, before any is inflated."""
        if entry.name is None:
            record = self.records()[entry.position]
            label = f"results[{entry.position}]"
            where = Where(self.url, entry.image_id, label + ".", label)
            if not isinstance(record, Record):
                raise InputError(self.url, f"a {type(record).__name__}", image=entry.image_id,
                                 field=label, expected="a Result object")
            return record.fields, where, None
        file = join(self.url, entry.name)
        data = self.npz_bytes(file)
        where = Where(file, entry.image_id, "", entry.name)
        archive = SafeZip(io.BytesIO(data), file, self.npz_limits)
        failures = {name: lambda what, expected=None, n=name: where.error(n, what, expected)
                    for name in fields_of(self.method) if name + ".npy" in archive}
        members = {name: npz_member(archive, name, entry.image_id, fail)
                   for name, fail in failures.items()}
        headers = {name: header for name, (header, _) in members.items()}
        placeholders = {name: header.placeholder(failures[name])
                        for name, header in headers.items()}
        check_shapes(field_arrays(placeholders, self.method, where), where, shape, classes,
                     self.instance_scores, self.limits)
        arrays = {name: npy_array(data if data is not None else archive.read(
                      name + ".npy", image=entry.image_id, field=name), header, failures[name])
                  for name, (header, data) in members.items()}
        return arrays, where, hashlib.sha256(data).hexdigest()

    def npz_bytes(self, file: str) -> bytes:
        fs, path = filesystem(file, self.options)
        try:
            with fs.open(path, "rb") as f:
                return read_capped(f, self.limits.max_total_size)
        except ValueError:
            raise InputError(file, "too large",
                             expected=limit_hint(self.limits, "max_total_size")) from None
        except OSError as err:
            raise SgdaskError(f"{file}: {unreadable(err)}") from None

    def image(self, entry: ResultEntry, shape: tuple[int, int] | None = None,
              classes: ClassCounts | None = None) -> ResultImage:
        """One image, checked (against the GT image's (height, width) and the GT's class
        counts when given) and decoded."""
        return self.image_and_digest(entry, shape, classes)[0]

    def image_and_digest(self, entry: ResultEntry, shape: tuple[int, int] | None = None,
                         classes: ClassCounts | None = None
                         ) -> tuple[ResultImage, str | None]:
        fields, where, digest = self.fields(entry, shape, classes)
        return decoded(fields, self.method, where, shape, classes, self.instance_scores,
                       self.limits), digest

    # -- identity

    def content_hash(self, entries: Sequence[ResultEntry],
                     digests: Iterable[str | None] | None = None) -> str:
        """``sha256:`` of the method, the instance-score choice and the result bytes: the
        pickle, or each ``.npz`` file's name and SHA-256 in pairing order (``digests``,
        when the caller has them already, else read here)."""
        digest = hashlib.sha256(HASH_HEADER)
        digest.update(f"{self.method}\n{int(self.instance_scores)}\n".encode())
        if not self.is_dir:
            digest.update(self.loaded()[1].encode())
        else:
            known = list(digests) if digests is not None else [None] * len(entries)
            for entry, hexdigest in zip(entries, known, strict=True):
                if hexdigest is None:
                    hexdigest = hashlib.sha256(self.npz_bytes(join(self.url, entry.name or "")
                                                              )).hexdigest()
                digest.update(f"{entry.name}\n{hexdigest}\n".encode())
        return "sha256:" + digest.hexdigest()


def convert_results(results: str, out: str, gt: str, method: str,
                    storage_options: StorageOptions | None = None,
                    partition_size: int = DEFAULT_STORE_PARTITION, overwrite: bool = False,
                    progress: Progress = None, cluster: ClusterSpec = None,
                    limits: ArchiveLimits | None = None, instance_scores: bool = False
                    ) -> dict[str, Any]:
    """OpenPSG-family result file or directory -> submission store (``convert --method``).

    Results are paired with the GT's test images that have relations, in psg.json's order;
    each part's task decodes its images' masks straight into crops (no TIFF) and derives
    the lists by ``method``'s rules (``schemas/results.md``). A problem in any image fails
    the whole conversion, after every task has finished, so no store is left behind.
    """
    gt_reader = StoreReader(gt, storage_options, "gt")
    gt_info = GTInfo.of(gt_reader)
    results = absolute(results)  # read by the tasks
    source = ResultSource(results, method, storage_options, limits, instance_scores)
    entries = source.images(evaluated_order(gt_reader, gt_info))
    parts = submission_parts(sorted(entries, key=lambda e: e.image_id), gt_reader,
                             partition_size)
    try:
        with StoreWriter(out, "submission", storage_options, overwrite) as writer:
            tasks = [(results, method, instance_scores, writer.write_url, storage_options, i,
                      part, {e.image_id: gt_info.sizes[e.image_id] for e in part},
                      gt_info.classes, limits)
                     for i, part in enumerate(parts)]
            outcomes = map_tasks(write_result_part, tasks, cluster,
                                 (lambda o: progress(len(o.digests))) if progress else None)
            raise_first(o.error for o in outcomes)
            digests = {e.position: d for part, o in zip(parts, outcomes, strict=True)
                       for e, d in zip(part, o.digests, strict=True)}
            return writer.finish(
                [o.info for o in outcomes], sgdask_version=__version__,
                content_hash=source.content_hash(entries, [digests[e.position]
                                                           for e in entries]),
                source=str(results), instances="masks", has_ng=True,
                n_images=len(entries), partition_size=partition_size, triplets_from=None,
                method=method, instance_scores=instance_scores)
    finally:
        loaded_pickle.cache_clear()



@dataclass
class PartOutcome:
    """What a result part's task returns: its manifest entry and file digests, or the
    first problem it found (returned, not raised, so that the driver removes the store only
    once no task writes into it any more)."""

    info: dict[str, Any] | None
    digests: list[str | None]
    error: SgdaskError | None = None



def raise_first(errors: Iterable[SgdaskError | None]) -> None:
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first



def write_result_part(results: str, method: str, instance_scores: bool, out: str,
                      options: StorageOptions | None, index: int, entries: list[ResultEntry],
                      sizes: dict[str, tuple[int, int]], classes: ClassCounts,
                      limits: ArchiveLimits | None) -> PartOutcome:
    """One part of a result conversion (a Dask task): decodes and checks its images, crops
    their masks and writes the part."""
    try:
        source = ResultSource(results, method, options, limits, instance_scores)
        tables = PartTables.empty()
        digests = []
        for entry in entries:
            img, digest = source.image_and_digest(entry, sizes[entry.image_id], classes)
            digests.append(digest)
            add_submission_rows(tables, img.submission_image(), img.masks.shape[1:],
                                part_name(index), BitMasks.from_dense(img.masks))
        return PartOutcome(write_part(out, options, index, tables), digests)
    except SgdaskError as err:
        return PartOutcome(None, [], err)


def evaluated_order(gt: StoreReader, gt_info: GTInfo) -> list[str]:
    """The GT's test images with relations, in psg.json's ``data`` order (what model result
    files are paired with)."""
    name = gt.manifest.get("image_order")
    if not name:
        raise StoreError(f"{gt.url}: the GT store does not record psg.json's image order, "
                         "which result files are paired by (written by an older sgdask: "
                         "run sgdask ingest-gt again)")
    raw = gt.read_file(name)  # checked against the manifest's size and SHA-256
    try:
        ids = json.loads(raw)["image_ids"]
    except (ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{gt.url}/{name}: unreadable ({type(err).__name__}: {err})") from None
    return [i for i in ids if i in gt_info.evaluated]



@dataclass(frozen=True)
class ResultSlice:
    """A partition's results of a model's result file, decoded and checked (against the GT
    image's size and the GT's classes) by the task that scores them."""

    url: str
    how: ResultsMethod
    entries: tuple[ResultEntry, ...]
    sizes: tuple[tuple[str, tuple[int, int]], ...]
    classes: ClassCounts
    limits: ArchiveLimits | None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(e.image_id for e in self.entries)

    def decode(self, options: StorageOptions | None
               ) -> tuple[dict[str, ImagePred], list[Digest]]:
        """The predictions, and the digests of the files read (for the content hash)."""
        if not self.entries:
            return {}, []
        source = ResultSource(self.url, self.how.method, options, self.limits,
                              self.how.instance_scores)
        sizes = dict(self.sizes)
        preds, digests = {}, []
        for entry in self.entries:
            img, digest = source.image_and_digest(entry, sizes[entry.image_id], self.classes)
            preds[entry.image_id] = img.prediction()
            digests.append((entry.position, digest))
        return preds, digests

    def read(self, options: StorageOptions | None) -> Loaded:
        return Loaded(*self.decode(options))



class ResultInput:
    """A model's result file or ``.npz`` directory, paired with the GT's test images as
    ``convert --method`` pairs them; its manifest is what that conversion would write, the
    content hash completed by ``finish`` from the digests the tasks return."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None, gt: StoreReader,
                 gt_info: GTInfo, how: ResultsMethod, limits: ArchiveLimits | None) -> None:
        self.source = ResultSource(url, how.method, options, limits, how.instance_scores)
        self.url, self.how, self.limits, self.gt_info = str(url), how, limits, gt_info
        self.entries = self.source.images(evaluated_order(gt, gt_info))
        self.by_id = {e.image_id: e for e in self.entries}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": True, "instances": "masks",
            "content_hash": None, "method": how.method,
            "instance_scores": how.instance_scores}

    def ids(self) -> list[str]:
        return sorted(self.by_id)

    def slice(self, ids: list[str]) -> ResultSlice:
        return ResultSlice(self.url, self.how, tuple(self.by_id[i] for i in ids),
                           tuple((i, self.gt_info.sizes[i]) for i in ids),
                           self.gt_info.classes, self.limits)

    def finish(self, digests: list[Digest]) -> None:
        """Set the content hash (``convert --method``'s) from the tasks' digests; drop the
        parsed pickle this process holds."""
        known = dict(digests)
        self.manifest["content_hash"] = self.source.content_hash(
            self.entries, [known.get(e.position) for e in self.entries])
        loaded_pickle.cache_clear()

# --------------------------------------------------------------------------- the format

def _convert(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
             method: str, **kwargs: Any) -> dict[str, Any]:
    if gt is None:
        raise SgdaskError(Option("method"), " needs ", Option("gt"), ": results are paired "
                          "with the GT store's test images, in psg.json's order")
    return convert_results(url, out, gt, method, options, **kwargs)


def _opened(url: str, options: StorageOptions | None, gt_reader: StoreReader,
            gt_info: GTInfo, limits: ArchiveLimits | None, how: Any) -> ResultInput:
    return ResultInput(url, options, gt_reader, gt_info, how, limits)


FORMAT = register(Format(
    RESULTS, SUBMISSION, lambda head, name: False,
    ("boxes", "masks", "instance_scores", "graph", "ng"),
    "schemas/results.md", _convert, _opened, options=("method", "instance_scores")))

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format: a pickle, a directory of ``.npz`` files, one
# ``.npz`` file (a ZIP of ``.npy`` members)


def _hint(role: str) -> Text | None:
    if role in ("pred", "submission file"):
        return ("add ", Option("method", "METHOD"))
    return ("pass it as ", Option("pred"), " with ", Option("method"))


register_signature(Signature(
    PICKLE, "a pickle (a model's result file)", "head", 30,
    lambda head: head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"),
    accepted_as=frozenset({"results"}), hint=_hint))
register_signature(Signature(
    NPZ_DIR, "a directory of .npz files (a model's result files)", "dir", 10,
    lambda names: bool(names) and any(n.endswith(".npz") for n in names),
    accepted_as=frozenset({"results"}), hint=_hint))
register_signature(Signature(
    NPZ, "an .npz file", "zip", 20,
    lambda names, files: bool(files) and all(n.endswith(".npy") for n in files),
    accepted_as=frozenset({"results", "scores"}), hint=_hint))
