"""Reference of the VG row: Scene-Graph-Benchmark.pytorch's relation evaluation, single
process, written the way its evaluator is (``vg_eval.py`` / ``sgg_eval.py``): a Python loop
over images, numpy per image (triplet equality matrix, float32 inclusive box IoU per
matched GT row, per-prediction GT match lists, their unions per k).

``python -m benchmarks._sgb_reference --gt G --pred P`` reads the two stores' tables (the
same bytes sgdask reads; timed as ``load_s``), evaluates (``evaluate_s``) and prints one
JSON line with the metrics (R, ngR, zR, ngzR, mR and mNgR at 20, 50, 100, the mean recalls
over the whole predicate vocabulary) so that the row can check agreement. It uses no
sgdask kernel: only the store reader to get the Parquet tables.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import reduce

import numpy as np
import pyarrow.parquet as pq

from sgdask.store.store import StoreReader

KS = (20, 50, 100)
NG_LIMIT = 100


def tables(url: str, kind: str) -> dict[str, dict[str, np.ndarray]]:
    reader = StoreReader(url, kind=kind)
    parts = [p["name"] for p in reader.parts]
    out = {}
    for name in ("images", "instances", "triplets"):
        table = reader.table(name, parts)
        out[name] = {c: table[c].to_numpy(zero_copy_only=False) for c in table.column_names}
    return out


def per_image(table: dict[str, np.ndarray]) -> dict[str, slice]:
    """Rows of each image (tables are grouped by image)."""
    ids = table["image_id"]
    if len(ids) == 0:
        return {}
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(ids)]])
    return {ids[s]: slice(int(s), int(e)) for s, e in zip(starts, ends, strict=True)}


def intersect_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)): rows equal."""
    return (a[:, None, :] == b[None, :, :]).all(2)


def bbox_overlaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """maskrcnn_benchmark's boxlist_iou: float32, +1 on width and height."""
    one = np.float32(1)
    area_a = (a[:, 2] - a[:, 0] + one) * (a[:, 3] - a[:, 1] + one)
    area_b = (b[:, 2] - b[:, 0] + one) * (b[:, 3] - b[:, 1] + one)
    lt = np.maximum(a[:, None, :2], b[:, :2])
    rb = np.minimum(a[:, None, 2:], b[:, 2:])
    wh = np.clip(rb - lt + one, np.float32(0), None)
    inter = wh[:, :, 0] * wh[:, :, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area_a[:, None] + area_b - inter)


def triplets(rels: np.ndarray, classes: np.ndarray, boxes: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    s, o, p = rels[:, 0], rels[:, 1], rels[:, 2]
    return np.column_stack((classes[s], p, classes[o])), np.column_stack((boxes[s], boxes[o]))


def pred_matches(gt_trip: np.ndarray, pred_trip: np.ndarray, gt_boxes: np.ndarray,
                 pred_boxes: np.ndarray) -> list[list[int]]:
    keeps = intersect_2d(gt_trip, pred_trip)
    has = keeps.any(1)
    out: list[list[int]] = [[] for _ in range(len(pred_trip))]
    for gt_ind, gt_box, keep in zip(np.where(has)[0], gt_boxes[has], keeps[has], strict=True):
        boxes = pred_boxes[keep]
        sub = bbox_overlaps(gt_box[None, :4], boxes[:, :4])[0]
        obj = bbox_overlaps(gt_box[None, 4:], boxes[:, 4:])[0]
        for i in np.where(keep)[0][(sub >= 0.5) & (obj >= 0.5)]:
            out[i].append(int(gt_ind))
    return out


def evaluate(gt: dict, pred: dict, manifest: dict, seen: set) -> tuple[dict, int]:
    n_pred_classes = len(manifest["predicate_classes"])
    gt_images, pred_images = per_image(gt["instances"]), per_image(pred["instances"])
    gt_trips, pred_trips = per_image(gt["triplets"]), per_image(pred["triplets"])
    sizes = dict(zip(gt["images"]["image_id"], zip(gt["images"]["height"],
                                                   gt["images"]["width"], strict=True),
                     strict=True))
    recall = {m: {k: [] for k in KS} for m in ("R", "ngR", "zR", "ngzR")}
    collect = {m: {k: [[] for _ in range(n_pred_classes)] for k in KS} for m in ("mR", "mNgR")}
    evaluated = 0
    for image_id, rows in gt_trips.items():
        t = gt["triplets"]
        gt_rels = np.column_stack([t["subject"][rows], t["object"][rows],
                                   t["predicate"][rows]]).astype(np.int64)
        if len(gt_rels) == 0 or image_id not in pred_trips:
            continue  # no GT relation / no proposals: skipped
        i = gt["instances"]
        inst = gt_images[image_id]
        h, w = sizes[image_id]
        gt_boxes = np.column_stack([i[c][inst] for c in ("x1", "y1", "x2", "y2")]
                                   ).astype(np.float32)
        gt_boxes[:, 0::2] = np.clip(gt_boxes[:, 0::2], 0, w - 1)
        gt_boxes[:, 1::2] = np.clip(gt_boxes[:, 1::2], 0, h - 1)
        gt_classes = i["category"][inst].astype(np.int64)
        p = pred["instances"]
        pinst = pred_images[image_id]
        pred_boxes = np.column_stack([p[c][pinst] for c in ("x1", "y1", "x2", "y2")]
                                     ).astype(np.float32)
        pred_classes = p["category"][pinst].astype(np.int64)
        pt = pred["triplets"]
        prow = pred_trips[image_id]
        lists = pt["list"][prow]
        prels = np.column_stack([pt["subject"][prow], pt["object"][prow],
                                 pt["predicate"][prow]]).astype(np.int64)
        graph = prels[lists == "graph"]
        if len(graph) == 0:
            continue
        ng = prels[lists == "ng"][:NG_LIMIT]
        evaluated += 1
        gt_trip, gt_tboxes = triplets(gt_rels, gt_classes, gt_boxes)
        zero_idx = [j for j, (s, o, q) in enumerate(gt_rels.tolist())
                    if (gt_classes[s], gt_classes[o], q) not in seen]
        for name, rels, mean_name in (("R", graph, "mR"), ("ngR", ng, "mNgR")):
            pt_trip, pt_boxes = triplets(rels, pred_classes, pred_boxes)
            to_gt = pred_matches(gt_trip, pt_trip, gt_tboxes, pt_boxes)
            for k in KS:
                match = reduce(np.union1d, to_gt[:k]) if to_gt[:k] else []
                recall[name][k].append(len(match) / len(gt_rels))
                hit = np.zeros(n_pred_classes)
                count = np.bincount(gt_rels[:, 2], minlength=n_pred_classes)
                for m in match:
                    hit[gt_rels[int(m), 2]] += 1
                for q in np.flatnonzero(count):
                    collect[mean_name][k][q].append(hit[q] / count[q])
                if zero_idx:
                    found = len(set(zero_idx) & {int(m) for m in match})
                    recall["zR" if name == "R" else "ngzR"][k].append(found / len(zero_idx))
    metrics = {}
    for name, by_k in recall.items():
        for k, values in by_k.items():
            if values:
                metrics[f"{name}@{k}"] = float(np.mean(values))
    for name, by_k in collect.items():
        for k, per_class in by_k.items():
            metrics[f"{name}@{k}"] = float(sum(np.mean(c) if c else 0.0 for c in per_class)
                                           / n_pred_classes)
    return metrics, evaluated


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._sgb_reference")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    gt, pred = tables(args.gt, "gt"), tables(args.pred, "submission")
    reader = StoreReader(args.gt, kind="gt")
    manifest = reader.manifest
    stats = pq.read_table(f"{args.gt}/{manifest['train_stats']}").to_pylist()
    seen = {(r["subject_category"], r["object_category"], r["predicate"]) for r in stats}
    loaded = time.perf_counter()
    metrics, evaluated = evaluate(gt, pred, manifest, seen)
    done = time.perf_counter()
    print(json.dumps({"load_s": loaded - start, "evaluate_s": done - loaded,
                      "evaluated_images": evaluated, "metrics": metrics}))


if __name__ == "__main__":
    main()
