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
    lows = [int(c.min()) for c in columns]
    spans = [int(c.max()) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if prod(spans) >= 1 << 62:
        return np.lexsort(columns[::-1])
    packed = columns[0].astype(np.int64) - lows[0]
    for column, low, span in zip(columns[1:], lows[1:], spans[1:], strict=True):
        packed = packed * span + (column.astype(np.int64) - low)
    return np.argsort(packed, kind="stable" if stable else None)
