"""Hand-made PVSG files for the tests (and for running OpenPVSG's code on the same files):
one video in the layout ``sgdask.testing.pvsg`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import imagecodecs
import numpy as np

from sgdask.io.codecs.coco_rle import encode_rle

VIDEO = "1000_0000000001"


def write_weak_hit_case(root: Path) -> Path:
    """Two objects on every one of 10 frames, one GT relation over frames 0-9, two predicted
    tubes equal to the GT masks, and six ranked predictions of the pair: predicate 0 with
    spans of 2, 3, 10 and 4 frames (vIoU 0.2, 0.3, 1.0, 0.4), one of predicate 1 (no match) and
    one of predicate 0 covering frame 5 (vIoU 0.1). The reference counts three weak hits for
    the one GT relation (ranks 0, 2 and 3: the strong match at rank 3 ends the loop)."""
    root = Path(root)
    frames, h, w = 10, 8, 8
    pan = np.zeros((h, w), np.uint8)
    pan[:4, :4], pan[:4, 4:] = 1, 2
    masks = root / "data" / "vidor" / "masks" / VIDEO
    masks.mkdir(parents=True, exist_ok=True)
    lines = []
    for f in range(frames):
        (masks / f"{f:04d}.png").write_bytes(imagecodecs.png_encode(pan))
        lines.append(f"{f + 1} 11 0 {h} {w} {encode_rle(pan == 1)}")
        lines.append(f"{f + 1} 12 1 {h} {w} {encode_rle(pan == 2)}")
    anno = {"objects": {"thing": ["person", "cup"], "stuff": []}, "relations": ["holding", "near"],
            "split": {"vidor": {"val": [VIDEO]}, "epic_kitchen": {"val": []}, "ego4d": {"val": []}},
            "data": [{"video_id": VIDEO,
                      "meta": {"height": h, "width": w, "fps": 5, "num_frames": frames},
                      "objects": [{"object_id": 1, "category": "person", "is_thing": True},
                                  {"object_id": 2, "category": "cup", "is_thing": True}],
                      "relations": [[1, 2, "holding", [[0, 9]]]]}]}
    (root / "data" / "pvsg.json").write_text(json.dumps(anno))
    spans = [([[0, 1]], 0), ([[0, 9]], 1), ([[0, 2]], 0), ([[0, 9]], 0), ([[0, 3]], 0),
             ([[5, 5]], 0)]
    ranked = [{"subject": 11, "object": 12, "relation": rel, "score": 1 - i / 10, "span": span}
              for i, (span, rel) in enumerate(spans)]
    out = root / "results" / VIDEO
    (out / "quantitive").mkdir(parents=True, exist_ok=True)
    (out / "quantitive" / "masks.txt").write_text("".join(x + "\n" for x in lines))
    (out / "relations.json").write_text(json.dumps({"video_id": VIDEO, "pairs": [[11, 12]],
                                                    "relations": ranked}))
    return root
