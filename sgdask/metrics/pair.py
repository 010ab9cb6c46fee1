"""Pair recall ``PR@k``: GT pairs (subject, object) among the pairs of the top-k graph
triplets, whatever their predicate, over |pairs(G)| (SPEC section 6)."""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import IMAGE, Block, Context, Family, HitsBatch, Metric, Terms
from sgdask.types import ImageHits

METRICS = (Metric("PR", IMAGE, "pair recall: GT pairs among the top-k graph triplets' pairs"),)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    for k in ctx.ks:
        found = int(np.count_nonzero(hits.pair_first < k.resolve(hits.n_gt_triplets)))
        terms.image[f"PR@{k.label}"] = (found, len(hits.pair_first))
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    images = np.arange(batch.n_images)
    pairs = np.bincount(batch.q_image, minlength=batch.n_images).astype(np.int64)
    blocks = []
    for k in ctx.ks:
        hit = batch.pair_first < batch.k_per_image(k)[batch.q_image]
        found = np.bincount(batch.q_image, weights=hit, minlength=batch.n_images)
        blocks.append(Block(f"PR@{k.label}", IMAGE, images, found.astype(np.int64), pairs))
    return blocks


FAMILY = Family("pair", METRICS, image_terms, batch_terms)
