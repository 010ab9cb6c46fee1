"""The one rule for triplet (and pair) rows, shared by every reader and the ``Evaluator``:
subject and object index the image's instances, differ (in a prediction), and the predicate
is one the GT knows.

Callers wrap each ``RowProblem`` in their own error (file, image, field prefix); the
messages are the same everywhere, only the expectations' wording names the caller's terms.
Pure numpy: the ``Evaluator`` imports it without Dask or pyarrow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Wording:
    """The ``expected`` texts, with ``{last}`` the highest valid index."""

    indices: str
    no_instances: str
    predicates: str


#: submission files (SGBench JSON/ZIP, registered formats)
SUBMISSION = Wording("subject and object in 0..{last}", "no triplet: the image has no instances",
                     "0..{last} as in the GT")
#: ``Evaluator.update``'s arrays (the predicates are the ones the evaluator was given)
EVALUATOR = Wording(SUBMISSION.indices, SUBMISSION.no_instances,
                    "0..{last} (the predicates given)")
#: a model's result file: (subject, object) pairs of masks
PAIRS = Wording("indices in 0..{last}", "no pairs: the image has no masks", "")


@dataclass(frozen=True)
class RowProblem:
    """Row ``row`` is wrong: ``what`` (shown in the message), ``expected`` instead."""

    row: int
    what: str
    expected: str


def row_problems(rows: np.ndarray, n: int, n_predicates: int | None, wording: Wording,
                 distinct: bool = True, shown: Sequence[Any] | None = None,
                 by_kind: bool = False) -> Iterator[RowProblem]:
    """The problems of ``rows`` (R x 3 triplets, or R x 2 pairs: no predicate) for an image
    of ``n`` instances, one per bad row, lazily. ``distinct``: subject and object must
    differ; ``n_predicates`` None: predicates unchecked; ``shown``: the rows as the file
    wrote them (default the rows' values); ``by_kind``: every bad index first, then equal
    pairs, then predicates (else in row order)."""
    if not len(rows):
        return
    bad_index = ((rows[:, :2] < 0) | (rows[:, :2] >= n)).any(axis=1)
    same = (rows[:, 0] == rows[:, 1]) & ~bad_index if distinct else np.zeros(len(rows), bool)
    bad_predicate = (np.zeros(len(rows), dtype=bool)
                     if n_predicates is None or rows.shape[1] < 3
                     else ((rows[:, 2] < 0) | (rows[:, 2] >= n_predicates)) & ~bad_index & ~same)
    order = (np.concatenate([np.flatnonzero(m) for m in (bad_index, same, bad_predicate)])
             if by_kind else np.flatnonzero(bad_index | same | bad_predicate))
    for i in order.tolist():
        row = shown[i] if shown is not None else rows[i].tolist()
        if bad_index[i]:
            yield RowProblem(i, f"instance index out of range in {row}",
                             wording.indices.format(last=n - 1) if n else wording.no_instances)
        elif same[i]:
            yield RowProblem(i, f"subject equals object in {row}", "two different instances")
        else:
            yield RowProblem(i, f"predicate {row[2]} out of range",
                             wording.predicates.format(last=(n_predicates or 0) - 1))
