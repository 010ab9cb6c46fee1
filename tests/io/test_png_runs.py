"""``sgdask.io.codecs.png``: a plain 8-bit RGB PNG decoded to runs of segment ids equals
Pillow's pixels (as ``rgb_runs``) for rows of every filter type, files written by Pillow and
libpng at every compression level, several IDAT chunks; any other PNG, or a damaged one, is
left to libpng and Pillow (None)."""

from __future__ import annotations

import io
import itertools
import struct
import zlib
from pathlib import Path

import imagecodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from sgdask.formats.coco_panoptic import Segments, panoptic_runs
from sgdask.io.codecs.png import png_runs
from sgdask.kernels.panoptic import rgb_runs


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data)))


def _paeth(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def _filtered(rgb: np.ndarray, filters: list[int]) -> bytes:
    """The image's rows filtered as PNG defines it, row y by ``filters[y]``."""
    height, width, _ = rgb.shape
    rows = rgb.reshape(height, 3 * width).astype(np.int64)
    out = []
    for y in range(height):
        x = rows[y]
        b = rows[y - 1] if y else np.zeros_like(x)
        a = np.r_[np.zeros(3, np.int64), x[:-3]]
        c = np.r_[np.zeros(3, np.int64), b[:-3]]
        f = filters[y]
        predicted = [0 * x, a, b, (a + b) >> 1, _paeth(a, b, c)][f]
        out.append(bytes([f]) + ((x - predicted) & 255).astype(np.uint8).tobytes())
    return b"".join(out)


def _png(rgb: np.ndarray, filters: list[int], pieces: int = 1, level: int = 6,
         header: bytes = bytes([8, 2, 0, 0, 0])) -> bytes:
    """A PNG of ``rgb`` with the given row filters, its zlib stream in ``pieces`` IDATs."""
    height, width, _ = rgb.shape
    stream = zlib.compress(_filtered(rgb, filters), level)
    cut = np.linspace(0, len(stream), pieces + 1).astype(int)
    idats = [_chunk(b"IDAT", stream[a:b]) for a, b in itertools.pairwise(cut)]
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">II", width, height) + header)
            + b"".join(idats) + _chunk(b"IEND", b""))


@st.composite
def _panoptic(draw: st.DrawFn) -> np.ndarray:
    """A small panoptic-like image: rectangles of a few colours on a background, or noise."""
    height, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    colours = draw(st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=4))
    if draw(st.booleans()):
        ids = np.asarray(draw(st.lists(st.sampled_from(colours), min_size=height * width,
                                       max_size=height * width))).reshape(height, width)
    else:
        ids = np.full((height, width), colours[0])
        for colour in colours[1:]:
            y0, x0 = draw(st.integers(0, height - 1)), draw(st.integers(0, width - 1))
            ids[y0:draw(st.integers(y0 + 1, height)), x0:draw(st.integers(x0 + 1, width))] = colour
    return np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], -1).astype(np.uint8)


def _expected(png: bytes) -> tuple[np.ndarray, np.ndarray]:
    with Image.open(io.BytesIO(png)) as img:
        return rgb_runs(np.ascontiguousarray(np.asarray(img.convert("RGB"))))


def _assert_equal(png: bytes) -> None:
    decoded = png_runs(png)
    assert decoded is not None
    height, width, ends, ids = decoded
    expected_ends, expected_ids = _expected(png)
    with Image.open(io.BytesIO(png)) as img:
        assert (width, height) == img.size
    np.testing.assert_array_equal(ends, expected_ends)
    np.testing.assert_array_equal(ids, expected_ids)


@settings(deadline=None, max_examples=150)
@given(st.data())
def test_rows_of_every_filter_type_decode_as_pillow_does(data: st.DataObject) -> None:
    rgb = data.draw(_panoptic())
    filters = data.draw(st.lists(st.integers(0, 4), min_size=rgb.shape[0],
                                 max_size=rgb.shape[0]))
    _assert_equal(_png(rgb, filters, pieces=data.draw(st.integers(1, 3))))


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_files_of_pillow_and_libpng_decode_as_pillow_does(level: int) -> None:
    rng = np.random.default_rng(level)
    ids = np.zeros((48, 64), np.int64)
    for colour in rng.integers(1, 2**24, 12):
        y, x = rng.integers(0, 48), rng.integers(0, 64)
        ids[y:y + rng.integers(1, 30), x:x + rng.integers(1, 40)] = colour
    ids[rng.random(ids.shape) < 0.02] = 7  # scattered pixels: nonzero filtered bytes
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], -1).astype(np.uint8)
    for optimize in (False, True):
        out = io.BytesIO()
        Image.fromarray(rgb).save(out, "PNG", compress_level=level, optimize=optimize)
        _assert_equal(out.getvalue())
    _assert_equal(imagecodecs.png_encode(rgb, level=level))
    for f in range(5):
        _assert_equal(_png(rgb, [f] * 48, level=level))


def test_other_or_damaged_pngs_are_left_to_libpng_and_pillow() -> None:
    rgb = np.arange(5 * 4 * 3, dtype=np.uint8).reshape(5, 4, 3)
    plain = _png(rgb, [4] * 5, pieces=2)
    assert png_runs(plain) is not None
    interlaced = _png(rgb, [0] * 5, header=bytes([8, 2, 0, 0, 1]))
    rgba = _png(rgb, [0] * 5, header=bytes([8, 6, 0, 0, 0]))
    bad_crc = plain[:-20] + bytes([plain[-20] ^ 1]) + plain[-19:]
    bad_filter = _png(rgb, [0] * 5)
    stream = zlib.decompress(bad_filter[33 + 8:-12 - 4])
    bad_filter = (bad_filter[:33] + _chunk(b"IDAT", zlib.compress(b"\x05" + stream[1:]))
                  + _chunk(b"IEND", b""))
    short = (plain[:33] + _chunk(b"IDAT", zlib.compress(_filtered(rgb, [0] * 5)[:-1]))
             + _chunk(b"IEND", b""))
    for png in (interlaced, rgba, bad_crc, bad_filter, short, plain[:-12], plain[:40],
                b"\x89PNG\r\n\x1a\n", b"GIF89a" + plain[6:]):
        assert png_runs(png) is None


def test_a_panoptic_png_of_any_kind_gives_the_same_runs(tmp_path: Path) -> None:
    """``panoptic_runs``: the plain PNG through this codec, a palette, RGBA or 16-bit one
    through libpng or Pillow, all the same runs."""
    ids = np.zeros((6, 9), np.int64)
    ids[1:4, 2:7], ids[4:, :3] = 70000, 258
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], -1).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "plain.png")
    Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE).save(
        tmp_path / "palette.png")
    Image.fromarray(rgb).convert("RGBA").save(tmp_path / "rgba.png")
    (tmp_path / "deep.png").write_bytes(imagecodecs.png_encode(rgb.astype(np.uint16) * 257))
    expected = rgb_runs(rgb)
    for name in ("plain", "palette", "rgba", "deep"):
        segments = Segments("1", f"{name}.png", np.array([70000, 258]), np.array([1, 2]),
                            np.zeros(2, bool), None)
        shape, ends, runs = panoptic_runs(str(tmp_path), segments, None)
        assert shape == (6, 9)
        np.testing.assert_array_equal(ends, expected[0])
        np.testing.assert_array_equal(runs, expected[1])
