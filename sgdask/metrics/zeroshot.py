"""Zero-shot recall ``zR@k`` / ``mzR@k``: R and mR restricted to the GT triplets whose type
(subject category, object category, predicate) never occurs in the training split; k stays
that of the whole image (relative k from all of G); images without such triplets are
skipped (SPEC section 6). ``ngzR@k``: the same on the NG list (Scene-Graph-Benchmark.pytorch's
ng-zR@K), reported under the protocols that report it (``ng_zero_shot``)."""

from __future__ import annotations

import numpy as np

from sgdask.metrics.base import (
    IMAGE,
    MEAN,
    Block,
    Context,
    Family,
    HitsBatch,
    Metric,
    Terms,
    add_recalls,
    recall_blocks,
)
from sgdask.types import ImageHits

EMPTY = "no zero-shot GT triplet in the evaluated images"
METRICS = (
    Metric("zR", IMAGE, "zero-shot recall: R on GT triplet types unseen in training",
           needs=("stats",), empty_reason=EMPTY),
    Metric("mzR", MEAN, "zero-shot mean recall", needs=("stats",), empty_reason=EMPTY),
    Metric("ngzR", IMAGE, "no-graph-constraint zero-shot recall: ngR on GT triplet types "
           "unseen in training", needs=("ngz", "ng", "stats"), empty_reason=EMPTY),
)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    unseen = hits.zero_shot
    if unseen is not None and unseen.any():
        add_recalls(terms, hits.graph_first[unseen], hits.predicates[unseen], ctx.ks,
                    hits.n_gt_triplets, "zR", "mzR")
        if hits.ng_first is not None:
            add_recalls(terms, hits.ng_first[unseen], hits.predicates[unseen], ctx.ks,
                        hits.n_gt_triplets, "ngzR", None)
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    if batch.zero_shot is None or not np.any(batch.zero_shot):
        return []
    blocks = recall_blocks(batch, batch.graph_first, ctx.ks, "zR", "mzR", batch.zero_shot)
    if batch.ng_first is not None:
        blocks += recall_blocks(batch, batch.ng_first, ctx.ks, "ngzR", None, batch.zero_shot)
    return blocks


FAMILY = Family("zero_shot", METRICS, image_terms, batch_terms)
