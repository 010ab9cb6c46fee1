"""COCO's compressed run-length strings (``maskApi.c``'s ``rleToString`` / ``rleFrString``)
↔ boolean masks, the way OpenPVSG's tracker writes each mask of a tube in ``masks.txt``.

Runs are over the mask in column-major order, starting with a run of zeros; each count is
written in 5-bit groups (``0x20``: more follow, ``0x10`` of the last: negative), offset by 48,
counts after the third as the difference to the count two before. ``rle_problem`` says what is
wrong with a string before ``decode_rle`` trusts it. Pure numpy: no I/O.
"""

from __future__ import annotations

import numpy as np


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


def rle_counts(text: str) -> list[int]:
    """The run lengths a compressed RLE string holds (no checks: see ``rle_problem``)."""
    counts: list[int] = []
    p, n = 0, len(text)
    while p < n:
        x, k, more = 0, 0, True
        while more:
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_problem(text: str, height: int, width: int) -> str | None:
    """What is wrong with a compressed RLE string for a ``height`` x ``width`` mask, or None."""
    if any(not 48 <= ord(ch) < 48 + 64 for ch in text):
        return "holds a character outside COCO's RLE alphabet"
    if text and ord(text[-1]) - 48 & 0x20:
        return "ends inside a count"
    counts = rle_counts(text)
    if any(c < 0 for c in counts):
        return "holds a negative run"
    if sum(counts) != height * width:
        return f"covers {sum(counts)} pixels, not height x width = {height * width}"
    return None


def decode_rle(text: str, height: int, width: int) -> np.ndarray:
    """The ``height`` x ``width`` boolean mask of a checked compressed RLE string."""
    counts = np.asarray(rle_counts(text), np.int64)
    values = np.zeros(counts.size, bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return flat.reshape((width, height)).T
