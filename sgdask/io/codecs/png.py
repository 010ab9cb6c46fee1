"""An 8-bit RGB PNG straight to runs of segment ids, its zero filter bytes skipped.

A panoptic PNG (COCO panoptic, OpenPSG) holds one segment id per pixel as its colour
(R + 256 G + 65536 B) and nearly every pixel repeats its left or upper neighbour, so after
PNG's row filters nearly every byte is zero (99.9% on COCO-like images). libpng still
unfilters and writes all 0.9 M bytes of a 640x480 image (about 0.9 ms, more than the
counting that follows). Here the zlib stream is inflated by libdeflate (through
imagecodecs, 0.1 ms) and the rows are unfiltered at the level of runs: a stretch of zero
bytes is the colour of the pixel on the left (filter Sub; Paeth while the row above
stays one colour: then its predictor is the left pixel), the row above's runs (Up) or
black (None); every other pixel, and every pixel of an Average row, is unfiltered as PNG
defines it from its left, upper and upper-left neighbours' colours. The result is the image
in raster order as runs: ``ends`` (one past each run's last pixel, as a flat index) and
``ids`` (its segment id), adjacent runs always of different ids.

Only plain PNGs are taken: 8-bit RGB, not interlaced, chunks whose lengths and CRCs (IHDR,
IDAT) check, one zlib stream of exactly the image's size. Anything else returns None and
the caller decodes the file with libpng or Pillow, which decide (this codec has no error
messages of its own). ``tests/io/test_png_runs.py`` checks it against Pillow.
"""

from __future__ import annotations

import threading
import zlib

import imagecodecs
import numpy as np
from numba import njit

JIT = {"cache": True, "nogil": True}
INLINE = {**JIT, "inline": "always"}

SIGNATURE = b"\x89PNG\r\n\x1a\n"
IHDR = b"\x00\x00\x00\x0dIHDR"
#: IHDR's bit depth, colour type, compression, filter method and interlace of a plain
#: 8-bit RGB PNG
PLAIN_RGB8 = bytes([8, 2, 0, 0, 0])
NONE, SUB, UP, AVERAGE, PAETH = 0, 1, 2, 3, 4
_BUFFERS = threading.local()
#: the largest inflating buffer a thread keeps (a 1920x1080 image's rows are 6.2 MB)
KEPT_BUFFER = 16 << 20


@njit(**INLINE)
def _channel(f: int, x: int, a: int, b: int, c: int) -> int:
    """One byte unfiltered: filtered byte ``x``, the left (a), upper (b) and upper-left (c)
    bytes of the same channel."""
    if f == SUB:
        x += a
    elif f == UP:
        x += b
    elif f == AVERAGE:
        x += (a + b) >> 1
    elif f == PAETH:
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        x += a if pa <= pb and pa <= pc else b if pb <= pc else c
    return x & 255


@njit(**INLINE)
def _pixel(f: int, raw: np.ndarray, at: int, a: int, b: int, c: int) -> int:
    """A pixel's colour (as a segment id) from its filtered bytes at ``at`` and the left,
    upper and upper-left colours."""
    colour = 0
    for k in range(3):
        shift = 8 * k
        colour |= _channel(f, int(raw[at + k]), (a >> shift) & 255, (b >> shift) & 255,
                           (c >> shift) & 255) << shift
    return colour


@njit(**INLINE)
def _nonzero(raw: np.ndarray, words: np.ndarray, q: int, end: int) -> int:
    """The first position in [q, end) of a nonzero byte (``end``: none); ``words``: the
    same bytes 8 at a time."""
    while q < end and q & 7:
        if raw[q]:
            return q
        q += 1
    while q + 8 <= end and words[q >> 3] == 0:
        q += 8
    while q < end and raw[q] == 0:
        q += 1
    return q


@njit(**INLINE)
def _append(starts: np.ndarray, ids: np.ndarray, n: int, x: int, colour: int) -> int:
    """A row's runs with pixel ``x`` onward of ``colour``: their new count."""
    if n and ids[n - 1] == colour:
        return n
    starts[n], ids[n] = x, colour
    return n + 1


@njit(**INLINE)
def _upper_left(above_starts: np.ndarray, above_ids: np.ndarray, k: int, x: int) -> int:
    """The colour above pixel x - 1 (0 for the first pixel); ``k``: the run above x."""
    if x == 0:
        return 0
    return above_ids[k - 1] if above_starts[k] == x else above_ids[k]


@njit(**JIT)
def raw_runs(raw: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs (``ends``, ``ids``) of the inflated, filtered rows of an 8-bit RGB PNG
    (``raw``: ``height`` rows of a filter byte and 3 ``width`` bytes, then up to 7 bytes
    more, never read, for its length to be a multiple of 8); (empty, empty) when a row's
    filter type is not one of PNG's five."""
    words = raw.view(np.uint64)
    stride = 3 * width + 1
    above_starts = np.zeros(width + 1, dtype=np.int64)
    above_ids = np.zeros(width + 1, dtype=np.int64)
    above_starts[1] = width  # the row above the first is black
    starts = np.zeros(width + 1, dtype=np.int64)
    ids = np.zeros(width + 1, dtype=np.int64)
    ends = np.empty(height * width, dtype=np.int64)
    out_ids = np.empty(height * width, dtype=np.int64)
    n_out = 0
    for y in range(height):
        f = raw[y * stride]
        if f > PAETH:
            return ends[:0], out_ids[:0]
        base = y * stride + 1
        n, colour, k, x = 0, 0, 0, 0  # colour: pixel x - 1's (0 left of the row); k: the
        while x < width:              # run above pixel x
            z = (_nonzero(raw, words, base + 3 * x, base + 3 * width) - base) // 3
            while x <= z and x < width:  # the zero pixels [x, z), then pixel z
                while above_starts[k + 1] <= x:
                    k += 1
                s, zero = x, x < z
                if zero and f == NONE:
                    colour, x = 0, z
                elif zero and f == SUB and x > 0:
                    x = z
                elif zero and f == UP:
                    colour, x = above_ids[k], min(z, above_starts[k + 1])
                elif zero and f == PAETH and x > 0 and above_starts[k] != x:
                    x = min(z, above_starts[k + 1])  # upper = upper-left: the left colour
                else:
                    colour = _pixel(f, raw, base + 3 * x, colour, above_ids[k],
                                    _upper_left(above_starts, above_ids, k, x))
                    x += 1
                n = _append(starts, ids, n, s, colour)
        starts[n] = width
        for r in range(n):
            if n_out and out_ids[n_out - 1] == ids[r]:
                ends[n_out - 1] = y * width + starts[r + 1]
            else:
                ends[n_out], out_ids[n_out] = y * width + starts[r + 1], ids[r]
                n_out += 1
        above_starts, starts = starts, above_starts
        above_ids, ids = ids, above_ids
    return ends[:n_out].copy(), out_ids[:n_out].copy()


def png_runs(png: bytes) -> tuple[int, int, np.ndarray, np.ndarray] | None:
    """(height, width, ends, ids) of a plain 8-bit RGB PNG, or None (another kind, or
    anything amiss: the caller's decoder decides). The caller checks the pixel count in
    IHDR first: the rows are inflated into memory whole."""
    if png[:16] != SIGNATURE + IHDR or png[24:29] != PLAIN_RGB8:
        return None
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    stream = _idat(png)
    if stream is None or not width or not height:
        return None
    size = height * (3 * width + 1)
    raw = _buffer(-(-size // 8) * 8)
    try:
        inflated = imagecodecs.deflate_decode(stream, out=raw[:size])
    except imagecodecs.DeflateError:
        return None
    if len(inflated) != size:
        return None
    ends, ids = raw_runs(raw, height, width)
    return (height, width, ends, ids) if len(ends) else None


def _buffer(size: int) -> np.ndarray:
    """A buffer of ``size`` bytes, the thread's own up to
    ``KEPT_BUFFER`` bytes (a fresh one page-faults in every page of it, about as long as
    the inflating takes); a larger image gets one of its own, not kept."""
    held = getattr(_BUFFERS, "raw", None)
    if held is None or len(held) < size:
        held = np.zeros(size, dtype=np.uint8)
        if size <= KEPT_BUFFER:
            _BUFFERS.raw = held
    return held[:size]


def _idat(png: bytes) -> bytes | None:
    """The zlib stream of a PNG's IDAT chunks (None: a chunk cut short, a bad CRC of IHDR
    or IDAT, no IDAT, IDATs not consecutive, no IEND)."""
    at, parts, ended = 8, [], False
    view = memoryview(png)
    while at + 12 <= len(png):
        length = int.from_bytes(png[at:at + 4], "big")
        kind = png[at + 4:at + 8]
        end = at + 12 + length
        if end > len(png):
            return None
        if kind in (b"IHDR", b"IDAT"):
            if zlib.crc32(view[at + 4:end - 4]) != int.from_bytes(png[end - 4:end], "big"):
                return None
            if kind == b"IDAT":
                if parts and parts[-1] is None:
                    return None
                parts.append(view[at + 8:end - 4])
        elif parts and parts[-1] is not None:
            parts.append(None)  # IDATs ended
        if kind == b"IEND":
            ended = True
            break
        at = end
    chunks = [p for p in parts if p is not None]
    return b"".join(chunks) if chunks and ended else None
