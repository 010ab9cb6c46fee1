"""What a metric family declares, and what its term functions receive and return.

A family computes *terms*: exact (numerator, denominator) pairs per image (image-level
metrics, ``R@50``), per image and predicate (mean metrics, ``mR@50``) or per image to be
summed before dividing (ratio metrics, ``A@50``). The accumulator (``sgdask.core.accum``) sums
them exactly and finalizes them under an aggregation mode; families never aggregate.

Every family has a plain per-image function (``image_terms``: the literal definition,
readable next to the SPEC) and may have a vectorized one over a whole partition
(``batch_terms``: the fast path). A test checks that both agree on random inputs; a family
without ``batch_terms`` runs through the plain one.

A family whose metrics need more than sums (average precision's runs of scored hits,
panoptic quality's IoUs) declares state (``sgdask.metrics.state``) and emits its rows next
to its terms; its ``derive`` reads the merged state's final form. DERIVED metrics read any
final value: a mean metric's per-predicate values, any metric's dataset value, a state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from sgdask.errors import Audience, Option, Text
from sgdask.kernels.selection import NEVER, KSpec
from sgdask.metrics.state import StateRows, StateSpec
from sgdask.types import Detections, ImageHits, PanopticHits, Term

IMAGE, MEAN, RATIO, DERIVED = "image", "mean", "ratio", "derived"
PERCENT, RANK = "percent", "rank"

# Inputs a metric may need, checked in this order; the first one missing is the reason a
# metric is left out of a report ({protocol}: the report's protocol). Options are named as
# data (``sgdask.errors.Option``): a report keeps the command line's rendering
# (``need_reason``), ``print(report)`` shows the Python API's (``reason_for``).
NEEDS: dict[str, Text] = {
    "legacy": ("legacy metric, off by default (", Option("legacy", True), ")"),
    "ng": "the submission has no ng_triplets (NG list)",
    "mapping": "needs an instance mapping; {protocol} matches triplets",
    "pairs": "needs an instance mapping; {protocol} matches triplets",
    "stats": ("no training statistics (the GT has no train_image_ids; give ",
              Option("stats", "FILE"), " from `sgdask stats`)"),
    "groups": ("no predicate groups: the GT is not VG150 and has no training statistics to "
               "split its predicates by frequency (give ", Option("stats", "FILE"),
               " from `sgdask stats`, or ", Option("predicate_groups", "FILE"), ")"),
    "predicate_means": (Option("aggregation", "image"), " averages each image's predicates: "
                        "a group's mean needs per-predicate values (",
                        Option("aggregation", "per_predicate"), " or pooled)"),
    "masks": "needs masks on both sides: the submission has boxes (boxes have no panoptic "
             "segmentation; an SGBench ZIP of masks has)",
    "crowd": "the GT store does not record iscrowd (store format version < 4: ingest the GT "
             "again with this sgdask)",
    "things": "the categories' thing/stuff split is unknown (Evaluator(things=N))",
}


def rendered(text: Text, audience: Audience) -> str:
    """``text`` with its options named for ``audience`` (``--stats`` or ``stats``)."""
    pieces = (text,) if isinstance(text, str) else text
    return "".join(p if isinstance(p, str) else p.render(audience) for p in pieces)


def need_reason(need: str) -> str:
    """Why a metric that needs ``need`` is left out, as a report keeps it (the command
    line's rendering)."""
    return rendered(NEEDS[need], "cli")


def reason_for(reason: str, audience: Audience) -> str:
    """A left-out reason as a report keeps it (the command line's) for ``audience``."""
    for text in NEEDS.values():
        if reason == rendered(text, "cli"):
            return rendered(text, audience)
    return reason


# Inputs whose absence means the metric is not part of the evaluation at all: such a
# metric is not listed under "left out" (a box evaluation has no panoptic quality), unless
# the evaluation has the input of LISTED_WITH (boxes scored against a GT with masks).
NOT_LISTED = {"masks"}
LISTED_WITH = {"masks": "gt_masks"}

# Inputs that make an evaluation report only the metrics that need them: every other
# metric is left out with this reason.
EXCLUSIVE: dict[str, str] = {}
# (Protocols add the inputs they provide to these three: ``sgdask.metrics.declare_inputs``.)


@dataclass(frozen=True)
class Metric:
    """One metric name, or one per k (``per_k``: ``R@20``, ``R@x10``...).

    ``kind``: IMAGE (mean over images of per-image values), MEAN (per predicate, then over
    predicates, under the aggregation mode), RATIO (total numerator / total denominator)
    or DERIVED (computed by the family's ``derive`` from other metrics' final values or
    from the family's declared state).
    ``display``: PERCENT (recalls) or RANK (a mean rank, lower is better).
    ``grouped``: one value per predicate group G (``mR@50[head]``; ``Context.groups``).
    ``board``: the ks (or ``("",)`` for a metric without k) shown on the leaderboard.
    ``empty_reason``: why the metric is left out when its inputs exist but no image has a
    value (zero-shot recall without zero-shot GT triplets). ``note``: a line every report
    with the metric carries (whether a MEAN metric is the mean over all (image, predicate)
    cells instead of following the aggregation mode is the protocol's:
    ``Protocol.mean_over_cells``).
    """

    prefix: str
    kind: str
    description: str
    per_k: bool = True
    needs: tuple[str, ...] = ()
    display: str = PERCENT
    board: tuple[str, ...] = ()
    empty_reason: str | None = None
    note: str | None = None
    grouped: bool = False

    def names(self, ks: tuple[KSpec, ...]) -> list[str]:
        """Its names for these ks (none for a grouped metric: its names depend on an
        evaluation's groups)."""
        if self.grouped:
            return []
        return [f"{self.prefix}@{k.label}" for k in ks] if self.per_k else [self.prefix]

    @property
    def key(self) -> str:
        """What tells the metric from the others of its prefix (``mR[G]`` for the grouped
        mR, ``R@inf``, ``mR``)."""
        return f"{self.prefix}[G]" if self.grouped else self.prefix

    @property
    def left_out_key(self) -> str:
        """How the report names the whole metric when it is left out (``ngR@k``,
        ``mR@k[G]``)."""
        if self.grouped:
            return f"{self.prefix}@k[G]"
        return f"{self.prefix}@k" if self.per_k else self.prefix

    @property
    def lower_is_better(self) -> bool:
        return self.display == RANK


@dataclass
class Context:
    """What an evaluation asks for, as the term and derive functions see it.

    ``groups``: predicate groups (name -> predicate ids) the grouped metrics run over;
    ``occurring``: under a protocol whose mean metrics run over the whole predicate
    vocabulary (an absent predicate counting 0), per such metric (``mR@50``) the predicates
    with a value on the evaluated data (not on a resample); None when means run over the
    predicates with a value; ``things``: the thing categories (the others are stuff; None:
    the split is unknown).
    """

    ks: tuple[KSpec, ...]
    aggregation: str = "per_predicate"
    tau: float = 0.5
    composition: dict[int, int] | None = None
    groups: dict[str, tuple[int, ...]] | None = None
    occurring: dict[str, frozenset[int]] | None = None
    things: frozenset[int] | None = None
    n_predicates: int | None = None  # the GT's predicate vocabulary, when known


@dataclass
class Terms:
    """Terms of one image: metric name -> term (image, ratio) or -> predicate -> term;
    ``states``: rows of the family's declared states."""

    image: dict[str, Term] = field(default_factory=dict)
    predicate: dict[str, dict[int, Term]] = field(default_factory=dict)
    ratio: dict[str, Term] = field(default_factory=dict)
    states: list[StateRows] = field(default_factory=list)


@dataclass
class Block:
    """Terms of one metric over many images: rows of (image, [predicate,] num, den)."""

    name: str
    kind: str
    image: np.ndarray
    num: np.ndarray
    den: np.ndarray
    predicate: np.ndarray | None = None


def _nothing(_: str) -> None:
    return None


class Finals:
    """Read access to finalized values, for DERIVED metrics.

    ``predicate_values(name)``: a mean metric's per-predicate values (predicates with a
    value); ``value(name)``: any non-derived metric's dataset value as reported (``R@50``,
    ``mR@50``; None without one); ``state(name)``: a declared state's final form
    (``StateSpec.final``; None where there is none: the bootstrap gives a resampled
    state's (``Ratios``, ``Counts``) from its weighted sums, keys whose sums are all 0
    left out, and no other state's, so a metric derived from those gets no interval).
    In the report per-predicate values are exact Fractions and dataset values floats; in
    the bootstrap all are floats.
    """

    def __init__(self, predicate_values: Callable[[str], dict[int, Any]],
                 value: Callable[[str], Any] = _nothing,
                 state: Callable[[str], dict[int, Any] | None] = _nothing) -> None:
        self.predicate_values = predicate_values
        self.value = value
        self.state = state


class FinalColumns:
    """``Finals`` for many weightings of the images at once (``derive_columns``):
    ``predicate_values(name)``: a mean metric's predicate ids and values (predicates x
    weightings, NaN: no value); ``value(name)``: any non-derived metric's values per
    weighting (NaN: none; None where not given); ``state(name)``: a resampled state's keys
    and its two weighted sums (keys x weightings each; None where there is none)."""

    def __init__(self, predicate_values: PredicateColumns,
                 value: Callable[[str], np.ndarray | None] = _nothing,
                 state: Callable[[str], StateColumns | None] = _nothing) -> None:
        self.predicate_values = predicate_values
        self.value = value
        self.state = state


PredicateColumns = Callable[[str], tuple[np.ndarray, np.ndarray]]
StateColumns = tuple[np.ndarray, np.ndarray, np.ndarray]  # keys, first sums, second sums


@dataclass(frozen=True)
class Family:
    """A metric family: its metrics and how their terms are computed.

    ``image_terms(hits, ctx)``: the terms of one image (the literal path; None for a
    family whose metrics are all DERIVED from other metrics' values: it computes no terms,
    so it costs nothing per image);
    ``batch_terms(batch, ctx)``: the same for every image of a partition at once (optional);
    ``derive(finals, ctx)``: values of the family's DERIVED metrics from ``Finals``
    (optional; the bootstrap and the paired tests call it on every resample, with or
    without training statistics);
    ``derive_columns(columns, ctx)``: the same for many weightings of the images at once
    (the bootstrap's resamples; optional, a faster twin): ``columns`` is a
    ``FinalColumns``, the result one array of values per derived metric, equal to
    ``derive`` on each column;
    ``states``: the family's declared states (``sgdask.metrics.state``), their rows emitted
    by ``image_terms`` (``Terms.states``) and ``batch_terms`` (next to its blocks; a
    resampled state's rows with their images);
    ``category_rows(finals, ctx)``: the family's columns of the report's per-category table
    (one dict per category, with its ``category``; optional);
    ``notes(diagnostics)``: lines the report carries, from its diagnostic totals (optional);
    ``derive_predicates(finals, ctx)``: per-predicate values of its own (columns of the
    per-predicate table, e.g. average precision's ``AP_rel``), optional;
    ``state_diagnostics(finals)``: counts the report's diagnostics get from the state
    (e.g. tied detections of a ranking), optional;
    ``state_samples(finals, image_ids, ctx)``: a function of image weights (resamples x
    images, in ``image_ids`` order) giving the family's metrics and per-predicate values
    under them, from its states' final forms (by state name): how its metrics get
    bootstrap intervals (the bootstrap resamples terms; a family whose metrics come from
    state gives its own values), optional;
    ``state_swaps(finals_a, finals_b, image_ids, ctx)``: a function of swap masks
    (permutations x images) giving both models' metrics with those images' contributions
    swapped (``compare``'s approximate randomization), optional.
    """

    name: str
    metrics: tuple[Metric, ...]
    image_terms: Callable[[ImageHits, Context], Terms] | None = None
    batch_terms: Callable[[HitsBatch, Context], list[Block | StateRows]] | None = None
    derive: Callable[[Finals, Context], dict[str, Fraction | float]] | None = None
    derive_columns: Callable[[FinalColumns, Context], dict[str, np.ndarray]] | None = None
    states: tuple[StateSpec, ...] = ()
    category_rows: Callable[[Finals, Context], list[dict[str, Any]]] | None = None
    notes: Callable[[dict[str, int]], list[str]] | None = None
    state_swaps: Callable[..., Callable[[np.ndarray], tuple[dict[str, np.ndarray], ...]]] \
        | None = None
    derive_predicates: Callable[[Finals, Context], dict[str, dict[int, float]]] | None = None
    state_diagnostics: Callable[[Finals], dict[str, int]] | None = None
    state_samples: Callable[..., Callable[[np.ndarray], tuple[dict[str, np.ndarray],
                                                              dict[str, np.ndarray]]]] | None \
        = None


@dataclass
class HitsBatch:
    """The ImageHits of many images, concatenated (images numbered 0..n-1).

    Per GT triplet: ``t_image`` (its image) and every hit array of ImageHits; per GT pair:
    ``q_image``, ``pair_first``; per image: ``n_gt_triplets``, ``n_instances``,
    ``n_matched``, ``missing``, ``panoptic`` (its ``PanopticHits`` or None);
    ``reachable``: GT triplets whose subject and object were both matched. ``group``
    numbers the (image, predicate) cells of the GT triplets in order; ``group_image``,
    ``group_predicate``, ``group_count`` describe them.
    ``detections``: under a protocol that ranks candidates, every image's ranked candidates
    concatenated, with ``d_image`` their image (None otherwise).
    """

    image_ids: list[str]
    missing: np.ndarray
    n_gt_triplets: np.ndarray
    n_instances: np.ndarray
    n_matched: np.ndarray
    t_image: np.ndarray
    predicates: np.ndarray
    reachable: np.ndarray
    graph_first: np.ndarray
    q_image: np.ndarray
    pair_first: np.ndarray
    ng_first: np.ndarray | None
    imr_first: np.ndarray | None
    prank: np.ndarray | None
    legacy_first: np.ndarray | None
    zero_shot: np.ndarray | None
    group: np.ndarray
    group_image: np.ndarray
    group_predicate: np.ndarray
    group_count: np.ndarray
    panoptic: list[PanopticHits | None] = field(default_factory=list)
    detections: Detections | None = None
    d_image: np.ndarray | None = None

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    def k_per_triplet(self, k: KSpec) -> np.ndarray:
        """The k of each GT triplet's image (relative ks resolve per image)."""
        if k.absolute is not None:
            return np.full(len(self.t_image), k.absolute, dtype=np.int64)
        return self.k_per_image(k)[self.t_image]

    def k_per_image(self, k: KSpec) -> np.ndarray:
        """k of each image: ``ceil(F * |G|)`` for a relative k, exactly (F = p/q)."""
        if k.absolute is not None:
            return np.full(self.n_images, k.absolute, dtype=np.int64)
        assert k.factor is not None
        p, q = k.factor.numerator, k.factor.denominator
        return -((-p * self.n_gt_triplets) // q)


def concat(parts: list[np.ndarray], dtype: type = np.int64) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)


FILL = {"prank": -1, "zero_shot": False}  # an image without the array: nothing found


def optional(images: list[ImageHits], name: str) -> np.ndarray | None:
    """A hit array over all images (an image without it counts as nothing found, e.g. no
    PRank for an image without prediction), or None when no image has it."""
    values = [getattr(h, name) for h in images]
    present = [i for i, v in enumerate(values) if v is not None]
    if not present:
        return None
    starts = np.cumsum([0, *(h.n_gt_triplets for h in images)])
    out = np.full(starts[-1], FILL.get(name, NEVER), bool if name == "zero_shot" else np.int64)
    for i in present:  # the filled array written once, not one array per image concatenated
        out[starts[i]:starts[i + 1]] = values[i]
    return out


def batch_of(images: list[ImageHits]) -> HitsBatch:
    """Concatenate the hits of ``images``."""
    n_gt_triplets = np.array([h.n_gt_triplets for h in images], dtype=np.int64)
    t_image = np.repeat(np.arange(len(images), dtype=np.int64), n_gt_triplets)
    relations = concat([h.relations.reshape(-1, 3) for h in images]).reshape(-1, 3)
    predicates = relations[:, 2]
    n_instances = np.array([len(h.matched_gt) for h in images], dtype=np.int64)
    # every image's matched flags in one array: an image's instance i at its offset + i
    matched = concat([h.matched_gt for h in images], bool)
    matched_before = np.zeros(len(matched) + 1, np.int64)
    np.cumsum(matched, out=matched_before[1:])
    starts = np.cumsum(n_instances) - n_instances
    shift = starts[t_image]
    reachable = matched[relations[:, 0] + shift] & matched[relations[:, 1] + shift]
    n_pairs = np.array([len(h.pair_first) for h in images], dtype=np.int64)
    top = int(predicates.max(initial=0)) + 1
    cells, group = np.unique(t_image * top + predicates, return_inverse=True)
    return HitsBatch(
        image_ids=[h.image_id for h in images],
        missing=np.array([h.missing for h in images], dtype=bool),
        n_gt_triplets=n_gt_triplets,
        n_instances=n_instances,
        n_matched=matched_before[starts + n_instances] - matched_before[starts],
        t_image=t_image, predicates=predicates, reachable=reachable,
        graph_first=concat([h.graph_first for h in images]),
        q_image=np.repeat(np.arange(len(images), dtype=np.int64), n_pairs),
        pair_first=concat([h.pair_first for h in images]),
        ng_first=optional(images, "ng_first"), imr_first=optional(images, "imr_first"),
        prank=optional(images, "prank"), legacy_first=optional(images, "legacy_first"),
        zero_shot=optional(images, "zero_shot"),
        group=group.reshape(-1), group_image=cells // top, group_predicate=cells % top,
        group_count=np.bincount(group.reshape(-1), minlength=len(cells)).astype(np.int64),
        panoptic=[h.panoptic for h in images],
        **detections_of(images))


def detections_of(images: list[ImageHits]) -> dict[str, Detections | np.ndarray]:
    """The images' detections concatenated, with their image (nothing when no image has
    any: only a protocol that ranks candidates has them)."""
    found = [(i, h.detections) for i, h in enumerate(images) if h.detections is not None]
    if not found:
        return {}
    sizes = [len(d) for _, d in found]
    return {"detections": Detections(*(np.concatenate([getattr(d, f) for _, d in found])
                                       for f in ("predicates", "scores", "tp_rel", "tp_phr"))),
            "d_image": np.repeat(np.array([i for i, _ in found], np.int64), sizes)}


def recall_blocks(batch: HitsBatch, hit_first: np.ndarray, ks: tuple[KSpec, ...],
                  image_prefix: str | None, mean_prefix: str | None,
                  select: np.ndarray | None = None) -> list[Block]:
    """Image-level and per-predicate recall blocks for every k, from first-hit positions
    over (a ``select``-ed subset of) the GT triplets; relative k uses every GT triplet."""
    keep = np.ones(len(hit_first), dtype=bool) if select is None else select
    images = batch.t_image[keep]
    counts = np.bincount(images, minlength=batch.n_images)
    present = np.flatnonzero(counts)
    groups, group_inverse = np.unique(batch.group[keep], return_inverse=True)
    group_counts = np.bincount(group_inverse.reshape(-1), minlength=len(groups))
    blocks = []
    for k in ks:
        hit = (hit_first[keep] < batch.k_per_triplet(k)[keep]).astype(np.int64)
        if image_prefix:
            per_image = np.bincount(images, weights=hit, minlength=batch.n_images)
            blocks.append(Block(f"{image_prefix}@{k.label}", IMAGE, present,
                                per_image[present].astype(np.int64), counts[present]))
        if mean_prefix:
            per_group = np.bincount(group_inverse.reshape(-1), weights=hit,
                                    minlength=len(groups)).astype(np.int64)
            blocks.append(Block(f"{mean_prefix}@{k.label}", MEAN, batch.group_image[groups],
                                per_group, group_counts.astype(np.int64),
                                batch.group_predicate[groups]))
    return blocks


def recall_terms(hit: np.ndarray, predicates: np.ndarray) -> tuple[Term, dict[int, Term]]:
    """Image recall and per-predicate recall terms from a boolean hit per GT triplet."""
    overall = (int(np.count_nonzero(hit)), len(hit))
    per_predicate: dict[int, Term] = {}
    for p in sorted(set(predicates.tolist())):
        sel = predicates == p
        per_predicate[p] = (int(np.count_nonzero(hit[sel])), int(sel.sum()))
    return overall, per_predicate


def add_recalls(terms: Terms, first: np.ndarray, predicates: np.ndarray,
                ks: tuple[KSpec, ...], n_gt_triplets: int, image_prefix: str | None,
                mean_prefix: str | None) -> None:
    """Recall terms for every k (relative k resolves with ``n_gt_triplets``, all GT triplets)."""
    for k in ks:
        overall, per_predicate = recall_terms(first < k.resolve(n_gt_triplets), predicates)
        if image_prefix:
            terms.image[f"{image_prefix}@{k.label}"] = overall
        if mean_prefix:
            terms.predicate[f"{mean_prefix}@{k.label}"] = per_predicate
