"""The evaluation unit: what a bootstrap resample and a paired test's swap draw.

A protocol's unit (``Protocol.unit``) is ``image``, or a group of images such as ``video``
(its frames). Frames of one video are not independent draws from the population of videos
(a model that fails on one video fails on most of its frames), so intervals and tests draw
whole units, each carrying every term of its images: the clustered bootstrap. Resample b
draws ``integers(0, U, U)`` over the U units in canonical order (sorted ids), and an image's
weight is the number of times its unit was drawn; a swap moves all of a unit's images from
one model to the other. Under ``image`` every image is its own unit and nothing changes:
the draws, the weights and so every interval and p-value are those of the per-image
bootstrap, bit for bit.

Pure numpy: the term tables (``sgdask.stats.table.TermTable``) carry each image's unit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sgdask.stats.table import TermTable

IMAGE_UNIT = "image"


def unit_index(table: TermTable) -> np.ndarray | None:
    """Per image (canonical order) the index of its unit among the table's units sorted by
    id; None when every image is its own unit."""
    if table.units is None or table.unit == IMAGE_UNIT:
        return None
    return np.unique(np.asarray([str(u) for u in table.units]), return_inverse=True)[1] \
        .reshape(-1).astype(np.int64)


def shared_index(tables: Sequence[TermTable]) -> np.ndarray | None:
    """``unit_index`` of tables that must be resampled together (the same images, in a
    comparison): they must group their images alike."""
    first = tables[0]
    for table in tables[1:]:
        if table.unit != first.unit or (table.units is None) != (first.units is None) or (
                first.units is not None and not np.array_equal(table.units, first.units)):
            raise ValueError("compared evaluations group their images into other units "
                             f"({first.unit} vs {table.unit})")
    return unit_index(first)


def n_units(index: np.ndarray | None, n_images: int) -> int:
    """How many units there are to draw from."""
    return n_images if index is None else int(index.max(initial=-1)) + 1


def per_image(unit_values: np.ndarray, index: np.ndarray | None) -> np.ndarray:
    """(B x units) values -> (B x images): each image takes its unit's value (with no
    grouping the values are the images' own)."""
    return unit_values if index is None else np.ascontiguousarray(unit_values[:, index])


def unit_of(table: TermTable) -> str:
    """The name of the unit the table resamples by."""
    return table.unit if table.units is not None else IMAGE_UNIT
