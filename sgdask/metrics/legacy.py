"""Legacy pair accuracy ``A@k`` (off by default, ``--legacy-metrics``; SPEC section 6): only
graph predictions whose remapped pair is a GT pair count; hits / |G| summed over the
dataset before dividing. Not a recall: not comparable with R@k."""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import RATIO, Block, Context, Family, HitsBatch, Metric, Terms
from sgdask.types import ImageHits

METRICS = (Metric("A", RATIO, "legacy pair accuracy (predictions on GT pairs only)",
                  needs=("legacy", "pairs"),
                  note="A@k is a legacy pair accuracy, not a recall: only predictions on GT "
                       "pairs count, so it is not comparable with R@k"),)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    if hits.legacy_first is None:
        return terms
    n = hits.n_gt_triplets
    for k in ctx.ks:
        terms.ratio[f"A@{k.label}"] = (int((hits.legacy_first < k.resolve(n)).sum()), n)
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    if batch.legacy_first is None:
        return []
    images = np.arange(batch.n_images)
    blocks = []
    for k in ctx.ks:
        hit = batch.legacy_first < batch.k_per_triplet(k)
        found = np.bincount(batch.t_image, weights=hit, minlength=batch.n_images)
        blocks.append(Block(f"A@{k.label}", RATIO, images, found.astype(np.int64),
                            batch.n_gt_triplets))
    return blocks


FAMILY = Family("legacy", METRICS, image_terms, batch_terms)
