"""Export a Scene-Graph-Benchmark.pytorch model's test output for sgdask.

Input, per test image, the plain numpy arrays of the model's output ``BoxList`` (as its
``eval_results.pytorch`` holds them, boxes already resized to the original image):

- ``boxes`` (n, 4) x1, y1, x2, y2 in image pixels; ``pred_labels`` (n,) 1-based classes;
  ``pred_scores`` (n,) object scores;
- ``rel_pair_idxs`` (m, 2) subject and object box indices, in the order its post-processor
  wrote them; ``pred_rel_scores`` (m, 1 + P) predicate probabilities, column 0 the
  background.

Output: a box submission JSON (``instances`` with box, 0-based category and score; the
triplet lists are left empty) and a scores Parquet file (one row per pair, the P
non-background probabilities, rows in the given order), for::

    sgdask convert submission.json --from-scores scores.parquet --rank-by triplet \\
        --ng-limit 100 --gt gt.store --out model.store

With ``keep`` (default 100, the largest k Scene-Graph-Benchmark.pytorch reports) only the
pairs that can reach the first ``keep`` triplets of the graph list or of the NG list under
``--rank-by triplet`` are written: the derived lists' first ``keep`` triplets are the same
as from every pair (the ranking is a stable sort), and the file is many times smaller
(sgdet scores every pair of 80 boxes). ``keep=None`` writes every pair.

Command line: ``sgdask export-sgb NPZ_DIR --submission S.json --scores S.parquet``, with one
``<image id>.npz`` per test image holding the five arrays. To write them from
Scene-Graph-Benchmark.pytorch's output (needs torch)::

    ids = split_image_ids("VG-SGG-with-attri.h5", "image_data.json")  # its dataset order
    for image_id, p in zip(ids, torch.load("eval_results.pytorch")["predictions"]):
        np.savez(f"npz/{image_id}.npz", boxes=p.bbox.numpy(),
                 pred_labels=p.get_field("pred_labels").numpy(),
                 pred_scores=p.get_field("pred_scores").numpy(),
                 rel_pair_idxs=p.get_field("rel_pair_idxs").numpy(),
                 pred_rel_scores=p.get_field("pred_rel_scores").numpy())

(``split_image_ids`` is ``sgdask.formats.vg150.split_image_ids``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sgdask.errors import SgdaskError
from sgdask.kernels.scores import triplet_ranked_lists

KEEP = 100
ARRAYS = ("boxes", "pred_labels", "pred_scores", "rel_pair_idxs", "pred_rel_scores")


@dataclass(frozen=True)
class SGBOutput:
    """One image's output, as Scene-Graph-Benchmark.pytorch's ``BoxList`` fields."""

    image_id: str
    boxes: np.ndarray
    pred_labels: np.ndarray
    pred_scores: np.ndarray
    rel_pair_idxs: np.ndarray
    pred_rel_scores: np.ndarray

    def predicate_scores(self) -> np.ndarray:
        """(m, P) probabilities without the background column."""
        return np.asarray(self.pred_rel_scores)[:, 1:]


def _submission_image(out: SGBOutput) -> dict:
    """The image's SGBench entry: boxes, 0-based categories, scores; no triplet list."""
    labels = np.asarray(out.pred_labels, dtype=np.int64)
    if len(labels) and labels.min() < 1:
        raise SgdaskError(f"image {out.image_id}: pred_labels: 0 (expected 1-based classes, "
                          "0 is the background)")
    boxes = np.asarray(out.boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(out.pred_scores, dtype=np.float64)
    return {"id": str(out.image_id), "triplets": [],
            "instances": [{"bbox": b, "category": c, "score": s} for b, c, s in zip(
                boxes.tolist(), (labels - 1).tolist(), scores.tolist(), strict=True)]}


def _kept_rows(out: SGBOutput, keep: int | None = KEEP) -> np.ndarray:
    """The rows (in order) whose pair is among the first ``keep`` triplets of the graph
    list or of the NG list ranked by triplet score; every row when ``keep`` is None."""
    pairs = np.asarray(out.rel_pair_idxs, dtype=np.int64).reshape(-1, 2)
    if keep is None or not len(pairs):
        return np.arange(len(pairs))
    lists = triplet_ranked_lists(pairs[:, 0], pairs[:, 1], out.predicate_scores(),
                                 np.asarray(out.pred_scores), ng_limit=keep)
    needed = np.concatenate([lists.graph[:keep, :2], lists.ng[:, :2]])
    width = int(pairs.max()) + 1
    return np.flatnonzero(np.isin(pairs[:, 0] * width + pairs[:, 1],
                                  needed[:, 0] * width + needed[:, 1]))


def export(outputs: Iterable[SGBOutput], submission: str | Path, scores: str | Path,
           keep: int | None = KEEP) -> tuple[int, int]:
    """Write the submission JSON and the scores Parquet file; returns how many images and
    pair rows they hold."""
    images, columns = [], {"image_id": [], "subject": [], "object": [], "scores": []}
    n_predicates = None
    for out in outputs:
        images.append(_submission_image(out))
        rows = _kept_rows(out, keep)
        pairs = np.asarray(out.rel_pair_idxs, dtype=np.int64).reshape(-1, 2)[rows]
        values = out.predicate_scores()[rows].astype(np.float32)
        n_predicates = values.shape[1] if n_predicates is None else n_predicates
        columns["image_id"].extend([str(out.image_id)] * len(rows))
        columns["subject"].append(pairs[:, 0])
        columns["object"].append(pairs[:, 1])
        columns["scores"].append(values.reshape(-1))
    Path(submission).write_text(json.dumps({"version": 1, "images": images}))
    flat = np.concatenate(columns["scores"]) if columns["scores"] else np.empty(0, np.float32)
    table = pa.table({
        "image_id": pa.array(columns["image_id"], type=pa.string()),
        "subject": pa.array(_concat(columns["subject"]), type=pa.int32()),
        "object": pa.array(_concat(columns["object"]), type=pa.int32()),
        "scores": pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()),
                                                    n_predicates or 1),
    })
    pq.write_table(table, str(scores), compression="zstd")
    return len(images), table.num_rows


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)


def outputs_from_npz(directory: Path) -> Iterable[SGBOutput]:
    """One SGBOutput per ``<image id>.npz`` of the directory, in name order."""
    if not directory.is_dir():
        raise SgdaskError(f"{directory}: not found (expected a directory of .npz files)")
    paths = sorted(directory.glob("*.npz"))
    if not paths:
        raise SgdaskError(f"{directory}: no .npz files (expected one <image id>.npz per test "
                          "image)")
    for path in paths:
        with np.load(path, allow_pickle=False) as arrays:
            missing = [name for name in ARRAYS if name not in arrays.files]
            if missing:
                raise SgdaskError(f"{path}: {', '.join(missing)}: missing (expected the arrays "
                                  f"{', '.join(ARRAYS)})")
            yield SGBOutput(path.stem, *(arrays[name] for name in ARRAYS))
