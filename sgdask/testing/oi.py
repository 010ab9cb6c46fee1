"""A synthetic Open Images V6 relationship dataset with a BGNN/PySGG-like model's output.

``write_oi_dataset`` writes into a folder:

- ``vrd-test-anno.json`` (``n_test`` images with boxes and relations, plus a few the
  loader drops: one without relations, one without boxes) and ``vrd-train-anno.json``
  (``n_train`` images) in the layout of the real files (``img_fn``, ``img_size`` as
  ``[width, height]``, ``bbox`` ``[x1, y1, x2, y2]``, ``det_labels``, ``rel``), and
  ``categories_dict.json`` (``obj``: ``n_classes`` class names, ``rel``: ``n_predicates``
  predicate names);
- what a model exports: a box submission JSON (per image its detected boxes, each with a
  category and a score: jittered copies of most GT boxes, some with a wrong category, plus
  spurious boxes; a few images without prediction) and an NPZ score file (``pairs`` scored
  ordered pairs per image, one probability per predicate **plus a background column 0**,
  as PySGG's relation head gives them; a few images without pairs).

Counts follow Open Images V6's test split: about 5 boxes and 2 relations per image (a few
exact duplicate relations), long-tailed classes and predicates; with the defaults (16
boxes, 64 pairs, 2 predicates each) an image has 128 candidates, so the cut at the top 100
matters. Scores are continuous, so equal float32 candidate scores are rare. Same arguments,
same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class OISynthPaths:
    anno: Path
    train: Path
    categories: Path
    submission: Path
    scores: Path


def oi_synth_paths(root: str | Path) -> OISynthPaths:
    root = Path(root)
    return OISynthPaths(root / "vrd-test-anno.json", root / "vrd-train-anno.json",
                        root / "categories_dict.json", root / "submission.json",
                        root / "scores.npz")


def _zipf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def _boxes(rng: np.random.Generator, n: int, width: int, height: int) -> np.ndarray:
    """n boxes inside the image (whole pixels; now and then one reaching past the border,
    which the evaluator clips)."""
    w = rng.integers(8, max(9, width // 2), n)
    h = rng.integers(8, max(9, height // 2), n)
    x1 = rng.integers(0, np.maximum(1, width - w), n)
    y1 = rng.integers(0, np.maximum(1, height - h), n)
    boxes = np.stack([x1, y1, x1 + w, y1 + h], 1).astype(np.float64)
    past = rng.random(n) < 0.03
    boxes[past, 2] += 5
    return boxes


def _relations(rng: np.random.Generator, n_boxes: int, n_rels: int, predicates: np.ndarray
               ) -> list[list[int]]:
    pairs = [(s, o) for s in range(n_boxes) for o in range(n_boxes) if s != o]
    chosen = rng.choice(len(pairs), min(n_rels, len(pairs)), replace=False)
    rels = [[pairs[i][0], pairs[i][1], int(rng.choice(len(predicates), p=predicates))]
            for i in chosen.tolist()]
    if rels and rng.random() < 0.03:
        rels.append(list(rels[0]))  # an exact duplicate, as the real files have
    return rels


def _annotations(rng: np.random.Generator, n: int, prefix: str, classes: np.ndarray,
                 predicates: np.ndarray) -> list[dict]:
    out = []
    for i in range(n):
        width, height = int(rng.integers(300, 1025)), int(rng.integers(300, 1025))
        n_boxes = int(2 + rng.poisson(3))
        out.append({"img_fn": f"{prefix}{i:07x}", "img_size": [width, height],
                    "bbox": _boxes(rng, n_boxes, width, height).astype(int).tolist(),
                    "det_labels": rng.choice(len(classes), n_boxes, p=classes).tolist(),
                    "rel": _relations(rng, n_boxes, int(1 + rng.poisson(1)), predicates)})
    return out


def _jittered(rng: np.random.Generator, boxes: np.ndarray, width: int, height: int
              ) -> np.ndarray:
    """GT boxes moved by up to 30 % of their size (float pixels): IoU from about 0.3."""
    size = np.maximum(boxes[:, 2:] - boxes[:, :2], 1.0)
    shift = rng.uniform(-0.3, 0.3, (len(boxes), 4)) * np.concatenate([size, size], 1)
    out = boxes + shift
    out[:, 2:] = np.maximum(out[:, 2:], out[:, :2] + 1)
    return np.round(out, 2)


def _prediction(rng: np.random.Generator, entry: dict, n_boxes: int, n_classes: int,
                classes: np.ndarray) -> dict:
    """Detected boxes of one image: most GT boxes jittered, some relabelled, the rest
    spurious; scores in (0.05, 1)."""
    gt = np.asarray(entry["bbox"], dtype=np.float64)
    width, height = entry["img_size"]
    keep = rng.random(len(gt)) < 0.9
    found = _jittered(rng, gt[keep], width, height)
    labels = np.asarray(entry["det_labels"])[keep]
    wrong = rng.random(len(labels)) < 0.15
    labels = np.where(wrong, rng.choice(n_classes, len(labels), p=classes), labels)
    extra = max(0, n_boxes - len(found))
    boxes = np.concatenate([found, _boxes(rng, extra, width, height)])
    labels = np.concatenate([labels, rng.choice(n_classes, extra, p=classes)]).astype(int)
    scores = np.round(rng.uniform(0.05, 1.0, len(boxes)), 6)
    order = rng.permutation(len(boxes))
    return {"id": entry["img_fn"], "triplets": [],
            "instances": [{"bbox": boxes[i].tolist(), "category": int(labels[i]),
                           "score": float(scores[i])} for i in order.tolist()],
            "truth": order.argsort()[:int(keep.sum())].tolist(), "kept": keep}


def _pair_scores(rng: np.random.Generator, entry: dict, prediction: dict, n_pairs: int,
                 n_predicates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scored ordered pairs of one image: the pairs of GT relations found first (their
    predicate likely), then random ones; softmax probabilities with background column 0."""
    n = len(prediction["instances"])
    where = np.full(len(entry["bbox"]), -1)
    where[np.flatnonzero(prediction["kept"])] = prediction["truth"]
    truth: dict[tuple[int, int], int] = {}
    for s, o, p in entry["rel"]:
        if where[s] >= 0 and where[o] >= 0:
            truth.setdefault((int(where[s]), int(where[o])), p)
    pairs = list(truth)
    others = [(s, o) for s in range(n) for o in range(n) if s != o and (s, o) not in truth]
    rng.shuffle(others)
    pairs = (pairs + others)[:n_pairs]
    rng.shuffle(pairs)
    logits = rng.normal(0.0, 1.0, (len(pairs), n_predicates + 1))
    logits[:, 0] += 1.5  # background
    for i, pair in enumerate(pairs):
        if pair in truth:
            logits[i, truth[pair] + 1] += rng.uniform(1.0, 4.0)
    probs = np.exp(logits)
    probs /= probs.sum(1, keepdims=True)
    arr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return arr[:, 0], arr[:, 1], probs.astype(np.float32)


def write_oi_dataset(root: str | Path, n_test: int = 200, n_train: int = 100, seed: int = 0,
                     n_classes: int = 300, n_predicates: int = 30, pred_boxes: int = 16,
                     pairs: int = 64) -> OISynthPaths:
    """Write the dataset (module docstring) into ``root``; returns the paths."""
    rng = np.random.default_rng(seed)
    paths = oi_synth_paths(root)
    paths.anno.parent.mkdir(parents=True, exist_ok=True)
    classes, predicates = _zipf(n_classes, 0.8), _zipf(n_predicates, 1.1)
    test = _annotations(rng, n_test, "t", classes, predicates)
    dropped = [{**test[0], "img_fn": "zz-no-rel", "rel": []},
               {"img_fn": "zz-no-box", "img_size": [640, 480], "bbox": [], "det_labels": [],
                "rel": []}]
    paths.anno.write_text(json.dumps(test + dropped))
    paths.train.write_text(json.dumps(_annotations(rng, n_train, "r", classes, predicates)))
    paths.categories.write_text(json.dumps({
        "obj": [f"object {i}" for i in range(n_classes)],
        "rel": [f"predicate {i}" for i in range(n_predicates)]}))
    images, ids, subjects, objects, scores = [], [], [], [], []
    for entry in test:
        if rng.random() < 0.01:
            continue  # the model gave nothing for this image
        prediction = _prediction(rng, entry, pred_boxes, n_classes, classes)
        if rng.random() >= 0.01:
            s, o, p = _pair_scores(rng, entry, prediction, pairs, n_predicates)
            ids += [entry["img_fn"]] * len(s)
            subjects.append(s)
            objects.append(o)
            scores.append(p)
        images.append({k: v for k, v in prediction.items() if k not in ("truth", "kept")})
    paths.submission.write_text(json.dumps({"version": 1, "images": images}))
    np.savez(paths.scores, image_id=np.asarray(ids, dtype=str),
             subject=np.concatenate(subjects), object=np.concatenate(objects),
             scores=np.concatenate(scores))
    return paths
