"""What a path IS, by its content, and whether it is what a command expected.

``what_is`` looks at a path the way a user would want sgdask to before any work: a store
by its manifest (GT or submission), a ZIP by its member names (an SGBench submission, a
ZIP of PNG masks, an ``.npz``), a JSON file by its first keys (an SGBench submission,
OpenPSG's psg.json, Visual Genome's dicts, Open Images V6's annotation list and
categories), other files by their magic bytes (HDF5, pickle,
Parquet, images). ``expect`` then says, in one line naming the file, what it is, what was
expected, and the option that fixes it ("psg.json: a ground-truth file (psg.json), where
a submission store, an SGBench ZIP or JSON is expected (pass it as --gt)"); a missing
file is "not found". It reads a few KiB of a file at most
(and a ZIP's member names): nothing is ingested, converted or sent to a cluster first.

The kinds of files come from the formats: each format's module registers ``Signature``s
(``sgdask.formats.registry``: the kind, how a message calls it, where it is seen and in
which order, the roles that take it, the hint that fixes it); ``what_is`` tries them in
their order, and knows by itself only stores, directories, images and plain JSON or ZIP.

Kinds nothing here recognises (an unusual JSON, a damaged ZIP) are left to the format's
reader, which says what is wrong with the file: ``expect`` only refuses what it knows.
"""

from __future__ import annotations

import re
import struct
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

from fsspec import AbstractFileSystem

from sgdask.errors import Hint, InputError, Option, Text
from sgdask.formats.registry import (
    COCO_JSON,
    COCO_PANOPTIC_JSON,
    PASS_AS_GT,
    PNG_DIR,
    PSG_CHALLENGE,
    PSG_JSON,
    SGBENCH_JSON,
    SGBENCH_ZIP,
    Signature,
    accepted_in,
    signature,
    signatures,
)
from sgdask.formats.registry import MASK_ZIP as MASK_ZIP
from sgdask.formats.registry import NPZ as NPZ
from sgdask.formats.registry import NPZ_DIR as NPZ_DIR
from sgdask.formats.registry import OI_ANNO as OI_ANNO
from sgdask.formats.registry import OI_CATEGORIES as OI_CATEGORIES
from sgdask.formats.registry import PARQUET as PARQUET
from sgdask.formats.registry import PICKLE as PICKLE
from sgdask.formats.registry import VG_DICTS as VG_DICTS
from sgdask.formats.registry import VG_H5 as VG_H5
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.store.store import MANIFEST, StoreReader, store_kind

#: the kinds of path ``what_is`` tells apart by itself; each format's module declares its
#: own (``Signature``s of the kinds ``registry`` names: ``PSG_JSON``, ``SGBENCH_ZIP``, ...)
(MISSING, GT_STORE, SUBMISSION_STORE, DIRECTORY, ZIP, JSON, IMAGE, EMPTY, OTHER) = (
    "missing", "gt store", "submission store", "directory", "zip", "json", "image", "empty",
    "other")
#: the kind of a COCO panoptic JSON (not the format's name, ``registry.COCO_PANOPTIC``)
COCO_PANOPTIC = COCO_PANOPTIC_JSON
#: bytes read to recognise a JSON file by its keys, or any file by its magic bytes
_HEAD = 64 << 10
_IMAGES = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image",
           b"II*\x00": "a TIFF image", b"MM\x00*": "a TIFF image", b"GIF8": "a GIF image"}
#: a ZIP's member names are read up to this many entries (an SGBench ZIP of PSG's test
#: split holds about 9,000; more than this is left to the reader and its entry limit)
_MAX_NAMES = 60_000
#: the end of central directory record lies in a ZIP's last 64 KiB + 22 bytes
_EOCD_SEARCH = (64 << 10) + 22
_KEY = re.compile(rb'"([A-Za-z_]+)"\s*:')


#: what a path with nothing at it is
NOT_FOUND = "not found (no file or directory at this path)"


@dataclass(frozen=True)
class Found:
    """What a path is: ``kind`` (one of the kinds above) and how to call it in a message."""

    kind: str
    what: str


def what_is(url: str, options: StorageOptions | None = None) -> Found:
    """What the path at ``url`` is, by its content (never by its name alone)."""
    fs, path = filesystem(url, options)
    if fs.isdir(path):
        return _directory(fs, path)
    try:
        with fs.open(path, "rb") as f:
            head = f.read(_HEAD)
            if head.startswith(b"PK"):
                return _archive(f)
    except FileNotFoundError:
        return Found(MISSING, "not found")
    except (IsADirectoryError, NotADirectoryError, PermissionError):
        return Found(OTHER, "not a readable file")
    return _file(head)


def _directory(fs: AbstractFileSystem, path: str) -> Found:
    """A store by its manifest's kind (a directory without a readable one: its reader
    says what is missing), else by the names of the files in it."""
    kind = store_kind(fs, join(path, MANIFEST))
    if kind == "gt":
        return Found(GT_STORE, "a ground-truth store")
    if kind == "submission":
        return Found(SUBMISSION_STORE, "a submission store")
    if fs.exists(join(path, MANIFEST)):
        return Found(DIRECTORY, "a directory with an unreadable manifest.json")
    names = [str(p).rsplit("/", 1)[-1].lower() for p in fs.ls(path, detail=False)]
    return _first(signatures("dir"), names) or Found(DIRECTORY, "a directory")


def _archive(f: BinaryIO) -> Found:
    """A ZIP by its member names (a damaged one, a ZIP64 or one with more entries than
    names are read for: left to the reader, which checks the archive's limits)."""
    try:
        names = [n.lower() for n in _member_names(f)]
    except (zipfile.BadZipFile, OSError, ValueError):
        return Found(ZIP, "a ZIP archive")
    files = [n for n in names if not n.endswith("/")]
    return (_first(signatures("zip"), names, files)
            or Found(ZIP, "a ZIP archive without triplets.json"))


def _member_names(f: BinaryIO) -> list[str]:
    """A ZIP's member names, from its central directory alone (one read; ``zipfile``
    builds an object per member, ten times slower on a submission's thousands of TIFFs)."""
    f.seek(0, 2)
    size = f.tell()
    f.seek(max(0, size - _EOCD_SEARCH))
    tail = f.read(_EOCD_SEARCH)
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or end + 22 > len(tail):
        raise zipfile.BadZipFile("no end of central directory record")
    entries = int.from_bytes(tail[end + 10:end + 12], "little")
    cd_size = int.from_bytes(tail[end + 12:end + 16], "little")
    cd_offset = int.from_bytes(tail[end + 16:end + 20], "little")
    if entries > _MAX_NAMES or cd_offset + cd_size > size:  # ZIP64's 0xFFFF.. too
        raise zipfile.BadZipFile("too many entries to list, or ZIP64")
    f.seek(cd_offset)
    directory = f.read(cd_size)
    names, at = [], 0
    for _ in range(entries):
        if directory[at:at + 4] != b"PK\x01\x02" or at + 46 > len(directory):
            raise zipfile.BadZipFile("damaged central directory")
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", directory, at + 28)
        names.append(directory[at + 46:at + 46 + name_len].decode("utf-8", "replace"))
        at += 46 + name_len + extra_len + comment_len
    return names


def _first(candidates: list[Signature], *seen: object) -> Found | None:
    """What the first of ``candidates`` that matches what was ``seen`` says, if any."""
    for sig in candidates:
        if sig.matches is not None and sig.matches(*seen):
            return Found(sig.kind, sig.what)
    return None


def _file(head: bytes) -> Found:
    found = _first(signatures("head"), head)
    if found is not None:
        return found
    for magic, what in _IMAGES.items():
        if head.startswith(magic):
            return Found(IMAGE, what)
    if head.lstrip()[:1] == b"{":
        return _json(head)
    if head.lstrip()[:1] == b"[":
        found = _first(signatures("list"), head, [k.decode() for k in _KEY.findall(head)])
        if found is not None:
            return found
    if not head:
        return Found(EMPTY, "an empty file (0 bytes)")
    if head.lstrip()[:1] == b"[":
        return Found(JSON, "a JSON file")
    return Found(OTHER, "a file sgdask does not recognise")


def _json(head: bytes) -> Found:
    """A JSON object by the formats' tests of its head and keys (COCO panoptic first),
    else by its first key (psg.json starts with its huge ``data`` list, so the first key
    decides), else by the keys in its first bytes."""
    keys = [k.decode() for k in _KEY.findall(head)]
    found = _first(signatures("object"), head, keys)
    if found is not None:
        return found
    by_keys = signatures("keys")
    for key in keys[:1] + keys:
        for sig in by_keys:
            if key in sig.keys:
                return Found(sig.kind, sig.what)
    return Found(JSON, "a JSON file")


@dataclass(frozen=True)
class Role:
    """Where a path was given: the kinds it takes and how to say what it expected."""

    name: str
    accepts: frozenset[str]
    expected: str


#: a kind nothing here can pin down: the format's reader says what is wrong with it
_UNSURE = frozenset({DIRECTORY, ZIP, JSON, OTHER})
#: the roles, with the kinds ``sniff`` itself accepts in each (stores, and ``_UNSURE``);
#: a format's ``Signature.accepted_as`` adds its kinds (``accepts``)
ROLES = {r.name: r for r in (
    Role("gt", frozenset({GT_STORE}) | _UNSURE, "a ground-truth store or psg.json"),
    Role("pred", frozenset({SUBMISSION_STORE}) | _UNSURE,
         "a submission store, an SGBench ZIP or JSON"),
    Role("results", _UNSURE, "a model's result file: a pickle or a directory of .npz files"),
    Role("submission file", _UNSURE, "an SGBench ZIP or JSON"),
    Role("gt source", _UNSURE,
         "psg.json, Visual Genome's VG-SGG-with-attri.h5 or Open Images V6's "
         "vrd-test-anno.json"),
    Role("psg", _UNSURE, "psg.json or Open Images V6's vrd-train-anno.json"),
    Role("masks", frozenset({DIRECTORY}), "a directory of panoptic PNGs"),
    Role("scores", frozenset({ZIP, OTHER}), "a score file (.npz or .parquet)"),
)}


def accepts(role: str) -> frozenset[str]:
    """The kinds ``role`` takes: its own, and every format's that says it is taken there."""
    return ROLES[role].accepts | accepted_in(role)


def _hint(kind: str, role: str) -> Text | None:
    """The option or command that fixes a path of ``kind`` given as ``role``: the format's
    hint for its kinds, else the stores'."""
    sig = signature(kind)
    if sig is not None:
        return sig.hint(role)
    if kind == GT_STORE:
        return PASS_AS_GT if role != "psg" else None
    if kind == SUBMISSION_STORE:
        if role == "results":
            return ("a submission store, not a model's result file: drop ", Option("method"))
        return ("pass it as ", Option("pred")) if role != "submission file" else None
    return None


def existing(url: str, options: StorageOptions | None = None) -> Found:
    """What ``url`` is, when there is anything at it; else "not found" (where a store is
    expected, its reader then says what else it is: ``StoreReader``)."""
    found = what_is(url, options)
    if found.kind == MISSING:
        raise InputError(str(url), NOT_FOUND)
    return found


def expect(url: str, role: str, options: StorageOptions | None = None) -> Found:
    """What ``url`` is, when it is what ``role`` takes; else an ``InputError`` naming the
    file, what it is, what was expected and the option that fixes it."""
    found = existing(url, options)
    given = ROLES[role]
    if (found.kind in given.accepts  # a store: told without importing any format
            or found.kind in accepts(role) or _registered_format(url, options, role)):
        return found
    hint = _hint(found.kind, role)
    raise InputError(str(url), f"{found.what}, where {given.expected} is expected",
                     expected=None if hint is None else Hint(hint))


def _registered_format(url: str, options: StorageOptions | None, role: str) -> bool:
    """Whether a registered format (``sgdask.formats``) beyond the built-in ones reads
    ``url`` in ``role``."""
    from sgdask.formats import BUILT_IN, GT, SUBMISSION, recognised

    kind = {"pred": SUBMISSION, "submission file": SUBMISSION, "gt source": GT}.get(role)
    if kind is None:
        return False
    return recognised(url, options, kind).name not in BUILT_IN


def evaluation_inputs(gt: str, pred: str, gt_masks: str | None = None,
                      method: str | None = None, options: StorageOptions | None = None
                      ) -> tuple[Found, Found]:
    """What ``evaluate``'s ground truth and submission are, each checked against what it
    takes, and the two against each other (a mask submission against a psg.json given
    without its masks), before anything is ingested or sent to a cluster."""
    gt_found = expect(gt, "gt", options)
    pred_found = expect(pred, "results" if method is not None else "pred", options)
    if gt_masks is not None:
        expect(gt_masks, "masks", options)
    if gt_found.kind == PSG_JSON and gt_masks is None and _has_masks(pred, pred_found,
                                                                     options):
        raise InputError(str(pred), "a mask submission, against a psg.json given without "
                         "its masks",
                         expected=Hint(("pass ", Option("gt_masks", "DIR"), " with ",
                                        Option("gt"), " psg.json")))
    return gt_found, pred_found


def _of_format(kind: str, name: str) -> bool:
    """Whether a file ``sniff`` calls ``kind`` belongs to the format called ``name``."""
    sig = signature(kind)
    return sig is not None and sig.format == name


def _has_masks(url: str, found: Found, options: StorageOptions | None) -> bool:
    """Whether a submission holds masks: an SGBench ZIP, PSG-challenge files, or a store of
    masks."""
    if found.kind == SGBENCH_ZIP or _of_format(found.kind, PSG_CHALLENGE):
        return True
    if found.kind != SUBMISSION_STORE:
        return False
    return StoreReader(url, options, "submission").manifest["instances"] == "masks"


#: what an upload's first bytes must tell (psg.json's first key comes within them)
UPLOAD_HEAD = 1024
#: what the benchmarking service may score (a ZIP is told apart only by its members)
_UPLOADABLE = frozenset({SGBENCH_JSON, JSON, ZIP})


def unscorable(head: bytes, name: str) -> str | None:
    """Why an uploaded file starting with ``head`` (its first ``UPLOAD_HEAD`` bytes) can
    never be scored as a submission, naming it by ``name``; None when it may be."""
    from sgdask.formats import BUILT_IN, FORMATS, HEAD_BYTES, SUBMISSION

    found = Found(ZIP, "a ZIP archive") if head.startswith(b"PK") else _file(head)
    if found.kind in _UPLOADABLE or _of_format(found.kind, PSG_CHALLENGE) or any(
            f.kind == SUBMISSION and f.name not in BUILT_IN
            and f.recognises(head[:HEAD_BYTES], name) for f in FORMATS.values()):
        return None
    return f"{name}: {found.what}, not a submission (expected an SGBench ZIP or JSON)"


def coco_panoptic_inputs(gt: str, gt_masks: str | None, pred: str, pred_masks: str | None,
                         options: StorageOptions | None = None) -> None:
    """``evaluate``'s COCO panoptic inputs checked before any work: the predictions' JSON
    and PNG folder, a COCO panoptic GT JSON (its ``annotations`` may come after a long
    ``images`` list: then its reader checks them) and its PNG folder."""
    found = existing(pred, options)
    if found.kind != COCO_PANOPTIC:
        raise InputError(str(pred), f"{found.what}, where COCO panoptic predictions (JSON "
                         "with segments_info) are expected",
                         expected=Hint(("drop ", Option("pred_masks"), ": it is only for "
                                        "COCO panoptic predictions")))
    given = existing(gt, options)
    if given.kind not in (COCO_PANOPTIC, COCO_JSON):
        raise InputError(str(gt), f"{given.what}, where a COCO panoptic GT JSON is expected "
                         "with COCO panoptic predictions")
    for option, folder in (("pred_masks", pred_masks), ("gt_masks", gt_masks)):
        if folder is None:
            raise InputError(str(pred), "COCO panoptic predictions without their PNGs",
                             expected=Hint(("pass ", Option("pred_masks", "DIR"), " and ",
                                            Option("gt_masks", "DIR"))))
        if existing(folder, options).kind not in (PNG_DIR, DIRECTORY):
            raise InputError(str(folder), "not a directory", field=Option(option))
