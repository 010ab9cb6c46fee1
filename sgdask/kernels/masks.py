"""Instance masks as bounding-box crops: the representation every mask kernel works on.

A predicted instance covers a small part of the image, so each layer is kept as its tight
box plus the boolean crop inside it. IoU, mask merge and matching then touch only the
pixels inside boxes, and the store keeps each crop bit-packed (``pack`` / ``unpack``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CropMasks:
    """``boxes[i] = (y0, x0, y1, x1)`` (exclusive ends; empty masks have a 0-size box) and
    ``crops[i]`` the boolean mask inside that box, for an image of ``shape`` (H, W)."""

    shape: tuple[int, int]
    boxes: np.ndarray
    crops: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.crops)

    @classmethod
    def from_dense(cls, masks: np.ndarray) -> CropMasks:
        """Crops of a boolean (n, H, W) stack."""
        masks = np.asarray(masks, dtype=bool)
        n, h, w = masks.shape
        rows, cols = masks.any(axis=2), masks.any(axis=1)
        boxes = np.zeros((n, 4), dtype=np.int64)
        crops = []
        for i in range(n):
            ys, xs = np.flatnonzero(rows[i]), np.flatnonzero(cols[i])
            if len(ys):
                boxes[i] = (ys[0], xs[0], ys[-1] + 1, xs[-1] + 1)
            y0, x0, y1, x1 = boxes[i]
            crops.append(masks[i, y0:y1, x0:x1])
        return cls((h, w), boxes, crops)

    def dense(self) -> np.ndarray:
        """The (n, H, W) boolean stack."""
        out = np.zeros((len(self), *self.shape), dtype=bool)
        for i, ((y0, x0, y1, x1), crop) in enumerate(zip(self.boxes, self.crops, strict=True)):
            out[i, y0:y1, x0:x1] = crop
        return out

    def areas(self) -> np.ndarray:
        return np.array([int(np.count_nonzero(c)) for c in self.crops], dtype=np.int64)

    def subset(self, index: np.ndarray | list[int], crops: list[np.ndarray] | None = None
               ) -> CropMasks:
        """The instances at ``index`` (optionally with replaced crops, same boxes)."""
        index = np.asarray(index, dtype=np.int64)
        return CropMasks(self.shape, self.boxes[index].reshape(-1, 4),
                         crops if crops is not None else [self.crops[i] for i in index])


def as_crops(masks: np.ndarray | CropMasks) -> CropMasks:
    """Accept a dense (n, H, W) stack or crops."""
    return masks if isinstance(masks, CropMasks) else CropMasks.from_dense(masks)


def packed_size(boxes: np.ndarray) -> np.ndarray:
    """Bytes of each encoded crop: ``h * ceil(w / 8)``."""
    boxes = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    return (boxes[:, 2] - boxes[:, 0]) * ((boxes[:, 3] - boxes[:, 1] + 7) // 8)


def encode_crop(crop: np.ndarray) -> np.ndarray:
    """Rows bit-packed, each XOR-ed with the row above: smooth shapes become mostly zeros,
    which the store's zstd compresses far better than the plain bits."""
    rows = np.packbits(crop, axis=1)
    delta = rows.copy()
    delta[1:] ^= rows[:-1]
    return delta.reshape(-1)


def decode_crop(data: np.ndarray, height: int, width: int) -> np.ndarray:
    """Inverse of ``encode_crop``."""
    rows = np.bitwise_xor.accumulate(data.reshape(height, (width + 7) // 8), axis=0)
    return np.unpackbits(rows, axis=1, count=width).view(bool)


def pack(masks: CropMasks) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets): every encoded crop concatenated; offsets has n + 1 entries."""
    chunks = [encode_crop(c) for c in masks.crops]
    sizes = np.array([len(c) for c in chunks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    data = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint8)
    return data.astype(np.uint8, copy=False), offsets


def unpack(data: np.ndarray, offsets: np.ndarray, boxes: np.ndarray, shape: tuple[int, int]
           ) -> CropMasks:
    """Inverse of ``pack`` given the boxes."""
    boxes = np.asarray(boxes, dtype=np.int64).reshape(-1, 4)
    crops = [decode_crop(data[offsets[i]:offsets[i + 1]], int(y1 - y0), int(x1 - x0))
             for i, (y0, x0, y1, x1) in enumerate(boxes)]
    return CropMasks(shape, boxes, crops)
