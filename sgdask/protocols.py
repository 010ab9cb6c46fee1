"""Named, versioned protocols (SPEC section 5): every result records name and version.

Bump a protocol's version whenever anything it computes changes, so that cached results
computed under the old definition are never mixed with new ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sgdask.errors import Choose, SettingError

# Version of the metric definitions shared by all protocols (kernels, accumulators,
# aggregation). Cached results carry it: bump it when any number could change.
METRICS_VERSION = "2"


@dataclass(frozen=True)
class Protocol:
    """A bundle of evaluation choices.

    ``normalization``: ``singlempo`` | ``dedup`` | ``none``; ``matching``: ``one_to_one`` |
    ``many_to_one`` (instance mappings) | ``triplet`` (legacy triplet-level matching).
    ``missing_counts_in_means``: an image without prediction scores 0 in the mean metrics
    (else it is left out of them, as SGBench 1.0.0 does). ``prank_over_cells``: PRank is the
    mean over all defined (image, predicate) cells (SGBench) instead of following the
    aggregation mode. ``zero_area_boxes_match``: two zero-area boxes of one category match
    (SGBench 1.0.0 divides 0 by 0 and its argmax takes the NaN).

    Scene-Graph-Benchmark.pytorch's conventions (``sgbpytorch``), each a flag of its own:
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
    part as -1; the cut at k comes first, so the rule never pulls later triplets in. It
    changes every metric read from the graph list's top k (R@k, mR@k, zR@k, mzR@k), not
    PR@k (the pairs stay the same), the NG list or A@k (which selects its own entries).

    ``open_images``: the Open Images V6 relationship evaluation (``oiv6``): each image's
    candidates come from its pairs' best predicates (``ImagePred.pairs``), ranked by
    subject x object x predicate score, and the protocol reports pooled R@50 and average
    precision (``sgdask.kernels.oiv6``, ``sgdask.metrics.oiv6``); ``ks``: the ks the
    protocol has (``--k`` is refused), None: any.

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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


SINGLEMPO = Protocol(
    name="singlempo",
    version="1.0",
    normalization="singlempo",
    matching="one_to_one",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="fair protocol: mask merge, relation dedup, graph constraint, 1:1 matching",
)

SGBENCH = Protocol(
    name="sgbench",
    version="1.0.0.1",  # .1: zero-area boxes match as in sgbench 1.0.0 (NaN IoU)
    normalization="dedup",
    matching="many_to_one",
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces sgbench==1.0.0: exact-duplicate removal, many-to-one matching",
    zero_area_boxes_match=True,
)

SGBENCH2 = Protocol(
    name="sgbench2",
    version="2.0.0",
    normalization="dedup",
    matching="many_to_one",
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces SGBench 2.0.0 (lorjul/sgbench v2, 26bf50e): sgbench's rules, "
                "and inside the top k only the first triplet of each remapped pair counts",
    zero_area_boxes_match=True,
    first_triplet_per_remapped_pair=True,
)

MULTIMPO = Protocol(
    name="multimpo",
    # 2.0: mR@k and mNgR@k over every predicate of the vocabulary, as OpenPSG prints them
    # (1.0 averaged the occurring predicates; that mean is now a diagnostic)
    version="2.0",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="legacy OpenPSG / Neural-MOTIFS: triplet-level matching, duplicates allowed",
    mean_over_vocabulary=True,
)

SGBPYTORCH = Protocol(
    name="sgbpytorch",
    # 1.1: boxes are matched on mask stores too (1 matched their masks there)
    version="1.1",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,  # (images without proposals are skipped altogether)
    prank_over_cells=False,
    description="reproduces Scene-Graph-Benchmark.pytorch (boxes, VG150): triplet-level "
                "matching with inclusive box IoU, GT clipped to the image, GT duplicates "
                "kept, images without proposals skipped, NG list cut at 100, mR over the "
                "vocabulary",
    box_iou_inclusive=True,
    clip_gt_boxes=True,
    keep_duplicate_gt=True,
    ng_limit=100,
    skip_images_without_proposals=True,
    mean_over_vocabulary=True,
    pair_accuracy_by_index=True,
    ng_zero_shot=True,
    match_boxes=True,
)

OIV6 = Protocol(
    name="oiv6",
    version="1",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="reproduces the Open Images V6 evaluation of RelDN / BGNN (PySGG): the top "
                "2 predicates of each pair, top 100 candidates by subject x object x "
                "predicate score, pooled R@50, relationship and phrase AP over the test set, "
                "score_wtd",
    box_iou_inclusive=True,
    clip_gt_boxes=True,
    keep_duplicate_gt=True,
    match_boxes=True,
    open_images=True,
    ks="50",
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (SINGLEMPO, SGBENCH, SGBENCH2, MULTIMPO,
                                                      SGBPYTORCH, OIV6)}
DEFAULT_PROTOCOL = SINGLEMPO.name


def get_protocols(names: str) -> tuple[Protocol, ...]:
    """Protocols of a comma-separated list (``singlempo,multimpo``), order kept."""
    found = tuple(dict.fromkeys(get_protocol(n) for n in names.split(",") if n.strip()))
    if not found:
        raise SettingError("protocols", "no protocol given")
    return found


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``, or a clear error listing the known ones (and the
    nearest, for a misspelt name)."""
    try:
        return PROTOCOLS[name.strip().lower()]
    except KeyError:
        raise SettingError("protocols", f"unknown protocol {name.strip()!r}",
                           fix=Choose(name.strip().lower(), tuple(sorted(PROTOCOLS)))) from None
