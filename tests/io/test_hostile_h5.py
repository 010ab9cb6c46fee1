"""A VG150 h5 file is read only as data: datasets kept in other files (external raw storage,
virtual datasets), reached through links (external, soft, a soft-link loop), declaring sizes
past the limits or encoded with filters HDF5 does not have built in are refused from their
metadata, before any dataset is read: one line naming the file and the dataset, exit code 2,
nothing written, no byte of another file in the message. Each hostile file is built here
with h5py from a valid synthetic one (``sgdask.testing.vg``)."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from sgdask.cli import main
from sgdask.errors import InputError
from sgdask.formats.vg150 import h5_arrays, ingest_vg, split_image_ids
from sgdask.io.archive import ArchiveLimits
from sgdask.testing.vg import VGSynthPaths, write_vg_dataset
from tests.helpers import run_cli

SECRET = b"SECRETTOKEN1" * 4096  # more than the boxes_1024 of the synthetic file hold
#: the secret as boxes_1024 would decode it (the issue's message showed these as row 0)
SECRET_INTS = [str(v) for v in np.frombuffer(SECRET[:12], dtype="<i4").tolist()]


@pytest.fixture(scope="module")
def vg(tmp_path_factory) -> VGSynthPaths:
    return write_vg_dataset(tmp_path_factory.mktemp("vg"), n_test=12, n_train=12, seed=4)


@pytest.fixture
def secret(tmp_path) -> Path:
    """A host file beside the input that the input must not reach."""
    path = tmp_path / "secret.bin"
    path.write_bytes(SECRET)
    return path


def valid_arrays(vg: VGSynthPaths) -> dict[str, np.ndarray]:
    with h5py.File(vg.h5) as f:
        return {key: f[key][()] for key in f}


def hostile_h5(vg: VGSynthPaths, out: Path, key: str,
               make: Callable[[h5py.File, str, np.ndarray], None]) -> Path:
    """A copy of the valid h5 with dataset ``key`` replaced by ``make(file, key, values)``."""
    with h5py.File(out, "w") as f:
        for name, values in valid_arrays(vg).items():
            if name == key:
                make(f, name, values)
            else:
                f.create_dataset(name, data=values)
    return out


# --------------------------------------------------------------------------- the cases


def external_storage(secret: Path) -> Callable:
    """boxes_1024 (as many rows as the labels) whose bytes are -1 from a file of the
    attacker's, then the secret's: a reader that reads them fails on row 0, a negative
    centre, and (before this check) showed the row, i.e. the secret, in its message."""
    def make(f: h5py.File, key: str, values: np.ndarray) -> None:
        prefix = secret.parent / "minus-one.bin"
        prefix.write_bytes(np.int32(-1).tobytes())
        assert len(SECRET) >= values.nbytes - 4
        f.create_dataset(key, shape=values.shape, dtype="<i4",
                         external=[(str(prefix), 0, 4), (str(secret), 0, values.nbytes - 4)])
    return make


def virtual_dataset(source: Path) -> Callable:
    """split as a virtual dataset over another h5 file (fill values where it is missing)."""
    def make(f: h5py.File, key: str, values: np.ndarray) -> None:
        with h5py.File(source, "w") as src:
            src.create_dataset("flags", data=values)
        layout = h5py.VirtualLayout(shape=values.shape, dtype=values.dtype)
        layout[:] = h5py.VirtualSource(str(source), "flags", shape=values.shape)
        f.create_virtual_dataset(key, layout, fillvalue=2)
    return make


def external_link(target: Path) -> Callable:
    def make(f: h5py.File, key: str, values: np.ndarray) -> None:
        with h5py.File(target, "w") as other:
            other.create_dataset(key, data=values)
        f[key] = h5py.ExternalLink(str(target), f"/{key}")
    return make


def soft_link_loop(f: h5py.File, key: str, values: np.ndarray) -> None:
    f[key] = h5py.SoftLink("/loop")
    f["loop"] = h5py.SoftLink(f"/{key}")


def soft_link(f: h5py.File, key: str, values: np.ndarray) -> None:
    """A soft link to a dataset of the same file: refused too (no links at all)."""
    f.create_dataset("elsewhere", data=values)
    f[key] = h5py.SoftLink("/elsewhere")


def huge_rows(f: h5py.File, key: str, values: np.ndarray) -> None:
    """2**40 rows declared, nothing stored: a few kB on disk, 16 TiB to read."""
    f.create_dataset(key, shape=(2**40, 4), dtype="<i4", chunks=(1024, 4))


def huge_chunks(f: h5py.File, key: str, values: np.ndarray) -> None:
    """A few rows in one deflated chunk declared 2 GiB + 8 bytes (decoded whole to read)."""
    f.create_dataset(key, shape=values.shape, maxshape=(None,), dtype="<i8",
                     chunks=(2**28 + 1,), compression="gzip")


def unknown_filter(f: h5py.File, key: str, values: np.ndarray) -> None:
    """labels encoded with filter 32001 (not built in: HDF5 would look for a plugin)."""
    f.create_dataset(key, shape=values.shape, dtype=values.dtype, chunks=values.shape,
                     compression=32001, allow_unknown_filter=True)
    f[key].id.write_direct_chunk((0, 0), values.tobytes())


def null_dataspace(f: h5py.File, key: str, values: np.ndarray) -> None:
    f.create_dataset(key, data=h5py.Empty("<i4"))


CASES = {  # case: (dataset, what the message says, how it is built (given tmp_path, secret))
    "external-storage": ("boxes_1024", "keeps its data in external files",
                         lambda tmp, secret: external_storage(secret)),
    "virtual": ("split", "is a virtual dataset",
                lambda tmp, secret: virtual_dataset(tmp / "host.h5")),
    "external-link": ("labels", "is an external link",
                      lambda tmp, secret: external_link(tmp / "other.h5")),
    "soft-link-loop": ("predicates", "is a soft link", lambda tmp, secret: soft_link_loop),
    "soft-link": ("relationships", "is a soft link", lambda tmp, secret: soft_link),
    "2**40-rows": ("boxes_1024", "declares shape (1099511627776, 4) of int32: "
                   "17592186044416 bytes (expected at most 2147483648; raise with --limit "
                   "max_h5_dataset_size=N)", lambda tmp, secret: huge_rows),
    "huge-chunks": ("split", "declares chunks of shape (268435457,) of int64",
                    lambda tmp, secret: huge_chunks),
    "unknown-filter": ("labels", "HDF5 filter 32001", lambda tmp, secret: unknown_filter),
    "null-dataspace": ("split", "has no dataspace", lambda tmp, secret: null_dataspace),
}


def build(vg: VGSynthPaths, tmp_path: Path, secret: Path, case: str) -> tuple[Path, str, str]:
    key, what, maker = CASES[case]
    return hostile_h5(vg, tmp_path / "VG-SGG-with-attri.h5", key, maker(tmp_path, secret)), \
        key, what


def assert_clean(message: str, bad: Path, key: str, what: str) -> None:
    """One line naming the file and the dataset, with no byte of the secret."""
    assert "\n" not in message
    assert message.startswith(f"{bad}: {key}: "), message
    assert what in message, message
    assert "SECRET" not in message and not any(v in message for v in SECRET_INTS), message


# --------------------------------------------------------------------------- the tests


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_refused_before_reading_through_the_function(vg, tmp_path, secret, case):
    bad, key, what = build(vg, tmp_path, secret, case)
    out = tmp_path / "store"
    start = time.perf_counter()
    with pytest.raises(InputError) as err:
        ingest_vg(str(bad), str(out), str(vg.dicts), str(vg.image_data))
    assert time.perf_counter() - start < 0.5
    assert_clean(err.value.render("cli"), bad, key, what)  # the message the CLI prints
    assert_clean(str(err.value), bad, key, what.partition("; raise with --limit")[0])
    assert "--limit" not in str(err.value)
    assert not out.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(CASES))
def test_refused_through_the_cli(vg, tmp_path, secret, capsys, case):
    bad, key, what = build(vg, tmp_path, secret, case)
    out = tmp_path / "store"
    with pytest.raises(SystemExit) as exit_info:
        main(["ingest-gt", str(bad), "--dicts", str(vg.dicts), "--image-data",
              str(vg.image_data), "--out", str(out), "--in-process"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("sgdask: error: ")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert_clean(lines[0].removeprefix("sgdask: error: "), bad, key, what)
    assert not out.exists()


def test_the_export_scripts_reader_refuses_too(vg, tmp_path, secret):
    """``split_image_ids`` (used by sgdask export-sgb) reads the h5 the same way."""
    bad, key, what = build(vg, tmp_path, secret, "external-storage")
    with pytest.raises(InputError) as err:
        split_image_ids(str(bad), str(vg.image_data))
    assert_clean(str(err.value), bad, key, what)


@pytest.mark.timeout(120)
def test_external_storage_on_a_fifo_is_never_opened(vg, tmp_path):
    """The external file is a FIFO: opening it would block until a writer comes, so a
    prompt exit 2 from a real ``sgdask`` process shows it was never opened."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def make(f: h5py.File, key: str, values: np.ndarray) -> None:
        f.create_dataset(key, shape=values.shape, dtype=values.dtype,
                         external=[(str(fifo), 0, values.nbytes)])

    bad = hostile_h5(vg, tmp_path / "fifo.h5", "boxes_1024", make)
    out = tmp_path / "store"
    proc = run_cli("ingest-gt", str(bad), "--dicts", str(vg.dicts), "--image-data",
                   str(vg.image_data), "--out", str(out), "--in-process", timeout=90)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sgdask: ")]
    assert errors == [f"sgdask: error: {bad}: boxes_1024: keeps its data in external files "
                      "(expected a dataset stored in this file, HDF5's built-in filters only)"
                      ], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_declared_sizes_are_limits_that_can_be_raised(vg, tmp_path, capsys):
    """The total across the datasets read, then each dataset, against ``--limit``."""
    out = tmp_path / "store"
    common = ["ingest-gt", str(vg.h5), "--dicts", str(vg.dicts), "--image-data",
              str(vg.image_data), "--out", str(out), "--in-process"]
    with pytest.raises(SystemExit) as exit_info:
        main([*common, "--limit", "max_h5_total_size=1KiB"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"sgdask: error: {vg.h5}: " in err and "the datasets read up to this one declare" \
        in err and "raise with --limit max_h5_total_size=N" in err, err
    assert not out.exists()

    boxes = valid_arrays(vg)["boxes_1024"]
    with pytest.raises(InputError) as error:
        ingest_vg(str(vg.h5), str(out), str(vg.dicts), str(vg.image_data),
                  limits=ArchiveLimits(max_h5_dataset_size=boxes.nbytes - 1))
    assert str(error.value).startswith(f"{vg.h5}: boxes_1024: declares shape {boxes.shape}")

    manifest = ingest_vg(str(vg.h5), str(out), str(vg.dicts), str(vg.image_data),
                         limits=ArchiveLimits(max_h5_dataset_size=boxes.nbytes,
                                              max_h5_total_size=10 * boxes.nbytes))
    assert manifest["n_images"] > 0


def test_multi_file_drivers_cannot_be_opened_from_the_one_file(vg, tmp_path):
    """A split-driver file (metadata here, raw data in a sibling file) is not readable
    through the single file sgdask opens: refused, the sibling never read."""
    base = tmp_path / "split.h5"
    with h5py.File(base, "w", driver="split") as f:
        for key, values in valid_arrays(vg).items():
            f.create_dataset(key, data=values)
    meta = tmp_path / "split.h5-m.h5"
    assert meta.exists() and (tmp_path / "split.h5-r.h5").exists()
    with pytest.raises(InputError) as err:
        ingest_vg(str(meta), str(tmp_path / "store"), str(vg.dicts), str(vg.image_data))
    assert str(err.value).startswith(f"{meta}: not a readable HDF5 file")


@pytest.mark.timeout(120)
def test_damaged_metadata_is_an_input_error(vg):
    """Bytes changed in the file's metadata (its first 4 KiB): each damaged file is read
    or refused with one line naming it, never an internal error (h5py raises OSError,
    RuntimeError, OverflowError... for them)."""
    data = vg.h5.read_bytes()
    rng = np.random.default_rng(0)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(300):
        damaged = bytearray(data)
        for at in rng.integers(0, 4096, size=rng.integers(1, 5)):
            damaged[at] = rng.integers(0, 256)
        try:
            h5_arrays(io.BytesIO(bytes(damaged)), "damaged.h5")
            outcomes["read"] += 1
        except InputError as err:
            assert str(err).startswith("damaged.h5: ") and "\n" not in str(err)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50, outcomes
