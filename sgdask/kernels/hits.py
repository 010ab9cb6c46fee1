"""First-hit positions: for each GT triplet (or pair), the first position of a ranked list
that hits it (``NEVER`` if none). A triplet is recalled at k when that position is below k,
so selection happens before matching, as the SPEC requires, and every k costs one pass.

Two ways a list entry can hit a GT triplet:

- through an instance mapping ``L`` (singlempo, sgbench): ``(L[s], L[o], p)`` equals it;
- at the triplet level (multimpo, SPEC 5.3): its predicate equals the GT one and
  ``instance_hit[s, gs]`` and ``instance_hit[o, go]``.

Compiled loops (numba): a list is walked once; GT triplets are found by binary search on
sorted integer keys, so no Python runs per triplet.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sgdask.kernels.bits import JIT
from sgdask.kernels.selection import NEVER as NEVER  # re-exported for the kernels' callers


@njit(**JIT)
def sorted_keys(relations: np.ndarray, n_gt: int, n_predicates: int, with_predicate: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """(sorted keys, GT row of each sorted key) of GT triplets or (with_predicate=False)
    pairs; a key is ``(s * n_gt + o) * n_predicates + p``."""
    t = relations.shape[0]
    keys = np.empty(t, dtype=np.int64)
    for i in range(t):
        p = relations[i, 2] if with_predicate else 0
        keys[i] = (relations[i, 0] * n_gt + relations[i, 1]) * n_predicates + p
    order = np.argsort(keys, kind="mergesort")
    return keys[order], order


@njit(**JIT)
def lookup(sorted_gt: np.ndarray, key: int) -> int:
    """Position of ``key`` in the sorted GT keys, or -1."""
    pos = np.searchsorted(sorted_gt, key)
    if pos < sorted_gt.shape[0] and sorted_gt[pos] == key:
        return pos
    return -1


@njit(**JIT)
def first_hits_mapped(relations: np.ndarray, triplets: np.ndarray, mapping: np.ndarray,
                      n_gt: int, n_predicates: int, with_predicate: bool) -> np.ndarray:
    """First position of each GT row (triplet, or pair when ``with_predicate`` is False)
    in the list remapped through ``mapping`` (pred -> GT index, -1 = unmatched)."""
    out = np.full(relations.shape[0], NEVER, dtype=np.int64)
    gt_keys, rows = sorted_keys(relations, n_gt, n_predicates, with_predicate)
    for j in range(triplets.shape[0]):
        s, o = mapping[triplets[j, 0]], mapping[triplets[j, 1]]
        if s < 0 or o < 0:
            continue
        p = triplets[j, 2] if with_predicate else 0
        if p < 0 or p >= n_predicates:
            continue
        pos = lookup(gt_keys, (s * n_gt + o) * n_predicates + p)
        if pos >= 0:
            row = rows[pos]
            if out[row] == NEVER:
                out[row] = j
    return out


@njit(**JIT)
def first_hits_triplet(relations: np.ndarray, triplets: np.ndarray, instance_hit: np.ndarray,
                       with_predicate: bool) -> np.ndarray:
    """First position of each GT row hit at the triplet level (multimpo)."""
    out = np.full(relations.shape[0], NEVER, dtype=np.int64)
    for t in range(relations.shape[0]):
        gs, go, gp = relations[t, 0], relations[t, 1], relations[t, 2]
        for j in range(triplets.shape[0]):
            if with_predicate and triplets[j, 2] != gp:
                continue
            if instance_hit[triplets[j, 0], gs] and instance_hit[triplets[j, 1], go]:
                out[t] = j
                break
    return out


@njit(**JIT)
def rank_within_predicate(triplets: np.ndarray, n_predicates: int) -> np.ndarray:
    """0-based position of each list entry among the entries with the same predicate."""
    seen = np.zeros(n_predicates, dtype=np.int64)
    out = np.empty(triplets.shape[0], dtype=np.int64)
    for j in range(triplets.shape[0]):
        p = triplets[j, 2]
        out[j] = seen[p]
        seen[p] += 1
    return out


@njit(**JIT)
def within_predicate_first(first: np.ndarray, within: np.ndarray) -> np.ndarray:
    """IMR positions: a GT triplet's first hit, counted among its predicate's entries."""
    out = np.full(first.shape[0], NEVER, dtype=np.int64)
    for t in range(first.shape[0]):
        if first[t] != NEVER:
            out[t] = within[first[t]]
    return out


@njit(**JIT)
def max_predicate(triplets: np.ndarray) -> int:
    top = -1
    for j in range(triplets.shape[0]):
        top = max(top, triplets[j, 2])
    return top


@njit(**JIT)
def predicate_ranks(relations: np.ndarray, ng: np.ndarray, mapping: np.ndarray, n_gt: int
                    ) -> np.ndarray:
    """PRank rank of each GT triplet (-1 when not found in the remapped NG list).

    The rank of a remapped NG triplet is the number of distinct predicates its pair
    received earlier in the list; unmatched entries and repeats of a triplet do not count.
    Only GT pairs matter (a rank is read for GT triplets only), so distinct predicates are
    counted per GT pair.
    """
    t = relations.shape[0]
    out = np.full(t, -1, dtype=np.int64)
    n_predicates = max(max_predicate(relations), max_predicate(ng)) + 1
    pair_keys, _ = sorted_keys(relations, n_gt, 1, False)
    # distinct GT pairs: index of each sorted pair key's first occurrence
    n_pairs = 0
    pair_of = np.empty(t, dtype=np.int64)
    for i in range(t):
        if i == 0 or pair_keys[i] != pair_keys[i - 1]:
            n_pairs += 1
        pair_of[i] = n_pairs - 1
    seen = np.zeros((max(n_pairs, 1), n_predicates), dtype=np.bool_)
    count = np.zeros(max(n_pairs, 1), dtype=np.int64)
    trip_keys, trip_rows = sorted_keys(relations, n_gt, n_predicates, True)
    for j in range(ng.shape[0]):
        s, o, p = mapping[ng[j, 0]], mapping[ng[j, 1]], ng[j, 2]
        if s < 0 or o < 0:
            continue
        pos = lookup(pair_keys, s * n_gt + o)
        if pos < 0:
            continue
        pair = pair_of[pos]
        if seen[pair, p]:
            continue
        seen[pair, p] = True
        rank = count[pair]
        count[pair] += 1
        hit = lookup(trip_keys, (s * n_gt + o) * n_predicates + p)
        if hit >= 0:
            out[trip_rows[hit]] = rank
    return out


@njit(**JIT)
def gt_pair_rows(relations: np.ndarray, n_gt: int) -> np.ndarray:
    """Rows of the distinct GT pairs, in order of their first occurrence."""
    keep = np.zeros(relations.shape[0], dtype=np.bool_)
    keys, rows = sorted_keys(relations, n_gt, 1, False)
    for i in range(keys.shape[0]):
        if i == 0 or keys[i] != keys[i - 1]:
            keep[rows[i]] = True
    return np.flatnonzero(keep)


@njit(**JIT)
def on_gt_pair(triplets: np.ndarray, mapping: np.ndarray, relations: np.ndarray, n_gt: int
               ) -> np.ndarray:
    """True for list entries whose remapped pair is a GT pair (legacy A@k)."""
    out = np.zeros(triplets.shape[0], dtype=np.bool_)
    pair_keys, _ = sorted_keys(relations, n_gt, 1, False)
    for j in range(triplets.shape[0]):
        s, o = mapping[triplets[j, 0]], mapping[triplets[j, 1]]
        if s >= 0 and o >= 0 and lookup(pair_keys, s * n_gt + o) >= 0:
            out[j] = True
    return out
