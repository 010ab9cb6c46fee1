"""The page chain of a layered TIFF, walked in compiled code from its third page on.

tifffile writes every page of a layered TIFF with the same directory: the same tags, types,
counts and values, except where each page's strips are (StripOffsets, StripByteCounts).
``io/tiff.plain_layout`` parses the first two pages in Python (every rule of the plain
layout, tag by tag: about 30 us a page, a quarter of the reading time of a PSG image);
``repeated_pages`` then only checks that each further page's directory is byte for byte the
second's outside those two value fields, and reads where the strips are. Such a page parses
to the second page's tags with its own strips, which is what the Python walk would make of
it. Anything else (another directory, a loop, a page past the limit or past the end of the
data, another type of strip tag) returns UNDECIDED and the Python walk decides, so this
walk never refuses a file and has no messages of its own.
"""

from __future__ import annotations

import numpy as np
from numba import njit

JIT = {"cache": True, "nogil": True}
OK, UNDECIDED = 0, 1
STRIP_OFFSETS, STRIP_COUNTS = 273, 279
SHORT, LONG = 3, 4
#: bytes of a directory entry, and where its value field starts in it
ENTRY, VALUE = 12, 8


@njit(**JIT)
def _u16(src: np.ndarray, at: int) -> int:
    return np.int64(src[at]) | (np.int64(src[at + 1]) << 8)


@njit(**JIT)
def _u32(src: np.ndarray, at: int) -> int:
    return _u16(src, at) | (_u16(src, at + 2) << 16)


@njit(**JIT)
def _strip_entry(src: np.ndarray, table: int, n: int, tag: int) -> int:
    """Index of the one entry of ``tag`` in the directory at ``table``; -1 when there is
    none or more than one."""
    found = -1
    for e in range(n):
        if _u16(src, table + ENTRY * e) == tag:
            if found >= 0:
                return -1
            found = e
    return found


@njit(**JIT)
def _is_strip_kind(kind: int) -> bool:
    return kind in (SHORT, LONG)


@njit(**JIT)
def _read_values(src: np.ndarray, field: int, kind: int, strips: int, out: np.ndarray
                 ) -> bool:
    """A strip tag's values (SHORT or LONG) from its value field into ``out``; False when
    they lie past the end of the data."""
    size = 2 if kind == SHORT else 4
    at = field if strips * size <= 4 else _u32(src, field)
    if at + strips * size > len(src):
        return False
    for s in range(strips):
        out[s] = _u16(src, at + 2 * s) if size == 2 else _u32(src, at + 4 * s)
    return True


@njit(**JIT)
def repeated_pages(src: np.ndarray, first: int, second: int, limit: int
                   ) -> tuple[int, np.ndarray, np.ndarray]:
    """(OK, offsets, counts) of the strips of the pages after the second (pages at
    ``first`` and ``second``, at most ``limit`` pages in all), each (pages, strips), when
    every such page repeats the second's directory but for its strip values; (UNDECIDED,
    empty, empty) otherwise."""
    none = np.zeros((0, 0), dtype=np.int64)
    n = _u16(src, second)
    table = second + 2
    e_off = _strip_entry(src, table, n, STRIP_OFFSETS)
    e_cnt = _strip_entry(src, table, n, STRIP_COUNTS)
    if e_off < 0 or e_cnt < 0:
        return UNDECIDED, none, none
    k_off, k_cnt = _u16(src, table + ENTRY * e_off + 2), _u16(src, table + ENTRY * e_cnt + 2)
    strips = _u32(src, table + ENTRY * e_off + 4)
    if (not _is_strip_kind(k_off) or not _is_strip_kind(k_cnt) or strips == 0
            or _u32(src, table + ENTRY * e_cnt + 4) != strips):
        return UNDECIDED, none, none
    size = 2 + ENTRY * n + 4
    seen = {first, second}
    positions = [np.int64(0) for _ in range(0)]
    at = _u32(src, table + ENTRY * n)
    while at:
        if at in seen or 2 + len(positions) >= limit or at + size > len(src):
            return UNDECIDED, none, none
        seen.add(at)
        if _u16(src, at) != n:
            return UNDECIDED, none, none
        for b in range(ENTRY * n):
            e, inside = divmod(b, ENTRY)
            if inside >= VALUE and e in (e_off, e_cnt):
                continue
            if src[at + 2 + b] != src[table + b]:
                return UNDECIDED, none, none
        positions.append(at)
        at = _u32(src, at + 2 + ENTRY * n)
    offsets = np.empty((len(positions), strips), dtype=np.int64)
    counts = np.empty((len(positions), strips), dtype=np.int64)
    for i, page in enumerate(positions):
        if not (_read_values(src, page + 2 + ENTRY * e_off + VALUE, k_off, strips, offsets[i])
                and _read_values(src, page + 2 + ENTRY * e_cnt + VALUE, k_cnt, strips,
                                 counts[i])):
            return UNDECIDED, none, none
    return OK, offsets, counts
