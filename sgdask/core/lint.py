"""The protocol lint: what a submission's own shape says about how it may have been scored
elsewhere (docs: Metrics and protocols, "Protocol lint").

Counted where the data already is: each scoring task adds its partition's counts
(``partition_lint``: plain numpy over the decoded images, one sort per partition) to the
partition result, which sums them like every other count; so the counts, and the
warnings worded from them (``lint_report``), are the same for any partitioning and any
worker count. Warnings never fail an evaluation; they say what a number computed from the
same submission by another evaluator may have measured instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, NamedTuple

import numpy as np

from sgdask.types import ImageGT, ImagePred


@dataclass
class LintCounts:
    """Integer counts over the evaluated images of one submission; merged by addition.

    ``images`` / ``gt_relations``: evaluated GT images and their GT relations (as given);
    ``missing_*``: those without a prediction; ``empty_*``: those whose prediction has an
    empty graph list; ``multi_predicate_images`` / ``multi_predicate_entries``: images whose
    graph list holds several predicates for one (subject, object) pair, and its entries
    beyond each pair's first predicate (distinct triplets minus distinct pairs);
    ``mask_images``: images whose predicted masks the singlempo merge looked at,
    ``duplicate_masks`` the masks it merged into an earlier one (IoU > 0.5) in
    ``duplicate_mask_images`` of them; ``scored_images``: images with two or more
    instances, each with a score, ``tied_score_images`` those whose scores are all equal;
    ``triplet_scores``: the submission store's triplet rows with a score,
    ``triplet_scores_equal`` 1 when two or more have one and all are equal (from the
    first-wave check's footer statistics, once per submission: ``with_first_wave``).
    """

    images: int = 0
    gt_relations: int = 0
    missing_images: int = 0
    missing_relations: int = 0
    empty_images: int = 0
    empty_relations: int = 0
    multi_predicate_images: int = 0
    multi_predicate_entries: int = 0
    mask_images: int = 0
    duplicate_mask_images: int = 0
    duplicate_masks: int = 0
    scored_images: int = 0
    tied_score_images: int = 0
    triplet_scores: int = 0
    triplet_scores_equal: int = 0

    def merged(self, other: LintCounts) -> LintCounts:
        return LintCounts(*(getattr(self, f.name) + getattr(other, f.name)
                            for f in fields(self)))


#: what the first-wave check adds to a submission's counts (``sgdask.store.consistency``)
FIRST_WAVE_PREFIX = "lint_"


def with_first_wave(counts: LintCounts, facts: Mapping[str, int]) -> LintCounts:
    """The counts with what the submission's first-wave check found (``lint_*`` keys of
    its counts: the triplet scores' spread)."""
    return replace(counts, **{k[len(FIRST_WAVE_PREFIX):]: v for k, v in facts.items()
                              if k.startswith(FIRST_WAVE_PREFIX)})


def partition_lint(gts: Sequence[ImageGT], preds: Mapping[str, ImagePred],
                   merged_masks: Mapping[str, int] | None = None) -> LintCounts:
    """The lint counts of one partition's GT images and a submission's predictions for them;
    ``merged_masks``: image id -> masks the singlempo merge merged (None: no protocol of
    the evaluation merged masks, duplicates not counted)."""
    out = LintCounts(images=len(gts))
    given: list[ImagePred] = []
    for gt in gts:
        n_rel = len(gt.relations)
        out.gt_relations += n_rel
        pred = preds.get(gt.image_id)
        if pred is None:
            out.missing_images += 1
            out.missing_relations += n_rel
            continue
        given.append(pred)
        if len(pred.graph) == 0:
            out.empty_images += 1
            out.empty_relations += n_rel
    extra = _extra_predicates([p.graph for p in given])
    out.multi_predicate_images = int((extra > 0).sum())
    out.multi_predicate_entries = int(extra.sum())
    out.scored_images, out.tied_score_images = _tied_scores(given)
    if merged_masks is not None:
        merged = [merged_masks[p.image_id] for p in given
                  if p.masks is not None and p.image_id in merged_masks]
        out.mask_images = len(merged)
        out.duplicate_mask_images = sum(1 for n in merged if n > 0)
        out.duplicate_masks = int(sum(merged))
    return out


def _extra_predicates(graphs: list[np.ndarray]) -> np.ndarray:
    """Per graph list, its distinct triplets minus its distinct (subject, object) pairs:
    one sort of packed (image, subject, object, predicate) keys for all of them (int32
    keys when they fit: half the sort)."""
    sizes = np.fromiter((len(g) for g in graphs), np.int64, len(graphs))
    if not sizes.sum():
        return np.zeros(len(graphs), dtype=np.int64)
    rows = np.concatenate(graphs).astype(np.int64, copy=False).reshape(-1, 3)
    n = int(rows.max()) + 1  # one bound for instance and predicate indices
    bound = len(graphs) * n ** 3
    if bound >= 1 << 62:  # indices too large to pack in int64: sort the columns instead
        return _extra_predicates_wide(rows, sizes)
    image = np.repeat(np.arange(len(graphs), dtype=np.int64), sizes)
    key = ((image * n + rows[:, 0]) * n + rows[:, 1]) * n + rows[:, 2]
    key = np.sort(key.astype(np.int32) if bound < 1 << 31 else key)
    pair = key // n
    extra = np.zeros(len(key), dtype=bool)
    extra[1:] = (pair[1:] == pair[:-1]) & (key[1:] != key[:-1])
    return np.bincount(pair[extra] // (n * n), minlength=len(graphs))


def _extra_predicates_wide(rows: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``_extra_predicates`` for indices too large to pack: a sort of the columns."""
    image = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    order = np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0], image))
    cols = np.column_stack([image, rows])[order]
    extra = np.zeros(len(cols), dtype=bool)
    extra[1:] = ((cols[1:, :3] == cols[:-1, :3]).all(axis=1)
                 & (cols[1:, 3] != cols[:-1, 3]))
    return np.bincount(cols[extra, 0], minlength=len(sizes))


def _tied_scores(preds: list[ImagePred]) -> tuple[int, int]:
    """(images with two or more instances, each scored; of them, those whose instance
    scores are all equal)."""
    scored = [np.asarray(p.scores, dtype=np.float64) for p in preds
              if p.scores is not None and len(p.scores) > 1]
    if not scored:
        return 0, 0
    starts = np.cumsum([0, *(len(s) for s in scored[:-1])])
    values = np.concatenate(scored)
    tied = np.maximum.reduceat(values, starts) == np.minimum.reduceat(values, starts)
    return len(scored), int(tied.sum())


class KnownTestSet(NamedTuple):
    """A benchmark's test set, recognised by its predicate vocabulary (size and first
    names)."""

    name: str
    n_images: int
    n_predicates: int
    first_predicates: tuple[str, ...]


#: test sets whose size a GT store is compared with (the PSG test split of OpenPSG's
#: psg.json; Scene-Graph-Benchmark.pytorch's VG150 test split)
KNOWN_TEST_SETS = (
    KnownTestSet("PSG", 2177, 56, ("over", "in front of", "beside")),
    KnownTestSet("VG150", 26446, 50, ("above", "across", "against")),
)


def known_test_set(predicates: Sequence[str]) -> KnownTestSet | None:
    """The known test set whose vocabulary these predicate names are, if any."""
    for known in KNOWN_TEST_SETS:
        if (len(predicates) == known.n_predicates
                and tuple(predicates[:len(known.first_predicates)]) == known.first_predicates):
            return known
    return None


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "0%"


def _left_out_under() -> str:
    """``, except under P, which leaves them out ...`` for the registered protocols that
    leave images without relation proposals out (none: nothing)."""
    from sgdask.protocols import PROTOCOLS

    names = [p.name for p in PROTOCOLS.values() if p.leaves_out(None)]
    if not names:
        return ""
    which = "which leaves" if len(names) == 1 else "which leave"
    return (f", except under {', '.join(names)}, {which} them out as "
            "Scene-Graph-Benchmark.pytorch does (images without relation proposals)")


def lint_warnings(counts: LintCounts, gt_images: int | None = None,
                  predicates: Sequence[str] = ()) -> list[dict[str, str]]:
    """The warnings the counts give, each ``{"code", "message"}`` (docs: Metrics and
    protocols, "Protocol lint", a row per code); ``gt_images``: the GT store's images,
    ``predicates``: its predicate names (for ``test-subset``)."""
    out = []

    def warn(code: str, message: str) -> None:
        out.append({"code": code, "message": message})

    c = counts
    if c.multi_predicate_images:
        warn("several-predicates-per-pair",
             f"{c.multi_predicate_images} of {c.images} images list several predicates for "
             f"one (subject, object) pair in the graph-constraint list "
             f"({c.multi_predicate_entries} entries beyond a pair's first predicate): "
             "singlempo keeps each pair's first; an evaluator that takes the list as given "
             "(as SGBench and OpenPSG do) reports no-graph-constraint recall under the name "
             "of graph-constraint recall")
    if c.duplicate_masks:
        warn("duplicate-masks",
             f"{c.duplicate_masks} predicted masks in {c.duplicate_mask_images} of "
             f"{c.mask_images} images overlap a higher-scored (or, unscored, earlier) mask "
             "by IoU > 0.5: singlempo merges them; an evaluator that matches every mask "
             "(as SGBench and OpenPSG do) lets the copies hit one GT instance several "
             "times, which raises recall")
    if c.missing_images:
        warn("missing-images",
             f"{c.missing_images} of {c.images} evaluated images have no prediction, "
             f"holding {c.missing_relations} of {c.gt_relations} GT relations "
             f"({_share(c.missing_relations, c.gt_relations)}): scored 0 here; an evaluator "
             "that loops over the submission's images (or a loader that filtered them "
             "out) reports its numbers on fewer images")
    if c.empty_images:
        warn("empty-graph-lists",
             f"{c.empty_images} of {c.images} evaluated images have a prediction with an "
             f"empty graph list, holding {c.empty_relations} GT relations "
             f"({_share(c.empty_relations, c.gt_relations)}): scored 0 here"
             f"{_left_out_under()}; a filtered test set looks like this")
    if c.tied_score_images:
        warn("tied-scores",
             f"the instance scores of {c.tied_score_images} of the {c.scored_images} images "
             "with scores are all equal: the mask merge takes their instances in file "
             "order; an evaluator that ranks by score ranks them by file order (a stable "
             "sort) or arbitrarily (an unstable one)")
    if c.triplet_scores_equal:
        warn("tied-triplet-scores",
             f"all {c.triplet_scores} triplet scores of the submission are equal: its "
             "lists' order is their ranking here; an evaluator that ranks triplets by score "
             "ranks them by file order (a stable sort) or arbitrarily (an unstable one)")
    known = known_test_set(list(predicates))
    if known is not None and gt_images is not None and gt_images < known.n_images:
        warn("test-subset",
             f"the GT has {gt_images} images; the {known.name} test set it looks like has "
             f"{known.n_images}: numbers on a subset are not comparable with numbers on "
             "the whole test set")
    return out


def lint_report(counts: LintCounts | None, gt_images: int | None = None,
                predicates: Sequence[str] = ()) -> dict[str, Any]:
    """What a report holds (metrics.json's ``lint``): the counts and the warnings; empty
    without counts (an in-memory ``Evaluator``)."""
    if counts is None:
        return {}
    return {"counts": asdict(counts),
            "warnings": lint_warnings(counts, gt_images, predicates)}
