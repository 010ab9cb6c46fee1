"""Measured subprocess of the floor: only read and decode masks, in one process.

``python -m benchmarks._floor --gt G --pred P --zip Z --masks-dir D`` prints one JSON line with
the CPU seconds to read and decode every GT label image and predicted mask stack from the stores
with sgdask's own partition readers (the least a store-based evaluation must do) and, for
comparison, the same from the raw inputs the reference reads (panoptic PNGs, ZIP TIFFs), once
as the reference decodes them (Pillow, tifffile) and once with sgdask's readers into word
masks (``panoptic_masks``, ``read_tiff_masks``).
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

from sgdask.formats.psg import gt_records, panoptic_masks
from sgdask.io.archive import ArchiveLimits
from sgdask.io.tiff import plain_layout, read_tiff_masks
from sgdask.store.partition import load_gt_images, load_predictions
from sgdask.store.store import StoreReader


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._floor")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--zip", required=True)
    parser.add_argument("--masks-dir", required=True)
    parser.add_argument("--psg-json", required=True)
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


def sgdask_png_seconds(psg_json: Path, masks_dir: Path) -> float:
    """CPU seconds of sgdask's GT reader: every test PNG to its instances' word masks."""
    records = gt_records(psg_json.read_bytes(), str(psg_json), masks=True)
    start = time.process_time()
    for record in records:
        path = masks_dir / (record.pan_seg_file_name or "")
        panoptic_masks(path.read_bytes(), record, str(path))
    return time.process_time() - start


def sgdask_tiff_seconds(zip_path: Path) -> float:
    """CPU seconds of sgdask's TIFF reader: every layered TIFF to word masks."""
    start = time.process_time()
    with zipfile.ZipFile(zip_path) as archive:
        for name in (n for n in archive.namelist() if n.endswith((".tif", ".tiff"))):
            data = archive.read(name)
            layout = plain_layout(data, ArchiveLimits())
            layers = layout.layers if layout else len(tifffile.TiffFile(io.BytesIO(data)).pages)
            read_tiff_masks(data, name, name, layers)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    gt_seconds(args.gt), pred_seconds(args.pred)  # warm-up: numba's cache, the file cache
    gt_s, n_gt = gt_seconds(args.gt)
    pred_s, n_pred = pred_seconds(args.pred)
    png_s, n_png = png_seconds(Path(args.masks_dir))
    tiff_s, n_tiff = zip_seconds(Path(args.zip))
    sgdask_png_seconds(Path(args.psg_json), Path(args.masks_dir))  # warm-up: numba's cache
    own_png_s = sgdask_png_seconds(Path(args.psg_json), Path(args.masks_dir))
    own_tiff_s = sgdask_tiff_seconds(Path(args.zip))
    print(json.dumps({
        "store_s": gt_s + pred_s, "store_gt_s": gt_s, "store_pred_s": pred_s,
        "n_gt_masks": n_gt, "n_pred_stacks": n_pred,
        "raw_s": png_s + tiff_s, "raw_png_s": png_s, "raw_tiff_s": tiff_s,
        "n_png": n_png, "n_tiff": n_tiff,
        "own_png_s": own_png_s, "own_tiff_s": own_tiff_s,
    }))


if __name__ == "__main__":
    main()
