"""Predicate rank ``PRank`` (SPEC section 6; lower is better): per predicate p, the mean
over GT triplets of p found in the remapped NG list of the triplet's 0-based rank among the
distinct predicates the NG list gives its pair; undefined when none is found. Needs an
instance mapping (not under triplet-level matching)."""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import MEAN, RANK, Block, Context, Family, HitsBatch, Metric, Terms
from sgdask.types import ImageHits

METRICS = (Metric("PRank", MEAN, "predicate rank: 0-based rank of the GT predicate among "
                  "its pair's NG predicates (lower is better)", per_k=False,
                  needs=("ng", "mapping"), display=RANK, board=("",)),)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    if hits.prank is None:
        return terms
    found = hits.prank >= 0
    per_predicate = {}
    for p in sorted(set(hits.predicates[found].tolist())):
        sel = found & (hits.predicates == p)
        per_predicate[p] = (int(hits.prank[sel].sum()), int(sel.sum()))
    terms.predicate["PRank"] = per_predicate
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    if batch.prank is None:
        return []
    found = batch.prank >= 0
    groups, inverse = np.unique(batch.group[found], return_inverse=True)
    inverse = inverse.reshape(-1)
    rank_sum = np.bincount(inverse, weights=batch.prank[found], minlength=len(groups))
    count = np.bincount(inverse, minlength=len(groups))
    return [Block("PRank", MEAN, batch.group_image[groups], rank_sum.astype(np.int64),
                  count.astype(np.int64), batch.group_predicate[groups])]


FAMILY = Family("prank", METRICS, image_terms, batch_terms)
