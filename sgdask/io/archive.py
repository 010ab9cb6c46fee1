"""Untrusted ZIP archives, read safely: every entry is checked from the central directory
before anything is decompressed, and members are read with a hard size cap.

Refused: path traversal (``..``, absolute paths, drive letters), symlinks, encrypted and
duplicate entries, too many entries, too much uncompressed data in all or in one entry, and
entries that expand more than ``max_ratio`` times (zip bombs). Stored and deflated members
are inflated by libdeflate (through imagecodecs) in one call into a buffer of their declared
size, which is also the hard cap: on boolean mask stacks, which compress a hundredfold, zlib's
byte-by-byte copies made inflating cost more than everything else. ``ArchiveLimits`` also holds
the limits of what is inside: JSON documents and layered TIFFs, and of model result files
(``convert --method``: pickles, ``.npz`` files and their mask stacks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import stat
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import imagecodecs

from sgdask.errors import Choose, InputError, RaiseLimit, SettingError, SgdaskError
from sgdask.io.fs import fault_detail, is_storage_fault
from sgdask.io.unpickle import MAX_DEPTH as PICKLE_DEPTH
from sgdask.io.unpickle import MAX_OBJECTS as PICKLE_OBJECTS

MiB, GiB = 1 << 20, 1 << 30
READ_BLOCK = MiB
DRIVE = re.compile(r"^[A-Za-z]:")
SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e\+?\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
#: a member's local file header: signature, then (at 26) the name and extra field lengths
LOCAL_HEADER = struct.Struct("<4s22xHH")
LOCAL_MAGIC = b"PK\x03\x04"
UTF8_NAME = 0x800
#: what corrupt compressed data makes zipfile and its decompressors raise (libdeflate's
#: DeflateError is a RuntimeError)
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError,
              NotImplementedError, KeyError, struct.error)


@dataclass(frozen=True)
class ArchiveLimits:
    """Limits on untrusted input; raise them with ``--limit NAME=VALUE``."""

    max_entries: int = 100_000
    max_total_size: int = 50 * GiB
    max_ratio: float = 200.0
    ratio_min_size: int = MiB
    max_member_size: int = 2 * GiB
    max_tiff_layers: int = 10_000
    max_layer_pixels: int = 100_000_000
    max_json_size: int = GiB
    max_json_depth: int = 64
    max_pickle_size: int = 4 * GiB
    max_pickle_objects: int = PICKLE_OBJECTS  # built by one pickle (sgdask.io.unpickle)
    max_pickle_depth: int = PICKLE_DEPTH  # tuples nested in tuples in a pickle
    max_h5_dataset_size: int = 2 * GiB  # one HDF5 dataset (or chunk) as declared
    max_h5_total_size: int = 4 * GiB  # every HDF5 dataset read, as declared
    #: what a parsed JSON document may take in memory, estimated before parsing as its size
    #: times the expansion factor of its kind (``JSON_EXPANSION``)
    max_json_memory: int = 8 * GiB
    max_instances_per_image: int = 10_000  # instances (boxes, masks) of one image
    max_triplets_per_image: int = 1_000_000  # one triplet list (graph or NG) of one image
    max_score_rows: int = 50_000_000  # rows (scored pairs) of a score file, from its header
    max_score_values: int = 1_000_000_000  # rows x predicate scores of a score file
    max_score_columns: int = 1_000  # predicate scores per row of a score file
    max_pairs_per_image: int = 20_000  # score rows of one image
    max_video_frames: int = 100_000  # frames of one video (PVSG: num_frames, frame numbers)

    @classmethod
    def from_pairs(cls, pairs: list[str] | None) -> ArchiveLimits:
        """Defaults, with ``["name=value", ...]`` applied (sizes may say KiB, MB, GiB...)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, int | float] = {}
        for pair in pairs or []:
            name, _, text = pair.partition("=")
            name = name.strip().replace("-", "_")
            if name not in fields:
                raise SettingError("limits", f"unknown limit {name!r}",
                                   fix=Choose(name, tuple(fields)))
            values[name] = parse_limit(text, type(fields[name].default), name)
        return cls(**values)


def parse_limit(text: str, kind: type, name: str) -> int | float:
    """A positive limit: a number, for sizes optionally with K/M/G/T (powers of 1000) or
    KiB/MiB/GiB/TiB (powers of 1024)."""
    match = SIZE.match(text)
    if match is None:
        raise SettingError("limits", f"{name}={text!r} is not a number (e.g. {name}=1000, "
                           "sizes also 4GiB or 500MB)")
    number, prefix, binary = match.groups()
    scale = (1024 if binary else 1000) ** "_kmgt".index(prefix.lower() or "_")
    value = float(number) * scale
    if value <= 0:
        raise SettingError("limits", f"{name} must be positive")
    return kind(value)


def limit_hint(limits: ArchiveLimits, name: str) -> RaiseLimit:
    """The ``expected`` of an input past the limit ``name``: its value and how to raise it
    (``--limit NAME=N`` on the command line)."""
    return RaiseLimit(name, getattr(limits, name))


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped: messages stay one
    line and cannot drive the terminal."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def unsafe_name(name: str) -> str | None:
    """Why an entry name could land outside the extraction directory, or None."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")):
        return "absolute path"
    if DRIVE.match(name):
        return "path with a drive letter"
    if ".." in parts:
        return "path leaving the archive root (..)"
    if "\x00" in name:
        return "NUL character in the name"
    return None


def entry_problems(info: zipfile.ZipInfo, label: str, limits: ArchiveLimits
                   ) -> list[InputError]:
    """What is wrong with one entry, from its central directory record alone."""
    where = f"{label}:{printable(info.filename)}"
    found = []
    why = unsafe_name(info.filename)
    if why:
        found.append(InputError(where, f"unsafe entry name: {why}",
                                expected="relative paths inside the archive"))
    if stat.S_ISLNK(info.external_attr >> 16):
        found.append(InputError(where, "is a symbolic link", expected="regular files only"))
    if info.flag_bits & 0x1:
        found.append(InputError(where, "is encrypted", expected="unencrypted entries"))
    if info.file_size > limits.max_member_size:
        found.append(InputError(where, f"is {info.file_size} bytes uncompressed",
                                expected=limit_hint(limits, "max_member_size")))
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > limits.ratio_min_size and ratio > limits.max_ratio:
        found.append(InputError(where, f"expands {ratio:.0f} times (a zip bomb?)",
                                expected=limit_hint(limits, "max_ratio")))
    return found


def archive_problems(infos: list[zipfile.ZipInfo], label: str, limits: ArchiveLimits
                     ) -> list[InputError]:
    """What is wrong with an archive as a whole and with each of its entries."""
    if len(infos) > limits.max_entries:
        return [InputError(label, f"has {len(infos)} entries",
                           expected=limit_hint(limits, "max_entries"))]
    found = [p for info in infos for p in entry_problems(info, label, limits)]
    total = sum(info.file_size for info in infos)
    if total > limits.max_total_size:
        found.append(InputError(label, f"holds {total} bytes uncompressed",
                                expected=limit_hint(limits, "max_total_size")))
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            found.append(InputError(f"{label}:{printable(info.filename)}",
                                    "appears twice in the archive",
                                    expected="unique entry names"))
        seen.add(info.filename)
    return found


def read_capped(stream: BinaryIO, cap: int) -> bytes:
    """All of ``stream``, but never more than ``cap`` bytes (raises ValueError past it).

    Blocks are joined once at the end: growing one buffer block by block and copying it
    out cost four times as much on multi-megabyte members."""
    blocks, size = [], 0
    while block := stream.read(READ_BLOCK):
        blocks.append(block)
        size += len(block)
        if size > cap:
            raise ValueError(f"more than {cap} bytes")
    return b"".join(blocks)


class SafeZip:
    """A ZIP archive whose entries were all checked; ``read`` refuses to read anything
    from an archive with problems (``problems``), so no caller can forget the checks."""

    def __init__(self, file: BinaryIO, label: str, limits: ArchiveLimits,
                 checked: Mapping[str, zipfile.ZipInfo] | None = None) -> None:
        """``checked``: entries of this archive that a SafeZip already checked (a task
        reading the members the driver's check saw), to read without parsing and checking
        the central directory again (25 ms for 2,069 entries, in every task)."""
        self.label, self.limits, self._file = label, limits, file
        self._lock = threading.Lock()  # reads seek the one file object
        self._zip: zipfile.ZipFile | None = None
        if checked is not None:
            self.problems: list[InputError] = []
            self.entries = dict(checked)
            return
        try:
            self._zip = zipfile.ZipFile(file)
            infos = self._zip.infolist()
        except ZIP_ERRORS as err:
            raise InputError(label, f"not a readable ZIP ({printable(str(err))})") from err
        self.problems = archive_problems(infos, label, limits)
        self.entries = {info.filename: info for info in infos}

    def checked_entries(self, names: Iterable[str]) -> dict[str, zipfile.ZipInfo]:
        """The entries of ``names`` (those present), for ``SafeZip(..., checked=)``."""
        self.check()
        return {name: self.entries[name] for name in names if name in self.entries}

    def _zipfile(self) -> zipfile.ZipFile:
        """zipfile's view of the archive, for what libdeflate does not inflate (made on
        first use by a SafeZip of ``checked`` entries)."""
        if self._zip is None:
            self._zip = zipfile.ZipFile(self._file)
        return self._zip

    def check(self) -> None:
        """Raise the archive's first problem, if any."""
        if self.problems:
            raise self.problems[0]

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def read(self, name: str, cap: str = "max_member_size", image: str | None = None,
             field: str | None = None) -> bytes:
        """One member's bytes, at most the limit named ``cap`` (and ``max_member_size``)."""
        self.check()
        where = f"{self.label}:{printable(name)}"
        info = self.entries.get(name)
        if info is None or info.is_dir():
            raise InputError(where, "missing from the archive", image=image, field=field)
        if info.file_size > getattr(self.limits, cap):
            raise InputError(where, f"is {info.file_size} bytes uncompressed", image=image,
                             field=field, expected=limit_hint(self.limits, cap))
        with self._reading(where, image, field), self._lock:
            if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                return self._inflated(info)
            with self._zipfile().open(info) as member:
                return read_capped(member, min(getattr(self.limits, cap),
                                               self.limits.max_member_size))

    @contextlib.contextmanager
    def _reading(self, where: str, image: str | None, field: str | None) -> Iterator[None]:
        """Turns what a damaged member or failing storage raises into one-line errors."""
        try:
            yield
        except ZIP_ERRORS as err:
            raise InputError(where, f"cannot be read from the archive ({printable(str(err))})",
                             image=image, field=field) from err
        except Exception as err:  # the storage under the archive failing (botocore...)
            if not is_storage_fault(err):
                raise
            raise SgdaskError(f"{self.label}: cannot read ({fault_detail(err)})") from err

    def head(self, name: str, size: int, image: str | None = None,
             field: str | None = None) -> bytes:
        """A member's first ``size`` bytes (fewer if it is shorter), inflating no more than
        that: the header of a format that declares its size, to check before ``read``."""
        self.check()
        where = f"{self.label}:{printable(name)}"
        info = self.entries.get(name)
        if info is None or info.is_dir():
            raise InputError(where, "missing from the archive", image=image, field=field)
        with self._reading(where, image, field), self._lock, \
                self._zipfile().open(info) as member:
            return member.read(size)

    def _inflated(self, info: zipfile.ZipInfo) -> bytes:
        """A stored or deflated member, checked as zipfile checks it (local header, name,
        size, CRC-32); never more than its declared (already capped) size is written."""
        fp = self._file
        fp.seek(info.header_offset)
        magic, name_size, extra_size = LOCAL_HEADER.unpack(fp.read(LOCAL_HEADER.size))
        if magic != LOCAL_MAGIC:
            raise zipfile.BadZipFile("bad magic number for file header")
        name = fp.read(name_size).decode("utf-8" if info.flag_bits & UTF8_NAME else "cp437")
        if name != info.orig_filename:
            raise zipfile.BadZipFile(f"file name in directory {info.orig_filename!r} and "
                                     f"header {name!r} differ")
        fp.seek(extra_size, 1)
        raw = fp.read(info.compress_size)
        if len(raw) != info.compress_size:
            raise EOFError("member data cut short")
        data = (raw if info.compress_type == zipfile.ZIP_STORED
                else imagecodecs.deflate_decode(raw, out=info.file_size, raw=True))
        if len(data) != info.file_size:
            raise zipfile.BadZipFile(f"{len(data)} bytes where the directory says "
                                     f"{info.file_size}")
        if imagecodecs.deflate_crc32(data) != info.CRC:
            raise zipfile.BadZipFile("bad CRC-32")
        return data
