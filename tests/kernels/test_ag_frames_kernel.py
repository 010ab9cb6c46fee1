"""The Action Genome batch path (``sgdask.kernels.ag.stacked_first_hits_modes``: many frames
in one compiled call, which the ``ag`` protocols' ``share_partition`` runs on a partition's
frames) equals the per-frame path (``frame_first_hits_modes`` on each frame, itself checked
against the literal twin in ``test_ag_kernel.py``): every frame's first hits and GT pairs'
first candidates under every mode, on generated videos full of ties, zeros, frames without
pairs and boxes at exactly IoU 0.5; and the protocols' hits with the partition shared are
those of frame by frame, with box scores of two dtypes and frames without prediction."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.io.actiongenome import frame_outputs
from sgdask.kernels import ag
from sgdask.kernels.hits import gt_pair_rows
from sgdask.protocols import get_protocols
from sgdask.types_ag import CONSTRAINTS, AGFrame, AGVideo, AGVideoPred
from tests.kernels.test_ag_kernel import frames
from tests.protocols.test_ag_protocol import _frame_gt, _frame_pred


def _frames_of(videos: list[tuple[AGVideo, AGVideoPred]]
               ) -> list[tuple[AGFrame, AGVideoPred]]:
    """Every video's frames (renamed apart) with their outputs, videos one after another."""
    out = []
    for v, (video, pred) in enumerate(videos):
        outputs = frame_outputs(pred, len(video.frames))
        out += [(replace(frame, name=f"{v}/{frame.name}"), output)
                for frame, output in zip(video.frames, outputs, strict=True)]
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=3), st.sampled_from([ag.SEMI_THRESHOLD, 0.5]))
def test_frames_kernel_equals_the_frame_kernel(videos, threshold):
    pairs = _frames_of(videos)
    first, at, pair_first, pair_at = ag.stacked_first_hits_modes(
        [frame.relations for frame, _ in pairs], [frame.boxes for frame, _ in pairs],
        [frame.classes for frame, _ in pairs], [output for _, output in pairs], threshold)
    assert first.shape == (len(CONSTRAINTS), at[-1])
    assert pair_first.shape == (len(CONSTRAINTS), pair_at[-1])
    for f, (frame, output) in enumerate(pairs):
        rows = gt_pair_rows(frame.relations, len(frame.classes))
        alone = ag.frame_first_hits_modes(frame, output, CONSTRAINTS, threshold, rows)
        for m, (one, one_pairs) in enumerate(alone):
            assert np.array_equal(first[m, at[f]:at[f + 1]], one), (f, m)
            assert np.array_equal(pair_first[m, pair_at[f]:pair_at[f + 1]], one_pairs), (f, m)


def test_no_frames():
    first, at, pair_first, pair_at = ag.stacked_first_hits_modes([], [], [], [])
    assert first.shape == (3, 0) and pair_first.shape == (3, 0)
    assert at.tolist() == [0] and pair_at.tolist() == [0]


@settings(max_examples=20, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=3), st.data())
def test_share_partition_equals_frame_by_frame(videos, data):
    """Videos whose box scores are float32 or float64 (two kernel calls), some frames
    without prediction: each protocol's hits of each frame, with ``share_partition`` run
    first, are its hits of the frame alone."""
    videos = [(video, replace(pred, scores=pred.scores.astype(data.draw(
        st.sampled_from([np.float32, np.float64]))))) for video, pred in videos]
    pairs = _frames_of(videos)
    gts = [_frame_gt(frame) for frame, _ in pairs]
    preds = {frame.name: _frame_pred(frame.name, output) for frame, output in pairs
             if data.draw(st.integers(0, 4)) > 0}
    shared: list[dict] = [{} for _ in gts]
    protocols = get_protocols("ag")
    for protocol in protocols:
        protocol.share_partition(gts, preds, shared)
    assert all(bool(cache) == (gt.image_id in preds) for gt, cache in zip(gts, shared,
                                                                          strict=True))
    for protocol in protocols:
        for gt, cache in zip(gts, shared, strict=True):
            pred = preds.get(gt.image_id)
            if pred is None:
                continue
            got = protocol.image_hits(gt, pred, shared=cache)
            alone = protocol.image_hits(gt, pred)
            assert np.array_equal(got.relations, alone.relations)
            assert np.array_equal(got.graph_first, alone.graph_first), gt.image_id
            assert np.array_equal(got.pair_first, alone.pair_first), gt.image_id
            assert got.diagnostics == alone.diagnostics
