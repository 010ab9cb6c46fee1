"""What a protocol is: a named, versioned set of evaluation rules that says what it does.

A ``Protocol`` records its choices as data (``as_dict``: what every report keeps under
``protocol``) and answers, as behaviour, every question the rest of sgdask asks of it: how
one image is scored (``image_hits``: its normalisation and per-image hit function, through
the pure kernels of ``sgdask.kernels.image``), which images it leaves out, what inputs its
metrics have (``inputs``), how its mean metrics run, what its report adds (``notes``,
``withheld``) and what it refuses. A protocol family that differs in behaviour subclasses
it (``sgbpytorch``, ``oiv6``); one that only differs in data is an instance. Nothing
outside ``sgdask.protocols`` reads the recorded choices.

The class declares, for the registry (``sgdask.protocols.register``):

- ``families``: metric families of its own (``oiv6``'s AP), registered with the metric
  registry;
- ``needs``: inputs it provides that metrics may need, each with the reason such a metric
  is left out under a protocol without them (``sgdask.metrics.base.NEEDS``);
- ``not_listed``: of those, the inputs whose absence means the metric is not part of an
  evaluation at all (not listed as left out);
- ``exclusive``: inputs that make an evaluation report only the metrics that need them,
  with the reason every other metric is left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from sgdask.errors import Option, Text
from sgdask.types import ImageGT, ImageHits, ImagePred

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sgdask.kernels.image import ImageRules
    from sgdask.metrics.base import Family

# Version of the metric definitions shared by all protocols (kernels, accumulators,
# aggregation). Cached results carry it: bump it when any number could change.
METRICS_VERSION = "2"

#: why a protocol cannot do something: the pieces of a one-line error (settings named as
#: ``Option``s, rendered for whoever reads it)
Refusal = tuple[str | Option, ...]


@dataclass(frozen=True)
class Protocol:
    """A bundle of evaluation choices (bump ``version`` whenever anything it computes
    changes, so that cached results computed under the old definition are never mixed
    with new ones).

    ``normalization``: ``singlempo`` | ``dedup`` | ``none``; ``matching``: ``one_to_one`` |
    ``many_to_one`` (instance mappings) | ``triplet`` (legacy triplet-level matching).
    ``missing_counts_in_means``: an image without prediction scores 0 in the mean metrics
    (else it is left out of them, as SGBench 1.0.0 does). ``prank_over_cells``: PRank is the
    mean over all defined (image, predicate) cells (SGBench) instead of following the
    aggregation mode. ``zero_area_boxes_match``: two zero-area boxes of one category match
    (SGBench 1.0.0 divides 0 by 0 and its argmax takes the NaN).

    Scene-Graph-Benchmark.pytorch's conventions, each a field of its own:
    ``box_iou_inclusive``: box IoU in inclusive pixel coordinates (``+1`` on width and
    height) in float32, as maskrcnn_benchmark's ``boxlist_iou``; ``clip_gt_boxes``: GT
    boxes clipped to the image (``[0, width - 1] x [0, height - 1]``) before matching;
    ``keep_duplicate_gt``: GT relations kept as given (duplicates count); ``ng_limit``: the
    NG list cut at this many entries; ``skip_images_without_proposals``: an image whose
    graph list is empty, or that the submission lacks, is left out of every metric (and
    counted); ``mean_over_vocabulary``: mR@k and mNgR@k are printed as the mean over every
    predicate of the vocabulary, an absent predicate counting 0 (the mean over the
    occurring predicates stays in the report as a diagnostic); ``pair_accuracy_by_index``:
    A@k counts predictions whose (subject, object) indices are a GT pair, valid only when
    every image's predicted boxes are its GT boxes in the same order; ``ng_zero_shot``:
    report ngzR@k (zero-shot recall of the NG list); ``match_boxes``: instances are matched
    by their boxes even when both sides also have masks (a box protocol).

    ``first_triplet_per_remapped_pair`` (SGBench 2.0.0's ``deduplicate_pairs``): after the
    top k of the graph list are remapped through the instance mapping, only the first
    triplet of each remapped (subject, object) pair counts, a side without a match taking
    part as -1; the cut at k comes first, so the rule never pulls later triplets in.

    ``open_images``: recorded by the Open Images V6 protocol (its behaviour is its class);
    ``ks``: the ks the protocol has (``ks`` of the settings is refused), None: any;
    ``unit``: the evaluation unit that bootstrap intervals and paired tests resample:
    ``image``, or a group whose members are images (``video``: frames), which the GT store
    records per image (``sgdask.stats.units``).
    """

    name: str
    version: str
    normalization: str
    matching: str
    missing_counts_in_means: bool
    prank_over_cells: bool
    description: str
    zero_area_boxes_match: bool = False
    box_iou_inclusive: bool = False
    clip_gt_boxes: bool = False
    keep_duplicate_gt: bool = False
    ng_limit: int | None = None
    skip_images_without_proposals: bool = False
    mean_over_vocabulary: bool = False
    pair_accuracy_by_index: bool = False
    ng_zero_shot: bool = False
    match_boxes: bool = False
    first_triplet_per_remapped_pair: bool = False
    open_images: bool = False
    ks: str | None = None
    unit: str = "image"

    families: ClassVar[tuple[Family, ...]] = ()
    needs: ClassVar[dict[str, Text]] = {}
    not_listed: ClassVar[frozenset[str]] = frozenset()
    exclusive: ClassVar[dict[str, str]] = {}

    def as_dict(self) -> dict[str, object]:
        """The choices as every report records them (``Report.protocol``)."""
        return asdict(self)

    # --------------------------------------------------------------- one image

    @cached_property
    def rules(self) -> ImageRules:
        """The per-image rules the kernels apply."""
        from sgdask.kernels.image import ImageRules  # numba's kernels load when first used

        return ImageRules(self.normalization, self.matching, self.zero_area_boxes_match,
                          self.box_iou_inclusive, self.clip_gt_boxes, self.keep_duplicate_gt,
                          self.ng_limit, self.pair_accuracy_by_index,
                          self.first_triplet_per_remapped_pair, self.match_boxes, self.name)

    def leaves_out(self, pred: ImagePred | None) -> bool:
        """True when the protocol leaves this image out of every metric (and counts it):
        no prediction, or no relation proposals, under a protocol that skips those."""
        if not self.skip_images_without_proposals:  # (called per image: no import then)
            return False
        from sgdask.kernels.image import without_proposals

        return without_proposals(pred)

    def share_partition(self, gts: Sequence[ImageGT], preds: Mapping[str, ImagePred],
                        shared: Sequence[dict]) -> None:
        """Put what the protocols of each image share (``shared[i]``: ``gts[i]``'s) in for a
        whole partition at once, when the protocol can compute it faster so; by default
        nothing: each image computes its own on first use (``image_hits``)."""

    def image_hits(self, gt: ImageGT, pred: ImagePred, with_ng: bool = True,
                   match_labels: bool = True, shared: dict | None = None,
                   legacy: bool = True) -> ImageHits:
        """Every hit position of one image (``shared``: what the protocols of one image
        share; ``legacy``: also the positions only the legacy metrics use)."""
        from sgdask.kernels.image import image_hits

        return image_hits(gt, pred, self.rules, with_ng, match_labels, shared, legacy)

    def missing_image_hits(self, gt: ImageGT, with_ng: bool = True) -> ImageHits:
        """An image of the GT without prediction: nothing hits, no PRank value."""
        from sgdask.kernels.image import missing_image_hits

        return missing_image_hits(gt, self.rules, with_ng)

    def merges_masks(self) -> bool:
        """Whether the protocol merges overlapping predicted masks (the lint then counts
        the merged masks from its hits)."""
        return self.normalization == "singlempo"

    # --------------------------------------------------------------- metrics

    def inputs(self, with_ng: bool, has_stats: bool, legacy: bool,
               data: frozenset[str] = frozenset()) -> set[str]:
        """The inputs an evaluation under this protocol has (what metrics may need:
        ``sgdask.metrics.base.NEEDS``); ``data``: what its data hold beyond lists."""
        inputs = {"graph", *data}
        if with_ng:
            inputs.add("ng")
        if self.matching != "triplet":
            inputs.update(("mapping", "pairs"))
        if self.pair_accuracy_by_index:
            inputs.add("pairs")
        if self.ng_zero_shot:
            inputs.add("ngz")
        if has_stats:
            inputs.add("stats")
        if legacy:
            inputs.add("legacy")
        return inputs

    def counts_in_means(self, missing: bool) -> bool:
        """Whether an image adds per-predicate terms to the mean metrics (``missing``: the
        submission lacks it)."""
        return not missing or self.missing_counts_in_means

    def mean_over_cells(self, prefix: str) -> bool:
        """Whether the mean metric of this prefix is the mean over all (image, predicate)
        cells instead of following the aggregation mode (SGBench's PRank)."""
        return self.prank_over_cells and prefix == "PRank"

    def aggregation_for(self, requested: str) -> str:
        """The aggregation mode its mean metrics follow when ``requested`` is asked for (a
        protocol whose reference fixes one answers it whatever is asked)."""
        return requested

    def means_over_vocabulary(self) -> bool:
        """Whether mR@k and mNgR@k are printed as means over the whole predicate
        vocabulary (an absent predicate counting 0)."""
        return self.mean_over_vocabulary

    # --------------------------------------------------------------- the report

    def notes(self, absent: int) -> list[str]:
        """Lines the report carries (``absent``: predicates of the vocabulary that never
        occur in the evaluated GT)."""
        return []

    def withheld(self, metrics: dict[str, float], diagnostics: dict[str, int]
                 ) -> tuple[dict[str, float], dict[str, str]]:
        """The metrics the report keeps and the left-out reasons of the ones the protocol
        withholds, given the evaluation's diagnostic totals."""
        return metrics, {}

    def board_metrics(self) -> tuple[str, ...]:
        """The metrics a leaderboard of this protocol shows as columns, when it is not the
        image board (``sgdask.batch.rerank``'s): empty for the image protocols."""
        return ()

    # --------------------------------------------------------------- refusals

    def submission_refusal(self, manifest: dict[str, Any]) -> Refusal | None:
        """Why a converted submission (its manifest) cannot be scored, or None."""
        return None

    def evaluator_refusal(self) -> Refusal | None:
        """Why the in-memory ``Evaluator`` cannot score under this protocol, or None."""
        return None

    def compare_refusal(self) -> Refusal | None:
        """Why reports read back from disk (without their states) cannot be compared
        under this protocol, or None."""
        return None


def recorded(record: dict[str, Any], known: dict[str, Protocol]) -> Protocol:
    """The protocol a report recorded (``Report.protocol``): its recorded choices (a choice
    it does not record: off), with the behaviour of the registered protocol of its name
    (the base protocol's when none is registered)."""
    names = {f.name for f in fields(Protocol)}
    base = known.get(str(record.get("name")))
    cls = Protocol if base is None else base.__class__
    return cls(**{"name": "?", "version": "?", "normalization": "none", "matching": "triplet",
                  "missing_counts_in_means": True, "prank_over_cells": False,
                  "description": "", **{k: v for k, v in record.items() if k in names}})
