"""Per-image inputs of the kernels: plain numpy, no I/O handles.

The pipeline reads these from the canonical store; tests build them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sgdask.kernels.masks import CropMasks

EMPTY_TRIPLETS = np.empty((0, 3), dtype=np.int64)


def as_triplets(rows: object) -> np.ndarray:
    """An (n, 3) int64 array from a list of [subject, object, predicate] rows."""
    arr = np.asarray(rows, dtype=np.int64)
    return arr.reshape(-1, 3) if arr.size else EMPTY_TRIPLETS.copy()


@dataclass
class ImageGT:
    """Ground truth of one image.

    ``label_image`` holds instance index + 1 per pixel (0 = no instance) for panoptic GT;
    ``boxes`` are ``[x1, y1, x2, y2]``. Either may be None, but not both. ``areas``
    (optional) are the label image's pixel counts per instance, stored at ingest so that
    no evaluation has to count them again.
    """

    image_id: str
    labels: np.ndarray
    relations: np.ndarray
    boxes: np.ndarray | None = None
    label_image: np.ndarray | None = None
    areas: np.ndarray | None = None

    @property
    def n_instances(self) -> int:
        return len(self.labels)


@dataclass
class ImagePred:
    """A model's output for one image: instances plus the graph and no-graph triplet lists.

    ``masks`` is a boolean (n, H, W) stack (layer i = instance i) or the same as
    ``CropMasks``; ``scores`` are optional
    per-instance confidences (used by the singlempo mask merge).
    """

    image_id: str
    labels: np.ndarray
    graph: np.ndarray
    ng: np.ndarray = field(default_factory=lambda: EMPTY_TRIPLETS.copy())
    boxes: np.ndarray | None = None
    masks: np.ndarray | CropMasks | None = None
    scores: np.ndarray | None = None

    @property
    def n_instances(self) -> int:
        return len(self.labels)
