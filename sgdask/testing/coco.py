"""Synthetic COCO panoptic files: a GT (JSON + PNGs, with VOID pixels and crowd regions)
and a model's predictions of it (boundaries moved, categories confused, segments missed
and made up), for tests and benchmarks (``benchmarks/pq.py``).

Segments are the cells of a coarse Voronoi diagram scaled up, so images of COCO's size
are generated quickly; segment ids are random 24-bit colours, category ids leave gaps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import imagecodecs
import numpy as np

#: category ids with gaps, as COCO's: things first, then stuff
THINGS, STUFF = tuple(range(1, 41, 2)), tuple(range(50, 62))


@dataclass(frozen=True)
class CocoPanoptic:
    """Where the generated files are."""

    gt_json: Path
    gt_masks: Path
    pred_json: Path
    pred_masks: Path


def _cells(rng: np.random.Generator, height: int, width: int, n: int, cell: int,
           seeds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A map of each pixel's nearest seed (``n`` random seeds, or ``seeds`` jittered),
    computed on a grid of ``cell`` pixels and scaled up; and the seeds."""
    h, w = -(-height // cell), -(-width // cell)
    if seeds is None:
        seeds = rng.uniform((0, 0), (h, w), size=(n, 2))
    else:
        seeds = seeds + rng.normal(0, 0.6, size=seeds.shape)
    yy, xx = np.mgrid[0:h, 0:w]
    d = (yy[..., None] - seeds[:, 0]) ** 2 + (xx[..., None] - seeds[:, 1]) ** 2
    small = d.argmin(-1)
    return np.repeat(np.repeat(small, cell, 0), cell, 1)[:height, :width], seeds


def _png(index: np.ndarray, colours: np.ndarray) -> bytes:
    """The panoptic PNG of a map of segment positions (-1: VOID) with these ids."""
    ids = np.where(index >= 0, colours[np.maximum(index, 0)], 0).astype(np.uint32)
    rgb = np.stack([ids & 255, (ids >> 8) & 255, ids >> 16], -1).astype(np.uint8)
    return imagecodecs.png_encode(rgb, level=1)


def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(np.arange(1, 1 << 24), size=n, replace=False)


def write_coco_panoptic(root: Path, n_images: int, seed: int = 0, height: int = 480,
                        width: int = 640, segments: tuple[int, int] = (8, 30),
                        cell: int = 8, crowd: float = 0.05, missing: float = 0.0
                        ) -> CocoPanoptic:
    """A GT of ``n_images`` images and predictions of it under ``root`` (``missing``: the
    fraction of images without prediction)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    files = CocoPanoptic(root / "gt.json", root / "gt", root / "pred.json", root / "pred")
    files.gt_masks.mkdir(parents=True, exist_ok=True)
    files.pred_masks.mkdir(parents=True, exist_ok=True)
    categories = np.array(THINGS + STUFF)
    gt_annotations, pred_annotations = [], []
    for i in range(n_images):
        image_id, name = 1000 + i, f"{1000 + i:012d}.png"
        n = int(rng.integers(*segments))
        cells, seeds = _cells(rng, height, width, n, cell)
        labels = rng.choice(categories, size=n)
        gt = np.where(rng.random(n) < 0.1, -1, np.arange(n))[cells]  # whole cells VOID
        y, x = rng.integers(0, height // 2), rng.integers(0, width // 2)
        gt[y:y + height // 8, x:x + width // 6] = -1  # and a band of VOID
        colours = _ids(rng, n)
        (files.gt_masks / name).write_bytes(_png(gt, colours))
        present, area = np.unique(gt[gt >= 0], return_counts=True)
        is_crowd = (rng.random(n) < crowd) & np.isin(labels, THINGS)
        gt_annotations.append({"image_id": image_id, "file_name": name, "segments_info": [
            {"id": int(colours[s]), "category_id": int(labels[s]), "iscrowd": int(is_crowd[s]),
             "area": int(a), "bbox": [0, 0, 1, 1]} for s, a in zip(present, area, strict=True)]})
        if rng.random() < missing:
            continue
        n_extra = int(rng.integers(0, 4))
        moved, _ = _cells(rng, height, width, n, cell,
                          np.vstack([seeds, rng.uniform((0, 0), seeds.max(0), (n_extra, 2))]))
        pred_labels = np.r_[labels, rng.choice(categories, size=n_extra)]
        confused = rng.random(len(pred_labels)) < 0.15
        pred_labels[confused] = rng.choice(categories, size=int(confused.sum()))
        pred = np.where(rng.random(len(pred_labels)) < 0.08, -1, np.arange(len(pred_labels)))
        pred = pred[moved]
        pred_colours = _ids(rng, len(pred_labels))
        (files.pred_masks / name).write_bytes(_png(pred, pred_colours))
        shown = np.unique(pred[pred >= 0])
        pred_annotations.append({"image_id": image_id, "file_name": name, "segments_info": [
            {"id": int(pred_colours[s]), "category_id": int(pred_labels[s])} for s in shown]})
    files.gt_json.write_text(json.dumps({
        "images": [{"id": a["image_id"], "file_name": a["file_name"].replace(".png", ".jpg"),
                    "height": height, "width": width} for a in gt_annotations],
        "annotations": gt_annotations,
        "categories": [{"id": int(c), "name": f"class{c}", "isthing": int(c in THINGS),
                        "supercategory": "x"} for c in categories]}))
    files.pred_json.write_text(json.dumps({"annotations": pred_annotations}))
    return files
