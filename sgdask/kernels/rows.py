"""Row orders of integer tables: one argsort of rows packed into one int64 key."""

from __future__ import annotations

from math import prod

import numpy as np


def lexsort_rows(columns: list[np.ndarray], stable: bool = False) -> np.ndarray:
    """An order sorting rows by ``columns`` (the first column primary), as
    ``np.lexsort(columns[::-1])``: one argsort of the rows packed into one int64 when their
    value ranges allow, else lexsort itself. ``stable``: equal rows keep their order (then
    the order is exactly lexsort's); else equal rows come in any order."""
    if not len(columns[0]):
        return np.empty(0, dtype=np.int64)
    packed = packed_rows(columns)
    if packed is None:
        return np.lexsort(columns[::-1])
    return np.argsort(packed, kind="stable" if stable else None)


def packed_rows(columns: list[np.ndarray]) -> np.ndarray | None:
    """Each row of ``columns`` (non-empty, the first column primary) packed into one int64
    ordered as the rows are lexicographically (equal exactly when the rows are), or None
    when their value ranges do not fit."""
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if prod(spans) >= 1 << 62:
        return None
    packed = columns[0].astype(np.int64) - lows[0]
    for column, low, span in zip(columns[1:], lows[1:], spans[1:], strict=True):
        packed = packed * span + (column.astype(np.int64) - low)
    return packed
