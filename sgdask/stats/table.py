"""Per-image terms of one evaluation (one submission under one protocol), kept compactly.

The accumulator (``sgdask.core.accum``) sums terms over images and forgets which image gave
what; resampling images needs them per image. A ``TermTable`` holds every term block of
every family as parallel numpy arrays, one row per (image, metric[, predicate]):
``image`` (index into ``image_ids``), ``metric`` (index into ``names``), ``predicate``
(-1 for image-level and ratio metrics), ``num``, ``den``. A resampled state's rows
(``sgdask.metrics.state``: ``Ratios``, ``Counts``) are rows too: ``metric`` the state's
name, its kind the state's kind, ``predicate`` the row's key, ``num`` and ``den`` its two
integers.

Tables of partitions concatenate; ``canonical`` sorts images by id, metrics in report
order and rows by (image, metric, predicate), so the merged table is the same for any
partitioning, worker count and order. ``per_image_terms.parquet`` is its file form
(``schemas/per-image-terms.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sgdask.kernels.rows import lexsort_rows
from sgdask.metrics.base import Block
from sgdask.metrics.state import SPECS, StateRows

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT_VERSION = "1"
NO_PREDICATE = -1


@dataclass
class TermTable:
    """Terms of many images; see the module docstring for the columns."""

    image_ids: np.ndarray
    names: list[str]
    kinds: list[str]
    image: np.ndarray
    metric: np.ndarray
    predicate: np.ndarray
    num: np.ndarray
    den: np.ndarray

    def __len__(self) -> int:
        return len(self.num)

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    def kind_of(self, name: str) -> str:
        return self.kinds[self.names.index(name)]

    def rows_of(self, name: str) -> np.ndarray:
        """Row indices of one metric (empty when the table lacks it)."""
        if name not in self.names:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.metric == self.names.index(name))

    @classmethod
    def from_blocks(cls, image_ids: Sequence[str], blocks: list[Block | StateRows]
                    ) -> TermTable:
        """A partition's table: ``blocks`` number their images 0..n-1 in ``image_ids``
        order (``sgdask.metrics.base.batch_of``); a resampled state's rows are terms (they
        must carry their images), other states' rows are not."""
        used = [b for b in blocks if isinstance(b, Block) and len(b.num)]
        used += [_term_block(b) for b in blocks
                 if isinstance(b, StateRows) and b.spec.resampled and len(b)]
        names = list(dict.fromkeys(b.name for b in used))
        kinds = {b.name: b.kind for b in used}

        def column(values: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(values).astype(dtype, copy=False) if values \
                else np.empty(0, dtype)

        return cls(
            np.array(list(image_ids), dtype=object), names, [kinds[n] for n in names],
            column([b.image for b in used], np.int32),
            column([np.full(len(b.num), names.index(b.name)) for b in used], np.int32),
            column([b.predicate if b.predicate is not None
                    else np.full(len(b.num), NO_PREDICATE) for b in used], np.int32),
            column([b.num for b in used], np.int64), column([b.den for b in used], np.int64))

    @classmethod
    def concat(cls, tables: Sequence[TermTable]) -> TermTable:
        """One canonical table of several (tables of disjoint image sets)."""
        names = list(dict.fromkeys(n for t in tables for n in t.names))
        kinds = {n: k for t in tables for n, k in zip(t.names, t.kinds, strict=True)}
        offsets = np.cumsum([0, *(t.n_images for t in tables)])[:-1]

        def joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts).astype(dtype, copy=False) if parts \
                else np.empty(0, dtype)

        codes = [np.array([names.index(n) for n in t.names] or [0], np.int32) for t in tables]
        return cls(
            joined([t.image_ids for t in tables], object), names, [kinds[n] for n in names],
            joined([t.image + off for t, off in zip(tables, offsets, strict=True)], np.int32),
            joined([c[t.metric] for t, c in zip(tables, codes, strict=True)], np.int32),
            joined([t.predicate for t in tables], np.int32),
            joined([t.num for t in tables], np.int64),
            joined([t.den for t in tables], np.int64)).canonical()

    def canonical(self) -> TermTable:
        """Images sorted by id, metrics in report order, rows by (image, metric,
        predicate)."""
        from sgdask.metrics import sort_key

        ids = [str(i) for i in self.image_ids]
        if len(set(ids)) != len(ids):
            raise ValueError("per-image terms: an image occurs in two partitions")
        image_order = np.array(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.int64)
        image_rank = np.empty(len(ids), dtype=np.int32)
        image_rank[image_order] = np.arange(len(ids), dtype=np.int32)
        names = sorted(self.names, key=sort_key)
        name_rank = np.array([names.index(n) for n in self.names] or [0], dtype=np.int32)
        image, metric = image_rank[self.image], name_rank[self.metric]
        order = lexsort_rows([image, metric, self.predicate], stable=True)
        return TermTable(np.array([ids[i] for i in image_order], dtype=object), names,
                         [self.kinds[self.names.index(n)] for n in names], image[order],
                         metric[order], self.predicate[order], self.num[order],
                         self.den[order])

    def to_arrow(self) -> pa.Table:
        """The file form: dictionary-encoded image ids, metric names and kinds."""
        import pyarrow as pa  # here: the in-memory Evaluator builds tables without pyarrow

        predicate = pa.array(self.predicate, mask=self.predicate == NO_PREDICATE)
        ids = pa.array([str(i) for i in self.image_ids], pa.string())
        kinds = pa.array(self.kinds, pa.string())
        metric_codes = pa.array(self.metric, pa.int32())
        table = pa.table({
            "image_id": pa.DictionaryArray.from_arrays(pa.array(self.image, pa.int32()), ids),
            "metric": pa.DictionaryArray.from_arrays(metric_codes,
                                                     pa.array(self.names, pa.string())),
            "kind": pa.DictionaryArray.from_arrays(metric_codes, kinds),
            "predicate": predicate.cast(pa.int32()),
            "num": pa.array(self.num, pa.int64()),
            "den": pa.array(self.den, pa.int64())})
        return table.replace_schema_metadata({"sgdask_terms_version": FORMAT_VERSION})

    @classmethod
    def from_arrow(cls, table: pa.Table) -> TermTable:
        """A table read back from ``per_image_terms.parquet`` (canonical)."""
        import pyarrow.compute as pc

        image, ids = dictionary_codes(table.column("image_id"))
        metric, names = dictionary_codes(table.column("metric"))
        kind, kind_names = dictionary_codes(table.column("kind"))
        first_codes, first_rows = np.unique(metric, return_index=True)
        kinds = {names[m]: kind_names[kind[r]] for m, r in
                 zip(first_codes.tolist(), first_rows.tolist(), strict=True)}
        predicate = pc.fill_null(table.column("predicate"), NO_PREDICATE)
        return cls(np.array(ids, dtype=object), names, [kinds.get(n, "") for n in names],
                   image, metric, predicate.to_numpy().astype(np.int32),
                   table.column("num").to_numpy().astype(np.int64),
                   table.column("den").to_numpy().astype(np.int64)).canonical()


def _term_block(rows: StateRows) -> Block:
    """A resampled state's rows as a block of term rows (key as predicate, the two integers
    as num and den)."""
    if rows.image is None:
        raise ValueError(f"state {rows.name}: rows without their images cannot be per-image "
                         "terms (give StateSpec.rows its image argument)")
    values = rows.values.astype(np.int64)
    return Block(rows.name, rows.spec.kind, rows.image, values[:, 0], values[:, 1], rows.keys)


def is_state(kind: str) -> bool:
    """Whether rows of this kind are a resampled state's (not a metric's terms)."""
    return kind in SPECS and SPECS[kind].resampled


def dictionary_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """(codes, values) of a string column, dictionary-encoded or not."""
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        array = column.unify_dictionaries().combine_chunks()
    else:
        array = column.combine_chunks().dictionary_encode()
    return (array.indices.to_numpy(zero_copy_only=False).astype(np.int32),
            array.dictionary.to_pylist())
