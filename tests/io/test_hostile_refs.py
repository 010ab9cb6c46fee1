"""Inputs that reference data outside themselves: read only what they hold.

Every reader that could be pointed elsewhere is given an input that tries, and the place it
points at is a FIFO watched by ``Opened``: opening a FIFO for reading blocks until a writer
comes, and the watcher, polling as a non-blocking writer, sees every such open (and ends it
with an empty read), so "never opened" is observed, not assumed, and nothing can hang.

- stores (Zarr v3 masks, Parquet tables, the manifest's files): paths with ``..`` in the
  manifest or in a table, symbolic links out of the store (checksummed and version 1
  stores), a mask array whose metadata names a pickle codec;
- Parquet: a footer whose column chunks name another file (``file_path``, the
  ``_metadata`` convention), given as a score file and as training statistics;
- TIFF: an OME-TIFF naming a sibling file for a plane (UUID ``FileName``), and sub-IFDs by
  the hundred thousand (a CPU and memory bomb in a 400 kB file: refused from the tags).
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import shutil
import struct
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tifffile

from sgdask.cli import main
from sgdask.errors import InputError, SgdaskError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.scores import read_score_rows
from sgdask.io.tiff import read_layered_tiff, read_tiff_masks
from sgdask.store.store import SELF_HASH, StoreReader, file_entry, manifest_digest, parquet_bytes
from sgdask.store.training_stats import read_stats
from sgdask.store.verify import verify_store
from sgdask.testing.psg import write_dataset
from tests.helpers import FIXTURES

FIXTURE_V1 = FIXTURES / "store-v1" / "gt"


class Opened:
    """Watches a FIFO at ``path``: ``opened`` becomes True if anything opens it for reading
    (that open is then released with an empty read)."""

    def __init__(self, path: Path) -> None:
        self.path, self.opened = path, False
        os.mkfifo(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:
                assert err.errno == errno.ENXIO  # no reader
                continue
            self.opened = True
            os.close(fd)

    def __enter__(self) -> Opened:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.05)  # an open racing the end of the test is still seen
        self._stop.set()
        self._thread.join()


def test_the_watcher_sees_an_open(tmp_path):
    with Opened(tmp_path / "fifo") as watch:
        assert (tmp_path / "fifo").read_bytes() == b""
    assert watch.opened


# --------------------------------------------------------------------------- stores


@pytest.fixture(scope="module")
def gt_store(tmp_path_factory) -> Path:
    """A checksummed GT store with masks (2 parts) and its image order."""
    root = tmp_path_factory.mktemp("refs")
    paths = write_dataset(root / "raw", n_images=6, seed=2, height=32, width=40,
                          missing_fraction=0.0, no_relation_fraction=0.0)
    ingest_gt(str(paths.psg_json), str(root / "gt"), str(paths.masks_dir), partition_size=3)
    return root / "gt"


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def edit_manifest(store: Path, edit) -> None:
    manifest = json.loads((store / "manifest.json").read_text())
    edit(manifest)
    if SELF_HASH in manifest:
        manifest[SELF_HASH] = manifest_digest(manifest)
    (store / "manifest.json").write_text(json.dumps(manifest, indent=1))


def listed(rel: str, data: bytes):
    """A manifest edit listing ``rel`` with the size and hash of ``data``."""
    def edit(m: dict) -> None:
        m["files"][rel] = file_entry(data)
    return edit


def problems_of(store: Path) -> list[str]:
    """``verify_store``'s lines, checked to be single lines with no traceback."""
    lines = verify_store(str(store)).problems
    assert all("\n" not in line and "Traceback" not in line for line in lines), lines
    return lines


@pytest.mark.timeout(60)
def test_a_listed_path_out_of_the_store_is_not_read(gt_store, tmp_path):
    """``../outside`` listed with a hash: refused before it is opened (the hash would
    show only after reading, and a size mismatch would tell a host file's size)."""
    store = copy_store(gt_store, tmp_path / "store")
    with Opened(tmp_path / "outside") as watch:
        edit_manifest(store, listed("../outside", b"anything"))
        lines = problems_of(store)
        with pytest.raises(SgdaskError) as err:
            StoreReader(str(store)).read_file("../outside")
    assert not watch.opened
    assert f"{store}/../outside: not a path inside the store" in lines
    assert str(err.value).startswith(f"{store}/../outside: not a path inside the store")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["train_stats", "image_order"])
def test_manifest_fields_naming_files_out_of_the_store(gt_store, tmp_path, field):
    store = copy_store(gt_store, tmp_path / "store")
    rel = f"../{field}"
    with Opened(tmp_path / field) as watch:
        edit_manifest(store, lambda m: m.update({field: rel}))
        edit_manifest(store, listed(rel, b"x"))
        problems_of(store)
        with pytest.raises(SgdaskError) as err:
            StoreReader(str(store)).read_file(rel)
    assert not watch.opened
    assert "not a path inside the store" in str(err.value)


@pytest.mark.timeout(60)
def test_version_1_train_stats_out_of_the_store(tmp_path):
    """Version 1 stores carry no hashes: the path check is all that stands between a
    manifest and a host file."""
    store = copy_store(FIXTURE_V1, tmp_path / "work" / "gt")
    with Opened(tmp_path / "stats.parquet") as watch:
        edit_manifest(store, lambda m: m.update({"train_stats": "../../stats.parquet"}))
        with pytest.warns(UserWarning, match="carries no checksums"):
            lines = problems_of(store)
    assert not watch.opened
    assert f"{store}/../../stats.parquet: not a path inside the store" in lines


def rewrite_images(store: Path, part: str, column: str, value: str) -> None:
    """Set a column of a part's images table (size and hash recorded when checksummed)."""
    rel = f"images/{part}.parquet"
    table = pq.read_table(store / rel)
    table = table.set_column(table.schema.get_field_index(column), column,
                             pa.array([value] * len(table), pa.string()))
    data = parquet_bytes(table)
    (store / rel).write_bytes(data)
    edit_manifest(store, lambda m: m["files"].update({rel: file_entry(data)})
                  if "files" in m else None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("version", [3, 1])
def test_a_mask_array_named_out_of_the_store(gt_store, tmp_path, version):
    """The images table names the part's mask array: ``../../outside`` reaches nothing
    (version 3: the manifest lists no such file; version 1: read by zarr directly)."""
    src = gt_store if version == 3 else FIXTURE_V1
    store = copy_store(src, tmp_path / "work" / "gt")
    (tmp_path / "outside").mkdir()
    with Opened(tmp_path / "outside" / "zarr.json") as watch:
        rewrite_images(store, "part-00000", "mask_array", "../../outside")
        with pytest.warns(UserWarning) if version == 1 else nullcontext():
            reader = StoreReader(str(store))
        array = reader.images()["mask_array"][0].as_py()
        with pytest.raises(SgdaskError) as err:
            reader.read_masks(array)
    assert not watch.opened
    assert str(err.value) == f"{store}/masks/../../outside: not a path inside the store"


@pytest.mark.timeout(60)
def test_a_symbolic_link_out_of_a_checksummed_store(gt_store, tmp_path):
    store = copy_store(gt_store, tmp_path / "store")
    target = store / "image_order.json"
    with Opened(tmp_path / "outside.json") as watch:
        target.unlink()
        target.symlink_to(tmp_path / "outside.json")
        lines = problems_of(store)
    assert not watch.opened
    assert f"{store}/image_order.json: a symbolic link out of the store" in lines, lines


@pytest.mark.timeout(60)
def test_a_symbolic_link_out_of_a_version_1_store(tmp_path):
    """A mask chunk read by zarr itself (version 1: no manifest hashes)."""
    store = copy_store(FIXTURE_V1, tmp_path / "gt")
    chunk = store / "masks" / "part-00000" / "c" / "0"
    with Opened(tmp_path / "outside") as watch:
        chunk.unlink()
        chunk.symlink_to(tmp_path / "outside")
        with pytest.warns(UserWarning, match="carries no checksums"):
            reader = StoreReader(str(store))
        with pytest.raises(SgdaskError) as err:
            reader.read_masks("part-00000")
    assert not watch.opened
    assert str(err.value) == f"{store}/masks/part-00000/c/0: a symbolic link out of the store"


def pickle_bomb(marker: Path) -> bytes:
    """A pickle that creates ``marker`` when loaded."""
    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(marker),)
    return pickle.dumps(Payload())


@pytest.mark.parametrize("metadata", ["zarr.json", ".zarray"])
def test_mask_metadata_naming_a_pickle_codec(gt_store, tmp_path, capsys, metadata):
    """Zarr v3 metadata naming ``numcodecs.pickle``, or Zarr v2 metadata (``.zarray``,
    listed with its hash) with a pickle compressor: refused, nothing unpickled."""
    store = copy_store(gt_store, tmp_path / "store")
    marker = tmp_path / "unpickled"
    array = store / "masks" / "part-00000"
    if metadata == "zarr.json":
        meta = json.loads((array / "zarr.json").read_text())
        meta["codecs"] = [{"name": "numcodecs.pickle", "configuration": {}}]
        docs = {"zarr.json": json.dumps(meta).encode()}
    else:
        (array / "zarr.json").unlink()
        docs = {".zarray": json.dumps({
            "zarr_format": 2, "shape": [8], "chunks": [8], "dtype": "|u1",
            "compressor": {"id": "pickle"}, "fill_value": 0, "filters": None,
            "order": "C"}).encode(), "0": pickle_bomb(marker)}

    def edit(m: dict) -> None:
        if metadata == ".zarray":
            del m["files"]["masks/part-00000/zarr.json"]
        for name, data in docs.items():
            m["files"][f"masks/part-00000/{name}"] = file_entry(data)
    for name, data in docs.items():
        (array / name).write_bytes(data)
    edit_manifest(store, edit)
    lines = problems_of(store)
    assert any(line.startswith(f"{store}/masks/part-00000") for line in lines), lines
    assert not marker.exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", str(store)])
    assert exit_info.value.code == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    assert not marker.exists()


# --------------------------------------------------------------------------- Parquet


def footer_naming(tmp_path: Path, sibling: str) -> Path:
    """A Parquet footer whose column chunks say their data is in ``sibling`` (the
    ``_metadata`` convention of partitioned datasets), as a score file would be named."""
    table = pa.table({"image_id": ["a"], "subject": [0], "object": [1], "predicate": [0],
                      "score": [0.5]})
    pq.write_table(table, tmp_path / "real.parquet")
    metadata = pq.ParquetFile(tmp_path / "real.parquet").metadata
    metadata.set_file_path(sibling)
    out = tmp_path / "scores.parquet"
    pq.write_metadata(table.schema, out, metadata_collector=[metadata])
    return out


@pytest.mark.timeout(60)
def test_parquet_column_chunks_in_another_file_are_not_followed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Opened(tmp_path / "sibling.parquet") as watch:
        footer = footer_naming(tmp_path, "sibling.parquet")
        with pytest.raises(InputError) as scores_err:
            read_score_rows(str(footer), None)
        with pytest.raises(InputError) as stats_err:
            read_stats(str(footer))
    assert not watch.opened
    for err in (scores_err, stats_err):
        assert str(err.value).startswith(f"{footer}: not a readable Parquet file")


# --------------------------------------------------------------------------- TIFF


OME = """<?xml version="1.0" encoding="UTF-8"?>
<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06" UUID="urn:uuid:{own}">
<Image ID="Image:0"><Pixels ID="Pixels:0" DimensionOrder="XYCZT" Type="uint8" SizeX="4"
 SizeY="3" SizeC="1" SizeZ="3" SizeT="1"><Channel ID="Channel:0:0" SamplesPerPixel="1"/>
<TiffData IFD="0" FirstZ="0" PlaneCount="1"><UUID FileName="masks.tif">urn:uuid:{own}</UUID>
</TiffData>
<TiffData IFD="0" FirstZ="1" PlaneCount="1"><UUID FileName="sibling.ome.tif">urn:uuid:{a}</UUID>
</TiffData>
<TiffData IFD="0" FirstZ="2" PlaneCount="1"><UUID FileName="{absolute}">urn:uuid:{b}</UUID>
</TiffData>
</Pixels></Image></OME>"""


@pytest.mark.timeout(60)
def test_ome_tiff_planes_in_sibling_files_are_not_read(tmp_path, monkeypatch):
    """An OME-TIFF mask file naming two other files for its planes (one relative: tifffile
    resolves it against the file's directory, which for bytes is the working directory;
    one absolute). Both are FIFOs: neither is opened, the planes read as zeros."""
    monkeypatch.chdir(tmp_path)
    uuids = {k: f"{i}" * 8 + "-1111-1111-1111-" + f"{i}" * 12 for i, k in
             enumerate(("own", "a", "b"), start=1)}
    with Opened(tmp_path / "sibling.ome.tif") as sibling, \
            Opened(tmp_path / "absolute.ome.tif") as absolute:
        buf = io.BytesIO()
        tifffile.imwrite(buf, np.ones((3, 4), np.uint8), metadata=None,
                         description=OME.format(absolute=absolute.path, **uuids))
        masks = read_layered_tiff(buf.getvalue(), "sub.zip:masks.tif", "1", 3, (3, 4))
        words = read_tiff_masks(buf.getvalue(), "sub.zip:masks.tif", "1", 3, (3, 4))
    assert not sibling.opened and not absolute.opened
    assert masks[0].all() and not masks[1:].any()
    assert [bool(m.any()) for m in words.dense()] == [True, False, False]


def with_sub_ifds(n_pages: int, page: int, count: int) -> bytes:
    """A tifffile-written layered TIFF whose page ``page`` gets a SubIFDs tag of ``count``
    offsets, all to the first page's IFD."""
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.ones((n_pages, 4, 4), np.uint8), compression="deflate",
                     photometric="minisblack")
    data = bytearray(buf.getvalue())
    offsets = [struct.unpack_from("<I", data, 4)[0]]
    while True:
        (n,) = struct.unpack_from("<H", data, offsets[-1])
        (following,) = struct.unpack_from("<I", data, offsets[-1] + 2 + 12 * n)
        if not following:
            break
        offsets.append(following)
    at = offsets[page]
    (n,) = struct.unpack_from("<H", data, at)
    entries = [bytes(data[at + 2 + 12 * i:at + 14 + 12 * i]) for i in range(n)]
    (following,) = struct.unpack_from("<I", data, at + 2 + 12 * n)
    values = len(data)
    data += struct.pack(f"<{count}I", *([offsets[0]] * count))
    entries.append(struct.pack("<HHII", 330, 4, count, values))
    moved = len(data)
    data += struct.pack("<H", n + 1) + b"".join(sorted(entries)) + struct.pack("<I", following)
    link = 4 if page == 0 else offsets[page - 1] + 2 + 12 * struct.unpack_from(
        "<H", data, offsets[page - 1])[0]
    struct.pack_into("<I", data, link, moved)
    return bytes(data)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("n_pages", "page"), [(1, 0), (3, 2)])
def test_sub_ifds_are_refused_from_the_tags(n_pages, page):
    data = with_sub_ifds(n_pages, page, 100_000)
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        read_tiff_masks(data, "sub.zip:m.tif", "1", n_pages, (4, 4))
    assert time.perf_counter() - start < 1.0
    assert str(err.value) == (
        "sub.zip:m.tif: image 1: seg_filename: TIFF pages have sub-IFDs (images under a "
        "page, e.g. pyramid levels) (expected one page per instance, without sub-IFDs)")
    buf = io.BytesIO()
    tifffile.imwrite(buf, np.ones((n_pages, 4, 4), np.uint8), compression="deflate",
                     photometric="minisblack")
    assert read_layered_tiff(buf.getvalue(), "sub.zip:m.tif", "1", n_pages, (4, 4)).all()
