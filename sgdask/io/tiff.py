"""Layered TIFF masks (one page per instance): the literal reader and the fast one.

``read_layered_tiff`` is the literal: tifffile reads the headers (checked against the
limits, the instance count and the GT size before any pixel is decoded) and decodes the
series into a dense (n, H, W) stack. ``read_tiff_masks`` returns the same masks as word
rows (``BitMasks``) without building that stack, for the layout SGBench's conversion writes
(``tifffile.imwrite(..., compression="deflate")``): little-endian pages of 8-bit, one
sample, deflate strips, no predictor, all alike. For those it walks the page chain itself
(``plain_layout``: tifffile's page objects cost about 1 ms per image; the pages after the
second, which repeat its directory, in compiled code) and inflates every
strip with the compiled decoder of ``io/codecs/inflate``, which sets the bits of nonzero
pixels and skips the runs of zeros instead of writing 6.8 MB of pixels per image. Anything
else, or anything that does not decode to exactly the size its tags give with a matching
checksum, goes through the literal reader, which decodes it or names the problem: the fast
reader never has its own error messages, and ``tests/io/test_fast_readers.py`` checks it against the
literal.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sgdask.errors import Fix, InputError
from sgdask.io.archive import ArchiveLimits, limit_hint, printable
from sgdask.types import BitMasks

if TYPE_CHECKING:
    import tifffile

# tifffile logs what it finds wrong in a corrupt TIFF; the reader reports it as one
# InputError instead, so without logging configured nothing may reach stderr
logging.getLogger("tifffile").addHandler(logging.NullHandler())

DEFAULT_LIMITS = ArchiveLimits()


# --------------------------------------------------------------------------- literal


def tiff_layout(tif: tifffile.TiffFile, limits: ArchiveLimits,
                fail: Callable[[str, str | Fix], InputError]) -> tuple[int, int, int]:
    """(layers, height, width) of a layered TIFF, from its headers, within the limits."""
    if len(tif.pages) > limits.max_tiff_layers:  # walks the page chain, parses no tags
        raise fail(f"TIFF has more than {limits.max_tiff_layers} pages",
                   limit_hint(limits, "max_tiff_layers"))
    if _has_sub_ifds(tif):
        raise fail("TIFF pages have sub-IFDs (images under a page, e.g. pyramid levels)",
                   "one page per instance, without sub-IFDs")
    if len(tif.series) != 1:
        raise fail(f"TIFF holds {len(tif.series)} series (pages of different shapes)",
                   "one page per instance, all of the image's size")
    series = tif.series[0]
    shape = (1, *series.shape) if len(series.shape) == 2 else series.shape
    if len(shape) != 3:
        raise fail(f"TIFF has shape {shape}", "layers x height x width")
    n, h, w = shape
    if n > limits.max_tiff_layers:
        raise fail(f"TIFF has {n} layers", limit_hint(limits, "max_tiff_layers"))
    if h * w > limits.max_layer_pixels:
        raise fail(f"TIFF layers are {w}x{h} pixels", limit_hint(limits, "max_layer_pixels"))
    if n * h * w * series.dtype.itemsize > limits.max_member_size:
        raise fail(f"TIFF decodes to {n * h * w * series.dtype.itemsize} bytes",
                   limit_hint(limits, "max_member_size"))
    return n, h, w


def _has_sub_ifds(tif: tifffile.TiffFile) -> bool:
    """Whether a page has a SubIFDs tag: checked before ``tif.series``, which parses every
    sub-IFD as a page and makes a series of each (100,000 of them in a 400 kB file cost 11 s
    and 0.5 GB). Reads each page's few frame tags, the pages' count being limited; the
    frames stay cached for ``tif.series``, so the check costs next to nothing."""
    pages = tif.pages
    useframes = pages.useframes
    pages.useframes = pages.cache = True
    try:
        return any(page.subifds for page in pages)
    finally:
        pages.useframes = useframes


def read_layered_tiff(data: bytes, file: str, image_id: str, n_instances: int,
                      shape: tuple[int, int] | None = None,
                      limits: ArchiveLimits = DEFAULT_LIMITS) -> np.ndarray:
    """The (n, H, W) boolean stack of a layered TIFF, checked against the instance count
    and (when given) the GT image's (height, width) before it is decoded.

    tifffile reads ``data`` from memory: a buffer has no directory and no file descriptor,
    so series that name other files (OME-TIFF ``UUID FileName``, Micro-Manager and NDTiff
    multi-file stacks) never open one (a missing OME plane reads as zeros); sub-IFDs are
    refused (``tiff_layout``)."""
    def fail(what: str, expected: str | Fix | None = None) -> InputError:
        return InputError(file, what, image=image_id, field="seg_filename", expected=expected)

    import tifffile  # here: only layered TIFFs need it, not every reader of SGBench files

    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tif:
            n, h, w = tiff_layout(tif, limits, fail)
            if n != n_instances:
                raise fail(f"TIFF has {n} layers but the image has {n_instances} instances",
                           "one layer per instance")
            if shape is not None and tuple(shape) != (h, w):
                raise fail(f"masks are {w}x{h}", f"{shape[1]}x{shape[0]} as the GT image")
            arr = tif.series[0].asarray()
    except InputError:
        raise
    except Exception as err:  # tifffile and its codecs raise many types for corrupt data
        raise fail(f"not a readable TIFF ({type(err).__name__}: {printable(str(err))})") \
            from err
    return arr.reshape(n, h, w).astype(bool, copy=False)


# --------------------------------------------------------------------------- fast


class PlainLayout(NamedTuple):
    """A TIFF whose pages are all alike: 8-bit, one sample, deflate strips, no
    predictor."""

    height: int
    width: int
    rows_per_strip: int
    #: (layers, strips): where each strip starts and its length in bytes
    offsets: np.ndarray
    counts: np.ndarray

    @property
    def layers(self) -> int:
        return len(self.offsets)


STRIP_CODECS = (8, 32946)  # deflate, Adobe deflate
#: tags a plain page may have (anything else: the literal reader decides)
PLAIN_TAGS = frozenset({256, 257, 258, 259, 262, 273, 277, 278, 279, 282, 283, 284, 296, 317,
                        339})
#: tags of the first page only: the description (tifffile's shape) and the software
FIRST_PAGE_TAGS = (270, 305)
#: tags that must hold 1 when present: samples per pixel, planar configuration, predictor,
#: sample format (unsigned)
MUST_BE_ONE = (277, 284, 317, 339)
STRIP_TAGS = (273, 279)
INT_FORMATS = {3: "H", 4: "I"}  # SHORT, LONG
RATIONAL, ASCII = 5, 2


def tag_value(data: bytes, kind: int, count: int, at: int) -> tuple | bytes | None:
    """A tag's values (integers, rationals as pairs, ASCII bytes) from its entry's value
    field at ``at``; None for other types or values outside the file."""
    if kind in INT_FORMATS:
        fmt, size = INT_FORMATS[kind], struct.calcsize(INT_FORMATS[kind])
    elif kind == RATIONAL:
        fmt, size = "I", 4
        count *= 2
    elif kind == ASCII:
        fmt, size = "s", 1
    else:
        return None
    if count * size > 4:
        (at,) = struct.unpack_from("<I", data, at)
    if at + count * size > len(data):
        return None
    if kind == ASCII:
        return bytes(data[at:at + count])  # type: ignore[index]
    return struct.unpack_from(f"<{count}{fmt}", data, at)


def page_tags(data: bytes, at: int, first: bool) -> tuple[dict[int, tuple | bytes], int] | None:
    """(tags, offset of the next page) of the page at ``at``; None unless plain."""
    if at + 2 > len(data):
        return None
    (count,) = struct.unpack_from("<H", data, at)
    end = at + 2 + 12 * count
    if end + 4 > len(data):
        return None
    tags: dict[int, tuple | bytes] = {}
    for entry in range(at + 2, end, 12):
        tag, kind, n = struct.unpack_from("<HHI", data, entry)
        if tag not in PLAIN_TAGS and not (first and tag in FIRST_PAGE_TAGS):
            return None
        value = tag_value(data, kind, n, entry + 8)
        if value is None:
            return None
        tags[tag] = value
    return tags, struct.unpack_from("<I", data, end)[0]


def described_shape(description: bytes | None) -> list[int] | None:
    """The shape a tifffile-written description gives (``{"shape": [...]}``)."""
    if description is None:
        return None
    try:
        doc = json.loads(description.rstrip(b"\0"))
    except (ValueError, RecursionError):
        return []
    return doc["shape"] if isinstance(doc, dict) and list(doc) == ["shape"] else []


def plain_layout(data: bytes, limits: ArchiveLimits) -> PlainLayout | None:
    """The strips of a plain layered TIFF within the limits, or None (see the module). The
    first two pages are parsed here, tag by tag; the pages after them, when they repeat the
    second's directory (as tifffile writes them), by the compiled walk of
    ``io/codecs/tiff_pages``, which otherwise leaves them to this walk."""
    if data[:4] != b"II*\x00" or len(data) < 8:
        return None
    pages: list[dict[int, tuple | bytes]] = []
    positions: list[int] = []
    rest = None
    (at,) = struct.unpack_from("<I", data, 4)
    seen = set()
    while at:
        if at in seen or len(pages) >= limits.max_tiff_layers:
            return None
        if len(pages) == 2 and rest is None:
            rest = _repeated_strips(data, positions, limits)
            if rest is not None:
                break
        seen.add(at)
        parsed = page_tags(data, at, not pages)
        if parsed is None:
            return None
        positions.append(at)
        tags, at = parsed
        pages.append(tags)
    if not pages:
        return None
    key = pages[0]
    description = key.get(270)
    key = {t: v for t, v in key.items() if t not in FIRST_PAGE_TAGS}
    alike = {t: v for t, v in key.items() if t not in STRIP_TAGS}
    if any({t: v for t, v in p.items() if t not in STRIP_TAGS} != alike for p in pages[1:]):
        return None
    try:
        (w,), (h,), (bits,), (compression,) = key[256], key[257], key[258], key[259]
        (photometric,) = key[262]
        (rows_per_strip,) = key.get(278, (2**32 - 1,))
        if any(key.get(t, (1,)) != (1,) for t in MUST_BE_ONE):
            return None
    except (KeyError, ValueError):
        return None
    n = len(pages) + (0 if rest is None else len(rest[0]))
    shape = described_shape(description)
    if (bits != 8 or compression not in STRIP_CODECS or photometric not in (0, 1)
            or not (h and w and rows_per_strip) or h * w > limits.max_layer_pixels
            or n * h * w > limits.max_member_size
            or shape not in (None, [n, h, w], [h, w] if n == 1 else None)):
        return None
    rows_per_strip = min(rows_per_strip, h)
    strips = -(-h // rows_per_strip)
    offsets = [p.get(273, ()) for p in pages]
    counts = [p.get(279, ()) for p in pages]
    if any(len(off) != strips or len(cnt) != strips for off, cnt in zip(offsets, counts,
                                                                       strict=True)):
        return None
    offsets_array, counts_array = (np.array(v, dtype=np.int64) for v in (offsets, counts))
    if rest is not None:
        if rest[0].shape[1] != strips:
            return None
        offsets_array = np.concatenate([offsets_array, rest[0]])
        counts_array = np.concatenate([counts_array, rest[1]])
    if int((offsets_array + counts_array).max()) > len(data):
        return None
    return PlainLayout(h, w, rows_per_strip, offsets_array, counts_array)


def _repeated_strips(data: bytes, positions: list[int], limits: ArchiveLimits
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, counts) of the strips of the pages after the first two (at
    ``positions``), when they repeat the second's directory; None: parse them here."""
    from sgdask.io.codecs.tiff_pages import OK, repeated_pages

    status, offsets, counts = repeated_pages(np.frombuffer(data, dtype=np.uint8), positions[0],
                                   positions[1], limits.max_tiff_layers)
    return (offsets, counts) if status == OK else None


def layer_rows(data: bytes, layout: PlainLayout) -> np.ndarray | None:
    """The (n, H, words) word rows of every layer, inflated by the compiled decoder
    (``io/codecs/inflate``); None when a strip does not decode to exactly its pixels."""
    from sgdask.io.codecs.inflate import OK, inflate_layers

    rows, status = inflate_layers(np.frombuffer(data, dtype=np.uint8), layout.offsets,
                                  layout.counts, layout.rows_per_strip, layout.height, layout.width)
    return rows if status == OK else None


def read_tiff_masks(data: bytes, file: str, image_id: str, n_instances: int,
                    shape: tuple[int, int] | None = None,
                    limits: ArchiveLimits = DEFAULT_LIMITS) -> BitMasks:
    """The word masks of a layered TIFF: ``BitMasks.from_dense(read_layered_tiff(...))``,
    without the dense stack when the layout is plain (see the module)."""
    layout = plain_layout(data, limits)
    rows = None
    if (layout is not None and layout.layers == n_instances
            and (shape is None or tuple(shape) == (layout.height, layout.width))):
        rows = layer_rows(data, layout)
    if rows is None:
        return BitMasks.from_dense(read_layered_tiff(data, file, image_id, n_instances,
                                                     shape, limits))
    return BitMasks.from_rows(rows, layout.width)
