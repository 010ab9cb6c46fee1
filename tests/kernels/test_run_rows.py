"""Masks decoded from COCO RLE runs straight into word rows (``sgdask.kernels.bits.run_rows``,
PVSG's predicted tubes) equal the plain path: each string decoded to a dense mask
(``decode_rle``, checked against pycocotools in ``tests/differential/test_pvsg.py``), then
packed (``row_words``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.io.codecs.coco_rle import checked_runs, decode_rle, encode_rle
from sgdask.kernels.bits import row_words, run_rows


@st.composite
def stacks(draw) -> np.ndarray:
    """1-4 masks up to 40 x 150 (several 64-bit words a row), sparse to full."""
    h, w, n = draw(st.integers(1, 40)), draw(st.integers(1, 150)), draw(st.integers(1, 4))
    seed, density = draw(st.integers(0, 2**32 - 1)), draw(st.sampled_from([0, 0.05, 0.5, 1]))
    return np.random.default_rng(seed).random((n, h, w)) < density


@settings(max_examples=150, deadline=None)
@given(stacks())
def test_runs_to_rows_equal_dense_decoding_then_packing(masks):
    _, h, w = masks.shape
    texts = [encode_rle(m) for m in masks]
    runs = []
    for text in texts:
        found, problem = checked_runs(text, h, w)
        assert problem is None
        runs.append(found)
    offsets = np.cumsum([0] + [len(r) for r in runs])
    dense = np.ascontiguousarray(np.stack([decode_rle(text, h, w) for text in texts]))
    assert np.array_equal(dense, masks)
    assert np.array_equal(run_rows(np.concatenate(runs), offsets, h, w), row_words(dense))
