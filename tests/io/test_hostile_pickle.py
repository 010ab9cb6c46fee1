"""Result files built to exhaust memory or time: pickles whose opcodes build far more than
their size (memo fan-out, floods of empty containers, a huge memo index, nested tuples) and
``.npz`` members that declare a huge array in a few compressed bytes.

Every hostile file is built here, byte for byte; loads that could take the machine down run
in a child process that reports its time and peak resident memory (``ru_maxrss``).
"""

from __future__ import annotations

import io
import json
import pickle
import re
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from sgdask.errors import InputError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.results import ResultEntry, ResultSource
from sgdask.io.archive import ArchiveLimits
from sgdask.io.unpickle import OverLimit, Refused, census, restricted_loads
from sgdask.testing.psg import write_dataset

CHILD_TIMEOUT = 60
#: the child's peak resident memory with numpy and sgdask imported is about 60 MiB
RSS_BOUND_MIB = 200


class Result:
    """Stands for OpenPSG's Result class (sgdask reads any class of that name as a record)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def fan_out(width: int, depth: int) -> list:
    """Each level a list of ``width`` references to the level below: ``depth * width`` memo
    references in the pickle, ``width ** depth`` paths to the innermost list."""
    level: list = [0]
    for _ in range(depth):
        level = [level] * width
    return level


def measured(code: str, *args: str) -> dict:
    """What ``code`` (which sets ``outcome``) reports from a child process: its outcome,
    the seconds it took and the child's peak resident memory in MiB (``VmHWM``: the
    ``ru_maxrss`` of a child started by ``subprocess`` starts at its parent's)."""
    script = ("import json, re, sys, time\nstart = time.perf_counter()\nbase_kb = 0\n" + code
              + "\nhwm = re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read())"
              "\nprint(json.dumps({'outcome': outcome, 'seconds': time.perf_counter() - "
              "start, 'rss_mib': (int(hwm.group(1)) - base_kb) / 1024}))")
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


LOAD = """
from sgdask.io.unpickle import Refused, restricted_loads
data = open(sys.argv[1], 'rb').read()
start = time.perf_counter()
try:
    restricted_loads(data)
    outcome = 'loaded'
except Refused as err:
    outcome = 'refused: ' + str(err)
"""

HOSTILE = {
    # 821 bytes: 17 s and 717 MB before resolution kept sharing
    "fan-out 100^4": (pickle.dumps(fan_out(100, 4), protocol=2), "loaded"),
    # 12 kB: still running at 60 s with 2 GB before
    "fan-out 1000^6": (pickle.dumps(fan_out(1000, 6), protocol=2), "loaded"),
    # 6 MB of EMPTY_SET (216 bytes each in memory): 1.4 GB before
    "empty sets": (b"\x80\x04(" + b"\x8f" * 6_000_000 + b"l.",
                   "refused: builds more than 5000000 objects"),
    # 9 bytes: LONG_BINPUT at index 10^9 made the C unpickler fill a 16 GB memo table
    "memo index": (b"\x80\x02Nr" + struct.pack("<I", 10**9) + b".",
                   "refused: memo index 1000000000 at opcode 3"),
    # 1 MB: a million nested tuples as a dict key overflowed the C stack (segfault)
    "nested tuple key": (b"\x80\x04})" + b"\x85" * 1_000_000 + b"Ns.",
                         "refused: nests tuples more than 100 deep"),
}


@pytest.mark.timeout(CHILD_TIMEOUT * 2)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_pickle_is_bounded_in_time_and_memory(name, tmp_path):
    data, outcome = HOSTILE[name]
    path = tmp_path / "hostile.pkl"
    path.write_bytes(data)
    got = measured(LOAD, str(path))
    assert got["outcome"].startswith(outcome), got
    assert got["rss_mib"] < RSS_BOUND_MIB, got
    assert got["seconds"] < (10 if name == "empty sets" else 1), got


def test_fan_out_stays_shared_after_resolution():
    data = pickle.dumps(fan_out(1000, 6), protocol=2)
    start = time.perf_counter()
    out = restricted_loads(data)
    assert time.perf_counter() - start < 1
    assert len(out) == 1000 and out[0] is out[999] and out[0][0] is out[999][999]
    assert out[0][0][0][0] is out[0][0][0][0]  # deeper than resolution goes: the original
    assert out[0][0][0][0][0][0] == [0]


def test_legitimate_shared_references_load_as_plain_pickle_reads_them():
    """Arrays and lists referenced twice stay one object; values are pickle's own."""
    array, boxes = np.arange(6, dtype=np.int32).reshape(2, 3), [np.ones(2), np.zeros(1)]
    results = [Result(masks=array, labels=array, extra=boxes, again=boxes,
                      meta={"shape": (2, 3), "ids": [1, 2]}) for _ in range(3)]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(results, protocol=protocol)
        out = restricted_loads(data)
        plain = pickle.loads(data)
        for got, want in zip(out, plain, strict=True):
            f = got.fields
            assert f["masks"] is f["labels"] and f["extra"] is f["again"], protocol
            np.testing.assert_array_equal(f["masks"], want.masks)
            assert [a.tolist() for a in f["extra"]] == [a.tolist() for a in want.extra]
            assert f["meta"] == want.meta
        assert out[0].fields["masks"] is out[2].fields["masks"], protocol


def test_a_list_that_holds_itself_resolves():
    cycle: list = [np.arange(2)]
    cycle.append(cycle)
    out = restricted_loads(pickle.dumps(cycle, protocol=2))
    assert out[0].tolist() == [0, 1] and out[1][0].tolist() == [0, 1]


def test_census_counts_what_is_built():
    """One object per list (the outer one and a thousand inner ones), none per reference."""
    inner: list = []
    assert census(pickle.dumps([[] for _ in range(1000)], protocol=2)) == 1001
    assert census(pickle.dumps([inner] * 1000, protocol=2)) == 2
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # every opcode pickle writes here
        data = pickle.dumps([Result(a=np.arange(3), b={"k": (1, 2.5, "s", b"b")},
                                    c={frozenset({1}), None, True}, d=bytearray(b"x"),
                                    e=10**40, f=-1)], protocol=protocol)
        assert census(data) > 10, protocol


@pytest.mark.parametrize("data, error", [
    (pickle.dumps([1, 2])[:-3], "pickle data was truncated"),
    (b"\x80\x02a.", "unpickling stack underflow"),
    (b"\x80\x02h\x05.", "Memo value not found at index 5"),
    (b"\x80\x02\xff.", "invalid load key"),
])
def test_census_refuses_malformed_pickles_as_the_unpickler_would(data, error):
    with pytest.raises(pickle.UnpicklingError, match=error):
        census(data)
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_limits_are_raised_with_limit_pairs():
    data = pickle.dumps([[] for _ in range(1000)], protocol=2)
    with pytest.raises(OverLimit, match="builds more than 1000 objects") as caught:
        restricted_loads(data, max_objects=1000)
    assert caught.value.limit == "max_pickle_objects"
    limits = ArchiveLimits.from_pairs(["max_pickle_objects=4k", "max_pickle_depth=3"])
    assert (limits.max_pickle_objects, limits.max_pickle_depth) == (4000, 3)
    assert len(restricted_loads(data, limits.max_pickle_objects)) == 1000
    nested = pickle.dumps(((((1,),),),), protocol=2)
    with pytest.raises(OverLimit, match="nests tuples more than 3 deep"):
        restricted_loads(nested, max_depth=3)
    # resolution counts the references it follows, within the same budget
    with pytest.raises(OverLimit, match="with the references resolved"):
        restricted_loads(pickle.dumps(fan_out(1000, 6), protocol=2), max_objects=2000)


def test_bounded_values_in_messages():
    """A refusal that names a value from the file prints a bounded part of it (the fan-out
    as a dtype code would otherwise be printed in full: width^depth elements)."""
    start = time.perf_counter()
    with pytest.raises(Refused, match=r"numpy dtype \[\[\[") as caught:
        restricted_loads(b"\x80\x02cnumpy\ndtype\n" + pickle.dumps(fan_out(1000, 6),
                                                                     protocol=2)[2:-1]
                         + b"\x85R.")
    assert time.perf_counter() - start < 1 and len(str(caught.value)) < 200


# --------------------------------------------------------------------------- through the CLI


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[str, int]:
    """(a GT store, how many results it pairs with)."""
    root = tmp_path_factory.mktemp("lab")
    data = write_dataset(root / "data", n_images=6, seed=3, height=32, width=48,
                         no_relation_fraction=0.0, missing_fraction=0.0)
    ingest_gt(str(data.psg_json), str(root / "gt"), str(data.masks_dir))
    psg = json.loads(data.psg_json.read_text())
    paired = [x for x in psg["data"] if x["image_id"] in psg["test_image_ids"]
              and x["relations"]]
    return str(root / "gt"), len(paired)


def convert(results: Path, gt: str, out: Path, *limits: str) -> tuple[int, list[str], float]:
    """(exit code, error lines, seconds) of ``sgdask convert --method psgtr``; stderr holds
    nothing else than those and the progress bar."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sgdask", "convert", str(results), "--method",
                           "psgtr", "--gt", gt, "--out", str(out), "--in-process", *limits],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if x.startswith("sgdask: error:")]
    return proc.returncode, errors, time.perf_counter() - start


@pytest.mark.timeout(CHILD_TIMEOUT * 3)
def test_fan_out_result_file_is_one_line_at_once(lab, tmp_path):
    """Results whose every field is the 12 kB fan-out: refused by the field checks in
    seconds (the process start included), or by the object limit when it is lowered."""
    gt, count = lab
    bomb = fan_out(1000, 6)
    path = tmp_path / "results.pkl"
    path.write_bytes(pickle.dumps([Result(masks=bomb, labels=bomb, refine_bboxes=bomb,
                                          rel_pair_idxes=bomb, rel_dists=bomb)] * count,
                                  protocol=2))
    assert path.stat().st_size < 20_000
    out = tmp_path / "store"
    code, lines, seconds = convert(path, gt, out)
    assert code == 2 and lines == [lines[0]], lines
    assert re.search(r"results\.pkl: image \d+: results\[\d+\]\.masks: a list \(expected a "
                     r"numpy array\)$", lines[0]), lines
    assert seconds < 30 and not out.exists()
    code, lines, _ = convert(path, gt, out, "--limit", "max_pickle_objects=2000")
    assert code == 2 and lines == [lines[0]], lines
    assert lines[0].endswith("results.pkl: builds more than 2000 objects (with the references "
                             "resolved) (expected at most 2000; raise with --limit "
                             "max_pickle_objects=N)"), lines
    assert not out.exists()


# --------------------------------------------------------------------------- npz


def zip_of(members: dict[str, tuple[bytes, int, int]]) -> bytes:
    """A ZIP of raw deflate streams: name -> (compressed bytes, size, CRC-32)."""
    local, central = b"", b""
    for name, (data, size, crc) in members.items():
        fields = struct.pack("<HHHHHIII", 20, 0, 8, 0, 0, crc, len(data), size)
        central += (b"PK\x01\x02\x14\x00" + fields + struct.pack("<HHHHHII", len(name), 0, 0,
                                                                  0, 0, 0, len(local))
                    + name.encode())
        local += b"PK\x03\x04" + fields + struct.pack("<HH", len(name), 0) + name.encode()
        local += data
    return local + central + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(members),
                                         len(members), len(central), len(local), 0)


def deflated(data: bytes) -> tuple[bytes, int, int]:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    return squeeze.compress(data) + squeeze.flush(), len(data), zlib.crc32(data)


def npy_head(shape: tuple[int, ...], descr: str) -> bytes:
    """A ``.npy`` header (format 1.0) declaring ``shape`` of ``descr``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False,
                                                  "shape": shape})
    return buffer.getvalue()


def npy_member(array: np.ndarray) -> tuple[bytes, int, int]:
    return deflated(npy_head(array.shape, array.dtype.str) + array.tobytes())


def zeros_member(shape: tuple[int, ...]) -> tuple[bytes, int, int]:
    """A ``.npy`` of ``shape`` boolean zeros, deflated without ever holding it: one MiB of
    zeros deflated after a full flush always gives the same bytes, so they are repeated."""
    header, total = npy_head(shape, "|b1"), int(np.prod(shape))
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    mib = bytes(1 << 20)
    start = squeeze.compress(header) + squeeze.flush(zlib.Z_FULL_FLUSH)
    chunk = squeeze.compress(mib) + squeeze.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(total, 1 << 20)
    tail = squeeze.compress(bytes(rest)) + squeeze.flush()
    crc = zlib.crc32(header)
    for _ in range(whole):
        crc = zlib.crc32(mib, crc)
    return start + chunk * whole + tail, len(header) + total, zlib.crc32(bytes(rest), crc)


def result_npz(masks: tuple[bytes, int, int]) -> bytes:
    """One image's results with ``masks`` as given and three instances, no relations."""
    return zip_of({"masks.npy": masks,
                   "labels.npy": npy_member(np.ones(3, np.int64)),
                   "refine_bboxes.npy": npy_member(np.ones((3, 5), np.float32)),
                   "rel_pair_idxes.npy": npy_member(np.zeros((0, 2), np.int64)),
                   "rel_dists.npy": npy_member(np.zeros((0, 57), np.float32))})


DECODE = """
from sgdask.errors import InputError
from sgdask.formats.results import ResultEntry, ResultSource
# the decode's own time and memory, as LOAD times the load: the imports are start-up (every
# format registers on import); the peak is reset to what the imports hold (clear_refs 5)
start = time.perf_counter()
base_kb = int(re.search(r'VmRSS:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1))
open('/proc/self/clear_refs', 'w').write('5')
try:
    ResultSource(sys.argv[1], 'psgtr').image(ResultEntry('7', 0, '0.npz'), shape=(32, 48))
    outcome = 'decoded'
except InputError as err:
    outcome = str(err)
"""


@pytest.mark.timeout(CHILD_TIMEOUT * 2)
def test_npz_mask_stack_is_checked_from_its_header_before_inflating(tmp_path):
    """A 640 kB file whose masks member inflates to 640 MB of masks of the wrong size:
    refused from the .npy header, without inflating it (it was inflated whole before)."""
    folder = tmp_path / "results"
    folder.mkdir()
    masks = zeros_member((10, 8000, 8000))
    assert zlib.decompressobj(-15).decompress(masks[0], 6) == b"\x93NUMPY"
    (folder / "0.npz").write_bytes(result_npz(masks))
    assert (folder / "0.npz").stat().st_size < 1_000_000
    got = measured(DECODE, str(folder))
    assert got["outcome"].endswith("0.npz: image 7: masks: masks are 8000x8000 (expected "
                                   "48x32 as the GT image)"), got
    assert got["rss_mib"] < RSS_BOUND_MIB and got["seconds"] < 1, got


def test_npz_header_must_declare_what_the_directory_holds(tmp_path):
    """A header declaring 10^12 masks in a member of a few bytes is refused as declared."""
    folder = tmp_path / "results"
    folder.mkdir()
    lie = deflated(npy_head((10**12, 32, 48), "|b1") + bytes(3 * 32 * 48))
    (folder / "0.npz").write_bytes(result_npz(lie))
    source = ResultSource(str(folder), "psgtr")
    with pytest.raises(InputError, match=r"0\.npz: image 7: masks: declares 1536000000000000 "
                       r"bytes \(shape \(1000000000000, 32, 48\) of bool\) in a member of "):
        source.image(ResultEntry("7", 0, "0.npz"), shape=(32, 48))
    # the genuine member passes and decodes
    (folder / "0.npz").write_bytes(result_npz(npy_member(np.zeros((3, 32, 48), bool))))
    image = source.image(ResultEntry("7", 0, "0.npz"), shape=(32, 48))
    assert image.masks.shape == (3, 32, 48) and list(image.categories) == [0, 0, 0]
