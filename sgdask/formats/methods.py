"""Graph and NG lists from OpenPSG-family result fields, by the rules of SGBench's conversion
scripts (``conversion/convert.py --method ...`` in the SGBench repository; the rules are
written down in ``schemas/results.md``).

Inputs are checked arrays (``sgdask.formats.results`` checks them): ``rel_pair_idxes`` (R, 2)
instance indices, ``rel_dists`` (R, 1 + P) with the no-relation column first,
``refine_scores`` (N, C) object class logits with the background column first, ``rels``
(R', 3) with 1-based predicates. Outputs are (n, 3) int64 ``[subject, object, predicate]``
rows, most confident first, predicates 0-based.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sgdask.method_names import METHODS, ONE_STAGE, VIDEO_METHODS

__all__ = ["METHODS", "ONE_STAGE", "VIDEO_METHODS", "Lists", "ResultsMethod", "fields_of",
           "lists_for"]
#: Result attributes every method reads
COMMON_FIELDS = ("masks", "labels", "refine_bboxes", "rel_pair_idxes", "rel_dists")
#: and the ones only two-stage results carry
TWO_STAGE_FIELDS = ("refine_scores", "rels")


@dataclass(frozen=True)
class ResultsMethod:
    """How to read a model's result file: ``--method`` and ``--instance-scores`` (here, not
    in ``results``, so that an evaluation of stores names it without importing the reader)."""

    method: str
    instance_scores: bool = False


@dataclass(frozen=True)
class Lists:
    graph: np.ndarray
    ng: np.ndarray


def fields_of(method: str) -> tuple[str, ...]:
    """The Result attributes ``method`` needs."""
    return COMMON_FIELDS + (TWO_STAGE_FIELDS if method == "2stage" else ())


def ranked_cells(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of every cell of ``scores``, highest first.

    The order is numpy's default (not stable) ``argsort`` of the row-major flattened matrix,
    reversed: the exact call SGBench's scripts make, so ties come out as they do there.
    """
    order = scores.flatten().argsort()[::-1]
    return order // scores.shape[1], order % scores.shape[1]


def ng_list(pairs: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Every (pair, predicate) cell of ``scores`` (R, P) as a triplet, highest score first."""
    if scores.size == 0:
        return np.empty((0, 3), dtype=np.int64)
    rows, predicates = ranked_cells(scores)
    return np.concatenate([pairs[rows].astype(np.int64), predicates[:, None]], axis=1)


def one_stage_lists(rel_pair_idxes: np.ndarray, rel_dists: np.ndarray) -> Lists:
    """PSGTR, PSGFormer, HiLo, Pair-Net: the graph list is one triplet per row of
    ``rel_pair_idxes``, in row order, with the row's highest-scoring predicate (first one on
    ties); the NG list ranks every (row, predicate) score of ``rel_dists``."""
    predicate_scores = rel_dists[:, 1:]
    pairs = rel_pair_idxes.astype(np.int64).reshape(-1, 2)
    best = (predicate_scores.argmax(axis=1) if len(pairs)
            else np.empty(0, dtype=np.int64))
    graph = np.concatenate([pairs, best.astype(np.int64)[:, None]], axis=1)
    return Lists(graph, ng_list(pairs, predicate_scores))


def object_confidences(refine_scores: np.ndarray) -> np.ndarray:
    """Per instance: the highest non-background probability of the softmax of its class
    logits (in the logits' dtype). SGBench computes this softmax with torch; sgdask with
    numpy, so a value may differ from torch's in the last bit."""
    shifted = refine_scores - refine_scores.max(axis=1, keepdims=True)
    exps = np.exp(shifted)
    return (exps / exps.sum(axis=1, keepdims=True))[:, 1:].max(axis=1)


def two_stage_lists(rel_pair_idxes: np.ndarray, rel_dists: np.ndarray,
                    refine_scores: np.ndarray, rels: np.ndarray) -> Lists:
    """Two-stage OpenPSG models: the graph list is ``rels`` as given (its predicates made
    0-based); the NG list ranks every predicate score of ``rel_dists`` times the product of
    the subject's and the object's confidence."""
    graph = rels.astype(np.int64).reshape(-1, 3).copy()
    graph[:, 2] -= 1
    pairs = rel_pair_idxes.astype(np.int64).reshape(-1, 2)
    if not len(pairs):
        return Lists(graph, np.empty((0, 3), dtype=np.int64))
    confidences = object_confidences(refine_scores)
    pair_scores = confidences[pairs].prod(axis=1)
    return Lists(graph, ng_list(pairs, rel_dists[:, 1:] * pair_scores[:, None]))


def lists_for(method: str) -> Callable[[dict[str, np.ndarray]], Lists]:
    """The derivation ``method`` uses, taking the checked fields by name."""
    if method == "2stage":
        return lambda f: two_stage_lists(f["rel_pair_idxes"], f["rel_dists"],
                                         f["refine_scores"], f["rels"])
    return lambda f: one_stage_lists(f["rel_pair_idxes"], f["rel_dists"])
