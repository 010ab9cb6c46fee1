"""``pair_runs``: the pixels each (predicted, GT) pair of segments shares, from two images as
runs, equal to counting pixel by pixel; ids the GT's JSON does not list in their column, the
first id the prediction's JSON does not list (raster order) reported."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.kernels.panoptic import pair_runs, rgb_runs


def _rgb(ids: np.ndarray) -> np.ndarray:
    return np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], -1).astype(np.uint8)


def _by_pixel(gt: np.ndarray, gt_ids: list[int], pred: np.ndarray, pred_ids: list[int]
              ) -> tuple[np.ndarray, int]:
    table = np.zeros((len(pred_ids) + 1, len(gt_ids) + 2), dtype=np.int64)
    for g, p in zip(gt.ravel().tolist(), pred.ravel().tolist(), strict=True):
        if p and p not in pred_ids:
            return table, p
        row = len(pred_ids) if p == 0 else pred_ids.index(p)
        column = (len(gt_ids) if g == 0 else gt_ids.index(g) if g in gt_ids
                  else len(gt_ids) + 1)
        table[row, column] += 1
    return table, -1


@settings(deadline=None, max_examples=120)
@given(st.data())
def test_pairs_of_runs_count_as_pixels_do(data: st.DataObject) -> None:
    height, width = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    palette = [0, 1, 256, 65536, 70000, 2**24 - 1]
    gt = np.asarray(data.draw(st.lists(st.sampled_from(palette), min_size=height * width,
                                       max_size=height * width))).reshape(height, width)
    pred = np.asarray(data.draw(st.lists(st.sampled_from(palette), min_size=height * width,
                                         max_size=height * width))).reshape(height, width)
    gt_ids = data.draw(st.lists(st.sampled_from(palette[1:]), unique=True))
    pred_ids = data.draw(st.lists(st.sampled_from(palette[1:]), unique=True))
    expected, first = _by_pixel(gt, gt_ids, pred, pred_ids)
    table, unlisted = pair_runs(*rgb_runs(_rgb(gt)), np.asarray(gt_ids, dtype=np.int64),
                                *rgb_runs(_rgb(pred)), np.asarray(pred_ids, dtype=np.int64))
    assert unlisted == first
    if first < 0:
        np.testing.assert_array_equal(table, expected)


def test_runs_of_an_image_in_raster_order() -> None:
    ids = np.array([[5, 5, 0], [0, 7, 7]])
    ends, runs = rgb_runs(_rgb(ids))
    assert ends.tolist() == [2, 4, 6] and runs.tolist() == [5, 0, 7]
