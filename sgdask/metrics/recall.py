"""Recall and mean recall, with and without graph constraint (SPEC section 6).

- ``R@k``: |G ∩ X_k| / |G| per image, X_k the first k triplets of the graph list;
- ``mR@k``: per predicate p of the image, |G(p) ∩ X_k(p)| / |G(p)|;
- ``ngR@k``, ``mNgR@k``: the same on the NG list (several predicates per pair).
"""

from __future__ import annotations

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

RANK_BY, TIE_BREAK = "mR@50", "mNgR@50"  # how the leaderboard ranks (SGBench's board)
# The mean metrics a protocol with ``mean_over_vocabulary`` prints over every predicate of
# the vocabulary (OpenPSG's and Scene-Graph-Benchmark.pytorch's mR@k and mNgR@k).
VOCABULARY_MEANS = ("mR", "mNgR")
METRICS = (
    Metric("R", IMAGE, "recall: GT triplets among the top-k of the graph list", board=("50",)),
    Metric("mR", MEAN, "mean recall: recall per predicate, averaged over predicates",
           board=("50", "20", "100")),
    Metric("ngR", IMAGE, "no-graph-constraint recall (NG list)", needs=("ng",)),
    Metric("mNgR", MEAN, "no-graph-constraint mean recall (NG list)", needs=("ng",),
           board=("50",)),
)


def image_terms(hits: ImageHits, ctx: Context) -> Terms:
    terms = Terms()
    add_recalls(terms, hits.graph_first, hits.predicates, ctx.ks, hits.n_gt_triplets, "R", "mR")
    if hits.ng_first is not None:
        add_recalls(terms, hits.ng_first, hits.predicates, ctx.ks, hits.n_gt_triplets, "ngR",
                    "mNgR")
    return terms


def batch_terms(batch: HitsBatch, ctx: Context) -> list[Block]:
    blocks = recall_blocks(batch, batch.graph_first, ctx.ks, "R", "mR")
    if batch.ng_first is not None:
        blocks += recall_blocks(batch, batch.ng_first, ctx.ks, "ngR", "mNgR")
    return blocks


FAMILY = Family("recall", METRICS, image_terms, batch_terms)
