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
images, byte-packed crops) are still read: ``sgdask.io.partition`` converts them on read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr
from zarr.codecs import ZstdCodec

from sgdask.errors import SgdaskError, StoreError
from sgdask.io.fs import StorageOptions, filesystem, join, zarr_store
from sgdask.kernels.bits import pack_sparse, word_layout, xor_rows
from sgdask.types import BitMasks

# sgdask reads one small array per task and gets its parallelism from Dask: zarr's own
# thread pool only adds hand-offs (a part's read costs 2.8 instead of 4.7 ms of CPU with one
# worker thread). Set before zarr creates its pool, i.e. before any zarr I/O.
zarr.config.set({"threading.max_workers": 1})

FORMAT = "sgdask-store"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
TABLES = ("images", "instances", "triplets")
MASK_CODEC = ZstdCodec(level=7)
MASK_CHUNK = 1 << 20

IMAGE_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("height", pa.int32()), ("width", pa.int32()),
    ("n_instances", pa.int32()), ("n_graph", pa.int32()), ("n_ng", pa.int32()),
    ("mask_array", pa.string()), ("mask_offset", pa.int64()), ("source_file", pa.string()),
])
INSTANCE_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("index", pa.int32()), ("category", pa.int32()),
    ("x1", pa.float64()), ("y1", pa.float64()), ("x2", pa.float64()), ("y2", pa.float64()),
    ("score", pa.float64()),
    ("mask_y0", pa.int32()), ("mask_x0", pa.int32()), ("mask_y1", pa.int32()),
    ("mask_x1", pa.int32()), ("mask_offset", pa.int64()), ("area", pa.int64()),
])
TRIPLET_SCHEMA = pa.schema([
    ("image_id", pa.string()), ("list", pa.dictionary(pa.int8(), pa.string())),
    ("rank", pa.int32()), ("subject", pa.int32()), ("object", pa.int32()),
    ("predicate", pa.int32()), ("score", pa.float64()),
])
SCHEMAS = {"images": IMAGE_SCHEMA, "instances": INSTANCE_SCHEMA, "triplets": TRIPLET_SCHEMA}


def part_name(index: int) -> str:
    return f"part-{index:05d}"


@dataclass
class PartTables:
    """Rows of one part, column -> list, ready to become Parquet tables, plus the part's
    mask data (chunks of one 1-D array)."""

    images: dict[str, list]
    instances: dict[str, list]
    triplets: dict[str, list]
    masks: list[np.ndarray] = field(default_factory=list)
    mask_length: int = 0  # words

    @classmethod
    def empty(cls) -> PartTables:
        return cls(*({name: [] for name in SCHEMAS[t].names} for t in TABLES))

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


def instance_rows(tables: PartTables, image_id: str, categories: np.ndarray,
                  boxes: np.ndarray | None, scores: np.ndarray | None,
                  masks: BitMasks | None = None, areas: np.ndarray | None = None) -> None:
    """Instance rows; with ``masks``, each mask goes into the part's mask array;
    ``areas``: GT mask areas in pixels."""
    n = len(categories)
    cols = tables.instances
    cols["area"].extend([None] * n if areas is None else areas.tolist())
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


def triplet_rows(tables: PartTables, image_id: str, list_name: str, triplets: np.ndarray,
                 scores: np.ndarray | None) -> None:
    n = len(triplets)
    cols = tables.triplets
    cols["image_id"].extend([image_id] * n)
    cols["list"].extend([list_name] * n)
    cols["rank"].extend(range(n))
    for j, name in enumerate(("subject", "object", "predicate")):
        cols[name].extend(triplets[:, j].tolist())
    cols["score"].extend([None] * n if scores is None else scores.tolist())


def write_part(url: str, storage_options: StorageOptions | None, index: int,
               tables: PartTables) -> dict[str, Any]:
    """A part's three Parquet files and, if it has masks, its Zarr mask array.

    Runs on any worker: parts are independent files, and the masks group exists already.
    Returns the part's manifest entry.
    """
    fs, path = filesystem(url, storage_options)
    ids = tables.images["image_id"]
    if tables.masks:
        data = pack_sparse(np.concatenate(tables.masks))
        group = zarr.open_group(zarr_store(join(url, "masks"), storage_options,
                                           read_only=False), mode="r+")
        group.create_array(part_name(index), data=data,
                           chunks=(min(MASK_CHUNK, max(len(data), 1)),),
                           compressors=MASK_CODEC)
    for name in TABLES:
        table = pa.Table.from_pydict(getattr(tables, name), schema=SCHEMAS[name])
        fs.makedirs(join(path, name), exist_ok=True)
        with fs.open(join(path, name, part_name(index) + ".parquet"), "wb") as f:
            pq.write_table(table, f, compression="zstd")
    return {"name": part_name(index), "first_id": ids[0], "last_id": ids[-1],
            "n_images": len(ids)}


class StoreWriter:
    """Writes a store all-or-nothing: on any failure (even Ctrl-C) the partial store is removed.

    Parts may be written by any process (``write_part``); the manifest, listing them, is
    written last by ``finish``, so a reader never mistakes a partial store for a store.
    """

    def __init__(self, url: str, kind: str, storage_options: StorageOptions | None = None,
                 overwrite: bool = False) -> None:
        self.url, self.kind, self.options = str(url).rstrip("/"), kind, storage_options
        self.fs, self.path = filesystem(self.url, storage_options)
        if self.fs.exists(self.path):
            if not overwrite:
                raise StoreError(f"{self.url}: already exists (choose another --out, "
                                 "or pass --overwrite to replace it)")
            self.fs.rm(self.path, recursive=True)

    def __enter__(self) -> StoreWriter:
        self.fs.makedirs(self.path, exist_ok=True)
        zarr.open_group(zarr_store(join(self.url, "masks"), self.options, read_only=False),
                        mode="w")
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is not None and self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)

    def finish(self, parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """Write the manifest (the store's commit point) and return it."""
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": self.kind,
                    **fields, "parts": parts}
        with self.fs.open(join(self.path, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        return manifest


def read_parquet(fs: Any, path: str, columns: list[str] | None = None) -> pa.Table:
    """A (small) Parquet file in one read: the bytes, then pyarrow without its dataset
    layer or thread pool (three times faster than ``pq.read_table`` on a store part)."""
    data = fs.cat_file(path)
    return pq.ParquetFile(pa.BufferReader(data)).read(columns=columns, use_threads=False)


class StoreReader:
    """Reads a complete store; refuses incomplete ones and ones of the wrong kind."""

    def __init__(self, url: str, storage_options: StorageOptions | None = None,
                 kind: str | None = None) -> None:
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)
        self.manifest = self._read_manifest()
        if kind is not None and self.manifest.get("kind") != kind:
            raise StoreError(f"{self.url}: is a {self.manifest.get('kind')} store "
                             f"(expected a {kind} store)")
        self._masks: zarr.Group | None = None
        self._arrays: dict[str, zarr.Array] = {}

    def _read_manifest(self) -> dict[str, Any]:
        mpath = join(self.path, "manifest.json")
        try:
            with self.fs.open(mpath, "r") as f:
                manifest = json.load(f)
        except FileNotFoundError:
            raise StoreError(f"{self.url}: not a complete sgdask store (no manifest.json: "
                             "wrong path, or a conversion that did not finish)") from None
        except json.JSONDecodeError as err:
            raise StoreError(f"{self.url}/manifest.json: corrupt ({err})") from err
        except OSError as err:
            raise SgdaskError(f"{self.url}: cannot read ({type(err).__name__}: {err})") \
                from err
        version = manifest.get("format_version")
        if manifest.get("format") != FORMAT or version not in READABLE_VERSIONS:
            newer = isinstance(version, int) and version > FORMAT_VERSION
            raise StoreError(f"{self.url}/manifest.json: format {manifest.get('format')!r} "
                             f"version {version!r} (expected {FORMAT!r} version "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}"
                             + ("; written by a newer sgdask: upgrade sgdask)" if newer
                                else ")"))
        return manifest

    @property
    def version(self) -> int:
        return int(self.manifest["format_version"])

    @property
    def parts(self) -> list[dict[str, Any]]:
        return self.manifest["parts"]

    def table(self, name: str, parts: Iterable[str], ids: list[str] | None = None,
              columns: list[str] | None = None) -> pa.Table:
        """Rows of table ``name`` from the given parts, only of ``ids`` when given (then
        ``columns`` must include ``image_id``), only ``columns`` when given."""
        tables = []
        for part in parts:
            table = read_parquet(self.fs, join(self.path, name, part + ".parquet"), columns)
            if ids is not None:
                table = table.filter(pa.compute.is_in(table["image_id"],
                                                      value_set=pa.array(ids, pa.string())))
            tables.append(table)
        if not tables:
            schema = SCHEMAS[name]
            return (schema if columns is None else pa.schema(
                [schema.field(c) for c in columns])).empty_table()
        return pa.concat_tables(tables)

    def images(self) -> pa.Table:
        """The images table of the whole store, with the part each image lives in."""
        tables = []
        for part in self.parts:
            t = self.table("images", [part["name"]])
            tables.append(t.append_column("part", pa.array([part["name"]] * len(t))))
        return pa.concat_tables(tables) if tables else IMAGE_SCHEMA.empty_table()

    def read_masks(self, array: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Elements [start, stop) of a part's 1-D mask array (all of it by default)."""
        if self._masks is None:
            self._masks = zarr.open_group(zarr_store(join(self.url, "masks"), self.options),
                                          mode="r")
        if array not in self._arrays:
            self._arrays[array] = self._masks[array]
        return self._arrays[array][start:stop]
