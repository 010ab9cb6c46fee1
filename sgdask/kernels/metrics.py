"""Per-image metric terms (SPEC section 6) from remapped triplet lists.

Triplets become integer keys ``(s * n_gt + o) * n_pred + p`` so that set operations are
sorted-array look-ups instead of Python sets. Every value is a rational term
``(numerator, denominator)``: the accumulators sum them exactly.
"""

from __future__ import annotations

import numpy as np

Term = tuple[int, int]
NEVER = np.iinfo(np.int64).max


def triplet_keys(triplets: np.ndarray, n_gt: int, n_predicates: int) -> np.ndarray:
    """Integer key per (subject, object, predicate); -1 where subject or object is unmatched."""
    if len(triplets) == 0:
        return np.empty(0, dtype=np.int64)
    s, o, p = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    keys = (s * n_gt + o) * n_predicates + p
    return np.where((s >= 0) & (o >= 0), keys, -1)


def first_positions(gt_keys: np.ndarray, list_keys: np.ndarray) -> np.ndarray:
    """For each GT key, the first position in the list holding it (``NEVER`` if absent)."""
    out = np.full(len(gt_keys), NEVER, dtype=np.int64)
    valid = np.nonzero(list_keys >= 0)[0]
    if len(valid) == 0 or len(gt_keys) == 0:
        return out
    uniq, first = np.unique(list_keys[valid], return_index=True)
    idx = np.clip(np.searchsorted(uniq, gt_keys), 0, len(uniq) - 1)
    found = uniq[idx] == gt_keys
    out[found] = valid[first[idx[found]]]
    return out


def recall_terms(hit: np.ndarray, gt_predicates: np.ndarray) -> tuple[Term, dict[int, Term]]:
    """Image recall and per-predicate recall terms from a boolean hit per GT triplet."""
    overall = (int(np.count_nonzero(hit)), len(hit))
    if len(hit) == 0:
        return overall, {}
    totals = np.bincount(gt_predicates)
    hits = np.bincount(gt_predicates, weights=hit, minlength=len(totals))
    present = np.flatnonzero(totals)
    return overall, {int(p): (int(hits[p]), int(totals[p])) for p in present}


def predicate_rank_terms(gt_keys: np.ndarray, gt_predicates: np.ndarray, ng_keys: np.ndarray,
                         n_predicates: int) -> dict[int, Term]:
    """PRank terms (rank sum, found count) per GT predicate with at least one found triplet.

    The rank of a remapped NG triplet is the number of distinct predicates its pair received
    earlier in the list; unmatched triplets and repeats of a triplet do not count.
    """
    valid = ng_keys[ng_keys >= 0]
    if len(valid) == 0 or len(gt_keys) == 0:
        return {}
    _, first = np.unique(valid, return_index=True)
    distinct = valid[np.sort(first)]
    pairs = distinct // n_predicates
    order = np.argsort(pairs, kind="stable")
    sorted_pairs = pairs[order]
    group_start = np.searchsorted(sorted_pairs, sorted_pairs, side="left")
    ranks = np.empty(len(distinct), dtype=np.int64)
    ranks[order] = np.arange(len(distinct)) - group_start
    by_key = np.argsort(distinct)
    keys_sorted = distinct[by_key]
    idx = np.clip(np.searchsorted(keys_sorted, gt_keys), 0, len(keys_sorted) - 1)
    found = keys_sorted[idx] == gt_keys
    gt_ranks = ranks[by_key[idx]]
    terms = {}
    for p in np.unique(gt_predicates[found]):
        sel = found & (gt_predicates == p)
        terms[int(p)] = (int(gt_ranks[sel].sum()), int(sel.sum()))
    return terms


def rank_within_predicate(triplets: np.ndarray) -> np.ndarray:
    """0-based position of each list entry among the entries with the same predicate."""
    if len(triplets) == 0:
        return np.empty(0, dtype=np.int64)
    predicates = triplets[:, 2]
    order = np.argsort(predicates, kind="stable")
    start = np.searchsorted(predicates[order], predicates[order], side="left")
    ranks = np.empty(len(triplets), dtype=np.int64)
    ranks[order] = np.arange(len(triplets)) - start
    return ranks


def first_hits_by_matrix(hit: np.ndarray) -> np.ndarray:
    """First list position per GT row of a (n_gt, list_len) hit matrix (``NEVER`` if none)."""
    out = np.full(hit.shape[0], NEVER, dtype=np.int64)
    if hit.size:
        any_hit = hit.any(axis=1)
        out[any_hit] = hit[any_hit].argmax(axis=1)
    return out


def triplet_hit_matrix(relations: np.ndarray, triplets: np.ndarray, instance_hit: np.ndarray,
                       with_predicate: bool = True) -> np.ndarray:
    """(n_gt_triplets, list_len): list entry j hits GT triplet t at the triplet level.

    ``instance_hit[m, g]``: predicted instance m may stand for GT instance g (same category
    and IoU >= 0.5); legacy multimpo matching, no one-to-one instance mapping.
    """
    if len(relations) == 0 or len(triplets) == 0:
        return np.zeros((len(relations), len(triplets)), dtype=bool)
    subj = instance_hit[triplets[:, 0]][:, relations[:, 0]].T
    obj = instance_hit[triplets[:, 1]][:, relations[:, 1]].T
    hit = subj & obj
    if with_predicate:
        hit &= relations[:, 2][:, None] == triplets[:, 2][None, :]
    return hit
