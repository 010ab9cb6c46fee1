"""Reader of PSG-challenge submissions: ``relation.json`` plus ``panseg/`` panoptic PNGs, as
OpenPSG's ``tools/grade.py`` reads them (``docs/tasks/result-files.md``, "PSG challenge
files").

A submission is a directory holding ``relation.json`` and ``panseg/``, a ZIP of the two (at
its root or in one folder), or ``relation.json`` itself (``panseg/`` beside it).
``relation.json`` is a list with one entry per GT test image that has relations, in
psg.json's ``data`` order (grade.py pairs them by position, as model result files are
paired): ``pan_seg_file_name`` (the PNG in ``panseg/``), ``segments_info`` (``id``: the
segment's colour R + 256 G + 65536 B; ``category_id``: the category, 1-based) and
``relations`` (``[subject, object, predicate]``: segment indices, the predicate 1-based;
the list's order is the ranking, and only its first ``KEPT_RELATIONS`` count).

``ChallengeInput`` checks ``relation.json`` on the client (every field but the pixels);
each task decodes its images' PNGs (``ChallengeSlice``), checked against the GT image's
size. The result is a mask submission with a graph list and no NG list: categories and
predicates 0-based, instance i the pixels of segment i, no scores; when some pixels are in
no listed segment, with the segments grade.py's PQ scores in their place
(``graded_segments``). A converted store holds those segments too (its segments table,
format 7), so it scores the same PQ as the files.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sgdask import __version__
from sgdask.errors import InputError, Option, SgdaskError
from sgdask.formats.psg import plain_rgb
from sgdask.formats.registry import (
    PSG_CHALLENGE,
    SUBMISSION,
    Format,
    Signature,
    register,
    register_claim,
    register_signature,
)
from sgdask.formats.results import evaluated_order
from sgdask.formats.sgbench import SubmissionImage
from sgdask.formats.validate import ClassCounts, GTInfo, Problem
from sgdask.io.archive import ArchiveLimits, SafeZip, limit_hint, printable, read_capped
from sgdask.io.bounded_json import load_json
from sgdask.io.fs import StorageOptions, absolute, filesystem, join, unreadable
from sgdask.io.sources import Digest, Loaded
from sgdask.store.store import (
    PartTables,
    StoreReader,
    StoreWriter,
    add_segment_rows,
    part_name,
    write_part,
)
from sgdask.types import EMPTY_TRIPLETS, BitMasks, ImagePred

RELATIONS_FILE, PNG_FOLDER = "relation.json", "panseg"
#: grade.py keeps an image's first 20 relations (``rel_array[:20]``)
KEPT_RELATIONS = 20
PAIRING = ("one entry per GT test image with relations, in psg.json's data order (grade.py "
           "pairs them by position)")
HASH_HEADER = b"sgdask psg-challenge v1\n"
_ID_LIMIT = 1 << 24  # a segment id is an RGB colour
Segments = tuple[BitMasks, np.ndarray]  # disjoint masks and their categories (0-based)
#: mmdetection's ``INSTANCE_OFFSET``: grade.py's panoptic id of a segment is its category
#: index + 1000 k (the k-th listed segment of its category)
INSTANCE_OFFSET = 1000


# --------------------------------------------------------------------------- files


class ChallengeFiles:
    """The submission's files: ``relation.json`` and ``panseg/NAME`` (in a directory or a
    ZIP), read within ``limits``."""

    def __init__(self, url: str, options: StorageOptions | None,
                 limits: ArchiveLimits | None) -> None:
        self.url, self.options = str(url), options
        self.limits = limits or ArchiveLimits()
        fs, path = filesystem(self.url, options)
        self.zip: SafeZip | None = None
        if fs.isdir(path):
            self.base = self.url.rstrip("/")
        elif self.url.rstrip("/").rsplit("/", 1)[-1] == RELATIONS_FILE:
            self.base = self.url.rstrip("/").rsplit("/", 1)[0]
        else:
            self.zip = SafeZip(fs.open(path, "rb"), self.url, self.limits)
            self.zip.check()
            self.base = _zip_folder(self.zip, self.url)

    def where(self, name: str) -> str:
        """How a file of the submission is named in messages."""
        return f"{self.url}:{self.base}{name}" if self.zip is not None else join(self.base,
                                                                                 name)

    def relations(self) -> bytes:
        if self.zip is not None:
            return self.zip.read(self.base + RELATIONS_FILE, "max_json_size")
        return self._file(RELATIONS_FILE, self.limits.max_json_size, "max_json_size", None)

    def png(self, name: str, image: str) -> bytes:
        member = f"{PNG_FOLDER}/{name}"
        if self.zip is not None:
            return self.zip.read(self.base + member, image=image, field="pan_seg_file_name")
        return self._file(member, self.limits.max_member_size, "max_member_size", image)

    def _file(self, name: str, cap: int, limit: str, image: str | None) -> bytes:
        url = self.where(name)
        fs, path = filesystem(url, self.options)
        field = None if image is None else "pan_seg_file_name"
        try:
            with fs.open(path, "rb") as f:
                return read_capped(f, cap)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise InputError(url, "not found", image=image, field=field) from None
        except ValueError:
            raise InputError(url, "too large", image=image, field=field,
                             expected=limit_hint(self.limits, limit)) from None
        except OSError as err:
            raise SgdaskError(f"{url}: {unreadable(err)}") from None


def _zip_folder(archive: SafeZip, label: str) -> str:
    """Where ``relation.json`` is in the ZIP: its root, or one folder."""
    found = sorted(n for n in archive.entries
                   if n.rsplit("/", 1)[-1] == RELATIONS_FILE and n.count("/") <= 1)
    if len(found) != 1:
        raise InputError(label, f"holds {len(found)} {RELATIONS_FILE} files at its root or "
                         "in a top folder", expected=f"one, with {PNG_FOLDER}/ beside it")
    return found[0][:-len(RELATIONS_FILE)]


def is_challenge_dir(fs: Any, path: str) -> bool:
    """Whether a directory is a PSG-challenge submission (``relation.json`` in it)."""
    return bool(fs.isfile(join(path, RELATIONS_FILE)))


# --------------------------------------------------------------------------- relation.json


@dataclass(frozen=True)
class ChallengeEntry:
    """One checked entry of ``relation.json``, paired with its GT image."""

    image_id: str
    position: int
    png: str
    segment_ids: tuple[int, ...]
    categories: tuple[int, ...]  # 0-based
    graph: tuple[tuple[int, int, int], ...]  # the kept relations, predicates 0-based
    n_categories: int  # the GT's: the category index grade.py's PQ takes as VOID


def challenge_entries(raw: bytes, where: str, order: list[str], classes: ClassCounts,
                      limits: ArchiveLimits) -> list[ChallengeEntry]:
    """``relation.json``'s entries, checked and paired with the GT's ``order``."""
    doc = load_json(raw, where, limits)
    if not isinstance(doc, list):
        raise InputError(where, f"holds a JSON {type(doc).__name__}", expected="a list: "
                         + PAIRING)
    if len(doc) != len(order):
        raise InputError(where, f"holds {len(doc)} entries; the GT has {len(order)} test "
                         "images with relations", expected=PAIRING)
    return [_entry(item, i, image_id, where, classes, limits)
            for i, (item, image_id) in enumerate(zip(doc, order, strict=True))]


def _entry(item: Any, i: int, image_id: str, where: str, classes: ClassCounts,
           limits: ArchiveLimits) -> ChallengeEntry:
    def fail(field: str, what: str, expected: Any = None) -> InputError:
        return InputError(where, what, image=image_id, field=f"[{i}].{field}",
                          expected=expected)

    if not isinstance(item, dict):
        raise fail("", f"a JSON {type(item).__name__}", "an object")
    png = item.get("pan_seg_file_name")
    if not isinstance(png, str) or not png or "/" in png or "\\" in png or png in (".", ".."):
        raise fail("pan_seg_file_name", f"{printable(repr(png))}",
                   f"a file name in {PNG_FOLDER}/")
    segments = item.get("segments_info")
    if not isinstance(segments, list):
        raise fail("segments_info", "missing or not a list")
    if len(segments) > limits.max_instances_per_image:
        raise fail("segments_info", f"{len(segments)} segments",
                   limit_hint(limits, "max_instances_per_image"))
    ids, categories = [], []
    for j, s in enumerate(segments):
        sid = s.get("id") if isinstance(s, dict) else None
        cat = s.get("category_id") if isinstance(s, dict) else None
        if not _is_int(sid) or not 0 < sid < _ID_LIMIT:
            raise fail(f"segments_info[{j}].id", printable(repr(sid)),
                       "a colour id R + 256 G + 65536 B, 1 to 16777215")
        if not _is_int(cat) or not 1 <= cat <= classes.categories:
            raise fail(f"segments_info[{j}].category_id", printable(repr(cat)),
                       f"a category 1 to {classes.categories} (1-based, as grade.py reads "
                       "it)")
        if sid in ids:
            raise fail(f"segments_info[{j}].id", f"{sid} repeats segment {ids.index(sid)}",
                       "one segment per colour")
        ids.append(sid)
        categories.append(cat - 1)
    return ChallengeEntry(image_id, i, png, tuple(ids), tuple(categories),
                          _kept_relations(item.get("relations"), len(ids), classes, fail),
                          classes.categories)


def _kept_relations(rows: Any, n: int, classes: ClassCounts,
                    fail: Callable[..., InputError]) -> tuple[tuple[int, int, int], ...]:
    """The first ``KEPT_RELATIONS`` relations, predicates 0-based (grade.py reads only these:
    later rows need only be lists of numbers)."""
    if not isinstance(rows, list):
        raise fail("relations", "missing or not a list")
    kept = []
    for r, row in enumerate(rows):
        if not isinstance(row, list) or len(row) < 3 or not all(_is_int(v) for v in row):
            raise fail(f"relations[{r}]", printable(repr(row))[:60],
                       "[subject, object, predicate] integers")
        if r >= KEPT_RELATIONS:
            continue
        s, o, p = row[:3]
        for name, v in (("subject", s), ("object", o)):
            if not 0 <= v < n:
                raise fail(f"relations[{r}]", f"{name} {v}",
                           f"a segment index 0 to {n - 1}" if n else "no relations: the "
                           "image has no segments")
        if not 1 <= p <= classes.predicates:
            raise fail(f"relations[{r}]", f"predicate {p}",
                       f"1 to {classes.predicates}: 1-based, 0 is no relation (grade.py "
                       "would score 0 as predicate 1)")
        kept.append((s, o, p - 1))
    return tuple(kept)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --------------------------------------------------------------------------- PNGs


def png_rgb(png: bytes, where: str, image: str, limits: ArchiveLimits) -> np.ndarray:
    """The (H, W, 3) pixels of an RGB or RGBA PNG (what grade.py's ``rgb2id`` reads)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise InputError(where, "not a PNG", image=image)
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    if height * width > limits.max_layer_pixels:
        raise InputError(where, f"PNG is {width}x{height} pixels", image=image,
                         expected=limit_hint(limits, "max_layer_pixels"))
    rgb = plain_rgb(png, height, width)
    if rgb is not None:
        return rgb
    from PIL import Image

    try:
        with Image.open(io.BytesIO(png)) as img:
            if img.mode not in ("RGB", "RGBA"):
                raise InputError(where, f"a {img.mode} PNG", image=image,
                                 expected="RGB colours, id = R + 256 G + 65536 B")
            return np.ascontiguousarray(np.asarray(img.convert("RGB")))
    except InputError:
        raise
    except Exception as err:  # Pillow raises many types for corrupt data
        raise InputError(where, f"not a readable PNG ({type(err).__name__})",
                         image=image) from None


def decoded(files: ChallengeFiles, entry: ChallengeEntry, size: tuple[int, int]
            ) -> tuple[SubmissionImage, BitMasks, Segments | None, str]:
    """An entry with its PNG decoded into one mask per segment (checked against the GT
    image's size), the segments grade.py's PQ scores when they differ from these
    (``graded_segments``), and the PNG's SHA-256."""
    raw = files.png(entry.png, entry.image_id)
    where = files.where(f"{PNG_FOLDER}/{entry.png}")
    rgb = png_rgb(raw, where, entry.image_id, files.limits)
    if rgb.shape[:2] != tuple(size):
        raise InputError(where, f"is {rgb.shape[1]}x{rgb.shape[0]} pixels", image=entry.image_id,
                         expected=f"the GT image's {size[1]}x{size[0]}")
    masks = BitMasks.from_panoptic(rgb, np.array(entry.segment_ids, dtype=np.int64),
                                   len(entry.segment_ids))
    segments = graded_segments(rgb, entry, masks, where)
    y0, x0, y1, x1 = masks.boxes.T if len(masks) else np.zeros((4, 0))
    graph = np.array(entry.graph, dtype=np.int64).reshape(-1, 3)
    image = SubmissionImage(entry.image_id, np.array(entry.categories, dtype=np.int64),
                            np.stack([x0, y0, x1, y1], 1).astype(np.float64), None, graph,
                            None, EMPTY_TRIPLETS.copy(), f"{PNG_FOLDER}/{entry.png}")
    return image, masks, segments, hashlib.sha256(raw).hexdigest()


def graded_segments(rgb: np.ndarray, entry: ChallengeEntry, masks: BitMasks, where: str
                    ) -> Segments | None:
    """The segments of grade.py's PQ, when pixels no listed segment holds (black, or a
    colour ``segments_info`` does not name) make them differ from the listed masks (None
    when every pixel is listed: the masks are the segments).

    grade.py (``load_results``) gives a listed segment's pixels the panoptic id ``category
    index + 1000 k`` (its k-th listed segment of that category) and every other pixel its
    colour id; mmdetection's ``CocoPanopticDataset`` makes each id a segment of category
    ``id % 1000``. So black pixels (id 0) join the first listed segment of the first
    category or are one of it; an unnamed colour joins the listed segment of equal id or is
    a segment of its own; an id whose ``id % 1000`` is the category count is VOID, written
    as id 0, which joins the segment of id 0 where there is one. An id beyond stops
    grade.py (a ``KeyError``): refused. Relations still match the listed masks, as grade.py's
    recall does.
    """
    height, width = rgb.shape[:2]
    if int(masks.areas().sum()) == height * width:
        return None
    pan = _panoptic_id_map(rgb, entry)
    category = pan % INSTANCE_OFFSET
    beyond = category > entry.n_categories
    if beyond.any():
        first = int(pan[beyond][0])
        raise InputError(where, f"colour {first} is in no segment and grade.py reads it "
                         f"as category index {first % INSTANCE_OFFSET} (id % "
                         f"{INSTANCE_OFFSET}), beyond the GT's {entry.n_categories} "
                         "categories", image=entry.image_id, field="segments_info",
                         expected="every colour listed, or black: grade.py stops on this "
                         "one (KeyError)")
    void = category == entry.n_categories
    if (pan == 0).any():
        pan[void], void = 0, np.zeros_like(void)
    values, inverse = np.unique(pan[~void], return_inverse=True)
    label = np.zeros((height, width), dtype=np.int64)
    label[~void] = inverse.reshape(-1) + 1
    return BitMasks.from_labels(label, len(values)), values % INSTANCE_OFFSET


def _panoptic_id_map(rgb: np.ndarray, entry: ChallengeEntry) -> np.ndarray:
    """grade.py's ``pan_result``: per pixel its listed segment's panoptic id, else its
    colour id."""
    pan = (rgb[..., 0].astype(np.int64) + 256 * rgb[..., 1].astype(np.int64)
           + 65536 * rgb[..., 2].astype(np.int64))
    listed = np.array(entry.segment_ids, dtype=np.int64)
    if len(listed):
        order = np.argsort(listed)
        at = np.minimum(np.searchsorted(listed[order], pan), len(listed) - 1)
        hit = listed[order][at] == pan
        pan[hit] = _panoptic_ids(entry.categories)[order][at[hit]]
    return pan


def _panoptic_ids(categories: tuple[int, ...]) -> np.ndarray:
    """grade.py's panoptic id of each listed segment: category index + 1000 k."""
    seen: dict[int, int] = {}
    ids = []
    for c in categories:
        ids.append(c + INSTANCE_OFFSET * seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
    return np.array(ids, dtype=np.int64)


def prediction(image: SubmissionImage, masks: BitMasks, segments: Segments | None
               ) -> ImagePred:
    return ImagePred(image.image_id, image.categories, image.graph, image.ng, image.boxes,
                     masks, None, segments=segments)


def content_hash(relations: bytes, digests: list[str | None]) -> str:
    """SHA-256 over ``relation.json`` and every PNG (in ``relation.json``'s order)."""
    h = hashlib.sha256(HASH_HEADER)
    h.update(hashlib.sha256(relations).digest())
    for d in digests:
        h.update((d or "-").encode())
    return "sha256:" + h.hexdigest()


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class ChallengeSlice:
    """A partition's entries, decoded by the task that scores them."""

    url: str
    entries: tuple[ChallengeEntry, ...]
    sizes: tuple[tuple[str, tuple[int, int]], ...]
    limits: ArchiveLimits | None

    def read(self, options: StorageOptions | None) -> Loaded:
        if not self.entries:
            return Loaded({})
        files, sizes = ChallengeFiles(self.url, options, self.limits), dict(self.sizes)
        preds, digests = {}, []
        for entry in self.entries:
            image, masks, segments, digest = decoded(files, entry, sizes[entry.image_id])
            preds[entry.image_id] = prediction(image, masks, segments)
            digests.append((entry.position, digest))
        return Loaded(preds, digests)


class ChallengeInput:
    """A PSG-challenge submission opened for an evaluation (``sgdask.io.sources``)."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None, gt: StoreReader,
                 gt_info: GTInfo, limits: ArchiveLimits | None) -> None:
        self.url, self.limits, self.gt_info = absolute(str(url)), limits, gt_info
        files = ChallengeFiles(self.url, options, limits)
        self.raw = files.relations()
        self.entries = challenge_entries(self.raw, files.where(RELATIONS_FILE),
                                         evaluated_order(gt, gt_info), gt_info.classes,
                                         files.limits)
        self.by_id = {e.image_id: e for e in self.entries}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": False, "instances": "masks",
            "content_hash": None, "format": "psg-challenge"}

    def ids(self) -> list[str]:
        return sorted(self.by_id)

    def slice(self, ids: list[str]) -> ChallengeSlice:
        return ChallengeSlice(self.url, tuple(self.by_id[i] for i in ids),
                              tuple((i, self.gt_info.sizes[i]) for i in ids), self.limits)

    def finish(self, digests: list[Digest]) -> None:
        known = dict(digests)
        self.manifest["content_hash"] = content_hash(
            self.raw, [known.get(e.position) for e in self.entries])


# --------------------------------------------------------------------------- conversion


@dataclass
class PartOutcome:
    """A conversion task's manifest entry and PNG digests, or its first problem (returned,
    not raised, so that no task writes into a store being removed)."""

    info: dict[str, Any] | None
    digests: list[str]
    error: SgdaskError | None = None


def write_challenge_part(url: str, out: str, options: StorageOptions | None, index: int,
                         entries: list[ChallengeEntry], sizes: dict[str, tuple[int, int]],
                         limits: ArchiveLimits | None) -> PartOutcome:
    """One store part (a Dask task): decodes and checks its entries' PNGs, writes them
    (with grade.py's segments where they are not the listed masks)."""
    from sgdask.formats.ingest import add_submission_rows

    try:
        files, tables, digests = ChallengeFiles(url, options, limits), PartTables.empty(), []
        for entry in entries:
            image, masks, segments, digest = decoded(files, entry, sizes[entry.image_id])
            add_submission_rows(tables, image, masks.shape, part_name(index), masks)
            if segments is not None:
                add_segment_rows(tables, entry.image_id, *segments)
            digests.append(digest)
        return PartOutcome(write_part(out, options, index, tables), digests)
    except SgdaskError as err:
        return PartOutcome(None, [], err)


def convert_challenge(url: str, out: str, gt: str | None, options: StorageOptions | None,
                      *, overwrite: bool = False, progress: Callable[[int], None] | None = None,
                      cluster: Any = None, limits: ArchiveLimits | None = None,
                      partition_size: int | None = None) -> dict[str, Any]:
    """A PSG-challenge submission -> submission store (``sgdask convert``, the service)."""
    from sgdask.cluster import map_tasks
    from sgdask.formats.ingest import DEFAULT_STORE_PARTITION, submission_parts
    from sgdask.formats.results import raise_first

    if gt is None:
        raise SgdaskError("PSG-challenge files need ", Option("gt"), ": their entries are "
                          "paired with the GT store's test images by position")
    gt_reader = StoreReader(gt, options, "gt")
    gt_info = GTInfo.of(gt_reader)
    source = ChallengeInput(url, options, gt_reader, gt_info, limits)
    size = partition_size or DEFAULT_STORE_PARTITION
    parts = submission_parts(sorted(source.entries, key=lambda e: e.image_id), gt_reader, size)
    with StoreWriter(out, "submission", options, overwrite) as writer:
        tasks = [(source.url, writer.write_url, options, i, part,
                  {e.image_id: gt_info.sizes[e.image_id] for e in part}, limits)
                 for i, part in enumerate(parts)]
        outcomes = map_tasks(write_challenge_part, tasks, cluster,
                             (lambda o: progress(len(o.digests))) if progress else None)
        raise_first(o.error for o in outcomes)
        source.finish([(e.position, d) for part, o in zip(parts, outcomes, strict=True)
                       for e, d in zip(part, o.digests, strict=True)])
        return writer.finish(
            [o.info for o in outcomes], sgdask_version=__version__,
            content_hash=source.manifest["content_hash"], source=source.url,
            instances="masks", has_ng=False, n_images=len(source.entries),
            partition_size=size, triplets_from=None)


def validate_challenge(url: str, gt: str | None, options: StorageOptions | None,
                       limits: ArchiveLimits | None, max_problems: int) -> list[Problem]:
    """Every problem, up to ``max_problems``: ``relation.json``'s first, else each PNG's."""
    if gt is None:
        raise SgdaskError("PSG-challenge files are checked against a GT store: ", Option("gt"))
    gt_reader = StoreReader(gt, options, "gt")
    gt_info = GTInfo.of(gt_reader)
    try:
        source = ChallengeInput(url, options, gt_reader, gt_info, limits)
    except InputError as err:
        return [Problem(err)]
    files, problems, unlisted = ChallengeFiles(source.url, options, limits), [], 0
    for entry in source.entries:
        try:
            unlisted += decoded(files, entry, gt_info.sizes[entry.image_id])[2] is not None
        except InputError as err:
            problems.append(Problem(err))
            if len(problems) >= max_problems:
                return problems
    if unlisted:
        problems.append(Problem(_unlisted_warning(files, unlisted, len(source.entries)),
                                "warning"))
    return problems


def _unlisted_warning(files: ChallengeFiles, unlisted: int, total: int) -> InputError:
    """That PQ reads pixels of no listed segment as grade.py does, which panopticapi would
    not (the files and a store converted from them score the same)."""
    return InputError(files.where(RELATIONS_FILE), f"{unlisted} of {total} PNGs hold pixels "
                      "in no listed segment: PQ scores them as grade.py does (they join listed "
                      "segments or make their own), where panopticapi would leave them "
                      "unlabelled; a store converted from these files keeps grade.py's "
                      "segments",
                      field="segments_info")


FORMAT = register(Format(
    PSG_CHALLENGE, SUBMISSION, lambda head, name: name == RELATIONS_FILE, ("masks", "graph"),
    "relation.json + panseg/ PNGs (the PSG challenge, OpenPSG's tools/grade.py), "
    "sgdask/formats/psg_challenge.py", convert_challenge,
    lambda url, options, gt_reader, gt_info, limits, _: ChallengeInput(url, options, gt_reader,
                                                                      gt_info, limits),
    validate_challenge))

# --------------------------------------------------------------------------- sniffing

#: what ``sniff`` calls these files: a directory or ZIP holding ``relation.json`` and
#: ``panseg/``, or ``relation.json`` itself
FOUND = "psg challenge"
_WHAT = "a PSG-challenge submission (relation.json + panseg/)"
_KEYS = {"relations", "segments_info", "pan_seg_file_name"}
_SUBMITTED = frozenset({"pred", "submission file"})
#: every kind ``sniff`` may call these files
CHALLENGE_KINDS = frozenset({FOUND, FOUND + " zip", FOUND + " json"})


def _hint(role: str) -> Option | tuple | None:
    return ("pass it as ", Option("pred")) if role != "submission file" else None


register_signature(Signature(
    FOUND, _WHAT, "dir", 5, lambda names: RELATIONS_FILE in names,
    accepted_as=_SUBMITTED, hint=_hint, format=PSG_CHALLENGE))
register_signature(Signature(
    FOUND + " zip", _WHAT + " (ZIP)", "zip", 15,
    lambda names, files: any(n.rsplit("/", 1)[-1] == RELATIONS_FILE and n.count("/") <= 1
                             for n in files),
    accepted_as=_SUBMITTED, hint=_hint, format=PSG_CHALLENGE))
register_signature(Signature(
    FOUND + " json", "a PSG challenge's relation.json", "list", 20,
    lambda head, keys: bool(set(keys) & _KEYS), accepted_as=_SUBMITTED, hint=_hint,
    format=PSG_CHALLENGE))


def _is_challenge(url: str, options: StorageOptions | None) -> bool:
    """A directory or ZIP of ``relation.json`` and ``panseg/`` is told by its member names."""
    from sgdask.formats.sniff import what_is

    return what_is(url, options).kind in CHALLENGE_KINDS


register_claim(PSG_CHALLENGE, _is_challenge)
