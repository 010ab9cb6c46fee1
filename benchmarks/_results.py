"""Row D of ``make bench``: a model's result files -> a score.

``python -m benchmarks._results make --psg P --zip Z --out DIR`` writes (once; not measured)
the benchmark's model results as OpenPSG-family one-stage models write them, one
``N.npz`` (compressed) per test image with relations in ``psg.json``'s order (``masks``, ``labels``
1-based, ``refine_bboxes`` with a score column, ``rel_pair_idxes``, ``rel_dists`` with the
no-relation column first): the synthetic submission's instances, and predicate scores
that rank its graph list first.

``python -m benchmarks._results convert --results DIR --psg P --out Z`` is the path labs
take today, emulated: the rules of SGBench's conversion script for ``psgtr``
(``conversion/cvt_psgtr.py``: graph list = argmax predicate per pair, NG list = every
(pair, predicate) cell by descending score) written literally, one deflate TIFF per image
into a ZIP, in the form ``sgbench==1.0.0`` reads (version 1, ``annotation`` entries). The
benchmark then runs ``python -m sgbench`` on that ZIP, against ``sgdask evaluate --pred DIR
--method psgtr`` in one command.
"""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import tifffile


def pairing(psg: dict) -> list[str]:
    """SGBench's pairing: the test images with at least one relation, in ``data`` order."""
    test = {str(i) for i in psg["test_image_ids"]}
    return [str(x["image_id"]) for x in psg["data"]
            if str(x["image_id"]) in test and len(x["relations"]) > 0]


def make_results(psg_path: Path, zip_path: Path, out: Path, seed: int = 0) -> int:
    psg = json.loads(psg_path.read_text())
    sizes = {str(x["image_id"]): (x["height"], x["width"]) for x in psg["data"]}
    n_predicates = len(psg["predicate_classes"])
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive:
        doc = json.loads(archive.read("triplets.json"))
        images = {str(img["id"]): img for img in doc["images"]}
        for i, image_id in enumerate(pairing(psg)):
            img = images.get(image_id)
            if img is not None and len(img.get("annotation") or []) >= 2:
                masks = tifffile.imread(io.BytesIO(archive.read(img["seg_filename"])))
                masks = masks.reshape(-1, *masks.shape[-2:]).astype(bool)
                labels = np.array([a["category"] + 1 for a in img["annotation"]])
                boxes = np.array([a["bbox"] for a in img["annotation"]], dtype=np.float32)
                wanted = [t for t in img["triplets"] if t[0] != t[1]]
            else:  # no usable prediction: two random instances
                h, w = sizes[image_id]
                masks = np.zeros((2, h, w), dtype=bool)
                masks[0, : h // 2, : w // 2] = masks[1, h // 2:, w // 2:] = True
                labels = np.array([1, 2])
                boxes = np.array([[0, 0, w / 2, h / 2], [w / 2, h / 2, w, h]], np.float32)
                wanted = [[0, 1, 0]]
            pairs = np.array([t[:2] for t in wanted], dtype=np.int64).reshape(-1, 2)
            dists = rng.dirichlet(np.ones(n_predicates + 1), size=len(pairs)).astype(np.float32)
            # earlier graph entries score higher: the model's ranking survives the conversion
            bonus = np.linspace(1.0, 0.5, len(pairs), dtype=np.float32) if len(pairs) else []
            for row, t in enumerate(wanted):
                dists[row, 1 + t[2]] += bonus[row]
            scores = rng.uniform(0.05, 1.0, size=(len(labels), 1)).astype(np.float32)
            np.savez_compressed(out / f"{i}.npz", masks=masks, labels=labels,
                     refine_bboxes=np.concatenate([boxes[:, :4], scores], axis=1),
                     rel_pair_idxes=pairs, rel_dists=dists)
    return i + 1


def literal_item(r: dict, image_id: str, seg_filename: str) -> dict:
    """One image entry as cvt_psgtr writes it (instances re-spelled as ``annotation``)."""
    predicate_scores = r["rel_dists"][:, 1:]
    n_predicates = predicate_scores.shape[1]
    triplets = np.concatenate((r["rel_pair_idxes"], predicate_scores.argmax(1)[:, None]),
                              axis=1)
    order = predicate_scores.flatten().argsort()[::-1]
    ng = np.concatenate((r["rel_pair_idxes"][order // n_predicates],
                         (order % n_predicates)[:, None]), axis=1)
    annotation = [{"bbox": b, "category": c} for b, c in
                  zip(r["refine_bboxes"][:, :4].tolist(), (r["labels"] - 1).tolist(),
                      strict=True)]
    return {"id": image_id, "seg_filename": seg_filename, "annotation": annotation,
            "triplets": triplets.tolist(), "ng_triplets": ng.tolist()}


def convert(results: Path, psg_path: Path, out: Path) -> int:
    """The ZIP SGBench's conversion writes from the result directory."""
    ids = pairing(json.loads(psg_path.read_text()))
    files = sorted(results.glob("*.npz"), key=lambda p: int(p.stem))
    images = []
    with zipfile.ZipFile(out, "w") as archive:
        for i, (path, image_id) in enumerate(zip(files, ids, strict=True)):
            with np.load(path) as data:
                r = {k: data[k] for k in data.files}
            images.append(literal_item(r, image_id, f"{i}.tiff"))
            buffer = io.BytesIO()
            tifffile.imwrite(buffer, r["masks"].astype(np.uint8), compression="deflate")
            archive.writestr(f"{i}.tiff", buffer.getvalue())
        archive.writestr("triplets.json", json.dumps({"version": 1, "images": images}))
    return len(images)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._results")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make")
    make.add_argument("--psg", type=Path, required=True)
    make.add_argument("--zip", type=Path, required=True)
    make.add_argument("--out", type=Path, required=True)
    cvt = sub.add_parser("convert")
    cvt.add_argument("--results", type=Path, required=True)
    cvt.add_argument("--psg", type=Path, required=True)
    cvt.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "make":
        n = make_results(args.psg, args.zip, args.out)
    else:
        n = convert(args.results, args.psg, args.out)
    print(json.dumps({"images": n}))


if __name__ == "__main__":
    main()
