"""The per-partition scoring loop: decoded images in, a partition result out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sgdask.core.image import hits_under
from sgdask.core.lint import LintCounts, partition_lint
from sgdask.core.result import PartitionResult
from sgdask.core.settings import ScoringSettings, Submission
from sgdask.errors import SgdaskError
from sgdask.kernels.selection import parse_ks
from sgdask.metrics.base import Block, Context
from sgdask.metrics.state import StateRows
from sgdask.metrics.terms import batch_blocks, inputs_of, skipped_diagnostics, with_zero_shot_all
from sgdask.protocols import Protocol
from sgdask.types import ImageGT, ImageHits, ImagePred


def scored_partition(gts: Sequence[ImageGT],
                     decoded: Iterable[tuple[Submission, Mapping[str, ImagePred]]],
                     scoring: ScoringSettings, result: PartitionResult | None = None
                     ) -> PartitionResult:
    """Every submission under each of its protocols on one partition's GT images, added to
    ``result`` (default: a new one). ``decoded`` yields each submission with its
    predictions for these images by image id (an image it lacks: the model gave nothing),
    one submission at a time, so that a task need not hold every submission's predictions
    at once; images of a submission share their protocol-independent work. Each
    submission's protocol lint counts are added too (``sgdask.core.lint``)."""
    out = PartitionResult() if result is None else result
    for sub, preds in decoded:
        shared: list[dict] = [{} for _ in gts]
        for protocol in sub.protocols:
            protocol.share_partition(gts, preds, shared)
        merged_masks: dict[str, int] | None = None
        for protocol in sub.protocols:
            skipped: dict[str, int] = {}
            hits = []
            for gt, cache in zip(gts, shared, strict=True):
                pred = preds.get(gt.image_id)
                if protocol.leaves_out(pred):
                    for name, value in skipped_diagnostics(pred is None).items():
                        skipped[name] = skipped.get(name, 0) + value
                    continue
                hits.append(hits_under(gt, pred, protocol, sub, scoring, cache))
            if merged_masks is None and protocol.merges_masks():
                merged_masks = _merged_masks(hits)
            with_zero_shot_all(hits, scoring.zero_shot)
            blocks = term_blocks(hits, protocol, sub.with_ng, scoring, sub.data) if hits \
                else []
            out.add((sub.name, protocol.name), hits, blocks, skipped, protocol.unit,
                    units_of(gts, protocol.unit))
        out.lint[sub.name] = out.lint.get(sub.name, LintCounts()).merged(
            partition_lint(gts, preds, merged_masks))
    return out


def units_of(gts: Sequence[ImageGT], unit: str) -> dict[str, str] | None:
    """Image id -> the id of its unit (None under the unit ``image``: every image its own).
    The pipeline checks the GT store records the unit before any task runs
    (``sgdask.io.units``)."""
    if unit == "image":
        return None
    missing = next((gt.image_id for gt in gts if unit not in gt.units), None)
    if missing is not None:
        raise SgdaskError(f"GT image {missing}: no {unit} recorded (the protocol resamples "
                          f"by {unit}; give a GT store that records each image's {unit})")
    return {gt.image_id: gt.units[unit] for gt in gts}


def _merged_masks(hits: list[ImageHits]) -> dict[str, int]:
    """Image id -> predicted masks the mask merge merged into another (the lint's
    duplicate masks: counted by the normalization, not again)."""
    return {h.image_id: h.diagnostics.get("masks_merged", 0) for h in hits if not h.missing}


def term_blocks(hits: list[ImageHits], protocol: Protocol, with_ng: bool,
                scoring: ScoringSettings, data: frozenset[str] = frozenset()
                ) -> list[Block | StateRows]:
    """The term blocks (and declared states' rows) of a batch of hits (zero-shot flags
    already set): every active family's vectorized terms; ``data``: as ``inputs_of``."""
    inputs = inputs_of(protocol, with_ng, scoring.zero_shot is not None, scoring.legacy, data)
    ks = scoring.ks if protocol.ks is None else parse_ks(protocol.ks)  # a protocol's own ks
    return batch_blocks(hits, Context(ks), protocol, inputs, scoring.families)
