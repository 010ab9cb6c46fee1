"""COCO's compressed run-length strings (``maskApi.c``'s ``rleToString`` / ``rleFrString``)
↔ boolean masks, the way OpenPVSG's tracker writes each mask of a tube in ``masks.txt``.

Runs are over the mask in column-major order, starting with a run of zeros; each count is
written in 5-bit groups (``0x20``: more follow, ``0x10`` of the last: negative), offset by 48,
counts after the third as the difference to the count two before. ``checked_runs`` says what
is wrong with a string before its runs are trusted (``decode_rle``, or
``sgdask.kernels.bits.run_rows`` straight into word rows). Pure numpy and numba: no I/O.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT


def _counts_of(mask: np.ndarray) -> list[int]:
    flat = np.asarray(mask, bool).ravel(order="F")
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return counts


def encode_rle(mask: np.ndarray) -> str:
    """The compressed RLE string of a 2-D mask (pycocotools' ``encode(...)['counts']``)."""
    counts, out = _counts_of(mask), []
    for i, count in enumerate(counts):
        x = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return "".join(out)


@njit(**JIT)
def run_lengths(codes: np.ndarray) -> np.ndarray:
    """The run lengths of a string's character codes minus 48 (a string ending inside a
    count: its last count as read so far; a count of more than 12 groups, past 60 bits:
    -1, which ``rle_problem`` refuses as a negative run)."""
    out = np.empty(codes.size, np.int64)
    n = 0
    p = 0
    while p < codes.size:
        x, k, more = 0, 0, True
        while more and p < codes.size:
            c = np.int64(codes[p])
            x |= (c & 0x1F) << (5 * k)
            more = (c & 0x20) != 0
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= np.int64(-1) << (5 * k)
        if k > 12:
            out[n] = -1
            return out[:n + 1]
        if n > 2:
            x += out[n - 2]
        out[n] = x
        n += 1
    return out[:n]


_NO_RUNS = np.zeros(0, np.int64)


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("latin-1", "replace"), np.uint8).astype(np.int64) - 48


def rle_counts(text: str) -> list[int]:
    """The run lengths a compressed RLE string holds (no checks: see ``rle_problem``)."""
    return run_lengths(_codes(text)).tolist()


def rle_problem(text: str, height: int, width: int) -> str | None:
    """What is wrong with a compressed RLE string for a ``height`` x ``width`` mask, or None."""
    return checked_runs(text, height, width)[1]


def checked_runs(text: str, height: int, width: int) -> tuple[np.ndarray, str | None]:
    """The run lengths of a compressed RLE string for a ``height`` x ``width`` mask, and what
    is wrong with it (None: nothing; the runs then cover the mask, zeros first)."""
    if not text.isascii():
        return _NO_RUNS, _PROBLEMS[_ALPHABET]
    counts, problem = checked_run_lengths(np.frombuffer(text.encode("ascii"), np.uint8),
                                      height * width)
    if problem == _COVERS:
        return counts, f"covers {int(counts.sum())} pixels, not height x width = " \
            f"{height * width}"
    return counts, _PROBLEMS.get(problem)


RUNS_OK, _ALPHABET, _INSIDE, _NEGATIVE, _COVERS = range(5)
_PROBLEMS = {_ALPHABET: "holds a character outside COCO's RLE alphabet",
             _INSIDE: "ends inside a count", _NEGATIVE: "holds a negative run"}


@njit(**JIT)
def checked_run_lengths(raw: np.ndarray, pixels: int) -> tuple[np.ndarray, int]:
    """``checked_runs`` of a string's ASCII bytes, compiled (also called by other compiled
    readers): (runs, what is wrong as one of ``RUNS_OK`` ... ``_COVERS``)."""
    codes = raw.astype(np.int64) - 48
    for c in codes:
        if c < 0 or c >= 64:
            return np.zeros(0, np.int64), _ALPHABET
    if len(codes) and codes[-1] & 0x20:
        return np.zeros(0, np.int64), _INSIDE
    counts = run_lengths(codes)
    total = 0
    for c in counts:
        if c < 0:
            return counts, _NEGATIVE
        total += c
    return counts, RUNS_OK if total == pixels else _COVERS


def decode_rle(text: str, height: int, width: int) -> np.ndarray:
    """The ``height`` x ``width`` boolean mask of a checked compressed RLE string."""
    counts = run_lengths(_codes(text))
    values = np.zeros(counts.size, bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return flat.reshape((width, height)).T
