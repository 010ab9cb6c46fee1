"""The canonical store (SPEC section 9; layout in ``schemas/store.md``).

::

    URL/manifest.json                written last: a store without it is incomplete
    URL/images/part-00000.parquet    one row per image
    URL/instances/part-00000.parquet one row per instance
    URL/triplets/part-00000.parquet  submission: graph + NG lists;  GT: relations
    URL/masks/part-00000             Zarr v3, 1-D uint8, one per part: every instance's
                                     mask as rows of 64-bit words over its box, row-XOR-ed
                                     and stored sparse (``pack_sparse``)

Images are sorted by id and cut into parts of ``partition_size`` images; the manifest lists
each part's first and last id, so a Dask task reads only the parts holding its images.
Word offsets into a part's mask array are in the instances table. Version 1 stores (GT label
images, byte-packed crops) are still read: ``sgdask.store.partition`` converts them on read.

Integrity (version 3): the manifest lists every other file of the store with its size and
SHA-256 (``files``); a reader checks the bytes it reads against it, Parquet pages carry
checksums (written and verified by pyarrow) and every mask chunk ends with a CRC-32C
(Zarr v3's ``crc32c`` codec). Any mismatch is ``URL/relative/path: corrupt (...)``.
Versions 1 and 2 carry no checksums: they are read with a one-line warning.

Version 6 records evaluation units (``sgdask.io.units``): the manifest's ``units`` names
the groups its images belong to (``["video"]``) and the images table has a column
``<unit>_id`` per unit (``video_id``: the image is a frame of that video). Only a store
that records units is written as version 6; every other store is written as version 5, as
before, so releases that read version 5 read it and nothing about it changes.

Version 7 holds the segments panoptic quality scores where a submission's instances are not
them (the PSG challenge's ``grade.py`` reads pixels of no listed segment as segments too:
``sgdask.formats.psg_challenge``): ``URL/segments/part-00000.parquet``, one row per image that
has them (``segments``: a list of category, mask box and word offset; the masks are in the
part's mask array after its instances'), for each part whose manifest entry says
``"segments": true``. Only such a store is written as version 7.

Version 4 adds the instances' ``iscrowd`` (GT from psg.json: its ``segments_info``'s
``iscrowd``; null elsewhere), which panoptic quality needs; older stores are read as they
are, without crowd flags (no panoptic quality then, with the reason in the report).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import pairwise
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sgdask.errors import Option, SgdaskError, SgdaskWarning, StoreError
from sgdask.io.archive import printable
from sgdask.io.codecs.words import pack_sparse, xor_rows
from sgdask.io.fs import (
    StorageOptions,
    absolute,
    fault_detail,
    filesystem,
    is_local,
    is_storage_fault,
    join,
)
from sgdask.io.units import unit_column
from sgdask.kernels.bits import word_layout
from sgdask.store.lock import exclusive_lock
from sgdask.store.schemas import STORE_MANIFEST, schema_problem
from sgdask.types import BitMasks

if TYPE_CHECKING:
    import zarr
    from zarr.abc.store import Store

FORMAT = "sgdask-store"
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
#: the version of a store whose images table records units (written only for those)
UNITS_VERSION = 6
#: the version of a store holding segments tables (written only for those)
SEGMENTS_VERSION = 7
#: the first version whose manifest lists every file with its size and hash
CHECKSUMMED_VERSION = 3
#: the first version whose instances table has ``iscrowd``
CROWD_VERSION = 4
#: the first version whose images table counts each image's pair rows (``n_pairs``)
PAIRS_VERSION = 5
TABLES = ("images", "instances", "triplets")
MANIFEST = "manifest.json"
#: the manifest's own SHA-256: over its canonical JSON without this field
SELF_HASH = "manifest_sha256"
MASK_CHUNK = 1 << 20


def store_formats() -> str:
    """The store formats this sgdask writes and reads, as ``--version --verbose`` says
    them (a store is written at the lowest version that holds what it records)."""
    return (f"store format {FORMAT_VERSION} ({UNITS_VERSION} with evaluation units, "
            f"{SEGMENTS_VERSION} with segments tables; reads {READABLE_VERSIONS[0]}-"
            f"{READABLE_VERSIONS[-1]})")


@functools.cache
def _zarr() -> ModuleType:
    """zarr, imported on first use and configured before any array is opened or written.

    Only mask stores need it, so an evaluation of box stores never imports it (about 90 ms
    of every process start). One worker thread: sgdask reads one small array per task and
    gets its parallelism from Dask, and zarr's own pool only adds hand-offs (a part's read
    costs 2.8 instead of 4.7 ms of CPU with one thread). Every zarr call of sgdask goes
    through here, so the setting applies in every process (workers included) before zarr
    creates its pool. The submodules sgdask uses (``codecs``, ``core.buffer``, ``storage``)
    are imported here too, so callers reach them as attributes."""
    import zarr
    import zarr.codecs
    import zarr.core.buffer
    import zarr.storage

    zarr.config.set({"threading.max_workers": 1})
    return zarr


@functools.cache
def _mask_codecs() -> tuple[Any, ...]:
    """The mask arrays' codecs: zstd (level 7), then each chunk's CRC-32C."""
    codecs = _zarr().codecs
    return codecs.ZstdCodec(level=7), codecs.Crc32cCodec()


def _zarr_store(url: str, storage_options: StorageOptions | None = None,
                read_only: bool = True) -> Store:
    """A Zarr v3 store at URL: LocalStore on local disk (fastest), FsspecStore elsewhere."""
    storage = _zarr().storage
    fs, path = filesystem(url, storage_options)
    if is_local(fs):
        return storage.LocalStore(path, read_only=read_only)
    return storage.FsspecStore.from_url(str(url), storage_options=storage_options or None,
                                        read_only=read_only)


IMAGE_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("height", pa.int32()), ("width", pa.int32()),
    ("n_instances", pa.int32()), ("n_graph", pa.int32()), ("n_ng", pa.int32()),
    ("n_pairs", pa.int32()), ("mask_array", pa.string()), ("mask_offset", pa.int64()),
    ("source_file", pa.string()),
])
INSTANCE_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("index", pa.int32()), ("category", pa.int32()),
    ("x1", pa.float64()), ("y1", pa.float64()), ("x2", pa.float64()), ("y2", pa.float64()),
    ("score", pa.float64()),
    ("mask_y0", pa.int32()), ("mask_x0", pa.int32()), ("mask_y1", pa.int32()),
    ("mask_x1", pa.int32()), ("mask_offset", pa.int64()), ("area", pa.int64()),
    ("iscrowd", pa.bool_()),
])
TRIPLET_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("list", pa.dictionary(pa.int8(), pa.string())),
    ("rank", pa.int32()), ("subject", pa.int32()), ("object", pa.int32()),
    ("predicate", pa.int32()), ("score", pa.float64()),
])
SEGMENT_SCHEMA = pa.schema([
    ("image_id", pa.string()),
    ("segments", pa.list_(pa.struct([
        ("category", pa.int32()), ("mask_y0", pa.int32()), ("mask_x0", pa.int32()),
        ("mask_y1", pa.int32()), ("mask_x1", pa.int32()), ("mask_offset", pa.int64())]))),
])
#: the optional table of a part (format 7): the segments panoptic quality scores in place of
#: an image's instances
SEGMENTS = "segments"
SCHEMAS = {"images": IMAGE_SCHEMA, "instances": INSTANCE_SCHEMA, "triplets": TRIPLET_SCHEMA,
           SEGMENTS: SEGMENT_SCHEMA}


def part_name(index: int) -> str:
    return f"part-{index:05d}"


def table_columns(name: str, version: int, units: Sequence[str] = ()) -> list[str]:
    """The columns of table ``name`` in a store of format ``version`` (before version 4,
    the instances table has no ``iscrowd``; before version 5, the images table has no
    ``n_pairs``; ``units``: the units the store records, a column each in the images
    table)."""
    absent = {*(("iscrowd",) if version < CROWD_VERSION else ()),
              *(("n_pairs",) if version < PAIRS_VERSION else ())}
    return [c for c in SCHEMAS[name].names if c not in absent] + (
        [unit_column(u) for u in units] if name == "images" else [])


def table_schema(name: str, units: Sequence[str] = ()) -> pa.Schema:
    """The Parquet schema of table ``name`` as written, with the units' columns."""
    schema = SCHEMAS[name]
    for unit in units if name == "images" else ():
        schema = schema.append(pa.field(unit_column(unit), pa.string()))
    return schema


@dataclass
class PartTables:
    """Rows of one part, column -> list, ready to become Parquet tables, plus the part's
    mask data (chunks of one 1-D array)."""

    images: dict[str, list]
    instances: dict[str, list]
    triplets: dict[str, list]
    masks: list[np.ndarray] = field(default_factory=list)
    mask_length: int = 0  # words
    units: tuple[str, ...] = ()  # the units recorded (a column each in ``images``)
    #: rows of the segments table (``add_segment_rows``; none: the part has no such table)
    segments: dict[str, list] = field(default_factory=lambda: {"image_id": [], SEGMENTS: []})

    @classmethod
    def empty(cls, units: Sequence[str] = ()) -> PartTables:
        return cls(*({name: [] for name in table_schema(t, units).names} for t in TABLES),
                   units=tuple(units))

    def add_masks(self, masks: BitMasks) -> np.ndarray:
        """Append masks (row-XOR encoded, see ``encoded_words``); returns each mask's word
        offset in the part's mask array."""
        words, offsets = encoded_words(masks)
        self.masks.append(words)
        start = self.mask_length
        self.mask_length += len(words)
        return offsets[:-1] + start


def encoded_words(masks: BitMasks) -> tuple[np.ndarray, np.ndarray]:
    """(words, offsets): the masks laid out one after the other, each row XOR-ed with the
    row above (smooth shapes become mostly zero words, which zstd compresses well)."""
    offsets = word_layout(masks.boxes)
    words = np.empty(offsets[-1], dtype=np.uint64)
    for i, (start, stop) in enumerate(pairwise(offsets.tolist())):
        words[start:stop] = masks.words[masks.starts[i]:masks.starts[i] + stop - start]
    xor_rows(masks.boxes, offsets[:-1], words, False)
    return words, offsets


def add_instance_rows(tables: PartTables, image_id: str, categories: np.ndarray,
                      boxes: np.ndarray | None, scores: np.ndarray | None,
                      masks: BitMasks | None = None, areas: np.ndarray | None = None,
                      crowd: np.ndarray | None = None) -> None:
    """Instance rows; with ``masks``, each mask goes into the part's mask array;
    ``areas``: GT mask areas in pixels; ``crowd``: GT crowd flags."""
    n = len(categories)
    cols = tables.instances
    cols["area"].extend([None] * n if areas is None else areas.tolist())
    cols["iscrowd"].extend([None] * n if crowd is None else crowd.astype(bool).tolist())
    if masks is None:
        for name in ("mask_y0", "mask_x0", "mask_y1", "mask_x1", "mask_offset"):
            cols[name].extend([None] * n)
    else:
        offsets = tables.add_masks(masks)
        for j, name in enumerate(("mask_y0", "mask_x0", "mask_y1", "mask_x1")):
            cols[name].extend(masks.boxes[:, j].tolist())
        cols["mask_offset"].extend(offsets.tolist())
    cols["image_id"].extend([image_id] * n)
    cols["index"].extend(range(n))
    cols["category"].extend(categories.tolist())
    for j, name in enumerate(("x1", "y1", "x2", "y2")):
        cols[name].extend([None] * n if boxes is None else boxes[:, j].tolist())
    cols["score"].extend([None] * n if scores is None else scores.tolist())


def add_segment_rows(tables: PartTables, image_id: str, masks: BitMasks,
                     categories: np.ndarray) -> None:
    """The segments panoptic quality scores for an image in place of its instances (disjoint
    masks and their categories): one row of the segments table, the masks into the part's
    mask array."""
    offsets = tables.add_masks(masks).tolist()
    boxes = masks.boxes.tolist()
    tables.segments["image_id"].append(image_id)
    tables.segments[SEGMENTS].append([
        {"category": int(c), "mask_y0": b[0], "mask_x0": b[1], "mask_y1": b[2],
         "mask_x1": b[3], "mask_offset": o}
        for c, b, o in zip(categories.tolist(), boxes, offsets, strict=True)])


def add_triplet_rows(tables: PartTables, image_id: str, list_name: str, triplets: np.ndarray,
                     scores: np.ndarray | None) -> None:
    """Triplet rows of one list ('gt', 'graph' or 'ng'), ranked in order."""
    n = len(triplets)
    cols = tables.triplets
    cols["image_id"].extend([image_id] * n)
    cols["list"].extend([list_name] * n)
    cols["rank"].extend(range(n))
    for j, name in enumerate(("subject", "object", "predicate")):
        cols[name].extend(triplets[:, j].tolist())
    cols["score"].extend([None] * n if scores is None else scores.tolist())


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of a manifest's canonical JSON (sorted keys, no spaces), ``SELF_HASH``
    left out: any change of a value changes it, a change of layout does not."""
    rest = {k: v for k, v in manifest.items() if k != SELF_HASH}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def file_entry(data: bytes) -> dict[str, Any]:
    """A file's manifest entry: its size and SHA-256."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def put_file(fs: Any, path: str, data: bytes, url: str | None = None) -> dict[str, Any]:
    """Write ``data`` to ``path`` (parents created) and return its manifest entry; a fault
    of the storage is one line naming ``url`` (the file's URL; default ``path``)."""
    parent = path.rsplit("/", 1)[0]
    try:
        fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(path, data)
    except Exception as err:
        if not is_storage_fault(err):
            raise
        raise SgdaskError(f"{url or path}: cannot write ({fault_detail(err)})") from err
    return file_entry(data)


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as Parquet bytes: zstd, with a CRC-32 in every page header."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=True)
    return sink.getvalue().to_pybytes()


def mask_array_files(data: np.ndarray) -> dict[str, bytes]:
    """The files of a 1-D Zarr v3 mask array (relative to its directory): ``zarr.json`` and
    its chunks, each zstd-compressed and ending with its CRC-32C. Encoded in memory, so the
    writer knows (and hashes) every byte it stores without reading it back."""
    zarr = _zarr()
    files: dict[str, Any] = {}
    zarr.create_array(zarr.storage.MemoryStore(files), data=data,
                      chunks=(min(MASK_CHUNK, max(len(data), 1)),), compressors=_mask_codecs())
    return {key: buf.to_bytes() for key, buf in files.items()}


def write_part(url: str, storage_options: StorageOptions | None, index: int,
               tables: PartTables) -> dict[str, Any]:
    """A part's three Parquet files and, if it has masks, its Zarr mask array.

    Runs on any worker: parts are independent files, and the masks group exists already.
    With segments rows, also its segments table (the entry then says ``"segments": true``).
    Returns the part's manifest entry (with ``files``: each file's size and SHA-256,
    which ``StoreWriter.finish`` moves into the manifest's ``files``).
    """
    fs, path = filesystem(url, storage_options)
    ids = tables.images["image_id"]
    files: dict[str, dict[str, Any]] = {}
    if tables.masks:
        data = pack_sparse(np.concatenate(tables.masks))
        for key, blob in mask_array_files(data).items():
            rel = f"masks/{part_name(index)}/{key}"
            files[rel] = put_file(fs, join(path, rel), blob, join(url, rel))
    for name in TABLES:
        table = pa.Table.from_pydict(getattr(tables, name),
                                     schema=table_schema(name, tables.units))
        rel = f"{name}/{part_name(index)}.parquet"
        files[rel] = put_file(fs, join(path, rel), parquet_bytes(table), join(url, rel))
    entry = {"name": part_name(index), "first_id": ids[0], "last_id": ids[-1],
             "n_images": len(ids), "files": files}
    if tables.segments["image_id"]:
        rel = f"{SEGMENTS}/{part_name(index)}.parquet"
        table = pa.Table.from_pydict(tables.segments, schema=SEGMENT_SCHEMA)
        files[rel] = put_file(fs, join(path, rel), parquet_bytes(table), join(url, rel))
        entry[SEGMENTS] = True
    return entry


def _warn(line: str) -> None:
    warnings.warn(line, SgdaskWarning, stacklevel=2)


class StoreWriter:
    """Writes a store all-or-nothing: on any failure (even Ctrl-C) the partial store is removed.

    Parts may be written by any process (``write_part``) to ``write_url``; the manifest,
    listing them, is written last by ``finish``, so a reader never mistakes a partial store
    for a store.

    With ``overwrite``, an existing store stays in place until the new one is complete. On
    local disk the new store is written beside it (``<url>.tmp-<uuid>``, so ``write_url``
    differs from ``url``) and ``finish`` swaps it into place with two renames: concurrent
    overwrites leave one complete store, the last one swapped in, and a run whose swap
    finds another run's store already moved in fails with one line. Object stores have no
    atomic directory rename: there the old store is removed and the new one written in
    place under the lock object ``<url>.lock`` (``sgdask.store.lock``), so a concurrent
    overwrite fails at once instead of mixing files into the store being written.
    """

    def __init__(self, url: str, kind: str, storage_options: StorageOptions | None = None,
                 overwrite: bool = False) -> None:
        self.url, self.kind, self.options = str(url).rstrip("/"), kind, storage_options
        self.fs, self.path = filesystem(self.url, storage_options)
        self.overwrite = overwrite
        if self.fs.exists(self.path) and not overwrite:
            raise StoreError(f"{self.url}: already exists (choose another ", Option("out"),
                             ", or pass ", Option("overwrite", True), " to replace it)")
        check_store_target(self.url, kind, storage_options)
        aside = overwrite and is_local(self.fs)
        suffix = f".tmp-{uuid.uuid4().hex}" if aside else ""
        #: where the store's files are written until ``finish`` (tasks write here: a local
        #: path made absolute, for workers started in another directory)
        self.write_url, self.write_path = absolute(self.url) + suffix, self.path + suffix
        self._held = ExitStack()

    def __enter__(self) -> StoreWriter:
        try:
            if self.overwrite and self.write_path == self.path:
                self._held.enter_context(exclusive_lock(
                    f"{self.url}.lock", self.options, log=_warn,
                    holder="another run writing this store"))
                if self.fs.exists(self.path):
                    self.fs.rm(self.path, recursive=True)
            self.fs.makedirs(self.write_path, exist_ok=True)
            _zarr().open_group(_zarr_store(join(self.write_url, "masks"), self.options,
                                           read_only=False), mode="w")
        except BaseException as err:
            self._held.close()
            if isinstance(err, Exception) and is_storage_fault(err):
                raise SgdaskError(f"{self.write_url}: cannot write "
                                  f"({fault_detail(err)})") from err
            raise
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        with self._held:
            if exc_type is not None:
                self._remove_unfinished(exc)

    def _remove_unfinished(self, exc: BaseException | None) -> None:
        try:
            if self.fs.exists(self.write_path):
                self.fs.rm(self.write_path, recursive=True)
        except Exception as err:
            if not is_storage_fault(err):
                raise
            # the storage that failed the writing fails the clean-up too: the files left
            # have no manifest, which every reader refuses; say so with the first error
            if isinstance(exc, SgdaskError):
                raise SgdaskError(exc, f"; {self.write_url}: the unfinished store could not "
                                  "be removed (readers refuse it: no manifest.json; remove "
                                  "it, or write it again with ", Option("overwrite", True), ")"
                                  ) from exc

    def finish(self, parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """Write the manifest (the store's commit point) and return it.

        Its ``files`` lists every other file of the store with its size and SHA-256: the
        parts' (as their tasks wrote them) and the store's own (read back: they are small).
        """
        files: dict[str, dict[str, Any]] = {}
        entries = []
        for part in parts:
            part = dict(part)
            files.update(part.pop("files", {}))
            entries.append(part)
        try:
            for rel in self.own_files(fields):
                files[rel] = file_entry(self.fs.cat_file(join(self.write_path, rel)))
            version = (SEGMENTS_VERSION if any(p.get(SEGMENTS) for p in entries)
                       else UNITS_VERSION if fields.get("units") else FORMAT_VERSION)
            manifest = {"format": FORMAT, "format_version": version, "kind": self.kind,
                        **fields, "parts": entries, "files": dict(sorted(files.items()))}
            manifest[SELF_HASH] = manifest_digest(manifest)
            with self.fs.open(join(self.write_path, MANIFEST), "w") as f:
                json.dump(manifest, f, indent=1)
        except Exception as err:
            if not is_storage_fault(err):
                raise
            raise SgdaskError(f"{self.write_url}/{MANIFEST}: cannot write "
                              f"({fault_detail(err)})") from err
        if self.write_path != self.path:
            self._swap_in()
        return manifest

    def _swap_in(self) -> None:
        """Put the finished store written aside in the place of the old one (local disk):
        the old one renamed out of the way, the new one renamed in, the old one removed.
        Between the two renames no store is at ``url``; a run that finds another run's
        store moved in there meanwhile leaves that one in place and says so."""
        trash = f"{self.path}.trash-{uuid.uuid4().hex}"
        try:
            os.rename(self.path, trash)
        except FileNotFoundError:
            trash = None
        try:
            os.rename(self.write_path, self.path)
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                if trash is not None and not os.path.lexists(self.path):
                    os.rename(trash, self.path)
                raise SgdaskError(f"{self.url}: cannot replace ({fault_detail(err)})") \
                    from err
            raise StoreError(f"{self.url}: another process replaced it while this one wrote "
                             "it (that store is kept; run again to replace it)") from None
        finally:
            if trash is not None and os.path.lexists(trash):
                self._remove_replaced(trash)

    def _remove_replaced(self, trash: str) -> None:
        try:
            self.fs.rm(trash, recursive=True)
        except OSError as err:  # the new store is in place: the old one only takes space
            warnings.warn(f"{self.url}: the store it replaced could not be removed from "
                          f"{trash} ({fault_detail(err)}); remove it", SgdaskWarning,
                          stacklevel=4)

    def own_files(self, fields: dict[str, Any]) -> list[str]:
        """The store's files that belong to no part: the masks group, the training
        statistics and the image order when present."""
        names = ["masks/zarr.json"]
        names += [fields[k] for k in ("train_stats", "image_order") if fields.get(k)]
        return names


#: what ``Corrupt`` says of a file the manifest lists and the storage lacks
MISSING_FILE = "corrupt (missing)"


class Corrupt(StoreError):
    """A store file that is missing, of the wrong size or hash, or does not decode:
    ``URL/relative/path: corrupt (...)``."""

    def __init__(self, url: str, rel: str, what: str) -> None:
        self.url, self.rel, self.what = url, rel, what
        super().__init__(f"{url}/{rel}: {what}")

    def __reduce__(self) -> tuple:
        return (Corrupt, (self.url, self.rel, self.what))


#: what reading a damaged Parquet file or Zarr chunk raises (pyarrow, zarr, numcodecs and
#: the crc32c codec share no base class; none of them is raised by sgdask's own code here)
DECODE_ERRORS = (pa.ArrowException, ValueError, RuntimeError, OSError, KeyError, TypeError,
                 IndexError, EOFError)


def decode_detail(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def parquet_table(data: bytes, columns: list[str] | None = None) -> pa.Table:
    """Parquet bytes as a table, page checksums verified (pyarrow without its dataset layer
    or thread pool: three times faster than ``pq.read_table`` on a store part)."""
    return pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True).read(
        columns=columns, use_threads=False)


_WARNED: set[str] = set()


def warn_unchecksummed(url: str, version: int) -> None:
    """Once per store and process: a store written before checksums existed."""
    if url in _WARNED:
        return
    _WARNED.add(url)
    warnings.warn(f"{url}: store format version {version} carries no checksums, so damage "
                  "to its files may go unnoticed (convert it again with this sgdask to "
                  "protect it)", SgdaskWarning, stacklevel=3)


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What is wrong with a manifest that its schema (checked first: the structure of every
    field readers rely on) cannot express (None: nothing): the parts' image counts against
    ``n_images``, its own hash, the files it lists against the parts it lists."""
    parts = manifest["parts"]
    total = manifest.get("n_images")
    if isinstance(total, int) and sum(p["n_images"] for p in parts) != total:
        return f"parts hold {sum(p['n_images'] for p in parts)} images, n_images says {total}"
    if manifest["format_version"] >= CHECKSUMMED_VERSION:
        if manifest.get(SELF_HASH) != manifest_digest(manifest):
            return f"{SELF_HASH} does not match the manifest's contents"
        segmented = {p["name"] for p in parts if p.get(SEGMENTS)}
        if segmented and manifest["format_version"] < SEGMENTS_VERSION:
            return (f"parts: {min(segmented)} has segments, which a version "
                    f"{manifest['format_version']} store cannot hold (version "
                    f"{SEGMENTS_VERSION} on)")
        return files_problem(manifest["files"], {p["name"] for p in parts}, segmented)
    return None


def files_problem(files: dict[str, Any], parts: set[str],
                  segmented: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Whether the listed files and the listed parts agree: every part's three tables
    listed, and its segments table when the part has segments (``segmented``); no file of
    a part the manifest does not list, no segments table of a part without segments."""
    for rel in files:
        head, _, rest = rel.partition("/")
        part = rest.split("/")[0].removesuffix(".parquet") \
            if head in (*TABLES, SEGMENTS, "masks") else None
        if part is not None and part != "zarr.json" and part not in parts:
            return f"files: {rel} belongs to no part listed in parts"
        if head == SEGMENTS and part not in segmented:
            return f"files: {rel} belongs to {part}, whose entry in parts has no segments"
    for part in sorted(parts):
        for name in (*TABLES, *((SEGMENTS,) if part in segmented else ())):
            if f"{name}/{part}.parquet" not in files:
                return f"files: {name}/{part}.parquet of {part} is not listed"
    return None


class StoreReader:
    """Reads a complete store; refuses incomplete ones and ones of the wrong kind.

    Every file read is checked against the manifest's size and SHA-256 (version 3), every
    Parquet page against its checksum, every mask chunk against its CRC-32C; a missing,
    damaged or undecodable file is a ``Corrupt`` error naming it.
    """

    def __init__(self, url: str, storage_options: StorageOptions | None = None,
                 kind: str | None = None, manifest: dict[str, Any] | None = None) -> None:
        """``manifest``: the store's manifest as a reader of this store already read and
        checked it (an evaluation's driver, for its tasks): not read again; every file is
        still checked against it."""
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)
        self.manifest = self._read_manifest() if manifest is None else manifest
        if kind is not None and self.manifest.get("kind") != kind:
            raise StoreError(f"{self.url}: is a {self.manifest.get('kind')} store "
                             f"(expected a {kind} store)")
        self._masks: zarr.Group | None = None
        self._arrays: dict[str, zarr.Array] = {}
        self._images: pa.Table | None = None
        if self.version < CHECKSUMMED_VERSION and manifest is None:
            warn_unchecksummed(self.url, self.version)

    def _read_manifest(self) -> dict[str, Any]:
        mpath = join(self.path, MANIFEST)
        try:
            if self.fs.isfile(self.path):
                raise StoreError(f"{self.url}: {what_file_is(self.fs, self.path)}")
            refused = self._refused(MANIFEST)
            if refused is not None:
                raise refused
            raw = self.fs.cat_file(mpath)
        except FileNotFoundError:
            raise missing_manifest(self.url) from None
        except (NotADirectoryError, IsADirectoryError) as err:
            raise StoreError(f"{self.url}: not a store ({type(err).__name__})") from None
        except StoreError:
            raise
        except Exception as err:  # OSError, botocore, aiohttp...: storage faults share no base
            raise SgdaskError(f"{self.url}/{MANIFEST}: cannot read ({decode_detail(err)})") \
                from err
        try:
            manifest = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise Corrupt(self.url, MANIFEST, f"corrupt (not JSON: {err})") from None
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if isinstance(manifest, dict) and (manifest.get("format") != FORMAT
                                           or version not in READABLE_VERSIONS):
            newer = isinstance(version, int) and version > FORMAT_VERSION
            raise StoreError(f"{self.url}/{MANIFEST}: format {manifest.get('format')!r} "
                             f"version {version!r} (expected {FORMAT!r} version "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}"
                             + ("; written by a newer sgdask: upgrade sgdask)" if newer
                                else ")"))
        problem = schema_problem(STORE_MANIFEST, manifest)
        if problem is not None:
            raise Corrupt(self.url, MANIFEST, f"corrupt (against the store manifest schema: "
                          f"{problem})")
        problem = manifest_problem(manifest)
        if problem is not None:
            raise Corrupt(self.url, MANIFEST, f"corrupt ({problem})")
        return manifest

    @property
    def version(self) -> int:
        return int(self.manifest["format_version"])

    @property
    def units(self) -> tuple[str, ...]:
        """The units the store records (a column each in the images table; version 6)."""
        if self.version < UNITS_VERSION:
            return ()
        return tuple(self.manifest.get("units") or ())

    @functools.cached_property
    def segmented(self) -> frozenset[str]:
        """The parts holding a segments table (version 7)."""
        if self.version < SEGMENTS_VERSION:
            return frozenset()
        return frozenset(p["name"] for p in self.parts if p.get(SEGMENTS))

    @property
    def checksummed(self) -> bool:
        return self.version >= CHECKSUMMED_VERSION

    @property
    def parts(self) -> list[dict[str, Any]]:
        return self.manifest["parts"]

    def _refused(self, rel: str) -> Corrupt | None:
        """Why ``rel``, a path the manifest or a table names, is not read (None: it is): a
        path with an empty, ``.`` or ``..`` segment or a backslash, or on local disk one
        that resolves outside the store's directory (a symbolic link out of it). Checked
        before the file is opened: its hash would tell only after reading a host file (and
        a version 1 or 2 store has none)."""
        if "\\" in rel or not rel.isprintable() or any(
                segment in ("", ".", "..") for segment in rel.split("/")):
            return Corrupt(self.url, printable(rel), "not a path inside the store")
        if is_local(self.fs):
            root = os.path.realpath(self.path)
            if os.path.commonpath([root, os.path.realpath(join(self.path, rel))]) != root:
                return Corrupt(self.url, rel, "a symbolic link out of the store")
        return None

    def read_file(self, rel: str) -> bytes:
        """A store file's bytes, checked against the manifest's size and SHA-256 (its path
        first, see ``_refused``)."""
        refused = self._refused(rel)
        if refused is not None:
            raise refused
        if self.checksummed and rel not in self.manifest["files"]:
            raise Corrupt(self.url, rel, "not listed in the manifest (expected every file "
                          "of the store to be listed)")
        try:
            data = self.fs.cat_file(join(self.path, rel))
        except FileNotFoundError:
            raise Corrupt(self.url, rel, MISSING_FILE) from None
        except (IsADirectoryError, NotADirectoryError) as err:
            raise Corrupt(self.url, rel, f"corrupt ({type(err).__name__})") from None
        except Exception as err:  # OSError, botocore, aiohttp...: storage faults share no base
            raise SgdaskError(f"{self.url}/{rel}: cannot read "
                              f"({decode_detail(err)})") from err
        self.check_bytes(rel, data)
        return data

    def check_bytes(self, rel: str, data: bytes) -> None:
        if not self.checksummed:
            return
        entry = self.manifest["files"][rel]
        if len(data) != entry["size"]:
            raise Corrupt(self.url, rel, f"corrupt (size {len(data)} bytes, the manifest "
                          f"says {entry['size']})")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise Corrupt(self.url, rel, "corrupt (SHA-256 differs from the manifest's)")

    def read_table(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        """A Parquet file of the store, checked (hash, page checksums, columns)."""
        data = self.read_file(rel)
        try:
            table = parquet_table(data, columns)
        except DECODE_ERRORS as err:
            raise Corrupt(self.url, rel, f"corrupt (not a readable Parquet file: "
                          f"{decode_detail(err)})") from None
        wanted = columns if columns is not None else None
        if wanted is not None and table.column_names != wanted:
            raise Corrupt(self.url, rel, f"corrupt (columns {table.column_names}, expected "
                          f"{wanted})")
        return table

    def table(self, name: str, parts: Iterable[str], ids: list[str] | None = None,
              columns: list[str] | None = None) -> pa.Table:
        """Rows of table ``name`` from the given parts, only of ``ids`` when given (then
        ``columns`` must include ``image_id``), only ``columns`` when given."""
        tables = []
        for part in parts:
            table = self.read_table(f"{name}/{part}.parquet", columns if columns is not None
                                    else table_columns(name, self.version, self.units))
            if ids is not None:
                table = table.filter(pa.compute.is_in(table["image_id"],
                                                      value_set=pa.array(ids, pa.string())))
            tables.append(table)
        if not tables:
            schema = table_schema(name, self.units)
            return pa.schema([schema.field(c) for c in columns or table_columns(
                name, self.version, self.units)]).empty_table()
        try:
            return pa.concat_tables(tables)
        except pa.ArrowInvalid as err:
            raise Corrupt(self.url, f"{name}/", f"corrupt (parts of different schemas: "
                          f"{decode_detail(err)})") from None

    def images(self) -> pa.Table:
        """The images table of the whole store, with the part each image lives in (read
        once per reader)."""
        if self._images is None:
            tables = []
            for part in self.parts:
                t = self.table("images", [part["name"]])
                tables.append(t.append_column("part", pa.array([part["name"]] * len(t))))
            self._images = (pa.concat_tables(tables) if tables
                            else IMAGE_SCHEMA.empty_table().append_column(
                                "part", pa.array([], pa.string())))
        return self._images

    def mask_files(self, array: str) -> list[str]:
        """Version 3: the files of a part's mask array, as the manifest lists them."""
        prefix = f"masks/{array}/"
        return [rel for rel in self.manifest["files"] if rel.startswith(prefix)]

    def open_masks(self, array: str) -> zarr.Array:
        """A part's mask array: version 3 read whole and checked (every file's hash, then
        zarr decodes from memory, verifying each chunk's CRC-32C); older versions through
        zarr's store, after checking that every chunk file exists (zarr would silently
        read a missing chunk as zeros)."""
        rel = f"masks/{array}"
        if array in self._arrays:
            return self._arrays[array]
        refused = self._refused(rel)
        if refused is not None or "/" in array:
            raise refused or Corrupt(self.url, rel, "not a path inside the store")
        zarr = _zarr()
        try:
            if self.checksummed:
                files = self.mask_files(array)
                if f"{rel}/zarr.json" not in files:
                    raise Corrupt(self.url, f"{rel}/zarr.json", "not listed in the manifest "
                                  "(expected the mask array of every part with masks)")
                proto = zarr.core.buffer.default_buffer_prototype().buffer
                contents = {f[len(rel) + 1:]: proto.from_bytes(self.read_file(f))
                            for f in files}
                opened = zarr.open_array(zarr.storage.MemoryStore(contents, read_only=True),
                                         mode="r", zarr_format=3)
            else:
                for meta in ("masks/zarr.json", f"{rel}/zarr.json"):
                    refused = self._refused(meta)
                    if refused is not None:
                        raise refused
                if self._masks is None:
                    self._masks = zarr.open_group(
                        _zarr_store(join(self.url, "masks"), self.options), mode="r",
                        zarr_format=3)
                opened = self._masks[array]
                self.check_chunks_exist(array, opened)
        except StoreError:
            raise
        except DECODE_ERRORS as err:
            raise Corrupt(self.url, rel, f"corrupt (not a readable Zarr array: "
                          f"{decode_detail(err)})") from None
        if opened.ndim != 1:
            raise Corrupt(self.url, rel, f"corrupt ({opened.ndim}-D, expected a 1-D array)")
        self._arrays[array] = opened
        return opened

    def check_chunks_exist(self, array: str, opened: zarr.Array) -> None:
        """Every chunk file zarr will read (named by the array's own chunk key encoding)
        exists and is a file of the store (``_refused``)."""
        n_chunks = -(-opened.shape[0] // opened.chunks[0]) if opened.shape[0] else 0
        for i in range(n_chunks):
            rel = f"masks/{array}/{opened.metadata.encode_chunk_key((i,))}"
            refused = self._refused(rel)
            if refused is not None:
                raise refused
            if not self.fs.exists(join(self.path, rel)):
                raise Corrupt(self.url, rel, "corrupt (missing)")

    def read_masks(self, array: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Elements [start, stop) of a part's 1-D mask array (all of it by default)."""
        opened = self.open_masks(array)
        try:
            return opened[start:stop]
        except DECODE_ERRORS as err:
            raise Corrupt(self.url, f"masks/{array}", f"corrupt (a chunk does not decode: "
                          f"{decode_detail(err)})") from None


def missing_manifest(url: str) -> StoreError:
    """The error for a store URL without ``manifest.json``."""
    return StoreError(f"{url}: not a complete sgdask store (no manifest.json: wrong path, or "
                      "a conversion that did not finish)")


def what_file_is(fs: Any, path: str) -> str:
    """What a file given where a store is expected is, and which command takes it."""
    name = path.rsplit("/", 1)[-1].lower()
    with fs.open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"PK"):
        return ("is a submission file (ZIP) where a store is expected; convert it first "
                "with sgdask convert")
    if name.endswith(".json") or head.lstrip()[:1] in (b"{", b"["):
        return ("is a JSON file where a store is expected (a submission: convert it first "
                "with sgdask convert; a psg.json: ingest it with sgdask ingest-gt)")
    if head.startswith(b"\x89HDF"):
        return ("is an HDF5 file where a store is expected (Visual Genome: ingest it with "
                "sgdask ingest-gt)")
    return "is a file where a store (a directory with manifest.json) is expected"


def enclosing_store(url: str, storage_options: StorageOptions | None = None
                    ) -> tuple[str, str] | None:
    """The store at ``url`` or holding it, if any: its location (``url`` itself, else the
    folder's URL or local path) and kind. ``url`` and each folder above it are checked
    for a store manifest (a few requests on an object store; never the bucket itself)."""
    fs, path = filesystem(url, storage_options)
    local = is_local(fs)
    path = os.path.abspath(path) if local else path.rstrip("/")
    url = str(url).rstrip("/")
    for depth in range(path.count("/")):
        folder = path.rsplit("/", depth)[0] if depth else path
        kind = store_kind(fs, join(folder, MANIFEST))
        if kind is not None:
            return (url if depth == 0 else folder if local
                    else url.rsplit("/", depth)[0]), kind
    return None


def store_kind(fs: Any, manifest: str) -> str | None:
    """The kind of the store whose manifest is at ``manifest`` (None: no store there)."""
    try:
        if not fs.isfile(manifest):
            return None
        kind = json.loads(fs.cat_file(manifest)).get("kind")
    except (ValueError, AttributeError, OSError):
        return None
    return kind if kind in ("gt", "submission") else None


def check_output_outside_stores(out: str, storage_options: StorageOptions | None = None,
                                what: str = "reports") -> None:
    """Refuse an output directory that is, or is inside, a store: its files would land in
    the store, which then fails ``sgdask verify`` (and everything that verifies it)."""
    found = enclosing_store(out, storage_options)
    if found is not None:
        store, kind = found
        inside = "is" if store.rstrip("/") == str(out).rstrip("/") else f"is inside {store},"
        raise StoreError(f"{out}: {inside} a {kind} store (writing {what} there would damage "
                         "it; choose another ", Option("out"), ")")


def unseen_by_workers(err: Corrupt, storage_options: StorageOptions | None = None
                      ) -> StoreError:
    """The error for a store file a worker found missing: when this process (the driver)
    sees it, the workers do not see the driver's files (another machine, or a directory
    such as ``/proc/self/cwd`` that differs per process), which is no damage to the store."""
    if err.what == MISSING_FILE:
        fs, path = filesystem(err.url, storage_options)
        if fs.exists(join(path, err.rel)):
            return StoreError(f"workers cannot see {err.url} (their {err.rel} is missing, "
                              "this process reads it): use a shared file system or an "
                              "s3:// URL")
    return err


def check_store_target(url: str, kind: str, storage_options: StorageOptions | None = None
                       ) -> None:
    """Refuse to write a ``kind`` store at ``url`` when that would replace a store of the
    other kind, or put a store inside another one (checked by the writer, and by a command
    before any work)."""
    found = enclosing_store(url, storage_options)
    if found is None:
        return
    store, found_kind = found
    url = str(url).rstrip("/")
    if store != url:
        raise StoreError(f"{url}: is inside the {found_kind} store {store} (choose another ",
                         Option("out"), ")")
    if found_kind != kind:
        raise StoreError(f"{url}: is a {found_kind} store; this writes a {kind} store "
                         "(replacing it would lose the other; choose another ", Option("out"),
                         ")")
