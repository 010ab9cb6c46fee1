"""OpenPVSG's ``masks.txt`` (one line per mask of a tube: ``frame track class height width
RLE``) parsed in one compiled pass over its bytes, with every mask's COCO RLE runs.

The fast path of ``sgdask.io.pvsg``'s reader: it answers only for a file in the plain form
(decimal integers without leading zeros, single spaces between fields, ``\\n`` line ends,
blank lines allowed, strings that are valid RLE for the mask's size) and says "not plain"
otherwise, so that the reader's line-by-line checks, which name the line and what is wrong,
run on anything else. Pure numba: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from sgdask.io.codecs.coco_rle import RUNS_OK, checked_run_lengths
from sgdask.kernels.bits import JIT

#: integers of more digits than this are left to the line-by-line reader (int64 range)
_MAX_DIGITS = 18
_SPACE, _NEWLINE, _ZERO, _NINE = 32, 10, 48, 57


class PlainLines(NamedTuple):
    """A plain ``masks.txt``: per line (frame, track, class, height, width) and its RLE's
    run lengths (``runs[offsets[i]:offsets[i + 1]]``)."""

    fields: np.ndarray
    runs: np.ndarray
    offsets: np.ndarray


def plain_lines(text: bytes) -> PlainLines | None:
    """The file's lines and runs, or None when it is not plain (see the module) or a
    string is not the RLE of a height x width mask."""
    fields, runs, offsets, plain = _parsed(np.frombuffer(text, np.uint8))
    return PlainLines(fields, runs, offsets) if plain else None


@njit(**JIT)
def _parsed(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    n_lines = 1
    for b in raw:
        n_lines += b == _NEWLINE
    fields = np.zeros((n_lines, 5), np.int64)
    spans = np.zeros((n_lines, 2), np.int64)
    n, p, end = 0, 0, len(raw)
    while p < end:
        if raw[p] == _NEWLINE:  # a blank line
            p += 1
            continue
        for k in range(5):
            start = p
            value = 0
            while p < end and _ZERO <= raw[p] <= _NINE:
                value = value * 10 + (raw[p] - _ZERO)
                p += 1
            digits = p - start
            if digits == 0 or digits > _MAX_DIGITS or (digits > 1 and raw[start] == _ZERO):
                return fields[:0], np.zeros(0, np.int64), np.zeros(1, np.int64), False
            if p >= end or raw[p] != _SPACE:
                return fields[:0], np.zeros(0, np.int64), np.zeros(1, np.int64), False
            p += 1
            fields[n, k] = value
        start = p
        while p < end and raw[p] != _NEWLINE:
            p += 1
        if p == start:
            return fields[:0], np.zeros(0, np.int64), np.zeros(1, np.int64), False
        spans[n, 0], spans[n, 1] = start, p
        n += 1
        p += 1
    offsets = np.zeros(n + 1, np.int64)
    parts = []
    for i in range(n):
        counts, problem = checked_run_lengths(raw[spans[i, 0]:spans[i, 1]],
                                              fields[i, 3] * fields[i, 4])
        if problem != RUNS_OK:  # a space in it too: a seventh field
            return fields[:0], np.zeros(0, np.int64), np.zeros(1, np.int64), False
        parts.append(counts)
        offsets[i + 1] = offsets[i] + len(counts)
    runs = np.empty(offsets[n], np.int64)
    for i in range(n):
        runs[offsets[i]:offsets[i + 1]] = parts[i]
    return fields[:n], runs, offsets, True
