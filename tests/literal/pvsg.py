"""PVSG's relation metrics written literally, in the shape of OpenPVSG's
``tools/rel_test_full.py`` (R, mR, weak R, weak mR @20/50/100, ``utils/rel_metrics.py``'s
``calculate_viou`` and ``calculate_final_metrics``) and, for pair recall, of ``tools/rel_test.py``
with the GT pairs ``tools/prepare_rel_set.py`` derives (``utils/relation_matching.py``).

It reads the files as the reference does (``pvsg.json``, one PNG per frame, each video's
``quantitive/masks.txt``, and ``relations.json``: the ranked list ``generate_results`` would
return, with the pair proposals' ranking), and departs from the reference only where it does
not compute: the model. A tube has a query feature at a frame exactly where it has a mask.

``weak="reference"`` counts weak hits as the reference does: a GT relation gains one weak hit
per matching prediction (same classes and predicate, vIoU >= 0.1) until the first prediction
with vIoU >= 0.5 ends the loop, so weak recall can pass 1. ``weak="once"`` is the reading
beside it: one weak hit per GT relation, at the rank of its first weak match.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import groupby
from pathlib import Path

import numpy as np
from PIL import Image

from sgdask.io.codecs.coco_rle import decode_rle

KS = (20, 50, 100)


def video_ids(anno: dict, split: str = "val") -> list[str]:
    return [v for source in ("vidor", "epic_kitchen", "ego4d")
            for v in anno["split"][source][split]]


def data_source(vid: str) -> str:
    head = vid.split("_")[0]
    if vid.startswith("P"):
        return "epic_kitchen"
    return "vidor" if head.isdigit() and len(head) == 4 else "ego4d"


def pred_tubes(masks_txt: Path) -> dict[int, dict]:
    """``get_pred_mask_tubes_one_video``: per track id its majority class (a string, ties to
    the first seen) and its masks as a list of ``{frame: mask}``."""
    rows = []
    for line in masks_txt.read_text().splitlines():
        fid, tid, cid, h, w, counts = line.strip().split()
        rows.append({"fid": fid, "tid": tid, "cid": cid,
                     "mask": decode_rle(counts, int(h), int(w))})
    rows.sort(key=lambda r: r["tid"])
    tubes = {}
    for tid, group in groupby(rows, key=lambda r: r["tid"]):
        group = list(group)
        cid, _ = Counter(r["cid"] for r in group).most_common(1)[0]
        tubes[int(tid)] = {"cid": cid, "mask": [{int(r["fid"]) - 1: r["mask"]} for r in group]}
    return tubes


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.logical_and(a, b).sum()
    union = np.logical_or(a, b).sum()
    return 0 if union == 0 else inter / union


def span_iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = (a * b).sum()
    union = a.sum() + b.sum() - inter
    return inter / union if union > 0 else 0


class Frames:
    """A video's panoptic PNGs, each read when first asked for."""

    def __init__(self, root: Path):
        self.root, self.cache = root, {}

    def __getitem__(self, frame: int) -> np.ndarray:
        if frame not in self.cache:
            self.cache[frame] = np.array(Image.open(self.root / f"{frame:04d}.png"))
        return self.cache[frame]


def viou(frames: Frames, gt_sub: int, gt_obj: int, gt_spans: list, sub_tube: dict,
         obj_tube: dict, pred_span: np.ndarray) -> float:
    """``calculate_viou``'s ``iou``: hit frames inside the predicted span against the GT span's
    frames where both GT masks are present."""
    sub = {k: v for d in sub_tube["mask"] for k, v in d.items()}
    obj = {k: v for d in obj_tube["mask"] for k, v in d.items()}
    gt_real, hit = np.zeros_like(pred_span), np.zeros_like(pred_span)
    for start, end in gt_spans:
        for f in range(start, end + 1):
            if f >= len(pred_span):
                continue
            pan = frames[f]
            gs, go = pan == gt_sub, pan == gt_obj
            if gs.any() and go.any():
                gt_real[f] = 1
            if (f in sub and f in obj and mask_iou(gs, sub[f]) >= 0.5
                    and mask_iou(go, obj[f]) >= 0.5):
                hit[f] = 1
    hit_real = np.logical_and(hit == 1, pred_span == 1).astype(hit.dtype)
    return span_iou(hit_real, gt_real)


def _span_vector(spans: list, frames: int) -> np.ndarray:
    out = np.zeros(frames)
    for a, b in spans:
        out[a:b + 1] = 1
    return (out > 0).astype(float)


def final_metrics(counts: dict) -> dict[str, float]:
    """``calculate_final_metrics``: pooled R and weak R; mR over the predicates present."""
    out = {}
    valid = [p for p, c in counts[KS[0]].items() if c["total"] != 0]
    for k in KS:
        rows = counts[k]
        total = sum(c["total"] for c in rows.values())
        out[f"R@{k}"] = sum(c["hit"] for c in rows.values()) / total if total else 0
        out[f"wR@{k}"] = sum(c["weak_hit"] for c in rows.values()) / total if total else 0
        out[f"mR@{k}"] = sum(c["hit"] / c["total"] for c in rows.values()
                             if c["total"]) / len(valid)
        out[f"wmR@{k}"] = sum(c["weak_hit"] / c["total"] for c in rows.values()
                              if c["total"]) / len(valid)
    return out


def video_counts(anno: dict, data_dir: Path, results: Path, vid: str, counts: dict,
                 weak: str = "reference") -> None:
    """One video of ``rel_test_full.py``'s loop, adding to ``counts[k][predicate]``."""
    classes = anno["objects"]["thing"] + anno["objects"]["stuff"]
    rec = next(r for r in anno["data"] if r["video_id"] == vid)
    category = {o["object_id"]: classes.index(o["category"]) for o in rec["objects"]}
    tubes = pred_tubes(results / vid / "quantitive" / "masks.txt")
    ranked = json.loads((results / vid / "relations.json").read_text())["relations"]
    n_frames = rec["meta"]["num_frames"]
    frames = Frames(data_dir / data_source(vid) / "masks" / vid)
    for s, o, name, spans in rec["relations"]:
        if name not in anno["relations"]:
            continue
        key = (category[s], category[o], anno["relations"].index(name))
        for k in KS:
            counts[k][key[2]]["total"] += 1
        weak_done = False
        for idx, r in enumerate(ranked):
            if r["subject"] not in tubes or r["object"] not in tubes:
                continue
            sub, obj = tubes[r["subject"]], tubes[r["object"]]
            if (int(sub["cid"]), int(obj["cid"]), r["relation"]) != key:
                continue
            iou = viou(frames, s, o, spans, sub, obj, _span_vector(r["span"], n_frames))
            if iou >= 0.1 and not (weak == "once" and weak_done):
                weak_done = True
                for k in KS:
                    counts[k][key[2]]["weak_hit"] += idx < k
            if iou >= 0.5:
                for k in KS:
                    counts[k][key[2]]["hit"] += idx < k
                break


def _matching(frames_dir: Path, objects: list[dict], classes: list[str], tubes: dict) -> dict:
    """``match_and_process_gt_tubes``: per GT object, per predicted tube of its class, the
    frames where their masks' IoU is above 0.5."""
    out: dict = {}
    for frame_id, path in enumerate(sorted(frames_dir.rglob("*.png"))):
        pan = np.array(Image.open(path))
        for entry in objects:
            oid, cid = entry["object_id"], classes.index(entry["category"])
            gt_mask = pan == oid
            for tid, tube in tubes.items():
                if int(tube["cid"]) != cid:
                    continue
                frames = [next(iter(d)) for d in tube["mask"]]
                if frame_id in frames:
                    pred = next(d for d in tube["mask"] if next(iter(d)) == frame_id)[frame_id]
                    if mask_iou(gt_mask, pred) > 0.5:
                        out.setdefault(oid, {}).setdefault(tid, []).append(frame_id)
    return out


def _find_ranges(nums: list[int]) -> list[str]:
    ranges, start = [], nums[0]
    for i in range(1, len(nums)):
        if nums[i] > nums[i - 1] + 5:
            ranges.append(f"{start}-{nums[i - 1]}")
            start = nums[i]
    ranges.append(f"{start}-{nums[-1]}")
    return ranges


def _compact(matching: dict) -> dict:
    """``compact_matching_dict``: tubes matched on fewer than 5 frames dropped; a GT object's
    only tube (counted before dropping) as one range, several as ranges split at gaps > 5."""
    out = {}
    for oid, inner in matching.items():
        kept = {}
        for tid, frames in inner.items():
            if len(frames) < 5:
                continue
            kept[tid] = (f"{min(frames)}-{max(frames)}" if len(inner) == 1
                         else _find_ranges(sorted(frames)))
        if kept:
            out[oid] = kept
    return out


def _ranges(value: str | list[str]) -> list[tuple[int, int]]:
    return [tuple(map(int, r.split("-"))) for r in ([value] if isinstance(value, str) else value)]


def gt_pairs(anno: dict, data_dir: Path, results: Path, vid: str) -> list[tuple[int, int]]:
    """The GT relations moved onto the predicted tubes, as ``prepare_rel_set.py`` writes them
    to ``relations.pickle`` (``translate_gt_relations``, then ``process_feats_and_relations``
    keeping spans of at least 3 frames where both tubes are present): their pairs."""
    classes = anno["objects"]["thing"] + anno["objects"]["stuff"]
    rec = next(r for r in anno["data"] if r["video_id"] == vid)
    tubes = pred_tubes(results / vid / "quantitive" / "masks.txt")
    matching = _compact(_matching(data_dir / data_source(vid) / "masks" / vid, rec["objects"],
                                  classes, tubes))
    merged: dict = {}
    for s, o, name, spans in rec["relations"]:
        if name not in anno["relations"] or s not in matching or o not in matching:
            continue
        for t0, t1 in spans:
            for tid1, r1 in matching[s].items():
                for a1, b1 in _ranges(r1):
                    for tid2, r2 in matching[o].items():
                        for a2, b2 in _ranges(r2):
                            o1 = (max(t0, a1), min(t1, b1 + 1))
                            o2 = (max(t0, a2), min(t1, b2 + 1))
                            both = (max(o1[0], o2[0]), min(o1[1], o2[1]))
                            if both[0] < both[1]:
                                merged.setdefault((tid1, tid2, name), []).append(both)
    n_frames = rec["meta"]["num_frames"]
    present = {tid: {next(iter(d)) for d in tube["mask"]} for tid, tube in tubes.items()}
    pairs = []
    for (tid1, tid2, _), spans in merged.items():
        span = np.zeros(n_frames)
        for a, b in spans:
            span[a:b] = 1
        for f in range(n_frames):
            if f not in present[tid1] or f not in present[tid2]:
                span[f] = 0
        if span.sum() >= 3:
            pairs.append((tid1, tid2))
    return pairs


def pair_recall(selected: list, gt: list, k: int = 20) -> float:
    """``calculate_pair_recall_at_k``."""
    sel, truth = {tuple(p) for p in selected[:k]}, {tuple(p) for p in gt}
    return len(sel & truth) / len(truth) if truth else 0


def evaluate(annotation: Path, data_dir: Path, results: Path, weak: str = "reference",
             split: str = "val") -> dict:
    """Every number, the per-predicate counts and the per-video pair recalls."""
    anno = json.loads(Path(annotation).read_text())
    counts = {k: {i: {"total": 0, "hit": 0, "weak_hit": 0} for i in range(len(anno["relations"]))}
              for k in KS}
    pair = []
    for vid in video_ids(anno, split):
        video_counts(anno, data_dir, results, vid, counts, weak)
        pairs = json.loads((results / vid / "relations.json").read_text())["pairs"]
        pair.append(pair_recall(pairs[:100], gt_pairs(anno, data_dir, results, vid), 20))
    metrics = final_metrics(counts)
    metrics["PR@20"] = float(np.array(pair).mean())
    return {"metrics": metrics, "counts": counts, "pair_recall_per_video": pair}
