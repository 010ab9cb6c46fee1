"""Random small images in the literal implementation's format (tests/literal/spec.py).

One generator serves hypothesis (``images()``, ``datasets()``: shrinkable) and seeded
plain randomness (``RandomChooser``: the pipeline test writes files from it). Images are
built to hit the corners of the SPEC: overlapping, duplicate, empty and off-GT masks,
masks at IoU exactly 0.5 and IoU ties, categories right and wrong, duplicate and
subject == object triplets in the GT (the submission format forbids the latter in
predictions), duplicates and several predicates per pair in both lists, scores with ties,
boxes at IoU exactly 0.5 (and of zero area), images without prediction, absolute and
relative ks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from hypothesis import strategies as st

from tests.literal.spec import GT, Pred, Training

N_CATEGORIES = 3
N_PREDICATES = 4
KS = ("1", "2", "3", "5", "20", "x0.5", "x1", "x2", "x10")
SCORES = (0.25, 0.5, 0.5, 0.75)  # few values: ties are common
MASK_KINDS = ("copy", "noisy", "noisy", "half", "other_half", "union", "duplicate", "empty",
              "background", "rectangle")
BOX_KINDS = ("copy", "shifted", "half", "double", "duplicate", "rectangle", "flat")
# tie-prone images: every prediction stands for a GT instance, with its category, often
# at the same IoU as another prediction (which one wins is the one-to-one tie rule)
TIE_MASK_KINDS = ("copy", "half", "half", "other_half", "other_half", "duplicate")
TIE_BOX_KINDS = ("copy", "copy", "half", "double", "duplicate")
LIST_KINDS = ("likely", "likely", "random", "repeat", "again")
TIE_LIST_KINDS = ("likely", "likely", "likely", "again")


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[Any]) -> Any: ...


class DrawChooser:
    """Choices drawn by hypothesis (so failures shrink)."""

    def __init__(self, draw) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))


class RandomChooser:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]


@dataclass
class Image:
    gt: GT
    pred: Pred | None


def subset(c: Chooser, options: Sequence[Any], lo: int, hi: int) -> list[Any]:
    """``lo..hi`` distinct options, in the order of ``options``."""
    chosen = {c.integer(0, len(options) - 1) for _ in range(c.integer(lo, hi))}
    return [options[i] for i in sorted(chosen)]


def triplet(c: Chooser, n: int) -> tuple[int, int, int]:
    return c.integer(0, n - 1), c.integer(0, n - 1), c.integer(0, N_PREDICATES - 1)


def gt_relations(c: Chooser, n: int) -> list[tuple[int, int, int]]:
    """1-8 relations; duplicates and several predicates per pair happen (subject == object
    too, when the draw says so)."""
    relations = [triplet(c, n) for _ in range(c.integer(1, 6))]
    for _ in range(c.integer(0, 2)):
        s, o, _ = c.choice(relations)
        relations.append((s, o, c.integer(0, N_PREDICATES - 1)))
    return relations


def rectangle(c: Chooser, h: int, w: int) -> tuple[int, int, int, int]:
    y0, x0 = c.integer(0, h - 1), c.integer(0, w - 1)
    return y0, x0, c.integer(y0 + 1, min(h, y0 + 9)), c.integer(x0 + 1, min(w, x0 + 9))


def label_image(c: Chooser, h: int, w: int, n: int) -> np.ndarray:
    """Rectangles painted in order (later ones cover earlier ones: some instances end up
    small or empty) plus a few pixels set to random labels."""
    label = np.zeros((h, w), dtype=np.int64)
    for g in range(n):
        y0, x0, y1, x1 = rectangle(c, h, w)
        label[y0:y1, x0:x1] = g + 1
    for _ in range(c.integer(0, 4)):
        label[c.integer(0, h - 1), c.integer(0, w - 1)] = c.integer(0, n)
    return label


def source_instance(c: Chooser, kind: str, relations: list, n_gt: int,
                    earlier: list[int | None], halvable: Sequence[int] = ()) -> int:
    """Mostly an instance the GT relations use (so that lists can hit through it); for a
    copy or the other half, often the source of an earlier prediction; for a half, often
    a GT mask of even size (two disjoint halves of it tie at IoU 0.5)."""
    made_from = [g for g in earlier if g is not None]
    if kind in ("copy", "other_half") and made_from and c.integer(0, 1):
        return c.choice(made_from)
    if kind == "half" and halvable and c.integer(0, 1):
        return c.choice(halvable)
    return c.choice([*(s for s, _, _ in relations), *(o for _, o, _ in relations),
                     c.integer(0, n_gt - 1)])


def predicted_mask(c: Chooser, kind: str, label: np.ndarray, n_gt: int, g: int,
                   earlier: list[tuple[np.ndarray, int | None]]
                   ) -> tuple[np.ndarray, int | None]:
    """A mask of the given kind (from GT instance ``g``) and the GT instance it was made
    from (None: none)."""
    h, w = label.shape
    source = label == g + 1
    if kind == "copy":
        return source, g
    if kind == "noisy":
        mask = source.copy()
        for _ in range(c.integer(1, 4)):
            y, x = c.integer(0, h - 1), c.integer(0, w - 1)
            mask[y, x] = not mask[y, x]
        return mask, g
    if kind in ("half", "other_half"):
        # one half of the pixels of an even-sized GT mask: IoU exactly 0.5; the two
        # halves are disjoint (both survive the merge) and tie
        ys, xs = np.nonzero(source)
        mask = np.zeros((h, w), dtype=bool)
        half = len(ys) // 2 + len(ys) % 2 * c.integer(0, 1)
        part = slice(None, half) if kind == "half" else slice(half, None)
        mask[ys[part], xs[part]] = True
        return mask, g
    if kind == "union":  # two GT masks: equal-sized ones tie in IoU
        return source | (label == c.integer(1, n_gt)), g
    if kind == "duplicate" and earlier:
        mask, g = c.choice(earlier)
        return mask.copy(), g
    if kind == "empty":
        return np.zeros((h, w), dtype=bool), None
    if kind == "background":  # covers nothing of the GT
        y0, x0, y1, x1 = rectangle(c, h, w)
        mask = np.zeros((h, w), dtype=bool)
        mask[y0:y1, x0:x1] = True
        return mask & (label == 0), None
    y0, x0, y1, x1 = rectangle(c, h, w)
    mask = np.zeros((h, w), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask, None


def gt_box(c: Chooser) -> list[float]:
    """A box of small integers (IoU of exactly 0.5 is common); of zero area sometimes."""
    x1, y1 = c.integer(0, 8), c.integer(0, 8)
    width = c.integer(0, 6)
    return [float(x1), float(y1), float(x1 + width), float(y1 + c.integer(1, 6))]


def predicted_box(c: Chooser, kind: str, boxes: list[list[float]], g: int,
                  earlier: list[tuple[list[float], int | None]]
                  ) -> tuple[list[float], int | None]:
    """A box of the given kind (from GT box ``g``) and the GT instance it was made from."""
    x1, y1, x2, y2 = boxes[g]
    if kind == "copy":
        return [x1, y1, x2, y2], g
    if kind == "shifted":
        dx, dy = c.integer(-1, 1), c.integer(-1, 1)
        return [x1 + dx, y1 + dy, x2 + dx, y2 + dy], g
    if kind == "half":  # IoU exactly 0.5
        return [x1, y1, x1 + (x2 - x1) / 2, y2], g
    if kind == "double":  # IoU exactly 0.5 from outside
        return [x1, y1, x2 + (x2 - x1), y2], g
    if kind == "duplicate" and earlier:
        box, g = c.choice(earlier)
        return list(box), g
    if kind == "flat":  # zero area
        x = float(c.integer(0, 8))
        return [x, y1, x, y2], None
    return gt_box(c), None


def prediction_list(c: Chooser, relations: list, sources: list[int | None], n_pred: int,
                    kinds: Sequence[str]) -> list[tuple[int, int, int]]:
    """A list mixing likely hits (GT triplets through predictions made from their
    instances), random triplets, repeats of earlier entries and further predicates for an
    earlier pair. Subject != object: the submission format forbids a triplet on one
    instance (the GT's allows it)."""
    if n_pred == 0:
        return []
    by_gt: dict[int, list[int]] = {}
    for i, g in enumerate(sources):
        if g is not None:
            by_gt.setdefault(g, []).append(i)
    out: list[tuple[int, int, int]] = []
    for _ in range(c.integer(0, 10)):
        kind = c.choice(kinds)
        s, o, p = c.choice(relations)
        if kind == "likely" and s in by_gt and o in by_gt:
            entry = (c.choice(by_gt[s]), c.choice(by_gt[o]),
                     c.choice((p, p, c.integer(0, N_PREDICATES - 1))))
        elif kind == "repeat" and out:
            entry = c.choice(out)
        elif kind == "again" and out:  # the same pair with another predicate
            s, o, _ = c.choice(out)
            entry = (s, o, c.integer(0, N_PREDICATES - 1))
        else:
            entry = triplet(c, n_pred)
        if entry[0] != entry[1]:
            out.append(entry)
    return out


def category(c: Chooser, right: int | None, always: bool) -> int:
    """Usually (``always``: always) the source's category, sometimes another one."""
    if right is not None and (always or c.integer(0, 3)):
        return right
    return c.integer(0, N_CATEGORIES - 1)


def box_instances(c: Chooser, gt: GT, n_pred: int, tie_prone: bool
                  ) -> tuple[dict[str, Any], list[int | None]]:
    """GT boxes (set on ``gt``) and ``n_pred`` predicted boxes with their sources."""
    n_gt = len(gt.categories)
    gt.boxes = [gt_box(c) for _ in range(n_gt)]
    made: list[tuple[list[float], int | None]] = []
    for _ in range(n_pred):
        kind = c.choice(TIE_BOX_KINDS if tie_prone else BOX_KINDS)
        g = source_instance(c, kind, gt.relations, n_gt, [g for _, g in made])
        made.append(predicted_box(c, kind, gt.boxes, g, made))
    return {"boxes": [b for b, _ in made]}, [g for _, g in made]


def mask_instances(c: Chooser, gt: GT, n_pred: int, tie_prone: bool
                   ) -> tuple[dict[str, Any], list[int | None]]:
    """A GT label image (set on ``gt``) and ``n_pred`` predicted masks with their sources."""
    n_gt = len(gt.categories)
    h, w = c.integer(6, 20), c.integer(6, 20)
    label = gt.label_image = label_image(c, h, w, n_gt)
    sizes = [np.count_nonzero(label == g + 1) for g in range(n_gt)]
    halvable = [g for g, size in enumerate(sizes) if size and size % 2 == 0]
    made: list[tuple[np.ndarray, int | None]] = []
    for _ in range(n_pred):
        kind = c.choice(TIE_MASK_KINDS if tie_prone else MASK_KINDS)
        g = source_instance(c, kind, gt.relations, n_gt, [g for _, g in made], halvable)
        made.append(predicted_mask(c, kind, label, n_gt, g, made))
    masks = np.array([m for m, _ in made], dtype=bool).reshape(n_pred, h, w)
    return {"masks": masks}, [g for _, g in made]


def image(c: Chooser, image_id: str = "img", boxes: bool = False, missing: bool = True,
          min_pred: int = 0, crowd: bool = False) -> Image:
    """One random image: GT (1-8 instances) and a prediction (``min_pred``-8 instances),
    or none (when ``missing`` allows it). A third of the images are tie-prone: every
    prediction has its source's category, predictions often tie, lists mostly hit.
    ``crowd``: some GT instances are crowd regions (panoptic quality)."""
    tie_prone = c.integer(0, 2) == 0
    n_gt = c.integer(1, 8)
    gt_cats = [c.integer(0, N_CATEGORIES - 1) for _ in range(n_gt)]
    gt = GT(image_id, gt_cats, gt_relations(c, n_gt))
    n_pred = c.integer(min_pred, 8)
    instances = box_instances if boxes else mask_instances
    shapes, sources = instances(c, gt, n_pred, tie_prone)
    if crowd:
        gt.crowd = [c.integer(0, 3) == 0 for _ in range(n_gt)]
    if missing and c.integer(0, 5) == 0:
        return Image(gt, None)
    cats = [category(c, gt_cats[g] if g is not None else None, tie_prone) for g in sources]
    scores = [c.choice(SCORES) for _ in range(n_pred)] if c.integer(0, 1) else None
    kinds = TIE_LIST_KINDS if tie_prone else LIST_KINDS
    graph = prediction_list(c, gt.relations, sources, n_pred, kinds)
    ng = prediction_list(c, gt.relations, sources, n_pred, kinds)
    return Image(gt, Pred(cats, graph, ng, scores=scores, **shapes))


def training(c: Chooser) -> Training:
    """1-3 training images, at least one relation."""
    out = []
    for _ in range(c.integer(1, 3)):
        n = c.integer(1, 4)
        cats = tuple(c.integer(0, N_CATEGORIES - 1) for _ in range(n))
        out.append((cats, tuple(triplet(c, n) for _ in range(c.integer(1, 4)))))
    return Training(tuple(out))


def ks(c: Chooser) -> list[str]:
    return subset(c, KS, 1, 4)


@st.composite
def images(draw, boxes: bool = False, image_id: str = "img", **kwargs) -> Image:
    return image(DrawChooser(draw), image_id, boxes, **kwargs)


@st.composite
def trainings(draw) -> Training | None:
    c = DrawChooser(draw)
    return training(c) if c.integer(0, 1) else None


@st.composite
def k_lists(draw) -> list[str]:
    return ks(DrawChooser(draw))


def dataset(c: Chooser, n: int, boxes: bool, **kwargs) -> list[Image]:
    """``n`` images with distinct sorted ids."""
    return [image(c, f"img{i:03d}", boxes, **kwargs) for i in range(n)]


@st.composite
def datasets(draw, boxes: bool = False, max_images: int = 5) -> list[Image]:
    c = DrawChooser(draw)
    return dataset(c, c.integer(1, max_images), boxes)
