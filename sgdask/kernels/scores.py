"""Per-pair predicate score vectors -> ranked triplet lists (graph list and NG list).

The derivation DSFormer uses (fair-ranking paper, section 3.8), with duplicate pairs merged
the SingleMPO way (section 3.1): per predicate the highest score, the mean no-relation
score. Pairs whose subject equals their object are never turned into triplets: a relation
links two different instances (SPEC 5.1 removes such triplets as well).

Inputs: ``subjects``/``objects`` (n,) ints, ``scores`` (n, P) with P >= 1 (column p is
predicate class p), ``no_rel`` (n,) in [0, 1] or None.

Every order here is deterministic: ties keep pair order (first occurrence), then predicate
index, so the same input always gives the same lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PairScores = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


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


def first_occurrence_groups(subjects: np.ndarray, objects: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
    """(group index per row, first row of each group) for the distinct (subject, object) pairs.

    Groups are numbered in the order their pair first occurs.
    """
    pairs = np.stack([np.asarray(subjects, dtype=np.int64),
                      np.asarray(objects, dtype=np.int64)], axis=1)
    _, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
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
    merged = np.full((len(first), scores.shape[1]), -np.inf)
    np.maximum.at(merged, group, scores)
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
