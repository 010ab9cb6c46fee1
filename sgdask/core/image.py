"""One image's path: its hits under one protocol."""

from __future__ import annotations

from sgdask.core.settings import ScoringSettings, Submission
from sgdask.errors import InputError, InstanceMismatch
from sgdask.protocols import Protocol
from sgdask.types import ImageGT, ImageHits, ImagePred


def hits_under(gt: ImageGT, pred: ImagePred | None, protocol: Protocol, sub: Submission,
               scoring: ScoringSettings, shared: dict) -> ImageHits:
    """One image's hits under one protocol (without zero-shot flags: ``with_zero_shot``
    adds them, ``with_zero_shot_all`` for many images at once); ``shared``: what the
    image's protocols share (one dict per image and submission)."""
    if pred is None:
        return protocol.missing_image_hits(gt, sub.with_ng)
    try:
        return protocol.image_hits(gt, pred, sub.with_ng, scoring.match_labels, shared,
                                   scoring.legacy)
    except InstanceMismatch as err:  # any other kernel exception is a bug in sgdask
        raise InputError(sub.url, err.parts, image=gt.image_id, field="instances") from err
