"""PSG-challenge submissions for tests: ``relation.json`` plus ``panseg/`` PNGs, written the
way OpenPSG's ``tools/grade.py`` reads them (one entry per GT test image with relations, in
psg.json's order; categories and predicates 1-based; relations in rank order)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

from sgdask.testing.psg import N_THING, SynthPaths


def evaluated_ids(psg: dict) -> list[str]:
    """The GT test images with relations, in psg.json's ``data`` order (grade.py's pairing)."""
    test = set(psg["test_image_ids"])
    return [x["image_id"] for x in psg["data"] if x["image_id"] in test and x["relations"]]


def colour_png(label: np.ndarray, ids: np.ndarray) -> bytes:
    """A panoptic PNG: pixel of segment i gets id ``ids[i]`` (R + 256 G + 65536 B); -1 black."""
    pixel = np.where(label >= 0, ids[np.maximum(label, 0)], 0)
    rgb = np.stack([pixel % 256, pixel // 256 % 256, pixel // 65536], -1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def distinct_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(np.arange(1, 1 << 24), size=n, replace=False)


def _submitted(data: SynthPaths) -> dict[str, tuple[dict, np.ndarray]]:
    out = {}
    with zipfile.ZipFile(data.submission_zip) as z:
        for img in json.loads(z.read("triplets.json"))["images"]:
            masks = tifffile.imread(io.BytesIO(z.read(img["seg_filename"])))
            out[img["id"]] = img, masks.reshape(-1, *masks.shape[-2:]).astype(bool)
    return out


def _entry(rng: np.random.Generator, img: dict, masks: np.ndarray, name: str,
           black_background: bool) -> tuple[dict, bytes]:
    """One image: the synthetic submission's masks painted first-wins, the uncovered pixels
    one more segment (a stuff category) or left black, empty segments dropped, triplets
    renumbered."""
    h, w = masks.shape[1:]
    label = np.full((h, w), -1, dtype=np.int64)
    for i, m in enumerate(masks):
        label[m & (label < 0)] = i
    categories = [a["category"] for a in img["annotation"]]
    kept = [i for i in range(len(categories)) if (label == i).any()]
    if (label < 0).any() and not black_background:
        label[label < 0] = len(categories)
        categories.append(N_THING)
        kept.append(len(categories) - 1)
    new = {old: j for j, old in enumerate(kept)}
    label = np.vectorize(lambda v: new.get(int(v), -1))(label)
    ids = distinct_ids(rng, len(kept))
    relations = [[new[s], new[o], p + 1] for s, o, p in img["triplets"] if s in new and o in new]
    entry = {"relations": relations or [[0, 0, 1]],
             "segments_info": [{"id": int(ids[j]), "category_id": categories[old] + 1}
                               for j, old in enumerate(kept)],
             "pan_seg_file_name": name}
    return entry, colour_png(label, ids)


def write_challenge_submission(data: SynthPaths, out: Path, seed: int,
                               black_background: bool = False) -> Path:
    """``out/relation.json`` and ``out/panseg/*.png`` from the synthetic SGBench submission
    (``write_dataset`` with ``missing_fraction=0``), as OpenPSG's ``save_results`` names them.
    ``black_background``: the pixels no mask covers stay black, in no listed segment (as
    ``save_results`` leaves them)."""
    rng = np.random.default_rng(seed)
    psg = json.loads(data.psg_json.read_text())
    submitted = _submitted(data)
    (out / "panseg").mkdir(parents=True, exist_ok=True)
    entries = []
    for i, image_id in enumerate(evaluated_ids(psg)):
        img, masks = submitted[image_id]
        entry, png = _entry(rng, img, masks, f"{i}.png", black_background)
        (out / "panseg" / entry["pan_seg_file_name"]).write_bytes(png)
        entries.append(entry)
    (out / "relation.json").write_text(json.dumps(entries))
    return out
