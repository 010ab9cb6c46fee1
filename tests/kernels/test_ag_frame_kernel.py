"""The per-frame path the ``ag`` protocols run (``sgdask.io.actiongenome.frame_outputs`` then
``sgdask.kernels.ag.frame_first_hits``) gives, frame by frame and k by k, the literal twin's
hits (``tests/literal/ag.py``) on generated frames full of ties, zeros and boxes at exactly
IoU 0.5; and each GT pair's first candidate on it (any predicate) as the plain reading."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.io.actiongenome import frame_outputs
from sgdask.kernels import ag
from sgdask.kernels.hits import gt_pair_rows
from tests.kernels.test_ag_kernel import KS, frames
from tests.literal import ag as literal_ag


def _pair_first(frame, pred, constraint: str) -> list[int]:
    """Per distinct GT pair, the rank of the first ranked candidate whose classes and boxes
    match it (plain Python over the twin's candidates)."""
    cands = literal_ag.candidates(pred, 0, constraint)
    score = [float(pred.scores[s]) * float(pred.scores[o]) * v for s, o, _, v in cands]
    order = sorted(range(len(cands)), key=lambda i: -score[i])
    out = []
    for g in gt_pair_rows(frame.relations, len(frame.classes)).tolist():
        gs, go, _ = frame.relations[g].tolist()
        found = ag.NEVER
        for rank, i in enumerate(order):
            s, o = cands[i][0], cands[i][1]
            if (int(frame.classes[gs]) == int(pred.labels[s])
                    and int(frame.classes[go]) == int(pred.labels[o])
                    and literal_ag.iou(frame.boxes[gs].tolist(), pred.boxes[s].tolist()) >= 0.5
                    and literal_ag.iou(frame.boxes[go].tolist(), pred.boxes[o].tolist()) >= 0.5):
                found = rank
                break
        out.append(found)
    return out


@settings(max_examples=60, deadline=None)
@given(frames(), st.sampled_from(["with", "semi", "no"]))
def test_frame_path_equals_twin(case, constraint):
    video, pred = case
    outputs = frame_outputs(pred, len(video.frames))
    for f, (frame, output) in enumerate(zip(video.frames, outputs, strict=True)):
        found = literal_ag.frame_hits(frame, pred, f, constraint, KS)
        pairs = gt_pair_rows(frame.relations, len(frame.classes))
        first, pair_first = ag.frame_first_hits(frame, output, constraint, pairs=pairs)
        for k in KS:
            assert set(np.flatnonzero(first < k).tolist()) == found[k], (f, constraint, k)
        assert pair_first.tolist() == _pair_first(frame, output, constraint)
