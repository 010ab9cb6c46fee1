"""A synthetic Action Genome: annotation files as its toolkit ships them, and the output of
an STTran-like model for PredCls, SGCls and SGDet.

``annotations(videos, frames, seed)`` gives the two annotation dicts and the frame list:
``videos`` videos of ``frames`` frames (every seventh video has only two, which the loader
drops), one person and one to four tracked objects per frame, each visible with 90 %
probability, one attention relation, one or two spatial and one or two contacting ones; one
video in ten is in the training split, one frame in ten has no person box.
``predictions(gt, setting, seed)`` gives per GT video (after the loader's filters) the arrays
an STTran-family model returns: boxes with their frame index (PredCls and SGCls: the GT
boxes; SGDet: jittered GT boxes, some off, and a few spurious ones), labels and scores, one
pair (person, box) per other box of a frame (one frame in twenty has none), attention
probabilities (softmax) and spatial / contacting sigmoids leaning towards the GT predicates;
one spatial or contacting row in twenty has exact zeros in its first two scores (rows
semi-constraint drops) when neither is a GT predicate of the pair (so that the reference's
unstable order of tied zero scores under no constraint never decides a hit), and sigmoids
above 0.9 are common. ``write_ag`` writes it all.
Same arguments, same bytes.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from sgdask.types_ag import ATTENTION, CONTACTING, OBJECT_CLASSES, SPATIAL, AGVideo

WIDTH, HEIGHT = 480.0, 270.0


def annotations(videos: int, frames: int, seed: int = 0
                ) -> tuple[dict[str, list[dict]], dict[str, dict], list[str]]:
    """(``object_bbox_and_relationship.pkl``'s dict, ``person_bbox.pkl``'s dict, the frame
    list), as the Action Genome toolkit ships them."""
    rng = np.random.default_rng(seed)
    objects: dict[str, list[dict]] = {}
    persons: dict[str, dict] = {}
    for v in range(videos):
        name = f"{v:05X}.mp4"
        split = "train" if v % 10 == 9 else "test"
        n_frames = 2 if v % 7 == 3 else frames
        tracked = [(int(c), _box(rng)) for c in
                   rng.choice(np.arange(2, len(OBJECT_CLASSES)), rng.integers(1, 5),
                              replace=False)]
        for f in range(n_frames):
            key = f"{name}/{f * 7 + 1:06d}.png"
            person = _box(rng)
            has_person = rng.random() >= 0.1
            persons[key] = {
                "bbox": (np.array([[person[0], person[1], person[0] + person[2],
                                    person[1] + person[3]]], dtype=np.float32)
                         if has_person else np.zeros((0, 4), dtype=np.float32)),
                "bbox_size": (int(WIDTH), int(HEIGHT)), "bbox_mode": "xyxy"}
            objects[key] = [_object(rng, c, box, split) for c, box in tracked]
    return objects, persons, list(persons)


def _box(rng: np.random.Generator) -> tuple[float, float, float, float]:
    """x, y, w, h inside the frame."""
    w, h = rng.uniform(20, 200), rng.uniform(20, 150)
    return (float(rng.uniform(0, WIDTH - w)), float(rng.uniform(0, HEIGHT - h)), float(w),
            float(h))


def _object(rng: np.random.Generator, cls: int, box: tuple, split: str) -> dict[str, Any]:
    visible = bool(rng.random() < 0.9)
    moved = tuple(float(x + d) for x, d in zip(box, rng.normal(0, 3, 4), strict=True))
    return {
        "class": OBJECT_CLASSES[cls],
        "bbox": moved if visible else None,
        "attention_relationship": [ATTENTION[rng.integers(len(ATTENTION))]] if visible else None,
        "spatial_relationship": [SPATIAL[i] for i in rng.choice(
            len(SPATIAL), rng.integers(1, 3), replace=False)] if visible else None,
        "contacting_relationship": [CONTACTING[i] for i in rng.choice(
            len(CONTACTING), rng.integers(1, 3), replace=False)] if visible else None,
        "metadata": {"tag": "synthetic", "set": split},
        "visible": visible,
    }


def predictions(gt: list[AGVideo], setting: str, seed: int = 0
                ) -> dict[str, dict[str, np.ndarray]]:
    """Per GT video, the arrays an STTran-family model returns for ``setting``."""
    rng = np.random.default_rng([seed, ("predcls", "sgcls", "sgdet").index(setting)])
    return {video.name: _video(rng, video, setting) for video in gt}


def _video(rng: np.random.Generator, video: AGVideo, setting: str) -> dict[str, np.ndarray]:
    boxes, labels, scores, pairs, frames, wanted = [], [], [], [], [], []
    for f, frame in enumerate(video.frames):
        first = len(boxes)
        for i, (box, cls) in enumerate(zip(frame.boxes, frame.classes, strict=True)):
            boxes.append([f, *_detected(rng, box, setting)])
            right = i == 0 or setting == "predcls" or rng.random() < 0.7
            labels.append(cls if right else rng.integers(2, len(OBJECT_CLASSES)))
            scores.append(1.0 if setting == "predcls" else rng.uniform(0.3, 1.0))
        if setting == "sgdet":
            for _ in range(rng.integers(0, 3)):
                x, y, w, h = _box(rng)
                boxes.append([f, x, y, x + w, y + h])
                labels.append(rng.integers(2, len(OBJECT_CLASSES)))
                scores.append(rng.uniform(0.1, 0.6))
        if rng.random() < 0.05:
            continue
        for j in range(first + 1, len(boxes)):
            pairs.append([first, j])
            frames.append(f)
            gt_row = j - first
            wanted.append(frame.relations[(frame.relations[:, 1] == gt_row)
                                          | (frame.relations[:, 0] == gt_row), 2]
                          if gt_row < len(frame.boxes) else np.zeros(0, np.int64))
    n = len(pairs)
    attention = _leaning(rng, wanted, 0, len(ATTENTION), n, 3.0)
    spatial = _sigmoid(_leaning(rng, wanted, len(ATTENTION), len(SPATIAL), n, 4.0))
    contacting = _sigmoid(_leaning(rng, wanted, len(ATTENTION) + len(SPATIAL),
                                   len(CONTACTING), n, 4.0))
    for dist, offset in ((spatial, len(ATTENTION)), (contacting, len(ATTENTION) + len(SPATIAL))):
        drop = rng.random(n) < 0.05
        for row in np.flatnonzero(drop):
            if not np.isin([offset, offset + 1], wanted[row]).any():
                dist[row, :2] = 0.0
    return {
        "boxes": np.array(boxes, dtype=np.float32).reshape(-1, 5),
        "labels": np.array(labels, dtype=np.int64),
        "scores": np.array(scores, dtype=np.float32),
        "pred_labels": np.array(labels, dtype=np.int64),
        "pred_scores": np.array(scores, dtype=np.float32),
        "pair_idx": np.array(pairs, dtype=np.int64).reshape(-1, 2),
        "im_idx": np.array(frames, dtype=np.int64),
        "attention_distribution": _softmax(attention),
        "spatial_distribution": spatial,
        "contacting_distribution": contacting,
    }


def _detected(rng: np.random.Generator, box: np.ndarray, setting: str) -> list[float]:
    """A GT box as the setting's model returns it (SGDet: jittered, one in five far off)."""
    if setting != "sgdet":
        return [float(x) for x in box]
    w, h = box[2] - box[0], box[3] - box[1]
    spread = 0.4 if rng.random() < 0.2 else 0.05
    return [float(x) for x in box + rng.normal(0, spread, 4) * np.array([w, h, w, h])]


def _leaning(rng: np.random.Generator, wanted: list[np.ndarray], offset: int, size: int,
             n: int, lean: float) -> np.ndarray:
    """Random logits, raised by ``lean`` at the GT predicates of each pair half the time."""
    logits = rng.normal(0, 1.5, (n, size)).astype(np.float32)
    for row, predicates in enumerate(wanted):
        own = predicates[(predicates >= offset) & (predicates < offset + size)] - offset
        if len(own) and rng.random() < 0.5:
            logits[row, own] += np.float32(lean)
    return logits


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return (np.float32(1) / (np.float32(1) + np.exp(-logits))).astype(np.float32)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)


def write_ag(root: str | Path, videos: int, frames: int, seed: int = 0,
             settings: tuple[str, ...] = ("predcls", "sgcls", "sgdet")) -> Path:
    """``root/annotations/`` (the two pickles and ``frame_list.txt``) and
    ``root/predictions_SETTING.pkl`` per setting (``{video: {field: array}}``)."""
    from sgdask.io.actiongenome import gt_videos

    root = Path(root)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    objects, persons, frame_list = annotations(videos, frames, seed)
    for name, value in (("object_bbox_and_relationship.pkl", objects),
                        ("person_bbox.pkl", persons)):
        (root / "annotations" / name).write_bytes(pickle.dumps(value, protocol=4))
    (root / "annotations" / "frame_list.txt").write_text("\n".join(frame_list) + "\n")
    gt = gt_videos(objects, persons)
    for setting in settings:
        (root / f"predictions_{setting}.pkl").write_bytes(
            pickle.dumps(predictions(gt, setting, seed), protocol=4))
    return root
