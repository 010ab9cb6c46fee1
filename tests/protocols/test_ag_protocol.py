"""The ``ag-with`` / ``ag-semi`` / ``ag-no`` protocols frame by frame: their ``image_hits``
on a GT frame (as the store gives it: 0-based categories) and the frame's output (as the
tasks decode it: ``frame_outputs``) give the literal twin's hits at every k
(``tests/literal/ag.py``), the same with the three modes sharing a frame's rows; a frame
without prediction hits nothing; a prediction that is not a video model's output is
refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.errors import InstanceMismatch
from sgdask.io.actiongenome import frame_outputs
from sgdask.protocols import get_protocol, get_protocols
from sgdask.types import ImageGT, ImagePred
from sgdask.types_ag import AGFrame, AGFramePred, AGVideo, AGVideoPred
from tests.kernels.test_ag_kernel import KS, frames
from tests.literal import ag as literal_ag

MODES = ("ag-with", "ag-semi", "ag-no")


def _frame_gt(frame) -> ImageGT:
    return ImageGT(frame.name, frame.classes - 1, frame.relations, boxes=frame.boxes,
                   units={"video": "v"})


def _frame_pred(name: str, output: AGVideoPred) -> AGFramePred:
    graph = np.column_stack([output.pairs, np.zeros(len(output.pairs), np.int64)])
    return AGFramePred(name, output.labels - 1, graph, boxes=output.boxes,
                       scores=output.scores, output=output)


def assert_agrees(case: tuple[AGVideo, AGVideoPred], name: str) -> None:
    """Every frame's first hits under protocol ``name`` are the twin's at every k."""
    video, pred = case
    protocol = get_protocol(name)
    constraint = name.split("-")[1]
    for f, (frame, output) in enumerate(zip(video.frames, frame_outputs(pred, len(video.frames)),
                                            strict=True)):
        hits = protocol.image_hits(_frame_gt(frame), _frame_pred(frame.name, output))
        found = literal_ag.frame_hits(frame, pred, f, constraint, KS)
        for k in KS:
            assert set(np.flatnonzero(hits.graph_first < k).tolist()) == found[k], (f, k)


@settings(max_examples=40, deadline=None)
@given(frames(), st.sampled_from(MODES))
def test_each_mode_equals_the_twin(case, name):
    assert_agrees(case, name)


@settings(max_examples=20, deadline=None)
@given(frames())
def test_the_modes_sharing_a_frames_rows_change_nothing(case):
    video, pred = case
    for frame, output in zip(video.frames, frame_outputs(pred, len(video.frames)), strict=True):
        shared: dict = {}
        gt, fp = _frame_gt(frame), _frame_pred(frame.name, output)
        for protocol in get_protocols("ag"):
            alone = protocol.image_hits(gt, fp).graph_first
            assert np.array_equal(protocol.image_hits(gt, fp, shared=shared).graph_first,
                                  alone)


def test_missing_frames_and_foreign_predictions():
    frame = AGFrame("v.mp4/000001.png", np.array([[0, 0, 9, 9], [20, 20, 29, 29]], float),
                    np.array([1, 5]), np.array([[0, 1, 0], [1, 0, 5], [0, 1, 14]]))
    gt = _frame_gt(frame)
    protocol = get_protocol("ag-no")
    missing = protocol.missing_image_hits(gt)
    assert missing.missing and (missing.graph_first == np.iinfo(np.int64).max).all()
    with pytest.raises(InstanceMismatch, match="video model's output"):
        protocol.image_hits(gt, ImagePred(frame.name, frame.classes - 1,
                                          np.zeros((0, 3), np.int64)))
    assert [p.name for p in get_protocols("ag")] == list(MODES)
    assert all(p.unit == "video" and p.aggregation_for("image") == "pooled"
               for p in get_protocols("ag"))
