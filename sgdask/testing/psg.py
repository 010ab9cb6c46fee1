"""A deterministic synthetic PSG-shaped dataset that looks like a real model's output.

``write_dataset`` writes OpenPSG ground truth (``psg.json`` plus panoptic PNGs) and an SGBench
submission for it (a ZIP of layered TIFF masks and a box-only JSON). The predictions imitate a
panoptic scene graph model: perturbed copies of most GT segments, some with a wrong category,
duplicate masks, false positives, a 100-triplet graph list that recovers roughly two thirds of
the GT relations and a ~300-triplet no-graph-constraint list. Same seed, same bytes.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

THING_CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

STUFF_CLASSES: tuple[str, ...] = (
    "banner", "blanket", "bridge", "cardboard", "counter", "curtain", "door-stuff", "floor-wood",
    "flower", "fruit", "gravel", "house", "light", "mirror-stuff", "net", "pillow", "platform",
    "playingfield", "railroad", "river", "road", "roof", "sand", "sea", "shelf", "snow",
    "stairs", "tent", "towel", "wall-brick", "wall-stone", "wall-tile", "wall-wood",
    "water-other", "window-blind", "window-other", "tree-merged", "fence-merged",
    "ceiling-merged", "sky-other-merged", "cabinet-merged", "table-merged",
    "floor-other-merged", "pavement-merged", "mountain-merged", "grass-merged", "dirt-merged",
    "paper-merged", "food-other-merged", "building-other-merged", "rock-merged",
    "wall-other-merged", "rug-merged",
)  # fmt: skip

PREDICATE_CLASSES: tuple[str, ...] = (
    "over", "in front of", "beside", "on", "in", "attached to", "hanging from", "on back of",
    "falling off", "going down", "painted on", "walking on", "running on", "crossing",
    "standing on", "lying on", "sitting on", "flying over", "jumping over", "jumping from",
    "wearing", "holding", "carrying", "looking at", "guiding", "kissing", "eating", "drinking",
    "feeding", "biting", "catching", "picking", "playing with", "chasing", "climbing",
    "cleaning", "playing", "touching", "pushing", "pulling", "opening", "cooking", "talking to",
    "throwing", "slicing", "driving", "riding", "parked on", "driving on", "about to hit",
    "kicking", "swinging", "entering", "exiting", "enclosing", "leaning on",
)  # fmt: skip

N_THING = len(THING_CLASSES)
N_STUFF = len(STUFF_CLASSES)
N_PREDICATE = len(PREDICATE_CLASSES)

MIN_SEGMENT_PIXELS = 64
GRAPH_SIZE = 100
NG_PER_PAIR = 3

_MIN_PRED_PIXELS = 16
_DETECTION_RATE = 0.85
_WRONG_CATEGORY_RATE = 0.05
_DUPLICATE_RATE = 0.15
_DUPLICATE_MIN_IOU = 0.5
_POOR_MASK_RATE = 0.08
_RELATION_RECALL = 0.9  # of the GT relations whose two segments both got a predicted mask
_VIA_DUPLICATE_RATE = 0.3
_NG_GT_ALTERNATIVE_RATE = 0.5
_MEAN_RELATIONS_FOR_COVERAGE = 6
_ZIP_TIMESTAMP = (1980, 1, 1, 0, 0, 0)


def _zipf_weights(n: int, exponent: float) -> np.ndarray:
    """Long-tailed class frequencies: the k-th class is drawn proportionally to 1 / k**exponent."""
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


_PREDICATE_WEIGHTS = _zipf_weights(N_PREDICATE, 1.2)
# Chance that a recovered relation keeps its true predicate: like real models, the synthetic
# one favours frequent predicates, so mean recall ends up below recall.
_PREDICATE_ACCURACY = np.linspace(0.9, 0.45, N_PREDICATE)
_THING_WEIGHTS = _zipf_weights(N_THING, 0.9)
_STUFF_WEIGHTS = _zipf_weights(N_STUFF, 0.7)


@dataclass(frozen=True)
class SynthPaths:
    """Where ``write_dataset`` put each artefact."""

    root: Path
    psg_json: Path
    masks_dir: Path
    submission_zip: Path
    submission_boxes: Path


def synth_paths(root: str | Path) -> SynthPaths:
    """The artefact locations under ``root`` (nothing is created)."""
    root = Path(root)
    return SynthPaths(
        root=root,
        psg_json=root / "psg.json",
        masks_dir=root / "panoptic",
        submission_zip=root / "submission.zip",
        submission_boxes=root / "submission_boxes.json",
    )


# --------------------------------------------------------------------------- ground truth


@dataclass(frozen=True)
class _StuffLayout:
    """Anisotropic Voronoi seeds plus a per-column row offset: wavy, mostly horizontal bands."""

    centers: np.ndarray  # (n_stuff, 2) float (y, x)
    y_weight: float
    wave: np.ndarray  # (width,) int row offsets


@dataclass(frozen=True)
class _Scene:
    """One GT image: label image (segment index, -1 = void) and per-segment facts."""

    label: np.ndarray  # (h, w) int16
    categories: np.ndarray  # (n,) 0-based over thing + stuff classes
    is_thing: np.ndarray  # (n,) bool
    areas: np.ndarray  # (n,) int64
    boxes: np.ndarray  # (n, 4) int64 [x1, y1, x2, y2], x2/y2 exclusive


def _stuff_layout(rng: np.random.Generator, h: int, w: int, n_stuff: int) -> _StuffLayout:
    centers = rng.random((n_stuff, 2)) * np.array([h, w])
    y_weight = float(rng.uniform(1.0, 6.0))
    amplitude = rng.uniform(0.0, 0.04) * h
    period = rng.uniform(0.3, 1.0) * w
    phase = rng.uniform(0.0, 2 * np.pi)
    wave = np.rint(amplitude * np.sin(2 * np.pi * np.arange(w) / period + phase))
    return _StuffLayout(centers=centers, y_weight=y_weight, wave=wave.astype(np.intp))


def _stuff_map(layout: _StuffLayout, h: int, w: int, keep: np.ndarray) -> np.ndarray:
    """(h, w) int16 index of the nearest kept stuff seed for every pixel.

    Row y of column x is measured at y + wave[x]. Within a column the weighted squared distance
    to seed k is, up to a term shared by all seeds, linear in y, so each column splits into at
    most one run per seed. The runs come from the lines' pairwise crossings and are filled with
    one np.repeat, far cheaper than a per-pixel argmin over seeds.
    """
    seeds = np.flatnonzero(keep)
    order = seeds[np.argsort(layout.centers[seeds, 0])]  # by row: runs go top to bottom
    cy, cx = layout.centers[order, 0], layout.centers[order, 1]
    slope = -2.0 * layout.y_weight * cy
    offset = layout.y_weight * cy**2 + (np.arange(w)[:, None] - cx[None, :]) ** 2  # (w, k)
    slope_gap = slope[None, :] - slope[:, None]
    np.fill_diagonal(slope_gap, 1.0)
    crossing = (offset[:, :, None] - offset[:, None, :]) / slope_gap  # [x, j, k]
    k = len(order)
    starts = np.where(np.triu(np.ones((k, k), dtype=bool), 1), crossing, -np.inf).max(axis=1)
    stops = np.where(np.tril(np.ones((k, k), dtype=bool), -1), crossing, np.inf).min(axis=1)
    ends = np.where(starts < stops, np.clip(np.ceil(stops - layout.wave[:, None]), 0, h), 0)
    lengths = np.diff(np.maximum.accumulate(ends, axis=1).astype(np.intp), axis=1, prepend=0)
    columns = np.repeat(np.tile(order.astype(np.int16), w), lengths.ravel()).reshape(w, h)
    return np.ascontiguousarray(columns.T)


def _ellipse(yy: np.ndarray, xx: np.ndarray, a: float, b: float, theta: float) -> np.ndarray:
    """Pixels inside an ellipse centred at the origin, semi-axes a (at angle theta) and b.

    Written as a quadratic form so that most terms stay one-dimensional until the last sums.
    """
    c, s = np.cos(theta), np.sin(theta)
    x2 = (c / a) ** 2 + (s / b) ** 2
    y2 = (s / a) ** 2 + (c / b) ** 2
    xy = 2 * c * s * (1 / a**2 - 1 / b**2)
    return (x2 * xx**2 + y2 * yy**2) + (xy * xx) * yy <= 1.0


def _ellipse_parts(rng: np.random.Generator, radius: float, n: int) -> np.ndarray:
    """(n, 5) ellipses (dy, dx, a, b, theta) near the origin; several overlap into a blob."""
    aspect = np.exp(rng.normal(0.0, 0.4, n))
    scale = radius * (rng.uniform(0.5, 0.8, n) if n > 1 else np.ones(1))
    offsets = radius * rng.uniform(-0.4, 0.4, (n, 2)) * (n > 1)
    return np.column_stack(
        [offsets, scale * np.sqrt(aspect), scale / np.sqrt(aspect), rng.uniform(0, np.pi, n)]
    )


def _shape_mask(
    rng: np.random.Generator, h: int, w: int, radius: float
) -> tuple[np.ndarray, int, int]:
    """A random ellipse, rectangle or blob (overlapping ellipses) centred inside the image.

    Returns the shape's boolean window, already clipped to the image, and its top-left corner.
    """
    kind = rng.integers(3)
    parts = _ellipse_parts(rng, radius, 3 if kind == 2 else 1)
    centres = parts[:, :2] + rng.random(2) * np.array([h, w])
    reach = parts[:, 2:4].max(axis=1)[:, None]
    lows = np.maximum(centres - reach, 0).astype(int)
    highs = np.minimum(centres + reach + 2, [h, w]).astype(int)
    (top, left), (bottom, right) = lows.min(axis=0), highs.max(axis=0)
    mask = np.zeros((bottom - top, right - left), dtype=bool)
    for (cy, cx), (a, b, theta), (y0, x0), (y1, x1) in zip(
        centres.tolist(), parts[:, 2:].tolist(), lows.tolist(), highs.tolist(), strict=True
    ):
        yy = (np.arange(y0, y1, dtype=np.float32) - np.float32(cy))[:, None]
        xx = (np.arange(x0, x1, dtype=np.float32) - np.float32(cx))[None, :]
        part = (np.abs(yy) <= b) & (np.abs(xx) <= a) if kind == 1 else _ellipse(yy, xx, a, b, theta)
        mask[y0 - top : y1 - top, x0 - left : x1 - left] |= part
    return mask, int(top), int(left)


def _clipped(mask: np.ndarray, top: int, left: int, h: int, w: int) -> tuple[np.ndarray, int, int]:
    """The part of a window that lies inside an (h, w) image, and its top-left corner."""
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + mask.shape[0], h), min(left + mask.shape[1], w)
    return mask[y0 - top : max(y1, y0) - top, x0 - left : max(x1, x0) - left], y0, x0


def _paint(label: np.ndarray, mask: np.ndarray, top: int, left: int, value: int) -> None:
    """Paints an in-image window mask onto the label image."""
    label[top : top + mask.shape[0], left : left + mask.shape[1]][mask] = value


def _thing_radii(rng: np.random.Generator, n: int, h: int, w: int) -> np.ndarray:
    """Log-uniform object sizes, roughly largest first so that small objects stay visible."""
    radii = min(h, w) * np.exp(rng.uniform(np.log(0.03), np.log(0.3), n))
    return radii[np.argsort(-(np.log(radii) + rng.normal(0.0, 0.5, n)))]


def _without_small_segments(
    label: np.ndarray,
    stuff: np.ndarray,
    layout: _StuffLayout,
    n_things: int,
    windows: list[tuple[int, int, int, int]],
) -> np.ndarray:
    """Hands the pixels of segments below the size floor to the stuff underneath.

    Small things give their pixels (found inside their paint ``windows``) to the stuff map;
    small stuff cells lose their seeds and the stuff map is recomputed, which only grows the
    remaining cells, so one pass suffices. If no stuff cell survives, its pixels are left void
    (-1): things then cover nearly everything.
    """
    h, w = label.shape
    n_stuff = len(layout.centers)
    counts = np.bincount(label.ravel(), minlength=n_things + n_stuff)
    stuff_counts = counts[n_things:].copy()
    for thing in np.flatnonzero(counts[:n_things] < MIN_SEGMENT_PIXELS).tolist():
        y0, x0, y1, x1 = windows[thing]
        region = label[y0:y1, x0:x1]
        pixels = region == thing
        underneath = stuff[y0:y1, x0:x1][pixels]
        region[pixels] = underneath + n_things
        stuff_counts += np.bincount(underneath, minlength=n_stuff)
    keep = stuff_counts >= MIN_SEGMENT_PIXELS
    if keep.all():
        return label
    pixels = label >= n_things
    label[pixels] = _stuff_map(layout, h, w, keep)[pixels] + n_things if keep.any() else -1
    return label


def _renumbered(label: np.ndarray, kept: np.ndarray, n: int) -> np.ndarray:
    """The label image with segment ``kept[i]`` renamed i (void stays -1)."""
    lookup = np.full(n + 1, -1, dtype=np.int16)
    lookup[kept + 1] = np.arange(len(kept), dtype=np.int16)
    return lookup.take(label + 1)


def _tight_boxes(label: np.ndarray, n: int) -> np.ndarray:
    """(n, 4) [x1, y1, x2, y2] of each segment's pixels, x2/y2 exclusive.

    Looks only at the first pixel of each horizontal and vertical run: a row holds a segment
    iff one of its runs starts with it, and label images are mostly long runs.
    """
    h, w = label.shape
    seg = (label + 1).ravel()  # void (-1) becomes column 0 and is dropped below
    starts = np.empty(h * w, dtype=bool)
    starts[0] = True
    np.not_equal(seg[1:], seg[:-1], out=starts[1:])
    starts[::w] = True
    at = np.flatnonzero(starts)
    in_row = np.zeros((h, n + 1), dtype=bool)
    in_row[at // w, seg[at]] = True
    starts[:w] = True
    np.not_equal(seg[w:], seg[:-w], out=starts[w:])
    at = np.flatnonzero(starts)
    in_col = np.zeros((w, n + 1), dtype=bool)
    in_col[at % w, seg[at]] = True
    rows, cols = in_row[:, 1:].T, in_col[:, 1:].T
    return np.stack(
        [
            cols.argmax(axis=1),
            rows.argmax(axis=1),
            w - cols[:, ::-1].argmax(axis=1),
            h - rows[:, ::-1].argmax(axis=1),
        ],
        axis=1,
    ).astype(np.int64)


def _segment_categories(rng: np.random.Generator, n_things: int, n_stuff: int) -> np.ndarray:
    """Thing classes with repeats, then distinct stuff classes (COCO merges stuff per class)."""
    things = rng.choice(N_THING, size=n_things, p=_THING_WEIGHTS)
    stuff = N_THING + rng.choice(N_STUFF, size=n_stuff, replace=False, p=_STUFF_WEIGHTS)
    return np.concatenate([things, stuff]).astype(np.int64)


def _scene(rng: np.random.Generator, h: int, w: int) -> _Scene:
    """Stuff cells covering the image, things painted over them (later ones occlude)."""
    n_segments = 8 + int(18 * rng.beta(2.5, 1.0))
    n_stuff = int(rng.integers(2, 7))
    n_things = n_segments - n_stuff
    categories = _segment_categories(rng, n_things, n_stuff)
    layout = _stuff_layout(rng, h, w, n_stuff)
    stuff = _stuff_map(layout, h, w, np.ones(n_stuff, dtype=bool))
    label = (stuff + n_things).astype(np.int16)
    windows = []
    for index, radius in enumerate(_thing_radii(rng, n_things, h, w)):
        mask, top, left = _shape_mask(rng, h, w, radius)
        _paint(label, mask, top, left, index)
        windows.append((top, left, top + mask.shape[0], left + mask.shape[1]))
    label = _without_small_segments(label, stuff, layout, n_things, windows)
    areas = np.bincount(label.ravel() + 1, minlength=n_segments + 1)[1:]
    kept = np.flatnonzero(areas >= MIN_SEGMENT_PIXELS)
    if len(kept) < n_segments:
        label = _renumbered(label, kept, n_segments)
    return _Scene(
        label=label,
        categories=categories[kept],
        is_thing=kept < n_things,
        areas=areas[kept].astype(np.int64),
        boxes=_tight_boxes(label, len(kept)),
    )


def _segment_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """Distinct random panoptic ids in [1, 2**24)."""
    return rng.choice(2**24 - 1, size=n, replace=False).astype(np.int64) + 1


def _subject_object_pairs(rng: np.random.Generator, is_thing: np.ndarray, n: int) -> np.ndarray:
    """Up to n distinct ordered (subject, object) pairs; things are likelier, most as subject."""
    subjects, objects = np.nonzero(~np.eye(len(is_thing), dtype=bool))
    weights = np.where(is_thing[subjects], 4.0, 1.0) * np.where(is_thing[objects], 2.0, 1.0)
    chosen = rng.choice(
        len(subjects), size=min(n, len(subjects)), replace=False, p=weights / weights.sum()
    )
    return np.stack([subjects[chosen], objects[chosen]], axis=1)


def _predicate_except(rng: np.random.Generator, excluded: Collection[int]) -> int:
    """A long-tail predicate draw that avoids ``excluded``."""
    weights = _PREDICATE_WEIGHTS.copy()
    weights[list(excluded)] = 0.0
    return int(rng.choice(N_PREDICATE, p=weights / weights.sum()))


def _relations(rng: np.random.Generator, scene: _Scene, forced: Sequence[int]) -> list[list[int]]:
    """GT relations: ~6 per image (1-12), some pairs with two predicates, no exact repeats.

    ``forced`` predicates come first, one per pair where possible, so that a small split still
    contains every predicate.
    """
    if len(scene.categories) < 2:
        return []
    n_relations = max(1 + int(rng.binomial(11, 0.45)), len(forced))
    n_multi = int(rng.binomial(n_relations - 1, 0.1))
    pairs = _subject_object_pairs(rng, scene.is_thing, n_relations - n_multi)
    drawn = rng.choice(N_PREDICATE, n_relations - len(forced), p=_PREDICATE_WEIGHTS)
    predicates = [*forced, *drawn.tolist()]
    used: dict[tuple[int, int], set[int]] = {}
    relations = []
    for j, predicate in enumerate(predicates):
        s, o = pairs[j] if j < len(pairs) else pairs[rng.integers(len(pairs))]
        on_pair = used.setdefault((int(s), int(o)), set())
        p = int(predicate) if predicate not in on_pair else _predicate_except(rng, on_pair)
        on_pair.add(p)
        relations.append([int(s), int(o), p])
    return relations


def _gt_entry(
    image_id: str, scene: _Scene, seg_ids: np.ndarray, relations: list[list[int]]
) -> dict[str, object]:
    h, w = scene.label.shape
    segments = [
        {"id": int(i), "category_id": int(c), "iscrowd": 0, "isthing": int(t), "area": int(a)}
        for i, c, t, a in zip(seg_ids, scene.categories, scene.is_thing, scene.areas, strict=True)
    ]
    annotations = [
        {"bbox": box.tolist(), "bbox_mode": 0, "category_id": int(c)}
        for box, c in zip(scene.boxes, scene.categories, strict=True)
    ]
    return {
        "image_id": image_id,
        "file_name": f"{image_id}.jpg",
        "height": h,
        "width": w,
        "pan_seg_file_name": f"{image_id}.png",
        "segments_info": segments,
        "annotations": annotations,
        "relations": relations,
    }


def _panoptic_rgb(label: np.ndarray, seg_ids: np.ndarray) -> np.ndarray:
    """COCO panoptic colour encoding: id = R + 256 * G + 65536 * B, void = black."""
    colours = np.zeros((len(seg_ids) + 1, 3), dtype=np.uint8)
    colours[1:] = (seg_ids[:, None] >> np.array([0, 8, 16])) & 0xFF
    return colours.take(label + 1, axis=0)


# --------------------------------------------------------------------------- predictions


@dataclass(frozen=True)
class _Prediction:
    """A model's instances in output order, plus which of them stand for which GT segment."""

    masks: np.ndarray  # (n, h, w) uint8
    categories: np.ndarray  # (n,)
    scores: np.ndarray  # (n,)
    boxes: np.ndarray  # (n, 4) [x1, y1, x2, y2], x2/y2 exclusive
    primary: np.ndarray  # (n_gt,) instance predicting each GT segment, -1 if missed
    duplicate: np.ndarray  # (n_gt,) its duplicate instance, -1 if none


def _dilated(mask: np.ndarray, radius: int) -> np.ndarray:
    """Binary dilation by a (2r+1)-square, done separably with shifted ORs."""
    rows = mask.copy()
    for s in range(1, radius + 1):
        rows[s:] |= mask[:-s]
        rows[:-s] |= mask[s:]
    out = rows.copy()
    for s in range(1, radius + 1):
        out[:, s:] |= rows[:, :-s]
        out[:, :-s] |= rows[:, s:]
    return out


def _cropped(rng: np.random.Generator, mask: np.ndarray, fraction: float) -> np.ndarray:
    """The mask with a band of ``fraction`` of its extent cut off one random side."""
    out = mask.copy()
    side = rng.integers(4)
    axis_len = mask.shape[side % 2]
    cut = int(fraction * axis_len)
    if side == 0:
        out[:cut] = False
    elif side == 1:
        out[:, :cut] = False
    elif side == 2:
        out[axis_len - cut :] = False
    else:
        out[:, axis_len - cut :] = False
    return out


def _morphed(rng: np.random.Generator, mask: np.ndarray, radius: int) -> np.ndarray:
    """The mask dilated or eroded (even odds) by ``radius``, padded by ``radius`` each side."""
    if not radius:
        return mask
    padded = np.zeros((mask.shape[0] + 2 * radius, mask.shape[1] + 2 * radius), dtype=bool)
    padded[radius:-radius, radius:-radius] = mask
    if rng.random() < 0.5:
        return _dilated(padded, radius)
    return ~_dilated(~padded, radius)


def _perturbed(
    rng: np.random.Generator, mask: np.ndarray, top: int, left: int, strength: float
) -> tuple[np.ndarray, int, int]:
    """A model-like copy of a window mask: dilated or eroded, sometimes cropped, shifted.

    Displacements scale with the object's size (sqrt of its area) times ``strength``.
    """
    size = float(np.sqrt(np.count_nonzero(mask)))
    radius = min(int(rng.exponential(0.02 * strength * size)), 4)
    out = _morphed(rng, mask, radius)
    if rng.random() < min(0.15 * strength, 0.6):
        out = _cropped(rng, out, rng.uniform(0.05, min(0.25 * strength, 0.6)))
    dy, dx = (max(-size / 2, min(size / 2, d)) for d in rng.normal(0.0, 0.03 * strength * size, 2))
    return out, top - radius + round(dy), left - radius + round(dx)


def _pasted(layer: np.ndarray, mask: np.ndarray, top: int, left: int) -> np.ndarray | None:
    """Writes the in-image part of a window into a layer; its tight box, or None if too small."""
    sub, y0, x0 = _clipped(mask, top, left, *layer.shape)
    if np.count_nonzero(sub) < _MIN_PRED_PIXELS:
        return None
    layer[y0 : y0 + sub.shape[0], x0 : x0 + sub.shape[1]] = sub
    rows, cols = sub.any(axis=1), sub.any(axis=0)
    return np.array(
        [
            x0 + cols.argmax(),
            y0 + rows.argmax(),
            x0 + len(cols) - cols[::-1].argmax(),
            y0 + len(rows) - rows[::-1].argmax(),
        ]
    )


def _mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.count_nonzero(a | b)
    return np.count_nonzero(a & b) / union if union else 0.0


def _wrong_category(rng: np.random.Generator, category: int) -> int:
    """Another class of the same kind (thing for thing, stuff for stuff)."""
    if category < N_THING:
        return int((category + rng.integers(1, N_THING)) % N_THING)
    return N_THING + int((category - N_THING + rng.integers(1, N_STUFF)) % N_STUFF)


def _segment_window(scene: _Scene, index: int) -> tuple[np.ndarray, int, int]:
    x1, y1, x2, y2 = scene.boxes[index]
    return scene.label[y1:y2, x1:x2] == index, int(y1), int(x1)


def _predicted_mask(
    rng: np.random.Generator,
    layer: np.ndarray,
    window: tuple[np.ndarray, int, int],
    strength: float,
) -> tuple[np.ndarray, tuple[np.ndarray, int, int]]:
    """Pastes a perturbed copy of ``window`` (the window itself if too little survives).

    Returns the tight box and the pasted window, from which a duplicate can be derived.
    """
    perturbed = _perturbed(rng, *window, strength)
    box = _pasted(layer, *perturbed)
    if box is None:
        perturbed = window
        box = _pasted(layer, *window)
    return box, perturbed


def _add_duplicate(
    rng: np.random.Generator,
    masks: np.ndarray,
    boxes: np.ndarray,
    original: int,
    layer: int,
    window: tuple[np.ndarray, int, int],
) -> None:
    """Pastes a second, slightly different copy of an instance (IoU >= 0.5 with it)."""
    boxes[layer], _ = _predicted_mask(rng, masks[layer], window, strength=0.3)
    if _mask_iou(masks[layer], masks[original]) < _DUPLICATE_MIN_IOU:
        masks[layer] = masks[original]
        boxes[layer] = boxes[original]


def _prediction(rng: np.random.Generator, scene: _Scene) -> _Prediction:
    """Perturbed copies of most GT segments, some duplicates, 1-4 false positives, shuffled."""
    h, w = scene.label.shape
    n_gt = len(scene.categories)
    detected = np.flatnonzero(rng.random(n_gt) < _DETECTION_RATE)
    duplicated = set(detected[rng.random(len(detected)) < _DUPLICATE_RATE].tolist())
    n_false = max(int(rng.integers(1, 5)), 2 - len(detected) - len(duplicated))
    n = len(detected) + len(duplicated) + n_false
    slots = iter(rng.permutation(n).tolist())
    masks = np.zeros((n, h, w), dtype=np.uint8)
    boxes = np.zeros((n, 4), dtype=np.int64)
    categories = np.zeros(n, dtype=np.int64)
    primary = np.full(n_gt, -1, dtype=np.int64)
    duplicate = np.full(n_gt, -1, dtype=np.int64)
    for k in detected.tolist():
        j = primary[k] = next(slots)
        strength = 4.0 if rng.random() < _POOR_MASK_RATE else 1.0
        boxes[j], window = _predicted_mask(rng, masks[j], _segment_window(scene, k), strength)
        categories[j] = scene.categories[k]
        if rng.random() < _WRONG_CATEGORY_RATE:
            categories[j] = _wrong_category(rng, int(categories[j]))
        if k in duplicated:
            d = duplicate[k] = next(slots)
            _add_duplicate(rng, masks, boxes, j, d, window)
            categories[d] = categories[j]
    for j, radius in zip(slots, _thing_radii(rng, n_false, h, w), strict=True):
        boxes[j] = _false_positive(rng, masks[j], radius)
        categories[j] = rng.integers(N_THING + N_STUFF)
    scores = np.floor(rng.uniform(0.3, 1.0, n) * 1e4) / 1e4
    return _Prediction(masks, categories, scores, boxes, primary, duplicate)


def _false_positive(rng: np.random.Generator, layer: np.ndarray, radius: float) -> np.ndarray:
    """Pastes a random blob, grown until enough of it lands in the image; its box."""
    while True:
        box = _pasted(layer, *_shape_mask(rng, *layer.shape, radius))
        if box is not None:
            return box
        radius *= 1.5


# --------------------------------------------------------------------------- triplet lists


@dataclass(frozen=True)
class _Hit:
    """A GT relation the model recovers, expressed over predicted instances."""

    subject: int
    obj: int
    predicate: int
    gt_predicate: int  # the true predicate when ``predicate`` is wrong, else -1


def _instance_for(rng: np.random.Generator, pred: _Prediction, gt_index: int) -> int:
    duplicate = int(pred.duplicate[gt_index])
    if duplicate >= 0 and rng.random() < _VIA_DUPLICATE_RATE:
        return duplicate
    return int(pred.primary[gt_index])


def _relation_hits(
    rng: np.random.Generator, pred: _Prediction, relations: list[list[int]]
) -> list[_Hit]:
    hits = []
    for s, o, p in relations:
        found = rng.random() < _RELATION_RECALL
        subject, obj = _instance_for(rng, pred, s), _instance_for(rng, pred, o)
        if not found or subject < 0 or obj < 0:
            continue
        if rng.random() < _PREDICATE_ACCURACY[p]:
            hits.append(_Hit(subject, obj, p, -1))
        else:
            hits.append(_Hit(subject, obj, _predicate_except(rng, [p]), p))
    return hits


def _pair_index(subject: int, obj: int, n: int) -> int:
    """Position of an ordered pair among the n * (n - 1) pairs of distinct instances."""
    return subject * (n - 1) + obj - (obj > subject)


def _first_hit_per_pair(hits: list[_Hit], n: int) -> list[_Hit]:
    seen: dict[int, _Hit] = {}
    for hit in hits:
        seen.setdefault(_pair_index(hit.subject, hit.obj, n), hit)
    return list(seen.values())


def _graph_list(
    rng: np.random.Generator, n: int, hits: list[_Hit]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranked graph list: triplets (m, 3), descending scores and GT alternatives (-1: none).

    With more than ``GRAPH_SIZE`` instance pairs the list has exactly ``GRAPH_SIZE`` triplets,
    including a few exact repeats; otherwise it lists every pair once. Recovered relations
    score higher on average than the random filler, so they cluster towards the top.
    """
    n_pairs = n * (n - 1)
    n_repeats = int(rng.integers(1, 4)) if n_pairs > GRAPH_SIZE else 0
    hits = hits[: GRAPH_SIZE - n_repeats] if n_repeats else _first_hit_per_pair(hits, n)
    n_fill = min(GRAPH_SIZE, n_pairs) - n_repeats - len(hits)
    hit_pairs = [_pair_index(h.subject, h.obj, n) for h in hits]
    candidates = rng.choice(n_pairs, size=min(n_pairs, n_fill + len(hits)), replace=False)
    fill = candidates[~np.isin(candidates, hit_pairs)][:n_fill]
    fill_s = fill // (n - 1)
    fill_o = fill % (n - 1)
    fill_o += fill_o >= fill_s
    hit_triplets = [[h.subject, h.obj, h.predicate] for h in hits]
    fill_p = rng.choice(N_PREDICATE, n_fill, p=_PREDICATE_WEIGHTS)
    triplets = np.concatenate(
        [
            np.array(hit_triplets, dtype=np.int64).reshape(-1, 3),
            np.stack([fill_s, fill_o, fill_p], 1),
        ]
    )
    scores = np.concatenate([rng.beta(2.0, 1.0, len(hits)), rng.beta(1.0, 2.5, n_fill)])
    alternatives = np.array([h.gt_predicate for h in hits] + [-1] * n_fill, dtype=np.int64)
    repeat = rng.choice(len(triplets), size=n_repeats, replace=False)
    triplets = np.concatenate([triplets, triplets[repeat]])
    scores = np.concatenate([scores, scores[repeat] * rng.uniform(0.5, 1.0, n_repeats)])
    alternatives = np.concatenate([alternatives, np.full(n_repeats, -1)])
    order = np.argsort(-scores, kind="stable")
    return triplets[order], np.round(scores[order], 6), alternatives[order]


def _ng_list(
    rng: np.random.Generator, graph: np.ndarray, scores: np.ndarray, alternatives: np.ndarray
) -> list[list[int]]:
    """Top-``NG_PER_PAIR`` predicates for every graph pair, ranked by score.

    Each pair keeps its graph predicates at their graph scores; the extra predicates score a
    decaying fraction of the pair's best score and, when the graph predicate is wrong, are
    often the true one (so the predicate rank metric has something to find).
    """
    per_pair: dict[tuple[int, int], list[tuple[int, float]]] = {}
    alternative: dict[tuple[int, int], int] = {}
    rows = zip(graph.tolist(), scores.tolist(), alternatives.tolist(), strict=True)
    for (s, o, p), score, alt in rows:
        entries = per_pair.setdefault((s, o), [])
        if all(p != q for q, _ in entries):
            entries.append((p, score))
        if alt >= 0:
            alternative.setdefault((s, o), alt)
    n_pairs = len(per_pair)
    preferences = np.argsort(
        -(np.log(_PREDICATE_WEIGHTS) + rng.gumbel(size=(n_pairs, N_PREDICATE))), axis=1
    )[:, : 2 * NG_PER_PAIR]
    decay = np.cumprod(rng.uniform(0.3, 0.9, (n_pairs, NG_PER_PAIR)), axis=1)
    take_alternative = rng.random(n_pairs) < _NG_GT_ALTERNATIVE_RATE
    ranked: list[tuple[float, list[int]]] = []
    for i, ((s, o), entries) in enumerate(per_pair.items()):
        chosen = [p for p, _ in entries]
        extra = [alternative[(s, o)]] if (s, o) in alternative and take_alternative[i] else []
        extra += preferences[i].tolist()
        extra = list(dict.fromkeys(q for q in extra if q not in chosen))
        extra = extra[: max(NG_PER_PAIR - len(chosen), 0)]
        ranked += [(score, [s, o, p]) for p, score in entries]
        ranked += [(entries[0][1] * decay[i, k], [s, o, q]) for k, q in enumerate(extra)]
    order = np.argsort([-score for score, _ in ranked], kind="stable")
    return [ranked[k][1] for k in order.tolist()]


def _submission_entry(
    image_id: str, pred: _Prediction, relations: list[list[int]], rng: np.random.Generator
) -> dict[str, object]:
    """One image of the box-only submission (the ZIP's entry adds ``seg_filename``)."""
    hits = _relation_hits(rng, pred, relations)
    graph, scores, alternatives = _graph_list(rng, len(pred.categories), hits)
    return {
        "id": image_id,
        "triplets": graph.tolist(),
        "ng_triplets": _ng_list(rng, graph, scores, alternatives),
        "scores": scores.tolist(),
        "annotation": [
            {"bbox": box.tolist(), "category": int(c), "score": float(s)}
            for box, c, s in zip(pred.boxes, pred.categories, pred.scores, strict=True)
        ],
    }


# --------------------------------------------------------------------------- files


def _image_ids(rng: np.random.Generator, n: int) -> list[str]:
    """Distinct six-digit ids."""
    return [str(i) for i in (rng.choice(900_000, size=n, replace=False) + 100_000).tolist()]


def _chosen(rng: np.random.Generator, n: int, fraction: float) -> np.ndarray:
    """A boolean mask selecting round(fraction * n) of n items."""
    chosen = np.zeros(n, dtype=bool)
    chosen[rng.choice(n, size=min(round(fraction * n), n), replace=False)] = True
    return chosen


def _forced_predicates(
    rng: np.random.Generator, has_relations: np.ndarray, submitted: np.ndarray
) -> list[list[int]]:
    """Predicates each test image must use so that the split covers all of them.

    Only done when the split is large enough to hold every predicate naturally
    (``_MEAN_RELATIONS_FOR_COVERAGE`` relations per image), like the real PSG test split. The
    predicates go to submitted images where possible: SGBench scores an image missing from the
    submission as NaN for every predicate, so a predicate seen only there makes mR@k NaN.
    """
    forced: list[list[int]] = [[] for _ in has_relations]
    preferred = has_relations & submitted
    carriers = rng.permutation(np.flatnonzero(preferred if preferred.any() else has_relations))
    if len(has_relations) * _MEAN_RELATIONS_FOR_COVERAGE < N_PREDICATE or not len(carriers):
        return forced
    for j, predicate in enumerate(rng.permutation(N_PREDICATE).tolist()):
        forced[carriers[j % len(carriers)]].append(predicate)
    return forced


def _tiff_bytes(masks: np.ndarray) -> bytes:
    """Layered masks as SGBench reads them; minisblack pages even for 3 or 4 layers."""
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, masks, compression="deflate", photometric="minisblack")
    return buffer.getvalue()


def _write_zip_entry(archive: zipfile.ZipFile, name: str, payload: bytes) -> None:
    """A deflated entry with a fixed timestamp, so that the archive is reproducible."""
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIMESTAMP)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, payload)


def _json_bytes(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _train_entries(seed: int, image_ids: list[str], h: int, w: int) -> list[dict[str, object]]:
    """Train annotations (only their statistics matter: no PNGs, no predictions)."""
    entries = []
    for i, image_id in enumerate(image_ids):
        rng = np.random.default_rng([seed, 1, i])
        scene = _scene(rng, h, w)
        seg_ids = _segment_ids(rng, len(scene.categories))
        entries.append(_gt_entry(image_id, scene, seg_ids, _relations(rng, scene, [])))
    return entries


def write_dataset(
    root: str | Path,
    n_images: int = 200,
    seed: int = 0,
    *,
    height: int = 480,
    width: int = 640,
    n_train: int | None = None,
    missing_fraction: float = 0.05,
    no_relation_fraction: float = 0.02,
    progress: Callable[[int], None] | None = None,
) -> SynthPaths:
    """Writes ground truth, panoptic PNGs and both submission files under ``root``.

    ``n_images`` test images get PNGs and (unless among the ``missing_fraction``) predictions;
    ``n_train`` (default ``n_images // 2``) train entries only appear in ``psg.json``.
    ``progress`` is called with 1 after each test image.
    """
    if height * width < 4 * MIN_SEGMENT_PIXELS:
        raise ValueError(f"{height}x{width} images are too small for the segment size floor")
    paths = synth_paths(root)
    paths.masks_dir.mkdir(parents=True, exist_ok=True)
    n_train = n_images // 2 if n_train is None else n_train
    rng = np.random.default_rng(seed)
    image_ids = _image_ids(rng, n_images + n_train)
    test_ids, train_ids = image_ids[:n_images], image_ids[n_images:]
    without_relations = _chosen(rng, n_images, no_relation_fraction)
    missing = _chosen(rng, n_images, missing_fraction)
    forced = _forced_predicates(rng, ~without_relations, ~missing)
    data: list[dict[str, object]] = []
    submitted: list[dict[str, object]] = []
    with zipfile.ZipFile(paths.submission_zip, "w") as archive:
        for i, image_id in enumerate(test_ids):
            image_rng = np.random.default_rng([seed, 0, i])
            scene = _scene(image_rng, height, width)
            seg_ids = _segment_ids(image_rng, len(scene.categories))
            relations = [] if without_relations[i] else _relations(image_rng, scene, forced[i])
            data.append(_gt_entry(image_id, scene, seg_ids, relations))
            Image.fromarray(_panoptic_rgb(scene.label, seg_ids)).save(
                paths.masks_dir / f"{image_id}.png"
            )
            if not missing[i]:
                pred = _prediction(image_rng, scene)
                submitted.append(_submission_entry(image_id, pred, relations, image_rng))
                _write_zip_entry(archive, f"{image_id}.tiff", _tiff_bytes(pred.masks))
            if progress is not None:
                progress(1)
        zip_images = [dict(entry, seg_filename=f"{entry['id']}.tiff") for entry in submitted]
        _write_zip_entry(
            archive, "triplets.json", _json_bytes({"version": 1, "images": zip_images})
        )
    paths.submission_boxes.write_bytes(_json_bytes({"version": 1, "images": submitted}))
    psg = {
        "thing_classes": list(THING_CLASSES),
        "stuff_classes": list(STUFF_CLASSES),
        "predicate_classes": list(PREDICATE_CLASSES),
        "test_image_ids": test_ids,
        "train_image_ids": train_ids,
        "data": data + _train_entries(seed, train_ids, height, width),
    }
    paths.psg_json.write_bytes(_json_bytes(psg))
    return paths
