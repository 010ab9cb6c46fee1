"""The compiled walk of a layered TIFF's pages after the second (``io/codecs/tiff_pages``)
against the Python walk it shortens (``io/tiff.page_tags`` on every page): where it decides,
every page it read parses in Python to the second page's tags with the strips it found;
``plain_layout`` as a whole equals the Python walk of every page; and the readers' outcome
on TIFFs of many pages, intact or with bytes of their directories overwritten, is the
literal reader's."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import tifffile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdask.io.archive import ArchiveLimits
from sgdask.io.codecs.tiff_pages import OK, repeated_pages
from sgdask.io.tiff import (
    FIRST_PAGE_TAGS,
    STRIP_TAGS,
    page_tags,
    plain_layout,
    read_layered_tiff,
    read_tiff_masks,
)
from sgdask.types import BitMasks
from tests.io.test_fast_readers import outcome

LIMITS = ArchiveLimits(max_tiff_layers=12, max_layer_pixels=1 << 14)
CHECKS = settings(max_examples=120, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def many_pages(draw: Any) -> tuple[np.ndarray, bytes]:
    """(masks, TIFF) of 3 to 13 layers (one more than LIMITS allows, at most), one or
    more strips each."""
    n, h, w = draw(st.integers(3, 13)), draw(st.integers(2, 20)), draw(st.integers(2, 90))
    masks = np.zeros((n, h, w), dtype=np.uint8)
    for i in range(n):
        y0, x0 = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
        masks[i, y0:draw(st.integers(y0, h)), x0:draw(st.integers(x0, w))] = 1
    buf = io.BytesIO()
    tifffile.imwrite(buf, masks, compression="deflate", metadata={}, photometric="minisblack",
                     rowsperstrip=draw(st.sampled_from([None, 1, 3, 7])))
    return masks, buf.getvalue()


def page_positions(data: bytes) -> list[int]:
    """Where the pages start, following the chain (stops at a loop or the data's end)."""
    at, seen = int.from_bytes(data[4:8], "little"), []
    while at and at not in seen and at + 2 <= len(data):
        seen.append(at)
        end = at + 2 + 12 * int.from_bytes(data[at:at + 2], "little")
        if end + 4 > len(data):
            break
        at = int.from_bytes(data[end:end + 4], "little")
    return seen


def python_layout(data: bytes, limits: ArchiveLimits) -> Any:
    """``plain_layout`` with every page parsed by ``page_tags`` (the walk before the
    compiled one): the layout's (height, width, rows per strip, offsets, counts) or None."""
    if data[:4] != b"II*\x00" or len(data) < 8:
        return None
    pages: list[dict] = []
    at, seen = int.from_bytes(data[4:8], "little"), set()
    while at:
        if at in seen or len(pages) >= limits.max_tiff_layers:
            return None
        seen.add(at)
        parsed = page_tags(data, at, not pages)
        if parsed is None:
            return None
        tags, at = parsed
        pages.append(tags)
    if not pages:
        return None
    key = {t: v for t, v in pages[0].items() if t not in FIRST_PAGE_TAGS}
    alike = {t: v for t, v in key.items() if t not in STRIP_TAGS}
    if any({t: v for t, v in p.items() if t not in STRIP_TAGS} != alike for p in pages[1:]):
        return None
    return [p.get(273, ()) for p in pages], [p.get(279, ()) for p in pages]


def corrupted(data: bytes, draw: Any) -> bytes:
    """``data`` with 1 to 3 bytes overwritten in the pages' directories and the values they
    point to (everything but the strips' contents)."""
    raw = bytearray(data)
    positions = page_positions(data)
    for _ in range(draw(st.integers(1, 3))):
        page = draw(st.sampled_from(positions))
        at = draw(st.integers(page, min(len(raw) - 1, page + 2 + 12 * 16 + 4)))
        raw[at] = draw(st.integers(0, 255))
    return bytes(raw)


def check_against_python(data: bytes) -> None:
    """The compiled walk's pages parse in Python to what it found; ``plain_layout`` is
    the all-Python walk's; the fast reader's outcome is the literal reader's."""
    positions = page_positions(data)
    if len(positions) >= 3 and page_tags(data, positions[1], False) is not None:
        status, offsets, counts = repeated_pages(np.frombuffer(data, dtype=np.uint8),
                                                 positions[0], positions[1],
                                                 LIMITS.max_tiff_layers)
        if status == OK:
            second = page_tags(data, positions[1], False)[0]
            assert len(offsets) == len(positions) - 2
            for page, off, cnt in zip(positions[2:], offsets, counts, strict=True):
                tags = page_tags(data, page, False)[0]
                assert {t: v for t, v in tags.items() if t not in STRIP_TAGS} == \
                    {t: v for t, v in second.items() if t not in STRIP_TAGS}
                assert (tags[273], tags[279]) == (tuple(off.tolist()), tuple(cnt.tolist()))
    expected, layout = python_layout(data, LIMITS), plain_layout(data, LIMITS)
    if layout is None or expected is None:
        # the Python walk may accept pages the layout's later checks refuse
        assert layout is None or expected is not None
    else:
        assert [tuple(r) for r in layout.offsets.tolist()] == list(expected[0])
        assert [tuple(r) for r in layout.counts.tolist()] == list(expected[1])
    n = len(positions)
    fast = outcome(lambda: read_tiff_masks(data, "z.zip:a.tiff", "a", n, None, LIMITS))
    literal = outcome(lambda: BitMasks.from_dense(
        read_layered_tiff(data, "z.zip:a.tiff", "a", n, None, LIMITS)))
    assert fast == literal


@CHECKS
@given(many_pages())
def test_walk_of_intact_tiffs_equals_python(written):
    masks, data = written
    check_against_python(data)
    if len(masks) <= LIMITS.max_tiff_layers:
        layout = plain_layout(data, LIMITS)
        assert layout is not None and layout.layers == len(masks)
        read = read_tiff_masks(data, "z.zip:a.tiff", "a", len(masks), None, LIMITS)
        assert np.array_equal(read.dense(), masks != 0)
    else:
        assert plain_layout(data, LIMITS) is None


@CHECKS
@given(many_pages(), st.data())
def test_walk_of_corrupt_directories_equals_python(written, data):
    check_against_python(corrupted(written[1], data.draw))
