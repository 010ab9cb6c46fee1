"""The vectorised PVSG kernel (``sgdask.kernels.pvsg``) on tube stores, a chunk of frames at a
time, against the numbers OpenPVSG printed (``fixtures/pvsg_golden.json``) and the literal
twin's one-weak-hit reading; any chunking gives the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sgdask.io.pvsg import TubeStore, ingest_pvsg_gt, ingest_pvsg_results
from sgdask.kernels.pvsg import (
    Spans,
    candidates,
    gt_pairs,
    pair_recall,
    relation_counts,
    video_tube_matches,
    video_viou,
)
from sgdask.testing.pvsg import write_pvsg
from tests.helpers.pvsg_cases import write_weak_hit_case
from tests.literal import pvsg as literal_pvsg

pytestmark = pytest.mark.timeout(120)
GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "pvsg_golden.json"
KS = (20, 50, 100)


def _cols(store: TubeStore, vid: str, name: str) -> dict[str, np.ndarray]:
    table = store.table(vid, name)
    return {c: table.column(c).to_numpy() for c in table.column_names}


def _video_counts(gt: TubeStore, pred: TubeStore, vid: str, weak: str):
    """(predicate per GT relation, hits, weak hits): the stores' tables and chunks through
    the kernel (what the protocol's per-video task will do)."""
    gt_tubes, pred_tubes = _cols(gt, vid, "tubes"), _cols(pred, vid, "tubes")
    gt_class = dict(zip(gt_tubes["tube"].tolist(), gt_tubes["category"].tolist(), strict=True))
    pred_class = dict(zip(pred_tubes["tube"].tolist(), pred_tubes["category"].tolist(),
                          strict=True))
    rel = _cols(gt, vid, "relations")
    n_rel = int(rel["relation"].max()) + 1 if len(rel["relation"]) else 0
    first = np.unique(rel["relation"], return_index=True)[1]
    rel_tubes = np.stack([rel["subject"][first], rel["object"][first]], 1)
    rel_keys = np.stack([[gt_class[t] for t in rel_tubes[:, 0]],
                         [gt_class[t] for t in rel_tubes[:, 1]], rel["predicate"][first]], 1)
    pr = _cols(pred, vid, "relations")
    n_pred = int(pr["rank"].max()) + 1 if len(pr["rank"]) else 0
    pfirst = np.unique(pr["rank"], return_index=True)[1]
    pred_pairs = np.stack([pr["subject"][pfirst], pr["object"][pfirst]], 1)
    pred_keys = np.stack([[pred_class.get(t, -1) for t in pred_pairs[:, 0]],
                          [pred_class.get(t, -1) for t in pred_pairs[:, 1]],
                          pr["predicate"][pfirst]], 1)
    cand_rel, cand_pred = candidates(rel_keys, pred_keys)
    viou = video_viou(gt.frame_chunks(vid), pred.frame_chunks(vid), gt_class, pred_class,
                      rel_tubes, Spans(rel["relation"], rel["start"], rel["end"], n_rel),
                      pred_pairs, Spans(pr["rank"], pr["start"], pr["end"], n_pred),
                      cand_rel, cand_pred)
    hits, weak_hits = relation_counts(viou, cand_rel, cand_pred, n_rel, KS, weak)
    matched, present = video_tube_matches(gt.frame_chunks(vid), pred.frame_chunks(vid),
                                          gt_class, pred_class)
    relations = [(int(rel_tubes[r, 0]), int(rel_tubes[r, 1]), int(rel_keys[r, 2]),
                  [(int(a), int(b)) for a, b, o in zip(rel["start"], rel["end"],
                                                         rel["relation"], strict=True)
                   if o == r and b >= a]) for r in range(n_rel)]
    truth = gt_pairs(matched, present, relations, gt.manifest["videos"][vid]["frames"])
    pairs = _cols(pred, vid, "pairs")
    ranked = np.stack([pairs["subject"], pairs["object"]], 1)[:100]
    return rel_keys[:, 2], hits, weak_hits, pair_recall(ranked, truth, 20)


def _metrics(gt_url: Path, pred_url: Path, weak: str = "reference") -> dict:
    gt, pred = TubeStore(str(gt_url)), TubeStore(str(pred_url))
    n_predicates = len(gt.manifest["predicates"])
    counts = {k: {p: {"total": 0, "hit": 0, "weak_hit": 0} for p in range(n_predicates)}
              for k in KS}
    pair = []
    for vid in gt.manifest["videos"]:
        predicates, hits, weak_hits, recall = _video_counts(gt, pred, vid, weak)
        pair.append(recall)
        for i, p in enumerate(predicates.tolist()):
            for j, k in enumerate(KS):
                counts[k][p]["total"] += 1
                counts[k][p]["hit"] += int(hits[i, j])
                counts[k][p]["weak_hit"] += int(weak_hits[i, j])
    metrics = literal_pvsg.final_metrics(counts)
    metrics["PR@20"] = float(np.array(pair).mean())
    return {"metrics": metrics, "counts": counts, "pair_recall_per_video": pair}


def _stores(raw, root: Path, per_chunk: int) -> tuple[Path, Path]:
    ingest_pvsg_gt(str(raw.annotation), str(raw.data_dir), str(root / "gt"),
                   frames_per_chunk=per_chunk)
    ingest_pvsg_results(str(raw.results), str(root / "gt"), str(root / "pred"),
                        frames_per_chunk=per_chunk)
    return root / "gt", root / "pred"


@pytest.fixture(scope="module")
def golden_raw(tmp_path_factory):
    return write_pvsg(tmp_path_factory.mktemp("raw"), n_videos=8, seed=1)


@pytest.mark.parametrize("per_chunk", [3, 16])
def test_kernel_on_stores_equals_reference_golden_values(golden_raw, tmp_path, per_chunk):
    golden = json.loads(GOLDEN.read_text())
    got = _metrics(*_stores(golden_raw, tmp_path, per_chunk))
    for name, value in golden["metrics"].items():
        assert got["metrics"][name] == pytest.approx(value, abs=1e-9), name
    for k, rows in golden["counts"].items():
        assert {str(p): c for p, c in got["counts"][int(k)].items()} == rows
    assert got["pair_recall_per_video"] == golden["pair_recall_per_video"]


def test_kernel_one_weak_hit_reading_equals_the_literal_twin(golden_raw, tmp_path):
    got = _metrics(*_stores(golden_raw, tmp_path, 5), weak="once")
    expected = literal_pvsg.evaluate(golden_raw.annotation, golden_raw.data_dir,
                                     golden_raw.results, weak="once")
    assert got["counts"] == expected["counts"]
    for name, value in got["metrics"].items():
        assert value == expected["metrics"][name], name


def test_kernel_on_the_weak_hit_hand_case(tmp_path):
    raw = write_pvsg.__globals__["PvsgFiles"](
        tmp_path / "raw" / "data" / "pvsg.json", tmp_path / "raw" / "data",
        tmp_path / "raw" / "results", ())
    write_weak_hit_case(tmp_path / "raw")
    gt, pred = _stores(raw, tmp_path, 4)
    ref, once = _metrics(gt, pred)["counts"][20][0], _metrics(gt, pred, "once")["counts"][20][0]
    assert ref == {"total": 1, "hit": 1, "weak_hit": 3}
    assert once == {"total": 1, "hit": 1, "weak_hit": 1}


def test_spans_inside_a_chunk():
    spans = Spans(np.array([0, 0, 1, 2]), np.array([2, 6, 0, 5]), np.array([3, 9, 1, 4]), 3)
    got = spans.inside(2, 5)  # frames 2..6
    assert got.tolist() == [[True, True, False, False, True], [False] * 5, [False] * 5]
