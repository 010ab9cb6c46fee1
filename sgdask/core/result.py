"""The fold state: what scoring partitions gives, merged associatively."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sgdask.core.accum import Accumulator
from sgdask.core.lint import LintCounts
from sgdask.metrics.base import IMAGE, Block
from sgdask.metrics.state import StateRows
from sgdask.stats.table import TermTable
from sgdask.types import ImageHits

if TYPE_CHECKING:
    from sgdask.io.sources import Digest

Key = tuple[str, str]  # (submission name, protocol name)


@dataclass
class PartitionResult:
    """Per (submission, protocol): an accumulator, per-image rows and the per-image terms
    (one ``TermTable`` per partition); the GT parts read; the store parts written
    (``keep_store``); per result-file submission, the digests of the files its tasks read.
    The last three are what a task's I/O reports (plain data, filled by ``sgdask.pipeline``).
    ``lint``: per submission, the protocol lint's counts (``sgdask.core.lint``);
    ``failed``: per submission whose predictions could not be read in a task, the error
    (its share, ``of``, raises it: it fails alone, the task's other submissions scored).

    Merging is associative (accumulators merge exactly; rows and lists concatenate).
    """

    accumulators: dict[Key, Accumulator] = field(default_factory=dict)
    images: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)
    gt_parts_read: list[str] = field(default_factory=list)
    parts_written: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    terms: dict[Key, list[TermTable]] = field(default_factory=dict)
    digests: dict[str, list[Digest]] = field(default_factory=dict)
    lint: dict[str, LintCounts] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)

    def add(self, key: Key, hits: list[ImageHits], blocks: list[Block | StateRows],
            skipped: dict[str, int] | None = None, unit: str = "image",
            units: dict[str, str] | None = None) -> None:
        """Add the hits of a partition's images and their term blocks (``skipped``: the
        diagnostics of the images the protocol left out; ``units``: under a ``unit`` other
        than ``image``, each image's unit id, kept with its terms and per-image row)."""
        acc = self.accumulators.setdefault(key, Accumulator())
        self.images.setdefault(key, [])
        self.terms.setdefault(key, [])
        if skipped:
            acc.add_counts(np.empty(0, dtype=np.int64), skipped)
        if not hits:
            return
        acc.add_blocks(blocks)
        acc.add_counts(np.concatenate([h.predicates for h in hits]),
                       image_diagnostics(hits))
        ids = [h.image_id for h in hits]
        rows = image_rows(hits, blocks)
        if units is not None:
            for row, image_id in zip(rows, ids, strict=True):
                row[f"{unit}_id"] = units[image_id]
        self.images.setdefault(key, []).extend(rows)
        self.terms.setdefault(key, []).append(TermTable.from_blocks(
            ids, blocks, unit, None if units is None else [units[i] for i in ids]))

    def of(self, name: str) -> PartitionResult:
        """One submission's share (every protocol of it): what its reports are made of;
        the error its predictions raised in the task, if they did."""
        if name in self.failed:
            raise self.failed[name]
        keys = [k for k in self.accumulators if k[0] == name]
        return PartitionResult(
            {k: self.accumulators[k] for k in keys}, {k: self.images[k] for k in keys}, [],
            {name: self.parts_written[name]} if name in self.parts_written else {},
            {k: self.terms[k] for k in keys},
            {name: self.digests[name]} if name in self.digests else {},
            {name: self.lint[name]} if name in self.lint else {})

    def merged(self, other: PartitionResult) -> PartitionResult:
        keys = list(dict.fromkeys([*self.accumulators, *other.accumulators]))
        empty = Accumulator()
        return PartitionResult(
            {k: self.accumulators.get(k, empty).merged(other.accumulators.get(k, empty))
             for k in keys},
            {k: self.images.get(k, []) + other.images.get(k, []) for k in keys},
            self.gt_parts_read + other.gt_parts_read,
            concatenated(self.parts_written, other.parts_written),
            {k: self.terms.get(k, []) + other.terms.get(k, []) for k in keys},
            concatenated(self.digests, other.digests), summed_lint(self.lint, other.lint),
            {**other.failed, **self.failed})


    @staticmethod
    def merged_all(results: Sequence[PartitionResult]) -> PartitionResult:
        """``merged`` of all of them in order, each key's accumulators at once
        (``Accumulator.merged_all``)."""
        bare = functools.reduce(PartitionResult.merged, [replace(r, accumulators={
            k: replace(a, states={}) for k, a in r.accumulators.items()}) for r in results],
            PartitionResult())
        bare.accumulators = {k: Accumulator.merged_all(
            [r.accumulators[k] for r in results if k in r.accumulators])
            for k in bare.accumulators}
        return bare


def summed_lint(a: dict[str, LintCounts], b: dict[str, LintCounts]
                ) -> dict[str, LintCounts]:
    """Per submission, ``a``'s lint counts plus ``b``'s."""
    return {name: a.get(name, LintCounts()).merged(b.get(name, LintCounts()))
            for name in {**a, **b}}


def concatenated(a: dict[str, list], b: dict[str, list]) -> dict[str, list]:
    """Per name, ``a``'s list then ``b``'s."""
    return {name: a.get(name, []) + b.get(name, []) for name in {**a, **b}}


def image_diagnostics(hits: list[ImageHits]) -> dict[str, int]:
    """Diagnostics summed over images, with the image counts."""
    out = {"images": len(hits), "images_missing": sum(h.missing for h in hits)}
    for h in hits:
        for name, value in h.diagnostics.items():
            out[name] = out.get(name, 0) + value
    return out


def image_rows(hits: list[ImageHits], blocks: list[Block | StateRows]
               ) -> list[dict[str, Any]]:
    """Rows of the per-image table: image-level values and diagnostics."""
    rows: list[dict[str, Any]] = [{"image_id": h.image_id, "missing": h.missing,
                                   "gt_triplets": h.n_gt_triplets} for h in hits]
    for block in blocks:
        if not isinstance(block, Block) or block.kind != IMAGE:
            continue
        values = np.divide(block.num, block.den, out=np.full(len(block.num), np.nan),
                           where=block.den > 0)
        for i, value in zip(block.image.tolist(), values.tolist(), strict=True):
            rows[i][block.name] = None if value != value else value
    for row, h in zip(rows, hits, strict=True):
        row.update(h.diagnostics)
    return rows
