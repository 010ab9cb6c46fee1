"""What the matched instances allow (SPEC section 6).

- ``R@inf`` / ``mR@inf``: GT triplets whose subject and object are both matched, over |G|
  (per predicate for mR@inf): the best any ranking could reach with these instances;
- ``InstR``: matched GT instances over all GT instances.
"""

from __future__ import annotations

import numpy as np

from sgdask.kernels.selection import KSpec
from sgdask.metrics.base import (
    IMAGE,
    MEAN,
    Block,
    Context,
    Family,
    HitsBatch,
    Metric,
    Terms,
    recall_blocks,
    recall_terms,
)
from sgdask.types import ImageHits

METRICS = (
    Metric("R@inf", IMAGE, "upper bound of R@k for any ranking of these instances",
           per_k=False),
    Metric("mR@inf", MEAN, "upper bound of mR@k for any ranking", per_k=False),
    Metric("InstR", IMAGE, "instance recall: matched GT instances / GT instances",
           per_k=False),
)
NEVER_K = np.iinfo(np.int64).max
ONE = KSpec("1", absolute=1)  # "hit" at position 0 = reachable: R@inf is a recall at k = 1


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    matched = hits.matched_gt
    reachable = matched[hits.relations[:, 0]] & matched[hits.relations[:, 1]]
    terms.image["R@inf"], terms.predicate["mR@inf"] = recall_terms(reachable, hits.predicates)
    terms.image["InstR"] = (int(matched.sum()), len(matched))
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    first = np.where(batch.reachable, 0, NEVER_K).astype(np.int64)
    blocks = recall_blocks(batch, first, (ONE,), "R", "mR")
    blocks[0].name, blocks[1].name = "R@inf", "mR@inf"
    images = np.arange(batch.n_images)
    blocks.append(Block("InstR", IMAGE, images, batch.n_matched, batch.n_instances))
    return blocks


FAMILY = Family("instances", METRICS, image_terms, batch_terms)
