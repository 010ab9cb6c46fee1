"""From hits to terms: every registered family, one image (plain path) or many (fast path).

``evaluate_image`` is the whole per-image computation in one call (normalize, match,
select, remap, then every family's terms), like sgbench's per-image functions; the
pipeline and the in-memory evaluator use ``batch_blocks`` instead, which runs each
family's vectorized ``batch_terms`` over all images of a partition at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from sgdask.kernels.selection import KSpec
from sgdask.metrics import FAMILIES, available
from sgdask.metrics.base import MEAN, Block, Context, Family, Terms, batch_of
from sgdask.metrics.state import STATE, StateRows, merged_by_name
from sgdask.types import ImageGT, ImageHits, ImagePred, ImageResult, ZeroShot

if TYPE_CHECKING:
    from sgdask.protocols import Protocol


def inputs_of(protocol: Protocol, with_ng: bool, has_stats: bool, legacy: bool,
              data: frozenset[str] = frozenset()) -> set[str]:
    """The inputs an evaluation has (what metrics may need: ``sgdask.metrics.base.NEEDS``;
    the protocol says which: ``Protocol.inputs``); ``data``: what its data hold beyond
    lists (``masks`` on both sides, the GT's ``crowd`` flags, the categories' ``things``
    split)."""
    return protocol.inputs(with_ng, has_stats, legacy, data)


def active(inputs: set[str], families: Sequence[Family] | None = None
           ) -> list[tuple[Family, set[str]]]:
    """Families (default: the registry's) that compute terms and have at least one
    computable metric, with the prefixes of those metrics (a family of DERIVED metrics only
    computes no terms: it reads the others' finals)."""
    out = []
    for family in FAMILIES if families is None else families:
        if family.image_terms is None:
            continue
        prefixes = {m.prefix for m in family.metrics if available(m, inputs) is None}
        if prefixes:
            out.append((family, prefixes))
    return out


def wanted(name: str, prefixes: set[str]) -> bool:
    return name in prefixes or name.partition("@")[0] in prefixes


def image_result(hits: ImageHits, ctx: Context, protocol: Protocol, inputs: set[str],
                 families: Sequence[Family] | None = None) -> ImageResult:
    """Every active family's terms of one image (the literal path)."""
    result = ImageResult(hits.image_id, hits.missing, hits.n_gt_triplets,
                         gt_counts(hits.predicates), diagnostics=dict(hits.diagnostics))
    for family, prefixes in active(inputs, families):
        terms = family.image_terms(hits, ctx)
        result.image_terms.update({n: t for n, t in terms.image.items() if wanted(n, prefixes)})
        result.ratio_terms.update({n: t for n, t in terms.ratio.items() if wanted(n, prefixes)})
        if protocol.counts_in_means(hits.missing):
            result.predicate_terms.update({n: t for n, t in terms.predicate.items()
                                           if wanted(n, prefixes)})
        result.states += terms.states
    return result


def gt_counts(predicates: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(predicates, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))




def drop_missing(block: Block, missing: np.ndarray) -> Block:
    keep = ~missing[block.image]
    return Block(block.name, block.kind, block.image[keep], block.num[keep], block.den[keep],
                 None if block.predicate is None else block.predicate[keep])


def plain_blocks(images: list[ImageHits], ctx: Context, protocol: Protocol, family: Family
                 ) -> list[Block | StateRows]:
    """A family without a vectorized path: its per-image function, as blocks (and its
    states' rows, one StateRows per state)."""
    rows: dict[tuple[str, str], list[tuple[int, int, int, int]]] = {}
    states: list[StateRows] = []
    for i, hits in enumerate(images):
        terms: Terms = family.image_terms(hits, ctx)
        states += [rows.at_image(i) for rows in terms.states]
        for name, (num, den) in terms.image.items():
            rows.setdefault((name, "image"), []).append((i, -1, num, den))
        for name, (num, den) in terms.ratio.items():
            rows.setdefault((name, "ratio"), []).append((i, -1, num, den))
        if not protocol.counts_in_means(hits.missing):
            continue
        for name, per_predicate in terms.predicate.items():
            for p, (num, den) in per_predicate.items():
                rows.setdefault((name, MEAN), []).append((i, p, num, den))
    blocks: list[Block | StateRows] = []
    for (name, kind), values in rows.items():
        arr = np.array(values, dtype=np.int64).reshape(-1, 4)
        blocks.append(Block(name, kind, arr[:, 0], arr[:, 2], arr[:, 3],
                            arr[:, 1] if kind == MEAN else None))
    return blocks + merged_by_name(states)


def batch_blocks(images: list[ImageHits], ctx: Context, protocol: Protocol,
                 inputs: set[str], families: Sequence[Family] | None = None
                 ) -> list[Block | StateRows]:
    """Term blocks of every active family over ``images`` (the fast path): a family's
    vectorized ``batch_terms`` when it has one, else its plain function image by image;
    the rows of declared states (``StateRows``) travel with them."""
    batch = batch_of(images)
    blocks: list[Block | StateRows] = []
    for family, prefixes in active(inputs, families):
        if family.batch_terms is None:
            found = plain_blocks(images, ctx, protocol, family)
        else:
            found = family.batch_terms(batch, ctx)
            if not protocol.counts_in_means(True) and batch.missing.any():
                found = [drop_missing(b, batch.missing)
                         if isinstance(b, Block) and b.kind == MEAN else b for b in found]
        blocks += [b for b in found if b.kind == STATE or wanted(b.name, prefixes)]
    return blocks


def with_zero_shot(hits: ImageHits, zero_shot: ZeroShot | None) -> ImageHits:
    if zero_shot is not None:
        hits.zero_shot = zero_shot.flags(hits.relations, hits.gt_labels)
    return hits


def with_zero_shot_all(hits: list[ImageHits], zero_shot: ZeroShot | None
                       ) -> list[ImageHits]:
    """``with_zero_shot`` for many images at once: their triplets stacked (instance indices
    shifted past the previous images' instances), one look-up, split back per image."""
    if zero_shot is None or not hits:
        return hits
    sizes = np.array([len(h.gt_labels) for h in hits], dtype=np.int64)
    counts = [len(h.relations) for h in hits]
    shift = np.repeat(np.cumsum(sizes) - sizes, counts)
    stacked = np.concatenate([h.relations for h in hits]).astype(np.int64, copy=False)
    stacked[:, :2] += shift[:, None]  # (a new array: the hits' relations stay as they are)
    labels = np.concatenate([h.gt_labels for h in hits]).astype(np.int64, copy=False)
    flags = zero_shot.flags(stacked, labels)
    for h, part in zip(hits, np.split(flags, np.cumsum(counts)[:-1]), strict=True):
        h.zero_shot = part
    return hits


def evaluate_image(gt: ImageGT, pred: ImagePred, protocol: Protocol, ks: tuple[KSpec, ...],
                   with_ng: bool = True, zero_shot: ZeroShot | None = None,
                   legacy: bool = False, match_labels: bool = True) -> ImageResult:
    """Every metric term of one image under one protocol (``match_labels=False``: a
    prediction may match a GT instance of another category, SPEC section 4). An image the
    protocol leaves out (no relation proposals) gives a ``skipped`` result."""
    if protocol.leaves_out(pred):
        return skipped_result(gt, missing=False)
    hits = with_zero_shot(protocol.image_hits(gt, pred, with_ng, match_labels, legacy=legacy),
                          zero_shot)
    inputs = inputs_of(protocol, with_ng, zero_shot is not None, legacy)
    return image_result(hits, Context(ks), protocol, inputs)


def missing_image_result(gt: ImageGT, protocol: Protocol, ks: tuple[KSpec, ...],
                         with_ng: bool = True, zero_shot: ZeroShot | None = None,
                         legacy: bool = False) -> ImageResult:
    """An image of the GT without prediction: 0 on every recall and InstR, no PRank.

    Under protocols that leave such images out of the mean metrics (SGBench), only the
    image-level zeros are recorded; under protocols that skip images without proposals it
    is skipped (and counted).
    """
    if protocol.leaves_out(None):
        return skipped_result(gt, missing=True)
    hits = with_zero_shot(protocol.missing_image_hits(gt, with_ng), zero_shot)
    inputs = inputs_of(protocol, with_ng, zero_shot is not None, legacy)
    return image_result(hits, Context(ks), protocol, inputs)


def skipped_diagnostics(missing: bool) -> dict[str, int]:
    """What an image left out for lack of relation proposals adds to the diagnostics."""
    return {"images_skipped": 1, "images_missing": int(missing),
            "images_without_proposals": int(not missing)}


def skipped_result(gt: ImageGT, missing: bool) -> ImageResult:
    """An image left out of every metric: only its diagnostics count."""
    return ImageResult(gt.image_id, missing, len(gt.relations),
                       diagnostics=skipped_diagnostics(missing), skipped=True)
