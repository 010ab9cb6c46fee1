"""Scores to triplets: duplicate-pair aggregation, graph and NG lists, the Parquet/NPZ reader."""

from __future__ import annotations

from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgdask.errors import InputError
from sgdask.formats.scores import load_score_lists
from sgdask.kernels.scores import (
    DerivedLists,
    aggregate_duplicate_pairs,
    graph_list,
    ng_list,
    triplet_lists,
)


def arrays(subjects, objects, scores, no_rel=None):
    """Kernel arguments from plain lists."""
    return (np.array(subjects), np.array(objects), np.array(scores, dtype=float),
            None if no_rel is None else np.array(no_rel, dtype=float))


def assert_lists_equal(a: DerivedLists, b: DerivedLists) -> None:
    np.testing.assert_array_equal(a.graph, b.graph)
    np.testing.assert_array_equal(a.graph_scores, b.graph_scores)
    np.testing.assert_array_equal(a.ng, b.ng)
    np.testing.assert_array_equal(a.ng_scores, b.ng_scores)


# --- kernels -------------------------------------------------------------------------------


def test_duplicate_pairs_take_max_per_predicate_and_mean_no_relation():
    subjects, objects, scores, no_rel = aggregate_duplicate_pairs(*arrays(
        [1, 0, 0, 0], [2, 1, 1, 1],
        [[0.5, 0.5, 0.5], [0.1, 0.8, 0.3], [0.6, 0.2, 0.4], [0.3, 0.9, 0.0]],
        [0.5, 0.2, 0.4, 0.6]))
    np.testing.assert_array_equal(subjects, [1, 0])  # first-occurrence order, not sorted
    np.testing.assert_array_equal(objects, [2, 1])
    np.testing.assert_array_equal(scores, [[0.5, 0.5, 0.5], [0.6, 0.9, 0.4]])
    np.testing.assert_allclose(no_rel, [0.5, 0.4])


def test_duplicate_pairs_without_no_relation():
    subjects, objects, scores, no_rel = aggregate_duplicate_pairs(*arrays(
        [0, 2, 0], [1, 0, 1], [[0.1, 0.7], [0.2, 0.2], [0.4, 0.3]]))
    np.testing.assert_array_equal(np.stack([subjects, objects], axis=1), [[0, 1], [2, 0]])
    np.testing.assert_array_equal(scores, [[0.4, 0.7], [0.2, 0.2]])
    assert no_rel is None


GRAPH_PAIRS = ([0, 1, 2], [1, 2, 0], [[0.9, 0.1], [0.3, 0.6], [0.5, 0.4]], [0.6, 0.1, 0.3])


def test_graph_list_ranks_by_lowest_no_relation():
    triplets, scores = graph_list(*arrays(*GRAPH_PAIRS))
    np.testing.assert_array_equal(triplets, [[1, 2, 1], [2, 0, 0], [0, 1, 0]])
    np.testing.assert_allclose(scores, [0.9, 0.7, 0.4])
    assert triplets.dtype == np.int64
    assert scores.dtype == np.float64


def test_graph_list_without_no_relation_ranks_by_best_predicate_score():
    triplets, scores = graph_list(*arrays(*GRAPH_PAIRS[:3]))
    np.testing.assert_array_equal(triplets, [[0, 1, 0], [1, 2, 1], [2, 0, 0]])
    np.testing.assert_allclose(scores, [0.9, 0.6, 0.5])


NG_PAIRS = ([0, 1], [1, 0], [[0.9, 0.2], [0.6, 0.5]], [0.5, 0.0])


def test_ng_list_ranks_by_score_times_one_minus_no_relation():
    triplets, scores = ng_list(*arrays(*NG_PAIRS))
    # raw scores would rank (0,1,0) first: 0.9 * (1 - 0.5) = 0.45 puts it third
    np.testing.assert_array_equal(triplets, [[1, 0, 0], [1, 0, 1], [0, 1, 0], [0, 1, 1]])
    np.testing.assert_allclose(scores, [0.6, 0.5, 0.45, 0.1])


def test_ng_list_without_no_relation_ranks_by_raw_score():
    triplets, scores = ng_list(*arrays(*NG_PAIRS[:3]))
    np.testing.assert_array_equal(triplets, [[0, 1, 0], [1, 0, 0], [1, 0, 1], [0, 1, 1]])
    np.testing.assert_allclose(scores, [0.9, 0.6, 0.5, 0.2])


def test_ng_list_limit():
    triplets, scores = ng_list(*arrays(*NG_PAIRS), limit=2)
    np.testing.assert_array_equal(triplets, [[1, 0, 0], [1, 0, 1]])
    assert len(scores) == 2
    assert ng_list(*arrays(*NG_PAIRS), limit=0)[0].shape == (0, 3)
    with pytest.raises(ValueError, match="limit"):
        ng_list(*arrays(*NG_PAIRS), limit=-1)


def test_ties_lowest_predicate_then_pair_order():
    triplets, _ = graph_list(*arrays(
        [0, 1, 0], [1, 0, 2], [[0.4, 0.4, 0.1], [0.2, 0.3, 0.3], [0.1, 0.1, 0.1]],
        [0.25, 0.25, 0.125]))
    np.testing.assert_array_equal(triplets, [[0, 2, 0], [0, 1, 0], [1, 0, 1]])
    triplets, _ = graph_list(*arrays([0, 1], [1, 0], [[0.5, 0.5], [0.25, 0.5]]))
    np.testing.assert_array_equal(triplets, [[0, 1, 0], [1, 0, 1]])
    triplets, scores = ng_list(*arrays([0, 1], [1, 0], [[0.5, 0.5], [0.5, 0.25]], [0.5, 0.5]))
    np.testing.assert_array_equal(triplets, [[0, 1, 0], [0, 1, 1], [1, 0, 0], [1, 0, 1]])
    np.testing.assert_array_equal(scores, [0.25, 0.25, 0.25, 0.125])


def test_self_pairs_are_dropped():
    args = arrays([0, 0, 2], [0, 1, 2], [[1.0, 1.0], [0.5, 0.25], [0.9, 0.9]], [0.0, 0.5, 0.0])
    lists = triplet_lists(*args)
    np.testing.assert_array_equal(lists.graph, [[0, 1, 0]])
    np.testing.assert_array_equal(lists.ng, [[0, 1, 0], [0, 1, 1]])
    np.testing.assert_array_equal(lists.ng_scores, [0.25, 0.125])
    np.testing.assert_array_equal(graph_list(*args)[0], [[0, 1, 0]])


def test_triplet_lists_aggregates_before_deriving():
    lists = triplet_lists(*arrays(
        [0, 1, 0], [1, 0, 1], [[0.5, 0.0], [0.5, 0.5], [0.0, 1.0]], [0.0, 0.5, 0.5]),
        ng_limit=3)
    # pair (0,1): scores [0.5, 1.0], no-relation 0.25; pair (1,0): [0.5, 0.5], 0.5
    np.testing.assert_array_equal(lists.graph, [[0, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(lists.graph_scores, [0.75, 0.5])
    np.testing.assert_array_equal(lists.ng, [[0, 1, 1], [0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(lists.ng_scores, [0.75, 0.375, 0.25])


def test_no_pairs_give_empty_lists():
    lists = triplet_lists(*arrays([], [], np.empty((0, 3)), []))
    assert lists.graph.shape == lists.ng.shape == (0, 3)
    assert len(lists.graph_scores) == len(lists.ng_scores) == 0


# --- reader --------------------------------------------------------------------------------

ROWS = {
    "image_id": ["b", "b", "a", "b", "a"],
    "subject": [0, 1, 2, 0, 0],
    "object": [1, 0, 0, 1, 0],
    "scores": [[0.1, 0.7, 0.2], [0.4, 0.4, 0.1], [0.3, 0.3, 0.9], [0.5, 0.1, 0.0],
               [0.9, 0.9, 0.9]],
    "no_relation": [0.2, 0.6, 0.3, 0.4, 0.0],
}


def write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def write_npz(path: Path, columns: dict) -> Path:
    np.savez(path, **{name: np.asarray(values) for name, values in columns.items()})
    return path


WRITERS = {"parquet": write_parquet, "npz": write_npz}


def expected_lists(columns: dict, ng_limit=None) -> dict[str, DerivedLists]:
    ids = [str(i) for i in columns["image_id"]]
    out = {}
    for image_id in dict.fromkeys(ids):
        rows = [i for i, x in enumerate(ids) if x == image_id]
        out[image_id] = triplet_lists(
            *arrays(*([columns[n][i] for i in rows] for n in ("subject", "object", "scores")),
                    [columns["no_relation"][i] for i in rows] if "no_relation" in columns
                    else None), ng_limit=ng_limit)
    return out


@pytest.mark.parametrize("fmt", WRITERS)
def test_round_trip(fmt, tmp_path):
    path = WRITERS[fmt](tmp_path / f"scores.{fmt}", ROWS)
    lists = load_score_lists(str(path), ng_limit=4)
    assert list(lists) == ["b", "a"]
    # image b: pairs (0,1) [0.5, 0.7, 0.2] no-rel 0.3 and (1,0) [0.4, 0.4, 0.1] no-rel 0.6
    np.testing.assert_array_equal(lists["b"].graph, [[0, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(lists["b"].ng, [[0, 1, 1], [0, 1, 0], [1, 0, 0], [1, 0, 1]])
    np.testing.assert_allclose(lists["b"].ng_scores, [0.49, 0.35, 0.16, 0.16])
    np.testing.assert_array_equal(lists["a"].graph, [[2, 0, 2]])  # (0, 0) dropped
    expected = expected_lists(ROWS, ng_limit=4)
    for image_id, derived in lists.items():
        assert_lists_equal(derived, expected[image_id])


def test_schema_example(tmp_path):
    """The worked example of schemas/scores.md."""
    path = write_parquet(tmp_path / "scores.parquet", {
        "image_id": ["img1"] * 4,
        "subject": [0, 1, 0, 2],
        "object": [1, 0, 1, 2],
        "scores": [[0.1, 0.7, 0.2], [0.4, 0.4, 0.1], [0.5, 0.1, 0.0], [0.9, 0.9, 0.9]],
        "no_relation": [0.2, 0.6, 0.4, 0.0],
    })
    lists = load_score_lists(str(path))["img1"]
    np.testing.assert_array_equal(lists.graph, [[0, 1, 1], [1, 0, 0]])
    np.testing.assert_allclose(lists.graph_scores, [0.7, 0.4])
    np.testing.assert_array_equal(
        lists.ng, [[0, 1, 1], [0, 1, 0], [1, 0, 0], [1, 0, 1], [0, 1, 2], [1, 0, 2]])
    np.testing.assert_allclose(lists.ng_scores, [0.49, 0.35, 0.16, 0.16, 0.14, 0.04])


@pytest.mark.parametrize("fmt", WRITERS)
def test_empty_file_gives_no_images(fmt, tmp_path):
    columns = {"image_id": np.array([], dtype=str), "subject": np.array([], dtype=np.int64),
               "object": np.array([], dtype=np.int64), "scores": np.empty((0, 3))}
    if fmt == "parquet":
        columns["scores"] = pa.array([], pa.list_(pa.float64()))
    assert load_score_lists(str(WRITERS[fmt](tmp_path / f"empty.{fmt}", columns))) == {}


def test_parquet_and_npz_agree_with_integer_ids_and_no_no_relation(tmp_path):
    columns = {name: values for name, values in ROWS.items() if name != "no_relation"}
    columns["image_id"] = [7, 7, 3, 7, 3]
    from_parquet = load_score_lists(str(write_parquet(tmp_path / "s.parquet", columns)))
    from_npz = load_score_lists(str(write_npz(tmp_path / "s.npz", columns)))
    assert list(from_parquet) == list(from_npz) == ["7", "3"]
    for image_id, derived in expected_lists(columns).items():
        assert_lists_equal(from_parquet[image_id], derived)
        assert_lists_equal(from_npz[image_id], derived)


def test_parquet_float32_list_and_int32_indices(tmp_path):
    table = pa.table({
        "image_id": pa.array(ROWS["image_id"]),
        "subject": pa.array(ROWS["subject"], pa.int32()),
        "object": pa.array(ROWS["object"], pa.uint16()),
        "scores": pa.array(ROWS["scores"], pa.list_(pa.float32(), 3)),
        "no_relation": pa.array(ROWS["no_relation"], pa.float32()),
    })
    pq.write_table(table, tmp_path / "s.parquet")
    lists = load_score_lists(str(tmp_path / "s.parquet"))
    np.testing.assert_array_equal(lists["b"].graph, [[0, 1, 1], [1, 0, 0]])


def test_reads_any_fsspec_url(tmp_path):
    path = write_npz(tmp_path / "s.npz", ROWS)
    with fsspec.open("memory://scores-test/s.npz", "wb") as f:
        f.write(path.read_bytes())
    lists = load_score_lists("memory://scores-test/s.npz")
    assert_lists_equal(lists["b"], load_score_lists(str(path))["b"])


def edited(**changes) -> dict:
    """ROWS with whole columns replaced (None: column removed) or single cells changed."""
    columns = {name: list(values) for name, values in ROWS.items()}
    for name, change in changes.items():
        if change is None:
            del columns[name]
        elif isinstance(change, dict):
            for row, value in change.items():
                columns[name][row] = value
        else:
            columns[name] = change
    return columns


BAD_INPUTS = [  # (id, formats, columns, field, image or None)
    ("missing-object", "parquet npz", edited(object=None), "object", None),
    ("missing-scores", "parquet npz", edited(scores=None), "scores", None),
    ("negative-subject", "parquet npz", edited(subject={2: -1}), "subject", "a"),
    ("negative-object", "parquet npz", edited(object={1: -3}), "object", "b"),
    ("nan-score", "parquet npz", edited(scores={4: [0.1, np.nan, 0.1]}), "scores", "a"),
    ("inf-score", "parquet npz", edited(scores={1: [0.1, np.inf, 0.1]}), "scores", "b"),
    ("no-relation-above-1", "parquet npz", edited(no_relation={2: 1.5}), "no_relation", "a"),
    ("no-relation-below-0", "parquet npz", edited(no_relation={3: -0.1}), "no_relation", "b"),
    ("no-relation-nan", "parquet npz", edited(no_relation={0: np.nan}), "no_relation", "b"),
    ("ragged-scores", "parquet", edited(scores={3: [0.5, 0.1]}), "scores", "b"),
    ("longer-scores", "parquet", edited(scores={2: [0.1, 0.2, 0.3, 0.4]}), "scores", "a"),
    ("null-score", "parquet", edited(scores={2: [0.1, None, 0.3]}), "scores", "a"),
    ("null-score-row", "parquet", edited(scores={1: None}), "scores", "b"),
    ("null-subject", "parquet", edited(subject={4: None}), "subject", "a"),
    ("no-predicates", "parquet",
     edited(scores=pa.array([[]] * 5, pa.list_(pa.float64()))), "scores", "b"),
    ("no-predicates", "npz", edited(scores=np.empty((5, 0))), "scores", "b"),
    ("float-subject", "parquet npz", edited(subject=[0.0, 1.0, 2.0, 0.0, 0.0]), "subject",
     None),
    ("scores-rows", "npz", edited(scores=ROWS["scores"][:4]), "scores", None),
    ("scores-1d", "npz", edited(scores=[0.1, 0.2, 0.3, 0.4, 0.5]), "scores", None),
]


@pytest.mark.parametrize(
    ("fmt", "columns", "field", "image"),
    [pytest.param(fmt, columns, field, image, id=f"{case}-{fmt}")
     for case, formats, columns, field, image in BAD_INPUTS for fmt in formats.split()])
def test_bad_input_names_file_image_and_field(fmt, columns, field, image, tmp_path):
    path = WRITERS[fmt](tmp_path / f"bad-scores.{fmt}", columns)
    with pytest.raises(InputError) as err:
        load_score_lists(str(path))
    message = str(err.value)
    assert "bad-scores" in message
    assert err.value.field == field
    assert f": {field}:" in message
    assert err.value.image == image
    if image is not None:
        assert f"image {image}" in message


UNPICKLED: list[bool] = []


def record_unpickling() -> str:
    UNPICKLED.append(True)
    return "unpickled"


class Tripwire:
    """Pickles to a call of ``record_unpickling``: loading it would leave a trace."""

    def __reduce__(self):
        return (record_unpickling, ())


def test_npz_object_array_is_refused_without_unpickling(tmp_path):
    columns = edited(image_id=np.array([Tripwire()] * 5, dtype=object))
    path = write_npz(tmp_path / "pickled.npz", columns)
    with pytest.raises(InputError, match=r"pickled\.npz: image_id: unreadable array"):
        load_score_lists(str(path))
    assert not UNPICKLED


def test_unknown_format_and_missing_file(tmp_path):
    (tmp_path / "scores.csv").write_text("image_id,subject\n")
    with pytest.raises(InputError, match=r"scores\.csv: unknown file format"):
        load_score_lists(str(tmp_path / "scores.csv"))
    with pytest.raises(InputError, match=r"nothing\.npz: file not found"):
        load_score_lists(str(tmp_path / "nothing.npz"))


def test_corrupt_containers(tmp_path):
    (tmp_path / "cut.parquet").write_bytes(b"PAR1" + b"\0" * 20)
    with pytest.raises(InputError, match=r"cut\.parquet: not a readable Parquet file"):
        load_score_lists(str(tmp_path / "cut.parquet"))
    (tmp_path / "cut.npz").write_bytes(b"PK\x03\x04" + b"\0" * 20)
    with pytest.raises(InputError, match=r"cut\.npz: not a readable NPZ archive"):
        load_score_lists(str(tmp_path / "cut.npz"))
