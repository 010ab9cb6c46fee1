"""The Open Images V6 evaluation written literally, per image and then over the whole test
set, in the shape of PySGG's ``eval_rel_results`` and ``ap_eval_rel`` (a loop over images
building each image's top candidates and recall matches, then per predicate one global
ranking of every image's detections walked in order with per-image ``visited`` flags).

The fast path (``sgdask.protocols.oiv6.kernels`` per image, ``sgdask.protocols.oiv6.metrics``
over merged state) is checked against it. It departs from the reference only where the
reference's order is undefined: its sorts are stable here (equal scores keep image, then
candidate, order), and then among a predicate's detections of equal score the false positives are
put first, sgdask's documented rule for ties.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from sgdask.types import ImageGT, ImagePred

TOPK, PRD_K = 100, 2


def boxlist_iou(boxes1: np.ndarray, boxes2: np.ndarray) -> np.ndarray:
    """maskrcnn_benchmark's ``boxlist_iou`` in float32 numpy."""
    boxes1 = np.asarray(boxes1, np.float32).reshape(-1, 4)
    boxes2 = np.asarray(boxes2, np.float32).reshape(-1, 4)
    area1 = (boxes1[:, 2] - boxes1[:, 0] + 1) * (boxes1[:, 3] - boxes1[:, 1] + 1)
    area2 = (boxes2[:, 2] - boxes2[:, 0] + 1) * (boxes2[:, 3] - boxes2[:, 1] + 1)
    lt = np.maximum(boxes1[:, None, :2], boxes2[:, :2])
    rb = np.minimum(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = np.maximum(rb - lt + 1, np.float32(0))
    inter = wh[:, :, 0] * wh[:, :, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area1[:, None] + area2 - inter)


def boxes_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.stack([np.minimum(a[:, 0], b[:, 0]), np.minimum(a[:, 1], b[:, 1]),
                     np.maximum(a[:, 2], b[:, 2]), np.maximum(a[:, 3], b[:, 3])], 1)


def clipped(gt: ImageGT) -> np.ndarray:
    boxes = np.asarray(gt.boxes, np.float64).reshape(-1, 4).astype(np.float32)
    height, width = gt.size
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, np.float32(width - 1))
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, np.float32(height - 1))
    return boxes


def top_dets(pred: ImagePred | None) -> dict[str, np.ndarray]:
    """One image's candidates, as ``eval_rel_results`` builds ``topk_dets``."""
    if pred is None or pred.pairs is None or not len(pred.pairs):
        return {"s": np.zeros(0, int), "o": np.zeros(0, int), "p": np.zeros(0, int),
                "score": np.zeros(0, np.float32)}
    pairs = pred.pairs
    inst = np.asarray(pred.scores, np.float32)
    k = pairs.per_pair
    n = len(pairs) // k
    subjects, objects = pairs.subjects[::k], pairs.objects[::k]
    prd = np.asarray(pairs.scores, np.float32).reshape(n, k)
    labels = np.asarray(pairs.predicates).reshape(n, k)
    so = inst[subjects] * inst[objects]
    spo = so[:, None] * prd
    flat = sorted(range(spo.size), key=lambda r: -spo.reshape(-1)[r])[:TOPK]
    rows, places = np.divmod(np.asarray(flat, int), k)
    score = spo[rows, places]
    keep = np.where(score > 0.00001)[0]
    return {"s": subjects[rows][keep], "o": objects[rows][keep],
            "p": labels[rows, places][keep], "score": score[keep]}


def recall_matches(gt: ImageGT, pred: ImagePred, dets: dict[str, np.ndarray]) -> list[list]:
    """``_compute_pred_matches``: per candidate, the GT relations it hits."""
    gt_boxes = clipped(gt)
    labels = np.asarray(pred.labels)
    boxes = np.asarray(pred.boxes, np.float64).reshape(-1, 4).astype(np.float32)
    out: list[list[int]] = [[] for _ in dets["p"]]
    for g, (gs, go, gp) in enumerate(np.asarray(gt.relations).tolist()):
        for c in range(len(dets["p"])):
            s, o, p = int(dets["s"][c]), int(dets["o"][c]), int(dets["p"][c])
            if (labels[s], p, labels[o]) != (gt.labels[gs], gp, gt.labels[go]):
                continue
            sub = boxlist_iou(gt_boxes[gs], boxes[s])[0, 0]
            obj = boxlist_iou(gt_boxes[go], boxes[o])[0, 0]
            if sub >= 0.5 and obj >= 0.5:
                out[c].append(g)
    return out


def get_ap(rec: np.ndarray, prec: np.ndarray) -> float:
    """``ap_eval_rel.get_ap``."""
    mrec = np.concatenate(([0.0], rec, [1.0]))
    mpre = np.concatenate(([0.0], prec, [0.0]))
    for i in range(mpre.size - 1, 0, -1):
        mpre[i - 1] = np.maximum(mpre[i - 1], mpre[i])
    i = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def ap_eval(dets: list[dict], gts: dict[int, dict], npos: int, rel: bool) -> float:
    """``ap_eval`` over one predicate's detections of every image (stable sort, then
    false positives first among equal scores)."""
    order = sorted(range(len(dets)), key=lambda d: -dets[d]["score"])
    visited = {im: [False] * len(g["s_boxes"]) for im, g in gts.items()}
    tp = np.zeros(len(order))
    for rank, d in enumerate(order):
        det = dets[d]
        gt = gts[det["image"]]
        ovmax, jmax = -np.inf, -1
        if len(gt["s_boxes"]):
            valid = (gt["s_labels"] == det["s_label"]) & (gt["o_labels"] == det["o_label"])
            if valid.any():
                if rel:
                    overlaps = np.minimum(boxlist_iou(det["s_box"], gt["s_boxes"])[0],
                                          boxlist_iou(det["o_box"], gt["o_boxes"])[0])
                else:
                    overlaps = boxlist_iou(det["r_box"], gt["r_boxes"])[0]
                overlaps = overlaps * valid
                ovmax, jmax = np.max(overlaps), np.argmax(overlaps)
            else:
                ovmax = 0.0
        if ovmax > 0.5 and not visited[det["image"]][jmax]:
            tp[rank] = 1.0
            visited[det["image"]][jmax] = True
    scores = [-dets[d]["score"] for d in order]
    tp = tp[sorted(range(len(order)), key=lambda r: (scores[r], tp[r]))]  # ties: FP first
    fp = np.cumsum(1.0 - tp)
    tp = np.cumsum(tp)
    rec = tp / (float(npos) + 1e-12)
    prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    return get_ap(rec, prec)


def evaluate(images: list[tuple[ImageGT, ImagePred | None]], n_predicates: int) -> dict:
    """Every oiv6 number of the images (GT with relations; None: no prediction)."""
    hits, all_gt = 0, 0
    dets: list[list[dict]] = [[] for _ in range(n_predicates)]
    gts: list[dict[int, dict]] = [{} for _ in range(n_predicates)]
    npos = [0] * n_predicates
    for im, (gt, pred) in enumerate(images):
        top = top_dets(pred)
        pred_to_gt = recall_matches(gt, pred, top) if len(top["p"]) else []
        match = reduce(np.union1d, pred_to_gt[:50]) if len(pred_to_gt) else []
        hits += len(match)
        relations = np.asarray(gt.relations).reshape(-1, 3)
        all_gt += len(relations)
        gt_boxes, gt_labels = clipped(gt), np.asarray(gt.labels)
        if len(top["p"]):
            boxes = np.asarray(pred.boxes, np.float64).reshape(-1, 4).astype(np.float32)
            labels = np.asarray(pred.labels)
        for c in range(n_predicates):
            mine = relations[relations[:, 2] == c]
            s_boxes, o_boxes = gt_boxes[mine[:, 0]], gt_boxes[mine[:, 1]]
            gts[c][im] = {"s_boxes": s_boxes, "o_boxes": o_boxes,
                          "r_boxes": boxes_union(s_boxes, o_boxes),
                          "s_labels": gt_labels[mine[:, 0]], "o_labels": gt_labels[mine[:, 1]]}
            npos[c] += len(mine)
            for d in np.flatnonzero(top["p"] == c).tolist():
                s, o = int(top["s"][d]), int(top["o"][d])
                dets[c].append({"image": im, "score": float(top["score"][d]),
                                "s_box": boxes[s], "o_box": boxes[o],
                                "r_box": boxes_union(boxes[s][None], boxes[o][None])[0],
                                "s_label": labels[s], "o_label": labels[o]})
    out = {"R@50": float(hits) / (float(all_gt) + 1e-12)}
    all_npos = sum(npos)
    aps = {}
    for name, rel in (("rel", True), ("phr", False)):
        aps[name] = [ap_eval(dets[c], gts[c], npos[c], rel) for c in range(n_predicates)]
        plain, weighted = 0.0, 0.0
        for c in range(n_predicates):
            weighted += aps[name][c] * float(npos[c]) / float(all_npos)
            plain += aps[name][c]
        out[f"mAP_{name}"] = plain / n_predicates
        out[f"wmAP_{name}"] = weighted
    out["score_wtd"] = 0.4 * out["wmAP_rel"] + 0.2 * out["R@50"] + 0.4 * out["wmAP_phr"]
    return {"metrics": out, "AP_rel": aps["rel"], "AP_phr": aps["phr"]}
