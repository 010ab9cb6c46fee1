"""`convert --from-scores --rank-by triplet`: pairs ranked by predicate x subject x object
score in float32, as Scene-Graph-Benchmark.pytorch ranks them (hand-computed cases)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgdask.errors import InputError, SgdaskWarning
from sgdask.formats.scores import SubmissionInstances, load_score_lists
from sgdask.formats.sgbench import convert_submission
from sgdask.kernels.scores import triplet_ranked_lists
from sgdask.store.store import StoreReader
from tests.helpers import run_cli

# Three instances scored 0.5, 1.0, 0.25; three pairs (values exact in binary, so every
# product below is exact in float32 too).
INSTANCE_SCORES = [0.5, 1.0, 0.25]
PAIRS = {"subject": [0, 1, 1], "object": [1, 2, 0],
         "scores": [[0.75, 0.25], [0.5, 0.875], [0.0, 0.5]]}


def ranked(subjects, objects, scores, instance_scores, ng_limit=None):
    return triplet_ranked_lists(np.array(subjects), np.array(objects),
                                np.array(scores, dtype=float), np.array(instance_scores),
                                ng_limit)


def test_graph_list_by_predicate_times_subject_times_object():
    lists = ranked(*PAIRS.values(), INSTANCE_SCORES)
    # (0,1): 0.75 * 0.5 * 1.0 = 0.375; (1,2): 0.875 * 1.0 * 0.25 = 0.21875;
    # (1,0): 0.5 * 1.0 * 0.5 = 0.25. By predicate score alone (1,2) would come first.
    np.testing.assert_array_equal(lists.graph, [[0, 1, 0], [1, 0, 1], [1, 2, 1]])
    np.testing.assert_array_equal(lists.graph_scores, [0.375, 0.25, 0.21875])


def test_ng_list_by_subject_times_object_times_predicate_ties_in_pair_order():
    lists = ranked(*PAIRS.values(), INSTANCE_SCORES)
    # s*o: (0,1) 0.5, (1,2) 0.25, (1,0) 0.5 -> (0,1) [0.375, 0.125], (1,2) [0.125, 0.21875],
    # (1,0) [0.0, 0.25]; the two 0.125 keep pair order: (0,1,1) before (1,2,0)
    np.testing.assert_array_equal(
        lists.ng, [[0, 1, 0], [1, 0, 1], [1, 2, 1], [0, 1, 1], [1, 2, 0], [1, 0, 0]])
    np.testing.assert_array_equal(lists.ng_scores, [0.375, 0.25, 0.21875, 0.125, 0.125, 0.0])
    cut = ranked(*PAIRS.values(), INSTANCE_SCORES, ng_limit=4)
    np.testing.assert_array_equal(cut.ng, lists.ng[:4])
    np.testing.assert_array_equal(ranked(*PAIRS.values(), INSTANCE_SCORES, 0).ng.shape, (0, 3))


def test_equal_products_keep_row_order():
    """Rows already in its post-processor's order stay in that order, ties included."""
    lists = ranked([2, 0, 1], [0, 2, 2], [[0.5, 0.25], [0.25, 0.25], [0.125, 0.5]],
                   [1.0, 0.5, 0.5])
    # products 0.25, 0.125, 0.125: the tie keeps rows 1 then 2; predicates tie -> index 0
    np.testing.assert_array_equal(lists.graph, [[2, 0, 0], [0, 2, 0], [1, 2, 1]])
    np.testing.assert_array_equal(lists.graph_scores, [0.25, 0.125, 0.125])


# 0.8917111158370972 is the float32 after 0.8917110562324524: times 0.5851629376411438 both
# round to the same float32 (0.5217962861061096), though the exact products differ.
P_LOW, P_HIGH, S = 0.8917110562324524, 0.8917111158370972, 0.5851629376411438


def test_products_are_float32_so_float32_ties_stay_ties():
    lists = ranked([0, 1], [1, 0], [[P_LOW], [P_HIGH]], [S, 1.0])
    # float64 would rank row 1 first (P_HIGH * S > P_LOW * S); float32 ties: row order
    assert P_HIGH * S > P_LOW * S
    np.testing.assert_array_equal(lists.graph, [[0, 1, 0], [1, 0, 0]])
    assert lists.graph_scores[0] == lists.graph_scores[1] == 0.5217962861061096


def test_graph_multiplies_predicate_first_ng_multiplies_objects_first():
    """(p * s) * o and (s * o) * p differ in float32 for these three numbers."""
    p, s, o = 0.45349788665771484, 0.1340416967868805, 0.4031129777431488
    lists = ranked([0], [1], [[p]], [s, o])
    assert lists.graph_scores.tolist() == [0.02450428158044815]
    assert lists.ng_scores.tolist() == [0.024504279717803]


def test_duplicate_and_self_pairs_as_for_predicate_ranking():
    lists = ranked([0, 1, 0, 1], [1, 1, 1, 0], [[0.25, 0.5], [1.0, 1.0], [0.75, 0.0],
                                                [0.5, 0.5]], [1.0, 0.5])
    # (0,1) merges to [0.75, 0.5] (max per predicate); (1,1) is dropped
    np.testing.assert_array_equal(lists.graph, [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(lists.graph_scores, [0.375, 0.25])  # 0.75*1*0.5, 0.5*0.5*1


# --- reader ------------------------------------------------------------------------------


def write_scores(path: Path, image_ids, no_relation=None, scores=None) -> str:
    n = len(image_ids)
    columns = {"image_id": image_ids, "subject": PAIRS["subject"][:n],
               "object": PAIRS["object"][:n], "scores": scores or PAIRS["scores"][:n]}
    if no_relation is not None:
        columns["no_relation"] = no_relation
    pq.write_table(pa.table(columns), path)
    return str(path)


def instances(scores=INSTANCE_SCORES, count=3) -> SubmissionInstances:
    return SubmissionInstances("sub.json", {"a": count},
                               {"a": None if scores is None else np.array(scores)})


def test_no_relation_is_ignored_with_a_warning(tmp_path):
    path = write_scores(tmp_path / "s.parquet", ["a"] * 3, no_relation=[0.9, 0.0, 0.5])
    with pytest.warns(SgdaskWarning, match="no_relation: ignored under rank_by=triplet") as w:
        lists = load_score_lists(path, rank_by="triplet", instances=instances())
    assert "no_relation: ignored under --rank-by triplet" in w[0].message.render("cli")
    np.testing.assert_array_equal(lists["a"].graph, [[0, 1, 0], [1, 0, 1], [1, 2, 1]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_score_lists(path, instances=instances())  # predicate ranking uses it: silent


def test_missing_instance_scores_name_the_submission(tmp_path):
    path = write_scores(tmp_path / "s.parquet", ["a"] * 3)
    with pytest.raises(InputError, match=r"^sub\.json: image a: score: no instance scores"):
        load_score_lists(path, rank_by="triplet", instances=instances(scores=None))


@pytest.mark.parametrize(("scores", "inst", "field"), [
    ([[0.75, -0.25], [0.5, 0.875], [0.0, 0.5]], INSTANCE_SCORES, "scores"),
    ([[0.75, 1e39], [0.5, 0.875], [0.0, 0.5]], INSTANCE_SCORES, "scores"),
    (None, [0.5, -1.0, 0.25], "score of instance 1"),
])
def test_negative_scores_cannot_rank_by_triplet(tmp_path, scores, inst, field):
    path = write_scores(tmp_path / "s.parquet", ["a"] * 3, scores=scores)
    with pytest.raises(InputError) as err:
        load_score_lists(path, rank_by="triplet", instances=instances(inst))
    assert err.value.field == field and err.value.image == "a"
    assert load_score_lists(path, instances=instances(inst))  # fine for predicate ranking


def test_unknown_rank_by(tmp_path):
    from sgdask.errors import SgdaskError

    with pytest.raises(SgdaskError, match=r"^rank_by: 'pair'") as err:
        load_score_lists(write_scores(tmp_path / "s.parquet", ["a"]), rank_by="pair")
    assert err.value.render("cli").startswith("--rank-by: 'pair'")


# --- convert ------------------------------------------------------------------------------


def box_submission(path: Path, with_scores: bool = True) -> str:
    boxes = [[0, 0, 10, 10], [5, 5, 20, 20], [30, 30, 40, 45]]
    images = [{"id": "a", "triplets": [], "instances": [
        {"bbox": b, "category": c, **({"score": s} if with_scores else {})}
        for b, c, s in zip(boxes, [0, 1, 2], INSTANCE_SCORES, strict=True)]},
        {"id": "b", "triplets": [], "instances": [{"bbox": [0, 0, 5, 5], "category": 0}]}]
    path.write_text(json.dumps({"version": 1, "images": images}))
    return str(path)


def lists_in(store: str, image: str) -> dict[str, list]:
    reader = StoreReader(store)
    rows = reader.table("triplets", [p["name"] for p in reader.parts], [image]).to_pylist()
    return {name: [[r["subject"], r["object"], r["predicate"]] for r in rows
                   if r["list"] == name] for name in ("graph", "ng")}


def test_convert_ranks_by_triplet_and_records_it(tmp_path):
    sub = box_submission(tmp_path / "sub.json")
    scores = write_scores(tmp_path / "s.parquet", ["a"] * 3)
    by_triplet = convert_submission(sub, str(tmp_path / "t"), from_scores=scores,
                                    rank_by="triplet", ng_limit=4)
    by_predicate = convert_submission(sub, str(tmp_path / "p"), from_scores=scores)
    assert lists_in(str(tmp_path / "t"), "a") == {
        "graph": [[0, 1, 0], [1, 0, 1], [1, 2, 1]],
        "ng": [[0, 1, 0], [1, 0, 1], [1, 2, 1], [0, 1, 1]]}
    assert lists_in(str(tmp_path / "p"), "a")["graph"] == [[1, 2, 1], [0, 1, 0], [1, 0, 1]]
    assert (by_triplet["rank_by"], by_triplet["ng_limit"]) == ("triplet", 4)
    assert (by_predicate["rank_by"], by_predicate["ng_limit"]) == ("predicate", None)
    # the content hash (the result cache's key) tells the two derivations apart
    assert by_triplet["content_hash"] != by_predicate["content_hash"]
    plain = convert_submission(sub, str(tmp_path / "plain"))
    assert plain["rank_by"] is None and plain["content_hash"] not in (
        by_triplet["content_hash"], by_predicate["content_hash"])


def test_cli_missing_instance_score_is_one_line(tmp_path):
    sub = box_submission(tmp_path / "sub.json", with_scores=False)
    scores = write_scores(tmp_path / "s.parquet", ["a"] * 3, no_relation=[0.1, 0.2, 0.3])
    out = tmp_path / "store"
    proc = run_cli("convert", sub, "--out", str(out), "--in-process", "--from-scores", scores,
                   "--rank-by", "triplet")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sgdask: error:")]
    assert errors == [f"sgdask: error: {sub}: image a: score: no instance scores, which "
                      "--rank-by triplet multiplies into the ranking (expected a score for "
                      "every instance of an image with score rows)"]
    assert "sgdask: warning: " in proc.stderr and "no_relation: ignored" in proc.stderr
    assert not out.exists()
