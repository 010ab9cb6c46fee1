"""Measured subprocess of the floor: only read and decode masks, in one process.

``python -m benchmarks._floor --gt G --pred P --zip Z --masks-dir D`` prints one JSON line with
the CPU seconds to read and decode every GT label image and predicted mask stack from the stores
with sgdask's own partition readers (the least a store-based evaluation must do) and, for
comparison, the same from the raw inputs the reference reads (panoptic PNGs, ZIP TIFFs).
"""

from __future__ import annotations

import argparse
import io
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

from sgdask.io.partition import load_gt_images, load_predictions
from sgdask.io.store import StoreReader


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._floor")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--zip", required=True)
    parser.add_argument("--masks-dir", required=True)
    return parser.parse_args(argv)


def part_ids(reader: StoreReader, part: str) -> list[str]:
    return reader.table("images", [part]).column("image_id").to_pylist()


def gt_seconds(url: str) -> tuple[float, int]:
    """CPU seconds to read and decode every GT image's masks (sgdask's own partition reader)."""
    start = time.process_time()
    reader, n = StoreReader(url, kind="gt"), 0
    for part in (p["name"] for p in reader.parts):
        for image in load_gt_images(reader, [part], part_ids(reader, part)):
            n += image.bit_masks() is not None
    return time.process_time() - start, n


def pred_seconds(url: str) -> tuple[float, int]:
    """CPU seconds to read and decode every predicted mask set (as the evaluation does)."""
    start = time.process_time()
    reader, n = StoreReader(url, kind="submission"), 0
    for part in (p["name"] for p in reader.parts):
        for pred in load_predictions(reader, [part], part_ids(reader, part)).values():
            n += pred.masks is not None
    return time.process_time() - start, n


def png_seconds(masks_dir: Path) -> tuple[float, int]:
    start = time.process_time()
    files = sorted(masks_dir.glob("*.png"))
    for path in files:
        np.asarray(Image.open(path).convert("RGB"))
    return time.process_time() - start, len(files)


def zip_seconds(zip_path: Path) -> tuple[float, int]:
    start = time.process_time()
    with zipfile.ZipFile(zip_path) as archive:
        names = [n for n in archive.namelist() if n.endswith((".tif", ".tiff"))]
        for name in names:
            tifffile.imread(io.BytesIO(archive.read(name)))
    return time.process_time() - start, len(names)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    gt_seconds(args.gt), pred_seconds(args.pred)  # warm-up: numba's cache, the file cache
    gt_s, n_gt = gt_seconds(args.gt)
    pred_s, n_pred = pred_seconds(args.pred)
    png_s, n_png = png_seconds(Path(args.masks_dir))
    tiff_s, n_tiff = zip_seconds(Path(args.zip))
    print(json.dumps({
        "store_s": gt_s + pred_s, "store_gt_s": gt_s, "store_pred_s": pred_s,
        "n_gt_masks": n_gt, "n_pred_stacks": n_pred,
        "raw_s": png_s + tiff_s, "raw_png_s": png_s, "raw_tiff_s": tiff_s,
        "n_png": n_png, "n_tiff": n_tiff,
    }))


if __name__ == "__main__":
    main()
