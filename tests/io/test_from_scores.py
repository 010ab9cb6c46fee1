"""`sgdask convert --from-scores`: triplet lists derived from per-pair score vectors."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sgdask.kernels.scores import triplet_lists
from sgdask.store.store import StoreReader
from tests.helpers import run_cli


def test_convert_from_scores_replaces_the_lists(dataset, stores, tmp_path):
    with zipfile.ZipFile(dataset.submission_zip) as z:
        doc = json.loads(z.read("triplets.json"))
    first = doc["images"][0]
    n = len(first["annotation"])
    rng = np.random.default_rng(0)
    subjects, objects = np.array([0, 1, 2, 0]), np.array([1, 2, 0, 1])  # (0, 1) twice
    scores = rng.random((4, 56))
    no_rel = np.array([0.2, 0.5, 0.1, 0.4])
    pq.write_table(pa.table({"image_id": [first["id"]] * 4, "subject": subjects,
                             "object": objects, "scores": scores.tolist(),
                             "no_relation": no_rel}), tmp_path / "scores.parquet")
    out = tmp_path / "store"
    proc = run_cli("convert", str(dataset.submission_zip), "--out", str(out), "--gt",
                   stores.gt, "--in-process", "--from-scores", str(tmp_path / "scores.parquet"))
    assert proc.returncode == 0, proc.stderr
    assert n > 2
    expected = triplet_lists(subjects, objects, scores, no_rel)
    reader = StoreReader(str(out))
    table = reader.table("triplets", [p["name"] for p in reader.parts], [first["id"]])
    rows = table.to_pylist()
    graph = [[r["subject"], r["object"], r["predicate"]] for r in rows if r["list"] == "graph"]
    ng = [[r["subject"], r["object"], r["predicate"]] for r in rows if r["list"] == "ng"]
    assert graph == expected.graph.tolist() and ng == expected.ng.tolist()
    assert len(graph) == 3  # the duplicate pair (0, 1) was aggregated
    other = reader.table("triplets", [p["name"] for p in reader.parts],
                         [doc["images"][1]["id"]])
    assert len(other) == 0  # images without score rows get empty lists
    assert reader.manifest["has_ng"] and reader.manifest["triplets_from"]


def test_scores_for_an_unknown_instance_are_refused(dataset, tmp_path):
    with zipfile.ZipFile(dataset.submission_zip) as z:
        first = json.loads(z.read("triplets.json"))["images"][0]
    n = len(first["annotation"])
    pq.write_table(pa.table({"image_id": [first["id"]], "subject": [0], "object": [n + 3],
                             "scores": [[0.5] * 56]}), tmp_path / "scores.parquet")
    out = tmp_path / "store"
    proc = run_cli("convert", str(dataset.submission_zip), "--out", str(out), "--in-process",
                   "--from-scores", str(tmp_path / "scores.parquet"))
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert f"image {first['id']}" in line and "out of range" in line and "scores.parquet" in line
    assert not out.exists()
