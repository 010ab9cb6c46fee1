"""Inflating a zlib stream of mask pixels straight into word rows, skipping the zeros.

A layered TIFF stores each instance as deflate strips of 8-bit pixels, nearly all zero.
Inflating them with a general decoder (libdeflate) writes every byte: 6.8 MB per PSG image,
about 3 ms, which was most of the time from a submission ZIP to the score. Here the strip
is decoded symbol by symbol (RFC 1950/1951, after Mark Adler's ``puff``): a literal or a
copy of nonzero bytes sets bits in the layer's word rows (bit b of word j of a row is
column 64 j + b, as in ``kernels/bits``), and a copy whose source holds no nonzero byte
(the long runs of zeros) only moves the position. The Adler-32 checksum is kept in closed
form over such runs, so every stream is still checked in full.

Anything the decoder does not accept (a bad header, an invalid code, a distance too far
back, a size other than expected, a wrong checksum) returns a nonzero status and the
caller reads the file with the literal decoder instead, which decides: this codec has no
error messages of its own. ``tests/io/test_fast_readers.py`` checks it against zlib.
"""

from __future__ import annotations

import numpy as np
from numba import njit

JIT = {"cache": True, "nogil": True}
#: the helpers of the decoding loop, inlined into it (a call passing arrays costs more than
#: most of them do)
INLINE = {**JIT, "inline": "always"}

LENGTH_BASE = np.array([3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59,
                        67, 83, 99, 115, 131, 163, 195, 227, 258], dtype=np.int64)
LENGTH_EXTRA = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4,
                         5, 5, 5, 5, 0], dtype=np.int64)
DISTANCE_BASE = np.array([1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385,
                          513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385,
                          24577], dtype=np.int64)
DISTANCE_EXTRA = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10,
                           10, 11, 11, 12, 12, 13, 13], dtype=np.int64)
#: order of the code length code lengths in a dynamic block header
LENGTH_CODE_ORDER = np.array([16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15],
                             dtype=np.int64)
ADLER_MOD = 65521
OK = 0
#: reader state ``st``: input position, bit buffer, bits in it, error flag
POS, BUF, COUNT, FAILED = 0, 1, 2, 3
#: output state ``out``: position in the strip, the two Adler-32 sums (reduced modulo
#: ADLER_MOD after each copy and every 4096 literals), the first and one past the last
#: nonzero byte written, and the row and column of the position in the layer
AT, S1, S2, NZ_LO, NZ_HI, Y, X = 0, 1, 2, 3, 4, 5, 6


@njit(**INLINE)
def bits(src: np.ndarray, end: int, st: np.ndarray, need: int) -> int:
    """The next ``need`` bits of the stream, least significant first (0 and the error
    flag set when the input runs out)."""
    while st[COUNT] < need:
        if st[POS] >= end:
            st[FAILED] = 1
            return 0
        st[BUF] |= np.int64(src[st[POS]]) << st[COUNT]
        st[POS] += 1
        st[COUNT] += 8
    value = st[BUF] & ((np.int64(1) << need) - 1)
    st[BUF] >>= need
    st[COUNT] -= need
    return value


@njit(**JIT)
def build_code(count: np.ndarray, symbol: np.ndarray, lengths: np.ndarray) -> int:
    """A canonical Huffman code from code lengths (``puff``'s construct): fills ``count``
    (codes per length) and ``symbol`` (symbols by code); < 0 over-subscribed, > 0
    incomplete, 0 complete."""
    count[:] = 0
    for length in lengths:
        count[length] += 1
    if count[0] == len(lengths):
        return 0
    left = 1
    for length in range(1, 16):
        left = (left << 1) - count[length]
        if left < 0:
            return left
    offsets = np.zeros(16, dtype=np.int64)
    for length in range(1, 15):
        offsets[length + 1] = offsets[length] + count[length]
    for s in range(len(lengths)):
        if lengths[s]:
            symbol[offsets[lengths[s]]] = s
            offsets[lengths[s]] += 1
    return left


@njit(**INLINE)
def decode(src: np.ndarray, end: int, st: np.ndarray, count: np.ndarray,
           symbol: np.ndarray) -> int:
    """The next symbol of a Huffman code, read bit by bit; -1 when none matches."""
    code = first = index = 0
    for length in range(1, 16):
        code |= bits(src, end, st, 1)
        if st[FAILED]:
            return -1
        n = count[length]
        if code - n < first:
            return symbol[index + code - first]
        index += n
        first = (first + n) << 1
        code <<= 1
    return -1


TABLE_BITS = 9


@njit(**JIT)
def code_table(count: np.ndarray, symbol: np.ndarray) -> np.ndarray:
    """Look-up table of the codes up to TABLE_BITS long: indexed by the next TABLE_BITS
    bits of the stream, (symbol << 4) | code length; 0 where a longer code (or none)
    starts, which ``decode`` reads bit by bit."""
    table = np.zeros(1 << TABLE_BITS, dtype=np.int64)
    code = index = 0
    for length in range(1, 16):
        for _ in range(count[length]):
            if length <= TABLE_BITS:
                reversed_code = 0
                for b in range(length):
                    reversed_code |= ((code >> b) & 1) << (length - 1 - b)
                for at in range(reversed_code, 1 << TABLE_BITS, 1 << length):
                    table[at] = (symbol[index] << 4) | length
            index += 1
            code += 1
        code <<= 1
    return table


@njit(**INLINE)
def decode_fast(src: np.ndarray, end: int, st: np.ndarray, table: np.ndarray,
                count: np.ndarray, symbol: np.ndarray) -> int:
    """``decode`` through the look-up table when the next code is short enough."""
    while st[COUNT] < TABLE_BITS and st[POS] < end:
        st[BUF] |= np.int64(src[st[POS]]) << st[COUNT]
        st[POS] += 1
        st[COUNT] += 8
    entry = table[st[BUF] & ((1 << TABLE_BITS) - 1)]
    length = entry & 15
    if entry and length <= st[COUNT]:
        st[BUF] >>= length
        st[COUNT] -= length
        return entry >> 4
    return decode(src, end, st, count, symbol)


@njit(**INLINE)
def moved(out: np.ndarray, length: int, base: int, width: int) -> None:
    """Advance the position by ``length`` pixels."""
    out[AT] += length
    x = out[X] + length
    if x < width:
        out[X] = x
    elif x < 2 * width:
        out[X], out[Y] = x - width, out[Y] + 1
    else:
        out[Y], out[X] = divmod(base + out[AT], width)


@njit(**INLINE)
def reduced(out: np.ndarray) -> None:
    out[S1] %= ADLER_MOD
    out[S2] %= ADLER_MOD


@njit(**INLINE)
def put(window: np.ndarray, out: np.ndarray, value: int, rows: np.ndarray,
        width: int) -> None:
    """Append one byte to the strip: kept in the window, a bit when nonzero, summed."""
    p = out[AT]
    if value:
        window[p] = value
        x = out[X]
        rows[out[Y], x >> 6] |= np.uint64(1) << np.uint64(x & 63)
        if p < out[NZ_LO]:
            out[NZ_LO] = p
        out[NZ_HI] = p + 1
    out[S1] += value
    out[S2] += out[S1]
    out[AT] = p + 1
    if out[X] + 1 == width:
        out[X] = 0
        out[Y] += 1
    else:
        out[X] += 1


@njit(**INLINE)
def set_bits(rows: np.ndarray, y: int, x: int, length: int, width: int) -> None:
    """Set ``length`` bits from row y, column x on, row after row."""
    while length > 0:
        end = min(width, x + length)
        length -= end - x
        while x < end:
            stop = min(end, (x | 63) + 1)
            span = stop - x
            mask = np.uint64(0xFFFFFFFFFFFFFFFF) if span == 64 else \
                (np.uint64(1) << np.uint64(span)) - np.uint64(1)
            rows[y, x >> 6] |= mask << np.uint64(x & 63)
            x = stop
        x, y = 0, y + 1


@njit(**INLINE)
def fill(window: np.ndarray, out: np.ndarray, value: int, length: int, rows: np.ndarray,
         base: int, width: int) -> None:
    """Append ``length`` copies of a nonzero byte (a copy from distance 1)."""
    p = out[AT]
    window[p:p + length] = value
    set_bits(rows, out[Y], out[X], length, width)
    out[S2] += length * out[S1] + value * length * (length + 1) // 2
    out[S1] += value * length
    if p < out[NZ_LO]:
        out[NZ_LO] = p
    out[NZ_HI] = p + length
    moved(out, length, base, width)


@njit(**INLINE)
def copy(window: np.ndarray, out: np.ndarray, distance: int, length: int,
         rows: np.ndarray, base: int, width: int) -> None:
    """Append ``length`` bytes copied from ``distance`` back; a source without nonzero
    bytes appends zeros by moving the position (the window is zero there already)."""
    p = out[AT]
    source_end = min(p, p - distance + length)
    if p - distance >= out[NZ_HI] or source_end <= out[NZ_LO] or (
            distance == 1 and not window[p - 1]):
        out[S2] += length * out[S1]
        moved(out, length, base, width)
    elif distance == 1:
        fill(window, out, window[p - 1], length, rows, base, width)
    elif distance % width == 0 and distance >= length:
        rows_above(window, out, distance, length, rows, base, width)
    else:
        copied(window, out, distance, length, rows, base, width)
    reduced(out)


@njit(**INLINE)
def copied(window: np.ndarray, out: np.ndarray, distance: int, length: int,
           rows: np.ndarray, base: int, width: int) -> None:
    """Append a copy from any distance, byte by byte (a copy may overlap itself)."""
    p, y, x = out[AT], out[Y], out[X]
    t1 = t2 = 0
    lo, hi = out[NZ_LO], out[NZ_HI]
    for i in range(length):
        b = window[p - distance + i]
        if b:
            window[p + i] = b
            rows[y, x >> 6] |= np.uint64(1) << np.uint64(x & 63)
            lo, hi = min(lo, p + i), p + i + 1
            t1 += np.int64(b)
            t2 += (length - i) * np.int64(b)
        x += 1
        if x == width:
            x, y = 0, y + 1
    out[S2] += length * out[S1] + t2
    out[S1] += t1
    out[NZ_LO], out[NZ_HI] = lo, hi
    out[AT], out[Y], out[X] = p + length, y, x


@njit(**INLINE)
def rows_above(window: np.ndarray, out: np.ndarray, distance: int, length: int,
               rows: np.ndarray, base: int, width: int) -> None:
    """Append a copy of the same columns some rows above (no overlap): the window bytes as
    one block, their bits word by word from the rows above."""
    p = out[AT]
    t1 = t2 = 0
    for i in range(length):
        b = np.int64(window[p - distance + i])
        window[p + i] = b
        t1 += b
        t2 += (length - i) * b
    out[S2] += length * out[S1] + t2
    out[S1] += t1
    if t1:
        if p < out[NZ_LO]:
            out[NZ_LO] = p
        out[NZ_HI] = p + length
    y, x, up, left = out[Y], out[X], distance // width, length
    while left > 0:
        end = min(width, x + left)
        left -= end - x
        for j in range(x >> 6, ((end - 1) >> 6) + 1):
            lo, hi = max(x, j << 6), min(end, (j + 1) << 6)
            span = hi - lo
            mask = np.uint64(0xFFFFFFFFFFFFFFFF) if span == 64 else \
                ((np.uint64(1) << np.uint64(span)) - np.uint64(1)) << np.uint64(lo & 63)
            rows[y, j] |= rows[y - up, j] & mask
        x, y = 0, y + 1
    moved(out, length, base, width)


@njit(**JIT)
def fixed_codes() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.empty(288, dtype=np.int64)
    lengths[:144], lengths[144:256], lengths[256:280], lengths[280:] = 8, 9, 7, 8
    lcount, lsymbol = np.zeros(16, dtype=np.int64), np.zeros(288, dtype=np.int64)
    build_code(lcount, lsymbol, lengths)
    dcount, dsymbol = np.zeros(16, dtype=np.int64), np.zeros(30, dtype=np.int64)
    build_code(dcount, dsymbol, np.full(30, 5, dtype=np.int64))
    return lcount, lsymbol, dcount, dsymbol


@njit(**JIT)
def dynamic_codes(src: np.ndarray, end: int, st: np.ndarray, lcount: np.ndarray,
                  lsymbol: np.ndarray, dcount: np.ndarray, dsymbol: np.ndarray) -> bool:
    """Read a dynamic block's code lengths and build its two codes; False when invalid."""
    n_length, n_distance, n_code = bits(src, end, st, 5) + 257, bits(src, end, st, 5) + 1, \
        bits(src, end, st, 4) + 4
    if n_length > 286 or n_distance > 30 or st[FAILED]:
        return False
    lengths = np.zeros(320, dtype=np.int64)
    for i in range(n_code):
        lengths[LENGTH_CODE_ORDER[i]] = bits(src, end, st, 3)
    ccount, csymbol = np.zeros(16, dtype=np.int64), np.zeros(19, dtype=np.int64)
    if build_code(ccount, csymbol, lengths[:19].copy()) != 0:
        return False
    lengths[:19] = 0
    index = 0
    while index < n_length + n_distance:
        sym = decode(src, end, st, ccount, csymbol)
        if sym < 0:
            return False
        if sym < 16:
            lengths[index] = sym
            index += 1
            continue
        repeat = 0
        if sym == 16:
            if index == 0:
                return False
            repeat = lengths[index - 1]
            times = 3 + bits(src, end, st, 2)
        elif sym == 17:
            times = 3 + bits(src, end, st, 3)
        else:
            times = 11 + bits(src, end, st, 7)
        if index + times > n_length + n_distance or st[FAILED]:
            return False
        lengths[index:index + times] = repeat
        index += times
    if lengths[256] == 0:
        return False
    left = build_code(lcount, lsymbol, lengths[:n_length].copy())
    if left < 0 or (left > 0 and n_length - lcount[0] != 1):
        return False
    left = build_code(dcount, dsymbol, lengths[n_length:n_length + n_distance].copy())
    return not (left < 0 or (left > 0 and n_distance - dcount[0] != 1))


@njit(**JIT)
def inflate_codes(src: np.ndarray, end: int, st: np.ndarray, window: np.ndarray,
                  out: np.ndarray, size: int, lcount: np.ndarray, lsymbol: np.ndarray,
                  dcount: np.ndarray, dsymbol: np.ndarray, rows: np.ndarray, base: int,
                  width: int) -> bool:
    """One Huffman-coded block; False when invalid or past ``size``."""
    ltable, dtable = code_table(lcount, lsymbol), code_table(dcount, dsymbol)
    while True:
        sym = decode_fast(src, end, st, ltable, lcount, lsymbol)
        if sym < 0:
            return False
        if sym < 256:
            if out[AT] >= size:
                return False
            put(window, out, sym, rows, width)
            if not out[AT] & 4095:
                reduced(out)
        elif sym == 256:
            return True
        else:
            sym -= 257
            if sym >= 29:
                return False
            length = LENGTH_BASE[sym] + bits(src, end, st, LENGTH_EXTRA[sym])
            dsym = decode_fast(src, end, st, dtable, dcount, dsymbol)
            if dsym < 0 or dsym >= 30:
                return False
            distance = DISTANCE_BASE[dsym] + bits(src, end, st, DISTANCE_EXTRA[dsym])
            if st[FAILED] or distance > out[AT] or out[AT] + length > size:
                return False
            copy(window, out, distance, length, rows, base, width)


@njit(**INLINE)
def byte_boundary(st: np.ndarray) -> int:
    """Position of the next whole byte: the bytes read ahead into the bit buffer go back,
    the bits left pad the last byte read."""
    st[POS] -= st[COUNT] >> 3
    st[BUF], st[COUNT] = 0, 0
    return st[POS]


@njit(**JIT)
def stored_block(src: np.ndarray, end: int, st: np.ndarray, window: np.ndarray,
                 out: np.ndarray, size: int, rows: np.ndarray, base: int, width: int) -> bool:
    at = byte_boundary(st)
    if at + 4 > end:
        return False
    length = np.int64(src[at]) | (np.int64(src[at + 1]) << 8)
    if length != (~(np.int64(src[at + 2]) | (np.int64(src[at + 3]) << 8))) & 0xFFFF:
        return False
    if at + 4 + length > end or out[AT] + length > size:
        return False
    for i in range(length):
        put(window, out, src[at + 4 + i], rows, width)
    reduced(out)
    st[POS] = at + 4 + length
    return True


@njit(**JIT)
def inflate_strip(src: np.ndarray, start: int, end: int, window: np.ndarray, size: int,
                  rows: np.ndarray, base: int, width: int, fixed: tuple) -> int:
    """Inflate the zlib stream ``src[start:end]`` (``size`` bytes of pixels starting at
    pixel ``base`` of a layer ``width`` wide) into ``rows``; 0 when it decoded to exactly
    ``size`` bytes with a matching checksum and used all its input. ``window`` (at least
    ``size`` bytes, all zero) is left all zero."""
    y, x = divmod(base, width)
    out = np.array([0, 1, 0, size, 0, y, x], dtype=np.int64)
    status = zlib_stream(src, start, end, window, out, size, rows, base, width, fixed)
    if out[NZ_HI] > out[NZ_LO]:
        window[out[NZ_LO]:out[NZ_HI]] = 0
    return status


@njit(**JIT)
def zlib_stream(src: np.ndarray, start: int, end: int, window: np.ndarray, out: np.ndarray,
                size: int, rows: np.ndarray, base: int, width: int, fixed: tuple) -> int:
    if end - start < 6:
        return 1
    cmf, flg = np.int64(src[start]), np.int64(src[start + 1])
    if cmf & 15 != 8 or cmf >> 4 > 7 or (cmf * 256 + flg) % 31 or flg & 32:
        return 2
    st = np.array([start + 2, 0, 0, 0], dtype=np.int64)
    lcount, lsymbol = np.zeros(16, dtype=np.int64), np.zeros(288, dtype=np.int64)
    dcount, dsymbol = np.zeros(16, dtype=np.int64), np.zeros(30, dtype=np.int64)
    last = 0
    while not last:
        last = bits(src, end, st, 1)
        kind = bits(src, end, st, 2)
        if st[FAILED]:
            return 3
        if kind == 0:
            ok = stored_block(src, end, st, window, out, size, rows, base, width)
        elif kind == 1:
            ok = inflate_codes(src, end, st, window, out, size, fixed[0], fixed[1], fixed[2],
                               fixed[3], rows, base, width)
        elif kind == 2:
            ok = dynamic_codes(src, end, st, lcount, lsymbol, dcount, dsymbol) and \
                inflate_codes(src, end, st, window, out, size, lcount, lsymbol, dcount,
                              dsymbol, rows, base, width)
        else:
            ok = False
        if not ok or st[FAILED]:
            return 4
    reduced(out)
    at = byte_boundary(st)
    if out[AT] != size or at + 4 != end:
        return 5
    stored = (np.int64(src[at]) << 24) | (np.int64(src[at + 1]) << 16) | \
        (np.int64(src[at + 2]) << 8) | np.int64(src[at + 3])
    return OK if stored == (out[S2] << 16) | out[S1] else 6


@njit(**JIT)
def inflate_layers(src: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                   rows_per_strip: int, height: int, width: int
                   ) -> tuple[np.ndarray, int]:
    """(n, H, words) word rows of n layers of zlib strips (offsets and byte counts (n,
    strips) into ``src``), and 0, or a nonzero status when a strip did not decode."""
    n, strips = offsets.shape
    rows = np.zeros((n, height, (width + 63) >> 6), dtype=np.uint64)
    strip = rows_per_strip * width
    window = np.zeros(strip, dtype=np.uint8)
    fixed = fixed_codes()
    for i in range(n):
        for j in range(strips):
            base = j * strip
            size = min(strip, height * width - base)
            status = inflate_strip(src, offsets[i, j], offsets[i, j] + counts[i, j], window,
                                   size, rows[i], base, width, fixed)
            if status != OK:
                return rows, status
    return rows, OK
