"""The fast readers against the literal ones they replace on the hot path.

- ``inflate_layers`` (the compiled decoder that sets bits and skips zeros) against zlib, on
  streams of every compression level and strategy, and on corrupted streams.

- ``read_tiff_masks`` (plain strips walked and inflated by sgdask) against
  ``BitMasks.from_dense(read_layered_tiff(...))`` (tifffile), on TIFFs written every way
  tifffile writes them and on corrupted ones: the same masks or the same error, always.
- ``pack_dense`` (``np.packbits`` rows cropped by a compiled kernel) against a loop that
  sets one bit per pixel.
- ``bracket_depth`` (a numpy scan of the JSON text) against the depth of the parsed value.
- ``panoptic_masks`` (libpng, then one compiled pass from RGB to bits) against Pillow and
  the numpy label image ingest used before.
"""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import numpy as np
import pytest
import tifffile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from sgdask.errors import InputError
from sgdask.formats.psg import GTRecord, panoptic_masks
from sgdask.io.archive import ArchiveLimits
from sgdask.io.bounded_json import bracket_depth, nested_deeper
from sgdask.io.codecs.inflate import OK, inflate_layers
from sgdask.io.codecs.words import HEADER, pack_sparse, set_bits, sparse_problem, unpack_sparse
from sgdask.io.tiff import plain_layout, read_layered_tiff, read_tiff_masks
from sgdask.kernels.bits import pack_dense, row_words
from sgdask.types import BitMasks

LIMITS = ArchiveLimits(max_tiff_layers=16, max_layer_pixels=1 << 16)
CHECKS = settings(max_examples=150, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: compression names tifffile writes -> whether the fast reader takes the file itself
WRITERS = {None: False, "deflate": True, "adobe_deflate": True, "lzw": False,
           "packbits": False}


@st.composite
def stacks(draw: Any) -> np.ndarray:
    """(n, H, W) uint8 stacks of 0, 1 and 255, mostly empty like instance masks."""
    n, h, w = draw(st.integers(1, 4)), draw(st.integers(1, 24)), draw(st.integers(1, 150))
    masks = np.zeros((n, h, w), dtype=np.uint8)
    for i in range(n):
        if draw(st.booleans()):
            y0, x0 = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
            y1, x1 = draw(st.integers(y0 + 1, h)), draw(st.integers(x0 + 1, w))
            masks[i, y0:y1, x0:x1] = draw(arrays(np.uint8, (y1 - y0, x1 - x0),
                                                 elements=st.sampled_from([0, 1, 255])))
    return masks


@st.composite
def layers(draw: Any) -> np.ndarray:
    """One (H, W) layer: mask-like shapes (rectangles, discs, noise) of one value, or
    random bytes."""
    h, w = draw(st.integers(1, 40)), draw(st.integers(1, 300))
    kind = draw(st.sampled_from(["shapes", "noise", "random", "empty"]))
    if kind == "random":
        return draw(arrays(np.uint8, (h, w)))
    layer = np.zeros((h, w), dtype=np.uint8)
    if kind == "noise":
        layer[draw(arrays(np.bool_, (h, w)))] = draw(st.integers(1, 255))
    for _ in range(draw(st.integers(0, 3)) if kind == "shapes" else 0):
        y, x = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
        r = draw(st.integers(1, 30))
        yy, xx = np.ogrid[:h, :w]
        shape = ((yy - y) ** 2 + (xx - x) ** 2 <= r * r) if draw(st.booleans()) else \
            ((abs(yy - y) <= r) & (abs(xx - x) <= 2 * r))
        layer[shape] = draw(st.sampled_from([1, 255, 7]))
    return layer


def compressed(data: bytes, level: int, strategy: int) -> bytes:
    packer = zlib.compressobj(level, zlib.DEFLATED, 15, 9, strategy)
    return packer.compress(data) + packer.flush()


def inflated_rows(stream: bytes, h: int, w: int) -> tuple[np.ndarray, int]:
    return inflate_layers(np.frombuffer(stream, dtype=np.uint8), np.array([[0]]),
                          np.array([[len(stream)]]), h, h, w)


STRATEGIES = [zlib.Z_DEFAULT_STRATEGY, zlib.Z_FILTERED, zlib.Z_HUFFMAN_ONLY, zlib.Z_RLE,
              zlib.Z_FIXED]


@CHECKS
@given(layers(), st.integers(0, 9), st.sampled_from(STRATEGIES))
def test_inflated_rows_equal_zlib(layer, level, strategy):
    h, w = layer.shape
    rows, status = inflated_rows(compressed(layer.tobytes(), level, strategy), h, w)
    assert status == OK
    assert np.array_equal(rows[0], row_words(layer[None])[0])


@CHECKS
@given(layers(), st.sampled_from(STRATEGIES), st.data())
def test_corrupt_streams_decode_only_as_zlib_does(layer, strategy, data):
    """A corrupted stream the decoder accepts is one zlib decodes to the same pixels."""
    h, w = layer.shape
    stream = bytearray(compressed(layer.tobytes(), 6, strategy))
    for _ in range(data.draw(st.integers(1, 3))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    rows, status = inflated_rows(bytes(stream), h, w)
    if status == OK:
        pixels = np.frombuffer(zlib.decompress(bytes(stream)), dtype=np.uint8)
        assert np.array_equal(rows[0], row_words(pixels.reshape(1, h, w))[0])


def written(masks: np.ndarray, compression: str | None, rows_per_strip: int | None,
            described: bool, photometric: str = "minisblack") -> bytes:
    buf = io.BytesIO()
    layers = masks[0] if len(masks) == 1 and not described else masks
    tifffile.imwrite(buf, layers, compression=compression, rowsperstrip=rows_per_strip,
                     photometric=photometric, metadata={} if described else None)
    return buf.getvalue()


def outcome(read: Any) -> tuple[str, Any]:
    """("ok", the masks' arrays) or ("error", the message)."""
    try:
        masks = read()
    except InputError as err:
        return "error", str(err)
    return "ok", (masks.shape, masks.boxes.tolist(), masks.starts.tolist(),
                  masks.words.tolist())


def both(data: bytes, n: int, shape: tuple[int, int] | None = None
         ) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """(fast, literal) outcomes of reading ``data`` as an image with n instances."""
    fast = outcome(lambda: read_tiff_masks(data, "z.zip:a.tiff", "a", n, shape, LIMITS))
    literal = outcome(lambda: BitMasks.from_dense(
        read_layered_tiff(data, "z.zip:a.tiff", "a", n, shape, LIMITS)))
    return fast, literal


@CHECKS
@given(stacks(), st.sampled_from(sorted(WRITERS, key=str)), st.integers(0, 30),
       st.booleans(), st.sampled_from(["minisblack", "miniswhite"]))
def test_fast_reader_equals_tifffile(masks, compression, rows_per_strip, described,
                                     photometric):
    data = written(masks, compression, rows_per_strip or None, described, photometric)
    assert (plain_layout(data, LIMITS) is not None) == WRITERS[compression]
    fast, literal = both(data, len(masks))
    assert fast == literal
    assert fast[0] == "ok"
    read = read_tiff_masks(data, "z.zip:a.tiff", "a", len(masks), None, LIMITS)
    assert np.array_equal(read.dense(), masks != 0)


@CHECKS
@given(stacks(), st.integers(-1, 1), st.booleans())
def test_header_mismatches_give_the_literal_error(masks, extra_layers, wrong_size):
    data = written(masks, "deflate", None, True)
    n, h, w = masks.shape
    shape = (h + 1, w) if wrong_size else (h, w)
    fast, literal = both(data, max(0, n + extra_layers), shape)
    assert fast == literal
    assert (fast[0] == "ok") == (extra_layers == 0 and not wrong_size)


@CHECKS
@given(stacks(), st.data())
def test_corrupt_tiffs_give_the_literal_outcome(masks, data):
    """Bytes overwritten anywhere (headers, tags, strips): the same masks, or the same
    error, as the literal reader."""
    raw = bytearray(written(masks, data.draw(st.sampled_from([None, "deflate"])), None,
                            data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    fast, literal = both(bytes(raw), len(masks))
    assert fast == literal


def test_truncated_strip_falls_back_to_the_literal_reader():
    masks = np.zeros((2, 8, 70), dtype=np.uint8)
    masks[1, 2:5, 60:66] = 1
    data = written(masks, "deflate", 4, True)
    layout = plain_layout(data, LIMITS)
    assert layout is not None and layout.layers == 2
    cut = layout.offsets[1][1] + layout.counts[1][1] // 2
    fast, literal = both(data[:cut] + bytes(len(data) - cut), 2)
    assert fast == literal and fast[0] == "error"


def literal_words(mask: np.ndarray) -> tuple[tuple[int, ...], list[int]]:
    """(box, words) of one mask, one bit per pixel set in a loop."""
    ys, xs = np.nonzero(mask)
    if not len(ys):
        return (0, 0, 0, 0), []
    y0, x0, y1, x1 = int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1
    w0, w1 = x0 // 64, (x1 + 63) // 64
    words = [0] * ((y1 - y0) * (w1 - w0))
    for y, x in zip(ys.tolist(), xs.tolist(), strict=True):
        words[(y - y0) * (w1 - w0) + x // 64 - w0] |= 1 << (x % 64)
    return (y0, x0, y1, x1), words


@settings(deadline=None, max_examples=100)
@given(st.sampled_from([np.bool_, np.uint8, np.int64, np.float32]), st.data())
def test_pack_dense_equals_a_bit_loop(dtype, data):
    shape = (data.draw(st.integers(0, 3)), data.draw(st.integers(0, 9)),
             data.draw(st.integers(0, 200)))
    masks = data.draw(arrays(np.uint8, shape, elements=st.sampled_from([0, 1, 3]))
                      ).astype(dtype)
    boxes, starts, words = pack_dense(masks)
    for i in range(shape[0]):
        box, expected = literal_words(masks[i])
        assert tuple(boxes[i].tolist()) == box
        end = starts[i] + len(expected)
        assert words[starts[i]:end].tolist() == expected
    assert len(words) == sum(len(literal_words(m)[1]) for m in masks)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


TRICKY_TEXT = st.text(alphabet='[]{}"\\/abé\u2028', max_size=8)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner,
                                                                 max_size=3),
    max_leaves=25)


@settings(deadline=None, max_examples=300)
@given(JSON_VALUES, st.booleans(), st.integers(0, 8))
def test_bracket_depth_equals_the_parsed_depth(value, ascii_only, limit):
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert bracket_depth(text) == depth(value)
    assert (bracket_depth(text) > limit) == nested_deeper(value, limit)


@pytest.mark.parametrize("text", [b'"\\\\"', b'["\\\\\\"]"]', b'[["\\\\\\\\"], {"]": "["}]'])
def test_bracket_depth_of_escapes(text):
    assert bracket_depth(text) == depth(json.loads(text))


def literal_label_image(png: bytes, segment_ids: np.ndarray) -> np.ndarray:
    """The label image (instance index + 1, 0 = none) as ingest built it in numpy."""
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int64)
    ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
    if not len(segment_ids):
        return np.zeros(ids.shape, dtype=np.int64)
    order = np.argsort(segment_ids, kind="stable")
    sorted_ids = segment_ids[order]
    pos = np.clip(np.searchsorted(sorted_ids, ids), 0, max(len(sorted_ids) - 1, 0))
    return np.where(sorted_ids[pos] == ids, order[pos] + 1, 0)


def png_bytes(pixels: np.ndarray, mode: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, format="PNG")
    return buf.getvalue()


@CHECKS
@given(st.integers(1, 20), st.integers(1, 90), st.data(),
       st.sampled_from(["RGB", "RGBA", "P", "L"]))
def test_panoptic_masks_equal_the_numpy_label_image(h, w, data, mode):
    """Segments from a small palette of ids (some absent, some listed twice or not at
    all), written as PNGs of several kinds: the same masks as Pillow + numpy."""
    palette = data.draw(st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=6))
    index = data.draw(arrays(np.int64, (h, w), elements=st.integers(0, len(palette) - 1)))
    ids = np.array(palette, dtype=np.int64)[index]
    pixels = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], axis=-1).astype(np.uint8)
    png = png_bytes(pixels, mode)
    segment_ids = np.array(data.draw(st.lists(st.sampled_from([*palette, 2**24 + 1]),
                                              max_size=8)), dtype=np.int64)
    n = data.draw(st.integers(0, len(segment_ids)))
    record = GTRecord(image_id="a", height=h, width=w, categories=np.zeros(n, dtype=np.int64),
                      boxes=None, segment_ids=segment_ids, relations=np.zeros((0, 3)),
                      pan_seg_file_name="a.png")
    fast = panoptic_masks(png, record, "a.png")
    literal = BitMasks.from_labels(literal_label_image(png, segment_ids), n)
    assert fast.shape == literal.shape == (h, w)
    for a, b in ((fast.boxes, literal.boxes), (fast.starts, literal.starts),
                 (fast.words, literal.words)):
        assert np.array_equal(a, b)


@settings(deadline=None)
@given(arrays(np.uint64, st.integers(0, 200), elements=st.sampled_from(
    [0, 0, 0, 1, 2**63, 2**64 - 1, 0x00FF00FF])), st.integers(0, 10**6))
def test_sparse_mask_bytes_check_and_decode(words, flip):
    """``sparse_problem``'s compiled bit count (``set_bits``) against np.unpackbits, and
    what it catches: one bitmap bit flipped makes the count disagree with the header."""
    data = pack_sparse(words)
    head = 8 * HEADER
    bitmap = (len(words) + 7) // 8
    assert set_bits(data, head, head + bitmap) == int(np.unpackbits(data[head:head + bitmap]).sum())
    assert sparse_problem(data) is None
    assert unpack_sparse(data).tolist() == words.tolist()
    if bitmap:
        bad = data.copy()
        bad[head + flip % bitmap] ^= np.uint8(1 << (flip % 8))
        assert sparse_problem(bad) == "the mask bitmap does not match its nonzero count"
