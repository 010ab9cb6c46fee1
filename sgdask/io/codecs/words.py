"""The store's mask words as bytes (``schemas/store.md``): row XOR, the sparse layout of
format 2 and the byte-packed crops of format 1.

Masks are the kernels' word rows (``sgdask.kernels.bits``). The store writes each row XOR-ed
with the row above (smooth shapes become mostly zero words) and a part's words sparse: a
header, a bitmap of the nonzero words and their bytes plane by plane. Decoding is compiled
(``nogil``, cached on disk) like the kernels; ``sparse_problem`` checks bytes before the
decoder, which trusts its input. Pure numpy + numba: no I/O, no Dask, pyarrow or zarr.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT, popcount, word_layout, word_span


@njit(**JIT)
def xor_rows(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray,
             decode: bool) -> None:
    """In place: each row XOR-ed with the row above (``decode=False``) or the inverse.

    Smooth shapes change little from row to row, so the encoded words are mostly zero and
    the store's zstd compresses them far better than the plain bits."""
    for i in range(boxes.shape[0]):
        w0, w1 = word_span(boxes[i, 1], boxes[i, 3])
        stride = w1 - w0
        rows = boxes[i, 2] - boxes[i, 0]
        if decode:
            for r in range(1, rows):
                base = starts[i] + r * stride
                for k in range(stride):
                    words[base + k] ^= words[base - stride + k]
        else:
            for r in range(rows - 1, 0, -1):
                base = starts[i] + r * stride
                for k in range(stride):
                    words[base + k] ^= words[base - stride + k]


@njit(**JIT)
def v1_crop_words(data: np.ndarray, offsets: np.ndarray, boxes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, words) of masks stored by store format version 1: per mask, its box's rows
    bit-packed big-endian from the box's left edge (``numpy.packbits``), each row XOR-ed
    with the row above, ``h * ceil(w / 8)`` bytes from ``offsets[i]``."""
    starts = word_layout(boxes)
    words = np.zeros(starts[-1], dtype=np.uint64)
    for i in range(boxes.shape[0]):
        y0, x0, y1, x1 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        width = x1 - x0
        row_bytes = (width + 7) >> 3
        w0, w1 = word_span(x0, x1)
        prev = np.zeros(max(row_bytes, 1), dtype=np.uint8)
        for r in range(y1 - y0):
            base = offsets[i] + r * row_bytes
            out = starts[i] + r * (w1 - w0) - w0
            for b in range(row_bytes):
                value = data[base + b] ^ prev[b]
                prev[b] = value
                for bit in range(8):
                    x = b * 8 + bit
                    if x < width and (value >> (7 - bit)) & 1:
                        col = x0 + x
                        words[out + (col >> 6)] |= np.uint64(1) << np.uint64(col & 63)
    return starts[:-1].copy(), words


HEADER = 2  # uint64s before the encoded words: the word count and the nonzero count


def pack_sparse(words: np.ndarray) -> np.ndarray:
    """Row-XOR-ed mask words as stored (store format 2): a header (word count, nonzero
    count), a bitmap of the nonzero words, then the nonzero words' bytes byte-plane by
    byte-plane. XOR-ed rows are mostly zero words, and what remains varies mostly in its
    low bytes: this cuts what zstd must decode five-fold and the size by a third."""
    words = np.ascontiguousarray(words, dtype=np.uint64)
    nonzero = words != 0
    values = words[nonzero]
    header = np.array([len(words), len(values)], dtype=np.uint64).view(np.uint8)
    planes = values.view(np.uint8).reshape(-1, 8).T.reshape(-1)
    return np.concatenate([header, np.packbits(nonzero, bitorder="little"), planes])


@njit(**JIT)
def set_bits(data: np.ndarray, start: int, stop: int) -> int:
    """Set bits of bytes [start, stop) (a sparse mask array's bitmap; np.unpackbits held
    the GIL for an eight times larger temporary)."""
    total = 0
    for i in range(start, stop):
        total += popcount(np.uint64(data[i]))
    return total


@njit(**JIT)
def unpack_sparse(data: np.ndarray) -> np.ndarray:
    """The row-XOR-ed words of ``pack_sparse``'s bytes."""
    n_words, n_values = 0, 0
    for b in range(8):
        n_words |= int(data[b]) << (8 * b)
        n_values |= int(data[8 + b]) << (8 * b)
    bitmap = 8 * HEADER
    planes = bitmap + (n_words + 7) // 8
    words = np.zeros(n_words, dtype=np.uint64)
    k = 0
    for byte in range((n_words + 7) // 8):
        flags = data[bitmap + byte]
        if flags == 0:  # most bytes: eight zero words
            continue
        for bit in range(8):
            if (flags >> bit) & 1:
                value = np.uint64(0)
                for b in range(8):
                    value |= np.uint64(data[planes + b * n_values + k]) << np.uint64(8 * b)
                words[8 * byte + bit] = value
                k += 1
    return words


def sparse_problem(data: np.ndarray) -> str | None:
    """What makes a part's mask bytes unreadable as ``pack_sparse`` output (None: they are
    readable): checked before the compiled decoder, which trusts its input."""
    head = 8 * HEADER
    if data.dtype != np.uint8 or len(data) < head:
        return f"{len(data)} mask bytes of {data.dtype}, expected a uint8 header"
    n_words, n_values = (int(v) for v in data[:head].view(np.uint64))
    bitmap = (n_words + 7) // 8
    if n_words > 8 * len(data) or len(data) != head + bitmap + 8 * n_values:
        return f"{len(data)} mask bytes do not hold {n_words} words, {n_values} nonzero"
    if set_bits(data, head, head + bitmap) != n_values:
        return "the mask bitmap does not match its nonzero count"
    return None
