"""Tiny hand-built inputs shared by the hand-computed kernel tests."""

from __future__ import annotations

import numpy as np


def labels_of(*rows: str) -> np.ndarray:
    """A GT label image from digit rows ("1122": instance index + 1, 0 = none)."""
    return np.array([[int(c) for c in row] for row in rows], dtype=np.int64)


def mask_of(*rows: str) -> np.ndarray:
    """A boolean mask from rows of '#' (set) and '.' (unset)."""
    return np.array([[c == "#" for c in row] for row in rows], dtype=bool)


def box(i: int) -> list[float]:
    """The i-th 10x10 box of a row of disjoint boxes (area 100)."""
    return [10.0 * i, 0.0, 10.0 * i + 10.0, 10.0]
