"""Masks as rows of 64-bit words: every mask kernel (IoU, merge) works on these.

An instance covers a small part of the image, so each mask keeps only the rows of its box
and, in each row, the 64-bit words that hold its columns. Words are aligned to absolute
image columns (bit ``b`` of word ``w`` is column ``64 * w + b``), so two masks' words at
the same (row, word) compare directly: an intersection is AND + popcount, a merge is
AND-NOT + OR, with no shifting and no unpacking. Masks are plain arrays (``BitMasks``):
a ``words`` array, the pixel ``boxes`` (y0, x0, y1, x1, exclusive ends; an empty mask has
a 0-size box) and each mask's first word in ``starts``; a mask's word count follows from
its box, so a subset of masks is a subset of (boxes, starts) over the same words.

Compiled with numba (``nogil``, cached on disk), so the Dask threads of one worker run them
in parallel and a new process loads them instead of compiling.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

JIT = {"cache": True, "nogil": True}


@intrinsic
def popcount(typingctx, value):
    """Number of set bits of a uint64 (the CPU's popcount instruction)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@njit(**JIT)
def word_span(x0: int, x1: int) -> tuple[int, int]:
    """First word and one past the last word holding columns [x0, x1)."""
    if x1 <= x0:
        return 0, 0
    return x0 >> 6, (x1 + 63) >> 6


@njit(**JIT)
def word_count(box: np.ndarray) -> int:
    """Words of a mask with this pixel box (rows x words per row)."""
    w0, w1 = word_span(box[1], box[3])
    return (box[2] - box[0]) * (w1 - w0)


@njit(**JIT)
def word_layout(boxes: np.ndarray) -> np.ndarray:
    """Offsets (n + 1) of masks with these boxes laid out one after the other."""
    n = boxes.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + word_count(boxes[i])
    return offsets


@njit(**JIT)
def areas(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray) -> np.ndarray:
    """Pixels per mask."""
    n = boxes.shape[0]
    out = np.zeros(n, dtype=np.int64)
    for i in range(n):
        total = np.uint64(0)
        for j in range(starts[i], starts[i] + word_count(boxes[i])):
            total += popcount(words[j])
        out[i] = total
    return out


@njit(**JIT)
def intersection(box_a: np.ndarray, off_a: int, words_a: np.ndarray,
                 box_b: np.ndarray, off_b: int, words_b: np.ndarray) -> int:
    """Pixels two masks share (0 when their boxes do not overlap)."""
    y0, y1 = max(box_a[0], box_b[0]), min(box_a[2], box_b[2])
    a0, a1 = word_span(box_a[1], box_a[3])
    b0, b1 = word_span(box_b[1], box_b[3])
    w0, w1 = max(a0, b0), min(a1, b1)
    if y1 <= y0 or w1 <= w0:
        return 0
    stride_a, stride_b = a1 - a0, b1 - b0
    total = np.uint64(0)
    for y in range(y0, y1):
        ra = off_a + (y - box_a[0]) * stride_a - a0
        rb = off_b + (y - box_b[0]) * stride_b - b0
        for w in range(w0, w1):
            total += popcount(words_a[ra + w] & words_b[rb + w])
    return int(total)


@njit(**JIT)
def iou_value(inter: int, area_a: int, area_b: int) -> float:
    """inter / union as float64, 0 when the union is empty (as SGBench does)."""
    union = area_a + area_b - inter
    if union <= 0:
        return 0.0
    return inter / union


@njit(**JIT)
def cross_intersections(boxes_a: np.ndarray, off_a: np.ndarray, words_a: np.ndarray,
                        labels_a: np.ndarray, boxes_b: np.ndarray, off_b: np.ndarray,
                        words_b: np.ndarray, labels_b: np.ndarray, match_labels: bool
                        ) -> np.ndarray:
    """Pixels shared (n_a, n_b) by two mask sets, 0 for pairs of different labels when
    ``match_labels`` (those are never computed)."""
    n_a, n_b = boxes_a.shape[0], boxes_b.shape[0]
    out = np.zeros((n_a, n_b), dtype=np.int64)
    for i in range(n_a):
        for j in range(n_b):
            if match_labels and labels_a[i] != labels_b[j]:
                continue
            out[i, j] = intersection(boxes_a[i], off_a[i], words_a, boxes_b[j], off_b[j],
                                     words_b)
    return out


@njit(**JIT)
def iou_of_intersections(inter: np.ndarray, area_a: np.ndarray, area_b: np.ndarray
                         ) -> np.ndarray:
    """IoU (n_a, n_b) from pixels shared and the masks' areas (``iou_value``)."""
    n_a, n_b = inter.shape
    out = np.zeros((n_a, n_b), dtype=np.float64)
    for i in range(n_a):
        for j in range(n_b):
            out[i, j] = iou_value(inter[i, j], area_a[i], area_b[j])
    return out


@njit(**JIT)
def cross_iou(boxes_a: np.ndarray, off_a: np.ndarray, words_a: np.ndarray,
                     area_a: np.ndarray, labels_a: np.ndarray, boxes_b: np.ndarray,
                     off_b: np.ndarray, words_b: np.ndarray, area_b: np.ndarray,
                     labels_b: np.ndarray, match_labels: bool) -> np.ndarray:
    """IoU (n_a, n_b) of two mask sets, 0 for pairs of different labels when
    ``match_labels`` (those are never computed)."""
    return iou_of_intersections(
        cross_intersections(boxes_a, off_a, words_a, labels_a, boxes_b, off_b, words_b,
                            labels_b, match_labels), area_a, area_b)


@njit(**JIT)
def covered_pixels(boxes_a: np.ndarray, off_a: np.ndarray, words_a: np.ndarray,
                   boxes_b: np.ndarray, off_b: np.ndarray, words_b: np.ndarray,
                   height: int, width: int) -> np.ndarray:
    """Per mask of set a, its pixels that some mask of set b covers (the union of b is
    painted once into image-sized word rows)."""
    n_words = (width + 63) >> 6
    union = np.zeros((height, max(n_words, 1)), dtype=np.uint64)
    for j in range(boxes_b.shape[0]):
        w0, w1 = word_span(boxes_b[j, 1], boxes_b[j, 3])
        for y in range(boxes_b[j, 0], boxes_b[j, 2]):
            row = off_b[j] + (y - boxes_b[j, 0]) * (w1 - w0) - w0
            for w in range(w0, w1):
                union[y, w] |= words_b[row + w]
    out = np.zeros(boxes_a.shape[0], dtype=np.int64)
    for i in range(boxes_a.shape[0]):
        w0, w1 = word_span(boxes_a[i, 1], boxes_a[i, 3])
        total = np.uint64(0)
        for y in range(boxes_a[i, 0], boxes_a[i, 2]):
            row = off_a[i] + (y - boxes_a[i, 0]) * (w1 - w0) - w0
            for w in range(w0, w1):
                total += popcount(words_a[row + w] & union[y, w])
        out[i] = total
    return out


@njit(**JIT)
def self_iou(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray,
             area: np.ndarray) -> np.ndarray:
    """IoU (n, n) between the masks of one image (the singlempo merge's input)."""
    n = boxes.shape[0]
    out = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        out[i, i] = iou_value(area[i], area[i], area[i])
        for j in range(i + 1, n):
            inter = intersection(boxes[i], starts[i], words, boxes[j], starts[j], words)
            out[i, j] = out[j, i] = iou_value(inter, area[i], area[j])
    return out


@njit(**JIT)
def merge_kernel(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray,
                 iou: np.ndarray, order: np.ndarray, height: int, width: int,
                 threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The singlempo mask merge (SPEC 5.1) on word masks.

    Visits instances in ``order``; an instance not merged away keeps the pixels no kept
    instance claimed before it (dropped when none are left) and absorbs every later,
    not-yet-merged, not-kept instance whose original mask has IoU >= ``threshold`` with its
    own. Returns (instance_map: original -> kept index or -1, kept: original index per kept
    instance, the kept masks' new words (at their original positions: same boxes and
    starts), n_merged, n_dropped).
    """
    n = boxes.shape[0]
    n_words = (width + 63) >> 6
    claimed = np.zeros((height, max(n_words, 1)), dtype=np.uint64)
    instance_map = np.full(n, -1, dtype=np.int64)
    merged = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    new_words = np.empty_like(words)
    n_kept, n_merged, n_dropped = 0, 0, 0
    for pos in range(n):
        m = order[pos]
        if merged[m]:
            continue
        w0, w1 = word_span(boxes[m, 1], boxes[m, 3])
        stride = w1 - w0
        fresh = np.uint64(0)
        for y in range(boxes[m, 0], boxes[m, 2]):
            row = starts[m] + (y - boxes[m, 0]) * stride - w0
            for w in range(w0, w1):
                bits = words[row + w] & ~claimed[y, w]
                new_words[row + w] = bits
                fresh |= bits
        if fresh == 0:
            n_dropped += 1
            continue
        for y in range(boxes[m, 0], boxes[m, 2]):
            row = starts[m] + (y - boxes[m, 0]) * stride - w0
            for w in range(w0, w1):
                claimed[y, w] |= new_words[row + w]
        instance_map[m] = n_kept
        kept[n_kept] = m
        for later in range(pos + 1, n):
            other = order[later]
            if not merged[other] and instance_map[other] < 0 and iou[m, other] >= threshold:
                merged[other] = True
                instance_map[other] = n_kept
                n_merged += 1
        n_kept += 1
    return instance_map, kept[:n_kept].copy(), new_words, n_merged, n_dropped


@njit(**JIT)
def merged_masks(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray, order: np.ndarray,
                 height: int, width: int, threshold: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int,
                            np.ndarray]:
    """The whole singlempo merge of one image in one call: areas, self IoU and
    ``merge_kernel`` on the image's own words (a store part's masks share one buffer; the
    merge writes an image-sized one). Returns (instance_map, kept, the kept masks' starts in
    the new words, the new words, the kept masks' new areas, n_merged, n_dropped, every
    mask's own area)."""
    sizes = np.diff(word_layout(boxes))
    used = sizes > 0  # masks with words (an empty mask's start is never read)
    lo = starts[used].min() if used.any() else 0
    hi = (starts + sizes)[used].max() if used.any() else 0
    local = words[lo:hi]
    local_starts = np.where(used, starts - lo, 0)
    area = areas(boxes, local_starts, local)
    iou = self_iou(boxes, local_starts, local, area)
    instance_map, kept, new_words, n_merged, n_dropped = merge_kernel(
        boxes, local_starts, local, iou, order, height, width, threshold)
    kept_starts = local_starts[kept]
    kept_areas = areas(boxes[kept], kept_starts, new_words)
    return instance_map, kept, kept_starts, new_words, kept_areas, n_merged, n_dropped, area


def row_words(masks: np.ndarray) -> np.ndarray:
    """The (n, H, ceil(W / 64)) uint64 rows of a dense (n, H, W) stack, every row's words
    aligned to column 0 (nonzero = set). ``np.packbits`` does the bit-setting with SIMD."""
    if masks.dtype != np.bool_ and not np.issubdtype(masks.dtype, np.integer):
        masks = masks != 0
    n, h, w = masks.shape
    packed = np.packbits(masks, axis=-1, bitorder="little")
    if packed.shape[-1] % 8:
        padded = np.zeros((n, h, (w + 63) >> 6 << 3), dtype=np.uint8)
        padded[..., :packed.shape[-1]] = packed
        packed = padded
    return packed.view(np.dtype("<u8")).astype(np.uint64, copy=False)


@njit(**JIT)
def first_bit(word: np.uint64) -> int:
    """Index of the lowest set bit of a nonzero word."""
    b = 0
    while not (word >> np.uint64(b)) & np.uint64(1):
        b += 1
    return b


@njit(**JIT)
def last_bit(word: np.uint64) -> int:
    """Index of the highest set bit of a nonzero word."""
    b = 63
    while not (word >> np.uint64(b)) & np.uint64(1):
        b -= 1
    return b


@njit(**JIT)
def row_box(rows: np.ndarray) -> tuple[int, int, int, int]:
    """Tight (y0, x0, y1, x1) of one mask's full-width word rows (H, words), all 0 when it
    has no set bit."""
    h, ww = rows.shape
    y0, y1 = -1, -1
    for y in range(h):
        seen = np.uint64(0)
        for j in range(ww):
            seen |= rows[y, j]
        if seen:
            if y0 < 0:
                y0 = y
            y1 = y + 1
    if y0 < 0:
        return 0, 0, 0, 0
    columns = np.zeros(ww, dtype=np.uint64)
    for y in range(y0, y1):
        for j in range(ww):
            columns[j] |= rows[y, j]
    lo, hi = 0, ww - 1
    while not columns[lo]:
        lo += 1
    while not columns[hi]:
        hi -= 1
    return y0, 64 * lo + first_bit(columns[lo]), y1, 64 * hi + last_bit(columns[hi]) + 1


@njit(**JIT)
def crop_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes, starts, words) of masks given as full-width word rows (n, H, words): each
    mask keeps the words of its tight box (bits outside a tight box are all 0)."""
    n = rows.shape[0]
    boxes = np.zeros((n, 4), dtype=np.int64)
    for i in range(n):
        boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3] = row_box(rows[i])
    offsets = word_layout(boxes)
    words = np.empty(offsets[-1], dtype=np.uint64)
    for i in range(n):
        w0, w1 = word_span(boxes[i, 1], boxes[i, 3])
        at = offsets[i]
        for y in range(boxes[i, 0], boxes[i, 2]):
            for j in range(w0, w1):
                words[at] = rows[i, y, j]
                at += 1
    return boxes, offsets[:-1].copy(), words


def pack_dense(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes, starts, words) of a dense (n, H, W) stack (any numeric or bool dtype;
    nonzero = set)."""
    return crop_rows(row_words(masks))


@njit(**JIT)
def run_rows(runs: np.ndarray, offsets: np.ndarray, h: int, w: int) -> np.ndarray:
    """(n, H, words) full-width word rows of n H x W masks given as run lengths over the
    mask in column-major order, zeros first (COCO RLE's; mask i's runs are
    ``runs[offsets[i]:offsets[i + 1]]``, checked to cover the mask exactly)."""
    n = len(offsets) - 1
    rows = np.zeros((n, h, (w + 63) >> 6), dtype=np.uint64)
    for i in range(n):
        at = 0
        for j in range(offsets[i], offsets[i + 1]):
            left = runs[j]
            if (j - offsets[i]) % 2 == 1:
                x, y = at // h, at % h
                while left > 0:
                    take = min(left, h - y)
                    word, bit = x >> 6, np.uint64(1) << np.uint64(x & 63)
                    for row in range(y, y + take):
                        rows[i, row, word] |= bit
                    left -= take
                    x, y = x + 1, 0
            at += runs[j]
    return rows


@njit(**JIT)
def label_rows(labels: np.ndarray, n: int) -> np.ndarray:
    """(n, H, words) full-width word rows of the n instances of a label image (value
    i + 1 = instance i, 0 = none; values above n are ignored)."""
    h, w = labels.shape
    rows = np.zeros((n, h, (w + 63) >> 6), dtype=np.uint64)
    for y in range(h):
        for x in range(w):
            v = labels[y, x]
            if 0 < v <= n:
                rows[v - 1, y, x >> 6] |= np.uint64(1) << np.uint64(x & 63)
    return rows


def pack_labels(labels: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes, starts, words) of the n instances of a label image (value i + 1 =
    instance i, 0 = none; values above n are ignored)."""
    return crop_rows(label_rows(labels, n))


@njit(**JIT)
def panoptic_rows(rgb: np.ndarray, sorted_ids: np.ndarray, order: np.ndarray, n: int
                  ) -> np.ndarray:
    """(n, H, words) full-width word rows of the n instances of a panoptic (H, W, 3) RGB
    image: a pixel's segment id is ``R + 256 G + 65536 B``, the instance is the position of
    that id in the segment list (``order``: its stable argsort, ``sorted_ids`` the sorted
    list; the first position among equal ids), and pixels of other ids are none. A row of
    pixels mostly repeats one id, so each id is looked up once per run."""
    h, w = rgb.shape[0], rgb.shape[1]
    rows = np.zeros((n, h, (w + 63) >> 6), dtype=np.uint64)
    k = len(sorted_ids)
    last_id, label = -1, 0
    for y in range(h):
        for x in range(w):
            segment = np.int64(rgb[y, x, 0]) + 256 * np.int64(rgb[y, x, 1]) + \
                65536 * np.int64(rgb[y, x, 2])
            if segment != last_id:
                last_id, label = segment, 0
                if k:
                    pos = min(np.searchsorted(sorted_ids, segment), k - 1)
                    if sorted_ids[pos] == segment:
                        label = order[pos] + 1
            if 0 < label <= n:
                rows[label - 1, y, x >> 6] |= np.uint64(1) << np.uint64(x & 63)
    return rows


@njit(**JIT)
def unpack_dense(boxes: np.ndarray, starts: np.ndarray, words: np.ndarray, height: int,
                 width: int) -> np.ndarray:
    """The dense (n, H, W) boolean stack (tests and small exports only)."""
    n = boxes.shape[0]
    out = np.zeros((n, height, width), dtype=np.bool_)
    for i in range(n):
        w0, w1 = word_span(boxes[i, 1], boxes[i, 3])
        stride = w1 - w0
        for y in range(boxes[i, 0], boxes[i, 2]):
            row = starts[i] + (y - boxes[i, 0]) * stride
            for x in range(boxes[i, 1], boxes[i, 3]):
                if (words[row + (x >> 6) - w0] >> np.uint64(x & 63)) & np.uint64(1):
                    out[i, y, x] = True
    return out
