"""Measured subprocess: the in-memory evaluator's cost per ``update``.

``python -m benchmarks._evaluator --psg P --masks-dir D --zip Z [--protocol singlempo]``
decodes each test image's GT (panoptic PNG -> label image) and prediction (ZIP TIFFs ->
mask stack) into memory (not timed: a training loop has them already), then times
``sgdask.Evaluator.update`` on it, image after image (the first one apart: it loads the compiled
kernels) and ``compute`` once. Prints one JSON line: images, seconds of the first update,
of the others and of compute, milliseconds per further update, the metrics.
"""

from __future__ import annotations

import argparse
import json
import time
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from PIL import Image


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._evaluator")
    parser.add_argument("--psg", required=True, type=Path)
    parser.add_argument("--masks-dir", required=True, type=Path)
    parser.add_argument("--zip", required=True, type=Path)
    parser.add_argument("--protocol", default="singlempo")
    parser.add_argument("--ks", default="20,50,100,x1,x10")
    parser.add_argument("--limit", type=int, default=None, help="only the first N images")
    return parser.parse_args(argv)


def ground_truth(entry: dict[str, Any], masks_dir: Path) -> dict[str, Any]:
    rgb = np.asarray(Image.open(masks_dir / entry["pan_seg_file_name"]).convert("RGB"),
                     dtype=np.int64)
    ids = rgb[..., 0] + 256 * rgb[..., 1] + 65536 * rgb[..., 2]
    labels = np.full(ids.shape, -1, dtype=np.int64)
    for i, segment in enumerate(entry["segments_info"]):
        labels[ids == segment["id"]] = i
    return {"labels": labels,
            "categories": np.array([s["category_id"] for s in entry["segments_info"]]),
            "relations": np.array(entry["relations"], dtype=np.int64).reshape(-1, 3)}


def prediction(image: dict[str, Any], archive: zipfile.ZipFile) -> dict[str, Any]:
    instances = image.get("annotation") or image.get("instances") or []
    categories = image.get("categories") or [x["category"] for x in instances]
    masks = tifffile.imread(BytesIO(archive.read(image["seg_filename"]))).astype(bool)
    masks = masks.reshape(-1, *masks.shape[-2:])
    out = {"categories": np.array(categories, dtype=np.int64), "masks": masks,
           "triplets": np.array(image["triplets"], dtype=np.int64).reshape(-1, 3)}
    if image.get("ng_triplets") is not None:
        out["ng_triplets"] = np.array(image["ng_triplets"], dtype=np.int64).reshape(-1, 3)
    scores = [x.get("score") for x in instances]
    if scores and None not in scores:
        out["scores"] = np.array(scores, dtype=np.float64)
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    psg = json.loads(args.psg.read_text())
    test = {str(i) for i in psg["test_image_ids"]}
    entries = [e for e in psg["data"] if str(e["image_id"]) in test][:args.limit]
    import sgdask

    start = time.perf_counter()
    evaluator = sgdask.Evaluator(protocol=args.protocol, ks=args.ks,
                                 predicates=psg["predicate_classes"],
                                 classes=psg["thing_classes"] + psg["stuff_classes"])
    setup_s = time.perf_counter() - start
    seconds = []
    with zipfile.ZipFile(args.zip) as archive:
        doc = json.loads(archive.read("triplets.json"))
        submitted = {str(img["id"]): img for img in doc["images"]}
        for entry in entries:  # decoded one at a time (as a loader would), timed apart
            image_id = str(entry["image_id"])
            gt = ground_truth(entry, args.masks_dir)
            img = submitted.get(image_id)
            pred = None if img is None else prediction(img, archive)
            start = time.perf_counter()
            evaluator.update(image_id, gt, pred)
            seconds.append(time.perf_counter() - start)
    first_s, update_s = seconds[0], sum(seconds[1:])
    inputs = entries
    start = time.perf_counter()
    report = evaluator.compute()
    compute_s = time.perf_counter() - start
    print(json.dumps({"images": len(inputs), "setup_s": setup_s, "first_update_s": first_s,
                      "update_s": update_s,
                      "ms_per_update": 1000 * update_s / max(len(inputs) - 1, 1),
                      "compute_s": compute_s, "metrics": report.metrics}))


if __name__ == "__main__":
    main()
