"""Synthetic PVSG-shaped files: a GT (OpenPVSG's ``pvsg.json`` and per-frame panoptic PNGs)
and a model's results of it, in the layout OpenPVSG's relation evaluation reads
(``tools/rel_test_full.py``), for tests and benchmarks.

Layout under ``root``::

    data/pvsg.json                              the annotation (objects, relations, split, data)
    data/vidor/masks/<video>/0000.png ...       one single-channel PNG per frame: object ids, 0 none
    results/<video>/quantitive/masks.txt        the predicted mask tubes (OpenPVSG's tracker's file)
    results/<video>/relations.json              the ranked relation predictions (``PVSG_RESULTS``)

Objects are rectangles that drift across the frames, each visible over a random span; later
objects cover earlier ones. Predicted tubes are the GT objects' masks shifted by a few pixels
(so per-frame IoU falls on both sides of 0.5), some frames dropped, some classes confused, plus
made-up tubes; predicted relations copy GT relations with jittered spans (several predictions
per GT relation, so the reference's weak-hit counting shows), confuse predicates and add noise.
Every score is distinct, so every ranking is defined.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import imagecodecs
import numpy as np

from sgdask.io.codecs.coco_rle import encode_rle

#: what ``relations.json`` of a video holds (the ranked output of OpenPVSG's
#: ``generate_results``, with its pair ranking for pair recall)
PVSG_RESULTS = "relations.json"


@dataclass(frozen=True)
class PvsgFiles:
    """Where the generated files are."""

    annotation: Path
    data_dir: Path
    results: Path
    videos: tuple[str, ...]


def _classes(n_things: int, n_stuff: int) -> dict[str, list[str]]:
    return {"thing": [f"thing{i}" for i in range(n_things)],
            "stuff": [f"stuff{i}" for i in range(n_stuff)]}


def _spans(rng: np.random.Generator, frames: int, parts: int) -> list[list[int]]:
    """``parts`` inclusive frame ranges, sorted, possibly touching or overlapping."""
    out = []
    for _ in range(parts):
        a, b = sorted(rng.integers(0, frames, size=2).tolist())
        out.append([a, b])
    return sorted(out)


def _video_objects(rng: np.random.Generator, frames: int, height: int, width: int,
                   n: int) -> list[dict]:
    """Moving rectangles: first box, velocity, visible frames."""
    objs = []
    for _ in range(n):
        h = int(rng.integers(max(2, height // 5), max(3, height // 2)))
        w = int(rng.integers(max(2, width // 5), max(3, width // 2)))
        y, x = rng.uniform(0, height - h), rng.uniform(0, width - w)
        start = int(rng.integers(0, max(1, frames // 3)))
        stop = int(rng.integers(min(frames, start + max(2, frames // 2)), frames + 1))
        objs.append({"box": (y, x, h, w), "v": rng.normal(0, 0.6, size=2),
                     "frames": (start, stop)})
    return objs


def _frame_ids(objs: list[dict], frame: int, height: int, width: int) -> np.ndarray:
    """The panoptic map of one frame: pixel = object id (1-based), 0 where no object."""
    out = np.zeros((height, width), np.uint8)
    for i, o in enumerate(objs):
        a, b = o["frames"]
        if not a <= frame < b:
            continue
        y, x, h, w = o["box"]
        y = int(np.clip(y + o["v"][0] * frame, 0, height - h))
        x = int(np.clip(x + o["v"][1] * frame, 0, width - w))
        out[y:y + h, x:x + w] = i + 1
    return out


def _predicted_tubes(rng: np.random.Generator, maps: list[np.ndarray], categories: list[int],
                     n_classes: int, extra: int) -> tuple[dict[int, int], list[str]]:
    """masks.txt lines (``fid tid cid h w counts``) and each GT object's predicted tube id."""
    height, width = maps[0].shape
    tids = rng.choice(np.arange(1, 1000), size=len(categories) + extra, replace=False)
    lines, of_object = [], {}
    for k, category in enumerate(categories):
        if rng.random() < 0.1:
            continue                       # a GT object the model never tracked
        tid = int(tids[k])
        of_object[k + 1] = tid
        reach = 4 if rng.random() < 0.25 else 1        # most tubes fit, some drift off
        dy, dx = (int(v) for v in rng.integers(-reach, reach + 1, size=2))
        cid = category if rng.random() > 0.1 else int(rng.integers(n_classes))
        for f, m in enumerate(maps):
            mask = np.roll(m == k + 1, (dy, dx), (0, 1))
            if not mask.any() or rng.random() < 0.08:
                continue
            frame_cid = cid if rng.random() > 0.15 else int(rng.integers(n_classes))
            lines.append(f"{f + 1} {tid} {frame_cid} {height} {width} {encode_rle(mask)}")
    for k in range(extra):
        tid, cid = int(tids[len(categories) + k]), int(rng.integers(n_classes))
        y0, x0 = int(rng.integers(0, height - 2)), int(rng.integers(0, width - 2))
        for f in range(len(maps)):
            if rng.random() < 0.5:
                mask = np.zeros((height, width), bool)
                mask[y0:y0 + height // 3, x0:x0 + width // 3] = True
                lines.append(f"{f + 1} {tid} {cid} {height} {width} {encode_rle(mask)}")
    order = rng.permutation(len(lines))
    return of_object, [lines[i] for i in order]


def _predicted_relations(rng: np.random.Generator, gt: list[list], predicates: list[str],
                         of_object: dict[int, int], all_tids: list[int], frames: int,
                         n: int) -> list[dict]:
    """Relation predictions: jittered copies of GT relations (one to three each, the
    predicate sometimes confused, the span sometimes made up), then noise up to ``n``."""
    out = []
    for s, o, name, spans in gt:
        ts, to = of_object.get(s, all_tids[0]), of_object.get(o, all_tids[-1])
        for _ in range(int(rng.integers(1, 4))):
            span = [sorted(int(np.clip(v + rng.integers(-2, 3), 0, frames - 1)) for v in p)
                    for p in spans]
            if rng.random() < 0.2:
                span = _spans(rng, frames, 1)
            rel = (predicates.index(name) if rng.random() < 0.8
                   else int(rng.integers(len(predicates))))
            out.append({"subject": ts, "object": to, "relation": rel, "span": span})
    while len(out) < n:
        s, o = rng.choice(all_tids, size=2, replace=False)
        out.append({"subject": int(s), "object": int(o),
                    "relation": int(rng.integers(len(predicates))),
                    "span": _spans(rng, frames, int(rng.integers(1, 3)))})
    return out


def _ranked(rng: np.random.Generator, preds: list[dict]) -> list[dict]:
    """The predictions with distinct scores, sorted by descending score."""
    scores = rng.permutation(len(preds) * 7)[:len(preds)] / (len(preds) * 7.0) + 1e-3
    ranked = [dict(p, score=float(x)) for p, x in zip(preds, scores, strict=True)]
    return sorted(ranked, key=lambda r: -r["score"])


def _pair_ranking(rng: np.random.Generator, ranked: list[dict]) -> list[list[int]]:
    """The pair proposals' ranking: the predicted pairs, shuffled in part."""
    pairs: list[list[int]] = []
    for r in ranked:
        if [r["subject"], r["object"]] not in pairs:
            pairs.append([r["subject"], r["object"]])
    swaps = rng.integers(0, len(pairs), size=(len(pairs) // 2, 2))
    for a, b in swaps:
        pairs[a], pairs[b] = pairs[b], pairs[a]
    return pairs


def write_pvsg(root: Path | str, n_videos: int = 3, n_frames: int = 16, height: int = 32,
               width: int = 48, seed: int = 0, objects: tuple[int, int] = (3, 7),
               relations: tuple[int, int] = (3, 9), predictions: int = 40,
               n_things: int = 6, n_stuff: int = 3, n_predicates: int = 8) -> PvsgFiles:
    """Write a PVSG-shaped GT and a model's results under ``root`` (same arguments, same
    bytes). Videos have ``n_frames`` frames of ``height`` x ``width``."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    data, results = root / "data", root / "results"
    classes = _classes(n_things, n_stuff)
    n_classes = n_things + n_stuff
    predicates = [f"pred{i}" for i in range(n_predicates)]
    videos, records = [], []
    for v in range(n_videos):
        vid = f"{1000 + v:04d}_{int(rng.integers(10**9, 10**10))}"
        videos.append(vid)
        n_obj = int(rng.integers(*objects))
        objs = _video_objects(rng, n_frames, height, width, n_obj)
        categories = [int(c) for c in rng.integers(0, n_classes, size=n_obj)]
        maps = [_frame_ids(objs, f, height, width) for f in range(n_frames)]
        masks_dir = data / "vidor" / "masks" / vid
        masks_dir.mkdir(parents=True, exist_ok=True)
        for f, m in enumerate(maps):
            (masks_dir / f"{f:04d}.png").write_bytes(imagecodecs.png_encode(m, level=1))
        gt = []
        for _ in range(int(rng.integers(*relations))):
            s, o = (int(x) + 1 for x in rng.choice(n_obj, size=2, replace=False))
            gt.append([s, o, predicates[int(rng.integers(n_predicates))],
                       _spans(rng, n_frames, int(rng.integers(1, 3)))])
        if gt and rng.random() < 0.5:
            gt.append(json.loads(json.dumps(gt[0])))          # a duplicate GT relation
        records.append({
            "video_id": vid,
            "meta": {"height": height, "width": width, "fps": 5, "num_frames": n_frames},
            "objects": [{"object_id": k + 1, "category": (classes["thing"] + classes["stuff"])[c],
                         "is_thing": c < n_things, "status": []}
                        for k, c in enumerate(categories)],
            "relations": gt})
        of_object, lines = _predicted_tubes(rng, maps, categories, n_classes, extra=2)
        all_tids = sorted({int(line.split()[1]) for line in lines} | {999999})
        preds = _predicted_relations(rng, gt, predicates, of_object, all_tids, n_frames,
                                     predictions)
        ranked = _ranked(rng, preds)
        pairs = _pair_ranking(rng, ranked)
        out = results / vid
        (out / "quantitive").mkdir(parents=True, exist_ok=True)
        (out / "quantitive" / "masks.txt").write_text("".join(line + "\n" for line in lines))
        (out / PVSG_RESULTS).write_text(json.dumps({"video_id": vid, "pairs": pairs,
                                                    "relations": ranked}))
    anno = {"objects": classes, "relations": predicates,
            "split": {"vidor": {"train": [], "val": videos},
                      "epic_kitchen": {"train": [], "val": []}, "ego4d": {"train": [], "val": []}},
            "data": records}
    data.mkdir(parents=True, exist_ok=True)
    (data / "pvsg.json").write_text(json.dumps(anno))
    return PvsgFiles(data / "pvsg.json", data, results, tuple(videos))
