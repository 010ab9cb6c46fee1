"""Reference of the Open Images V6 row: RelDN's / PySGG's ``eval_rel_results`` with its
``ap_eval_rel``, single process, written the way that code is: a Python loop over images
with numpy per image (candidates from each pair's two best predicates, ``argsort_desc``,
the top 100, the ``> 1e-5`` cut, ``_compute_pred_matches`` and the unions of its match
lists for R@50), then per predicate one global ranking walked detection by detection
(``ap_eval``: the GT of that image and predicate, label mask, overlaps, ``argmax``,
visited flags) for relationship and phrase AP.

``python -m benchmarks._oi_reference --gt G --pred P`` reads the two stores' tables (the
same bytes sgdask reads; timed as ``load_s``), evaluates (``evaluate_s``) and prints one
JSON line with R@50, mAP_rel, wmAP_rel, mAP_phr, wmAP_phr and score_wtd. It uses no sgdask
kernel: only the store reader to get the Parquet tables. Its sorts are numpy's stable
ones, and among equal scores false positives come first (sgdask's rule for what the
reference leaves open).
"""

from __future__ import annotations

import argparse
import json
import time
from functools import reduce

import numpy as np

from benchmarks._sgb_reference import bbox_overlaps, intersect_2d, per_image, tables


def boxes_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.stack([np.minimum(a[:, 0], b[:, 0]), np.minimum(a[:, 1], b[:, 1]),
                     np.maximum(a[:, 2], b[:, 2]), np.maximum(a[:, 3], b[:, 3])], 1)


def image_dets(pred: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """One image's top candidates (``eval_rel_results``' per-image block)."""
    if pred is None or not len(pred["p"]):
        empty = np.zeros(0, np.int64)
        return {"s_box": np.zeros((0, 4), np.float32), "o_box": np.zeros((0, 4), np.float32),
                "s_lbl": empty, "o_lbl": empty, "p": empty, "score": np.zeros(0, np.float32)}
    s, o = pred["s"][::2], pred["o"][::2]
    det_scores_prd = pred["score"].reshape(-1, 2)
    det_labels_prd = pred["p"].reshape(-1, 2)
    so = pred["inst_score"][s] * pred["inst_score"][o]
    spo = so[:, None] * det_scores_prd
    inds = np.column_stack(np.unravel_index(np.argsort(-spo.ravel(), kind="stable"),
                                            spo.shape))[:100]
    score = spo[inds[:, 0], inds[:, 1]]
    keep = np.where(score > 0.00001)[0]
    rows, places = inds[keep, 0], inds[keep, 1]
    return {"s_box": pred["boxes"][s[rows]], "o_box": pred["boxes"][o[rows]],
            "s_lbl": pred["labels"][s[rows]], "o_lbl": pred["labels"][o[rows]],
            "p": det_labels_prd[rows, places], "score": score[keep]}


def pred_matches(gt_spo: np.ndarray, det_spo: np.ndarray, gt_boxes: np.ndarray,
                 det_boxes: np.ndarray) -> list[list[int]]:
    """``_compute_pred_matches``."""
    keeps = intersect_2d(gt_spo, det_spo)
    pred_to_gt: list[list[int]] = [[] for _ in range(len(det_boxes))]
    for gt_ind in np.where(keeps.any(1))[0]:
        keep = keeps[gt_ind]
        boxes = det_boxes[keep]
        sub = bbox_overlaps(gt_boxes[gt_ind][None, :4], boxes[:, :4])[0]
        obj = bbox_overlaps(gt_boxes[gt_ind][None, 4:], boxes[:, 4:])[0]
        for i in np.where(keep)[0][(sub >= 0.5) & (obj >= 0.5)]:
            pred_to_gt[i].append(int(gt_ind))
    return pred_to_gt


def get_ap(rec: np.ndarray, prec: np.ndarray) -> float:
    mrec = np.concatenate(([0.0], rec, [1.0]))
    mpre = np.concatenate(([0.0], prec, [0.0]))
    for i in range(mpre.size - 1, 0, -1):
        mpre[i - 1] = np.maximum(mpre[i - 1], mpre[i])
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def ap_eval(image_ids: list[int], dets: dict[str, np.ndarray], gts: dict[int, dict],
            npos: int, rel: bool) -> float:
    """``ap_eval``, step by step as it is written (its per-detection conversions
    included); a stable sort, then false positives first among equal scores."""
    confidence = dets["confidence"]
    order = np.argsort(-confidence, kind="stable")
    bb_s, bb_o, bb_r = dets["BB_s"][order, :], dets["BB_o"][order, :], dets["BB_r"][order, :]
    lbl_s, lbl_o = dets["LBL_s"][order], dets["LBL_o"][order]
    image_ids = [image_ids[x] for x in order]
    nd = len(image_ids)
    tp, fp = np.zeros(nd), np.zeros(nd)
    visited = {k: [False] * v["gt_num"] for k, v in gts.items()}
    for d in range(nd):
        r = gts[image_ids[d]]
        seen = visited[image_ids[d]]
        s_box, o_box, r_box = (b[d, :].astype(float) for b in (bb_s, bb_o, bb_r))
        ovmax, jmax = -np.inf, -1
        gt_s, gt_o, gt_r = (r[k].astype(float) for k in ("s_box", "o_box", "r_box"))
        if gt_s.size > 0:
            valid = np.logical_and(r["s_lbl"] == lbl_s[d], r["o_lbl"] == lbl_o[d])
            if valid.any():
                if rel:
                    overlaps = np.minimum(
                        bbox_overlaps(s_box[None, :].astype(np.float32),
                                      gt_s.astype(np.float32))[0],
                        bbox_overlaps(o_box[None, :].astype(np.float32),
                                      gt_o.astype(np.float32))[0])
                else:
                    overlaps = bbox_overlaps(r_box[None, :].astype(np.float32),
                                             gt_r.astype(np.float32))[0]
                overlaps *= valid
                ovmax, jmax = np.max(overlaps), np.argmax(overlaps)
            else:
                ovmax, jmax = 0.0, -1
        if ovmax > 0.5 and not seen[jmax]:
            tp[d] = 1.0
            seen[jmax] = True
        else:
            fp[d] = 1.0
    ties = np.lexsort((tp, -confidence[order]))  # among equal scores: false positives first
    fp, tp = np.cumsum(fp[ties]), np.cumsum(tp[ties])
    rec = tp / (float(npos) + 1e-12)
    prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    return get_ap(rec, prec)


def prepared(topk: list[dict], n_predicates: int
             ) -> tuple[list[list[int]], list[dict], list[dict], list[int]]:
    """``prepare_mAP_dets``: per predicate its detections of every image (grown image by
    image, as it does) and per image its GT of that predicate."""
    image_ids: list[list[int]] = [[] for _ in range(n_predicates)]
    dets = [{"confidence": np.empty(0), "BB_s": np.empty((0, 4)), "BB_o": np.empty((0, 4)),
             "BB_r": np.empty((0, 4)), "LBL_s": np.empty(0), "LBL_o": np.empty(0)}
            for _ in range(n_predicates)]
    gts: list[dict[int, dict]] = [{} for _ in range(n_predicates)]
    npos = [0] * n_predicates
    for im, top in enumerate(topk):
        r_box = boxes_union(top["s_box"], top["o_box"])
        gt_r = boxes_union(top["gt_s_box"], top["gt_o_box"])
        for c in range(n_predicates):
            sel = np.where(top["p"] == c)[0]
            if len(sel):
                for key, values in (("confidence", top["score"]), ("BB_s", top["s_box"]),
                                    ("BB_o", top["o_box"]), ("BB_r", r_box),
                                    ("LBL_s", top["s_lbl"]), ("LBL_o", top["o_lbl"])):
                    dets[c][key] = np.concatenate((dets[c][key], values[sel]), 0)
                image_ids[c] += [im] * len(sel)
            mine = np.where(top["gt_p"] == c)[0]
            npos[c] += len(mine)
            gts[c][im] = {"s_box": top["gt_s_box"][mine], "o_box": top["gt_o_box"][mine],
                          "r_box": gt_r[mine], "s_lbl": top["gt_s_lbl"][mine],
                          "o_lbl": top["gt_o_lbl"][mine], "gt_num": len(mine)}
    return image_ids, dets, gts, npos


def load(gt_url: str, pred_url: str) -> tuple[list, int]:
    """Per evaluated GT image (id order): its GT arrays and its prediction arrays."""
    gt, pred = tables(gt_url, "gt"), tables(pred_url, "submission")
    from sgdask.store.store import StoreReader

    n_predicates = len(StoreReader(gt_url, kind="gt").manifest["predicate_classes"])
    g_inst, g_trip = per_image(gt["instances"]), per_image(gt["triplets"])
    p_inst = per_image(pred["instances"])
    pairs = {k: v for k, v in pred["triplets"].items()}
    is_pair = pairs["list"] == "pair"
    pairs = {k: v[is_pair] for k, v in pairs.items()}
    p_pair = per_image(pairs)
    images = []
    for image_id, height, width, n in zip(gt["images"]["image_id"], gt["images"]["height"],
                                          gt["images"]["width"], gt["images"]["n_graph"],
                                          strict=True):
        if not n:
            continue
        gi = g_inst[image_id]
        boxes = np.stack([gt["instances"][c][gi] for c in ("x1", "y1", "x2", "y2")], 1)
        boxes = boxes.astype(np.float32)
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, np.float32(width - 1))
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, np.float32(height - 1))
        t = g_trip[image_id]
        rel = np.stack([gt["triplets"][c][t] for c in ("subject", "object", "predicate")], 1)
        entry = {"boxes": boxes, "labels": gt["instances"]["category"][gi], "rel": rel,
                 "pred": None}
        if image_id in p_inst:
            pi = p_inst[image_id]
            rows = p_pair.get(image_id, slice(0, 0))
            entry["pred"] = {
                "boxes": np.stack([pred["instances"][c][pi] for c in ("x1", "y1", "x2", "y2")],
                                  1).astype(np.float32),
                "labels": pred["instances"]["category"][pi],
                "inst_score": pred["instances"]["score"][pi].astype(np.float32),
                "s": pairs["subject"][rows], "o": pairs["object"][rows],
                "p": pairs["predicate"][rows], "score": pairs["score"][rows].astype(np.float32)}
        images.append(entry)
    return images, n_predicates


def evaluate(images: list[dict], n_predicates: int) -> dict[str, float]:
    hits, all_gt = 0, 0
    topk = []
    for entry in images:
        top = image_dets(entry["pred"])
        rel, labels, boxes = entry["rel"], entry["labels"], entry["boxes"]
        gt_spo = np.stack([labels[rel[:, 0]], rel[:, 2], labels[rel[:, 1]]], 1)
        gt_boxes = np.hstack([boxes[rel[:, 0]], boxes[rel[:, 1]]])
        det_spo = np.stack([top["s_lbl"], top["p"], top["o_lbl"]], 1)
        pred_to_gt = pred_matches(gt_spo, det_spo, gt_boxes,
                                  np.hstack([top["s_box"], top["o_box"]]))
        match = reduce(np.union1d, pred_to_gt[:50]) if len(pred_to_gt) else []
        hits += len(match)
        all_gt += len(rel)
        top.update(gt_s_box=boxes[rel[:, 0]], gt_o_box=boxes[rel[:, 1]],
                   gt_s_lbl=labels[rel[:, 0]], gt_o_lbl=labels[rel[:, 1]], gt_p=rel[:, 2])
        topk.append(top)
    out = {"R@50": float(hits) / (float(all_gt) + 1e-12)}
    image_ids, dets, gts, npos = prepared(topk, n_predicates)
    all_npos = sum(npos)
    for name, is_rel in (("rel", True), ("phr", False)):
        plain, weighted = 0.0, 0.0
        for c in range(n_predicates):
            ap = ap_eval(image_ids[c], dets[c], gts[c], npos[c], is_rel)
            weighted += ap * float(npos[c]) / float(all_npos)
            plain += ap
        out[f"mAP_{name}"] = plain / n_predicates
        out[f"wmAP_{name}"] = weighted
    out["score_wtd"] = 0.4 * out["wmAP_rel"] + 0.2 * out["R@50"] + 0.4 * out["wmAP_phr"]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._oi_reference")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    images, n_predicates = load(args.gt, args.pred)
    loaded = time.perf_counter()
    metrics = evaluate(images, n_predicates)
    done = time.perf_counter()
    print(json.dumps({"load_s": loaded - start, "evaluate_s": done - loaded,
                      "images": len(images), "metrics": metrics}))


if __name__ == "__main__":
    main()
