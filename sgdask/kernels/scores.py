"""Per-pair predicate score vectors -> ranked triplet lists (graph list and NG list).

The derivation DSFormer uses (fair-ranking paper, section 3.8), with duplicate pairs merged
the SingleMPO way (section 3.1): per predicate the highest score, the mean no-relation
score. Pairs whose subject equals their object are never turned into triplets: a relation
links two different instances (SPEC 5.1 removes such triplets as well).

Inputs: ``subjects``/``objects`` (n,) ints, ``scores`` (n, P) with P >= 1 (column p is
predicate class p), ``no_rel`` (n,) in [0, 1] or None.

Every order here is deterministic: ties keep pair order (first occurrence), then predicate
index, so the same input always gives the same lists.

Two rankings (``RANK_BY``): ``predicate`` (the above: best predicate score, or no-relation)
and ``triplet``, the one of Scene-Graph-Benchmark.pytorch and OpenPSG, which multiplies in
the subject's and the object's instance score (``triplet_ranked_lists``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdask.types import TopPredicates

PairScores = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
PREDICATE, TRIPLET = "predicate", "triplet"
RANK_BY = (PREDICATE, TRIPLET)


@dataclass(frozen=True)
class DerivedLists:
    """The two ranked lists of one image, most confident first.

    ``graph``/``ng`` are (n, 3) int64 ``[subject, object, predicate]`` rows; the score
    arrays are float64 and non-increasing along their list.
    """

    graph: np.ndarray
    graph_scores: np.ndarray
    ng: np.ndarray
    ng_scores: np.ndarray
    pairs: TopPredicates | None = None


def first_occurrence_groups(subjects: np.ndarray, objects: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
    """(group index per row, first row of each group) for the distinct (subject, object) pairs.

    Groups are numbered in the order their pair first occurs.
    """
    subjects = np.asarray(subjects, dtype=np.int64)
    objects = np.asarray(objects, dtype=np.int64)
    # one integer per pair, ordered as the (subject, object) rows (1-D unique is much faster)
    width = int(objects.max()) + 1 if len(objects) else 1
    _, first, inverse = np.unique(subjects * width + objects, return_index=True,
                                  return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    renumber = np.empty_like(by_first)
    renumber[by_first] = np.arange(len(by_first))
    return renumber[inverse.reshape(-1)], first[by_first]


def aggregate_duplicate_pairs(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
                              no_rel: np.ndarray | None) -> PairScores:
    """One row per distinct (subject, object) pair, in first-occurrence order.

    Duplicate rows are merged as SingleMPO does: the element-wise maximum of the predicate
    scores and the mean of the no-relation scores (``no_rel`` may be None).
    """
    scores = np.asarray(scores, dtype=np.float64)
    group, first = first_occurrence_groups(subjects, objects)
    if len(first) == len(scores):  # no duplicate pair: nothing to merge
        return (np.asarray(subjects, dtype=np.int64), np.asarray(objects, dtype=np.int64),
                scores, None if no_rel is None else np.asarray(no_rel, dtype=np.float64))
    by_group = np.argsort(group, kind="stable")
    group_starts = np.searchsorted(group[by_group], np.arange(len(first)))
    merged = np.maximum.reduceat(scores[by_group], group_starts, axis=0)
    merged_no_rel = None
    if no_rel is not None:
        counts = np.bincount(group, minlength=len(first))
        sums = np.bincount(group, weights=np.asarray(no_rel, dtype=np.float64),
                           minlength=len(first))
        merged_no_rel = sums / counts
    return (np.asarray(subjects, dtype=np.int64)[first],
            np.asarray(objects, dtype=np.int64)[first], merged, merged_no_rel)


def without_self_pairs(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
                       no_rel: np.ndarray | None) -> PairScores:
    """The rows whose subject differs from their object (the others can never be a relation)."""
    subjects = np.asarray(subjects, dtype=np.int64)
    objects = np.asarray(objects, dtype=np.int64)
    keep = subjects != objects
    return (subjects[keep], objects[keep], np.asarray(scores, dtype=np.float64)[keep],
            None if no_rel is None else np.asarray(no_rel, dtype=np.float64)[keep])


def graph_list(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
               no_rel: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One triplet per pair row (argmax predicate, ties: lowest index), most confident first.

    Pairs are ranked by ascending no-relation score when given (DSFormer), else by
    descending best predicate score; ties keep pair order. The returned scores are what the
    list is ranked by (``1 - no_rel``, or the best predicate score), so they never increase
    along the list. Rows with subject == object are dropped; pass distinct pairs (see
    ``aggregate_duplicate_pairs``) to get a list that satisfies the graph constraint.
    """
    subjects, objects, scores, no_rel = without_self_pairs(subjects, objects, scores, no_rel)
    predicates = np.argmax(scores, axis=1)
    if no_rel is None:
        confidence = scores[np.arange(len(scores)), predicates]
        order = np.argsort(-confidence, kind="stable")
    else:
        # sorting no_rel itself, not 1 - no_rel: the subtraction can round distinct values equal
        confidence = 1.0 - no_rel
        order = np.argsort(no_rel, kind="stable")
    triplets = np.stack([subjects[order], objects[order], predicates[order]], axis=1)
    return triplets.astype(np.int64, copy=False), confidence[order]


def ng_list(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
            no_rel: np.ndarray | None, limit: int | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Every (pair, predicate) triplet ranked by ``score * (1 - no_rel)`` (or ``score``).

    Descending; ties keep pair order, then predicate index. Truncated to the first ``limit``
    triplets when given (a full list has pairs x predicates rows). Rows with
    subject == object are dropped.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    subjects, objects, scores, no_rel = without_self_pairs(subjects, objects, scores, no_rel)
    ranking = scores if no_rel is None else scores * (1.0 - no_rel)[:, None]
    flat = ranking.reshape(-1)
    order = np.argsort(-flat, kind="stable")[:limit]
    pairs, predicates = np.divmod(order, scores.shape[1])
    triplets = np.stack([subjects[pairs], objects[pairs], predicates], axis=1)
    return triplets.astype(np.int64, copy=False), flat[order]


def triplet_lists(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
                  no_rel: np.ndarray | None, ng_limit: int | None = None) -> DerivedLists:
    """Both lists of one image: duplicate pairs aggregated, then graph and NG list derived."""
    pairs = aggregate_duplicate_pairs(subjects, objects, scores, no_rel)
    graph, graph_scores = graph_list(*pairs)
    ng, ng_scores = ng_list(*pairs, limit=ng_limit)
    return DerivedLists(graph, graph_scores, ng, ng_scores)


def top_predicates(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray
                   ) -> TopPredicates:
    """Each row's best two predicates (one for a vocabulary of one), as the ``oiv6``
    protocol takes them: rows as given (self pairs dropped, duplicates kept: ``oiv6``
    refuses them), scores in float32, each row's predicates by descending float32 score,
    equal scores by predicate index (a stable sort where the reference's ``argsort`` is
    unstable)."""
    keep = np.asarray(subjects) != np.asarray(objects)
    with np.errstate(over="ignore"):
        values = np.asarray(scores, dtype=np.float64)[keep].astype(np.float32)
    per_pair = min(2, values.shape[1]) if values.ndim == 2 else 2
    order = np.argsort(-values, axis=1, kind="stable")[:, :per_pair]
    n = len(values)
    return TopPredicates(np.repeat(np.asarray(subjects, np.int64)[keep], per_pair),
                         np.repeat(np.asarray(objects, np.int64)[keep], per_pair),
                         order.reshape(-1).astype(np.int64),
                         values[np.arange(n)[:, None], order].reshape(-1), per_pair)


def descending_stable(values: np.ndarray, limit: int | None = None) -> np.ndarray:
    """Indices sorting ``values`` from largest to smallest, equal values in index order;
    only the first ``limit`` when given.

    Negating is exact in floating point, so ``-values`` orders the same values the same way.
    With a limit, only the values at least as large as the limit-th largest are sorted
    (found by a partition): the same first ``limit`` indices as the full stable sort.
    """
    negated = -values
    if limit is not None and limit < len(values):
        if limit == 0:
            return np.empty(0, dtype=np.int64)
        cut = np.partition(negated, limit - 1)[limit - 1]
        candidates = np.flatnonzero(negated <= cut)
        return candidates[np.argsort(negated[candidates], kind="stable")[:limit]]
    return np.argsort(negated, kind="stable")


def triplet_ranked_lists(subjects: np.ndarray, objects: np.ndarray, scores: np.ndarray,
                         instance_scores: np.ndarray, ng_limit: int | None = None
                         ) -> DerivedLists:
    """Both lists ranked by predicate score x subject score x object score.

    What Scene-Graph-Benchmark.pytorch computes on its float32 tensors, in float32 and in
    its order of multiplication, so that equal products come out equal here too:

    - graph list: one triplet per pair, predicate = argmax (ties: the lowest index), pairs
      ranked by ``(best * s) * o`` (its ``PostProcessor``: ``rel_scores * obj_scores0 *
      obj_scores1``);
    - NG list: every (pair, predicate) ranked by ``(s * o) * score[p]`` (its
      ``SGNoGraphConstraintRecall``: ``obj_scores[pairs].prod(1)[:, None] * rel_scores``).

    Ties keep pair order, then predicate index (a stable sort). ``instance_scores`` (n,) are
    the image's per-instance scores, indexed by ``subjects``/``objects``. Self pairs are
    dropped and duplicate pairs aggregated first, as for the predicate ranking; no-relation
    scores play no part. The returned scores are the float32 products, as float64.
    """
    if ng_limit is not None and ng_limit < 0:
        raise ValueError(f"ng_limit must be >= 0, got {ng_limit}")
    subjects, objects, merged, _ = aggregate_duplicate_pairs(
        *without_self_pairs(subjects, objects, scores, None))
    predicate_scores = merged.astype(np.float32)
    instance_scores = np.asarray(instance_scores, dtype=np.float32)
    s, o = instance_scores[subjects], instance_scores[objects]

    predicates = np.argmax(predicate_scores, axis=1)
    best = predicate_scores[np.arange(len(predicates)), predicates]
    graph_confidence = best * s * o
    order = descending_stable(graph_confidence)
    graph = np.stack([subjects[order], objects[order], predicates[order]], axis=1)

    ng_confidence = ((s * o)[:, None] * predicate_scores).reshape(-1)
    ng_order = descending_stable(ng_confidence, ng_limit)
    pairs, ng_predicates = np.divmod(ng_order, max(predicate_scores.shape[1], 1))
    ng = np.stack([subjects[pairs], objects[pairs], ng_predicates], axis=1)
    return DerivedLists(graph.astype(np.int64, copy=False),
                        graph_confidence[order].astype(np.float64),
                        ng.astype(np.int64, copy=False),
                        ng_confidence[ng_order].astype(np.float64))
