"""Hostile input IV (issue 36): every reader sizes its work before materialising it, and
every bad setting or annotation file is one line naming the limit or the field."""

from __future__ import annotations

import io
import json
import tracemalloc
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgdask.errors import MAX_MESSAGE, InputError
from sgdask.formats.oiv6 import evaluated_records, oi_train_stats
from sgdask.formats.scores import load_score_lists, read_score_rows
from sgdask.io.archive import ArchiveLimits
from sgdask.io.bounded_json import load_json
from sgdask.io.documents import strict_json, strict_yaml
from sgdask.io.predicate_groups import read_groups
from sgdask.service.benchmark import load_benchmark
from sgdask.store.training_stats import train_stats

pytestmark = pytest.mark.timeout(60)
NAMES = {"thing_classes": ["a", "b"], "predicate_classes": ["on", "in"], "stuff_classes": []}


def test_five_million_identical_rows_refused_from_the_footer(tmp_path):
    n = 5_000_000
    table = pa.table({"image_id": pa.DictionaryArray.from_arrays(
                          pa.array(np.zeros(n, np.int32)), pa.array(["img"])),
                      "subject": pa.array(np.zeros(n, np.int64)),
                      "object": pa.array(np.ones(n, np.int64)),
                      "scores": pa.FixedSizeListArray.from_arrays(
                          pa.array(np.full(2 * n, 0.5)), 2)})
    path = tmp_path / "bomb.parquet"
    pq.write_table(table, path, row_group_size=n)
    del table
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    with pytest.raises(InputError, match=r"declares 5000000 rows of one image.*"
                                         r"raise with limits=ArchiveLimits\(max_pairs_per_image"):
        read_score_rows(str(path), None)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20  # refused before any column is read


def test_rows_values_and_columns_limits(tmp_path):
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"image_id": ["a"], "subject": [0], "object": [1],
                             "scores": [np.zeros(2_000).tolist()]}), path)
    with pytest.raises(InputError, match=r"row 0 has 2000 scores.*max_score_columns"):
        read_score_rows(str(path), None)
    with pytest.raises(InputError, match=r"declares 2000 scores.*max_score_values"):
        read_score_rows(str(path), None, ArchiveLimits(max_score_values=1_000))
    with pytest.raises(InputError, match=r"declares 1 rows.*max_score_rows"):
        read_score_rows(str(path), None, ArchiveLimits(max_score_rows=0.5))


def _npz(path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def test_npz_header_declaring_a_terabyte_and_a_member_not_npy(tmp_path):
    good = {"image_id.npy": _npy(np.array(["a"])), "subject.npy": _npy(np.array([0])),
            "object.npy": _npy(np.array([1])), "scores.npy": _npy(np.zeros((1, 2)))}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (10**12, 2)})
    huge = _npz(tmp_path / "huge.npz", {**good, "scores.npy": header.getvalue()})
    tracemalloc.start()
    with pytest.raises(InputError, match=r"scores: header declares shape \(1000000000000, 2\)"):
        read_score_rows(huge, None)
    assert tracemalloc.get_traced_memory()[1] < 20 * 2**20
    tracemalloc.stop()
    plain = _npz(tmp_path / "plain.npz", {**{k: v for k, v in good.items()
                                             if k != "scores.npy"}, "scores": b"hello"})
    with pytest.raises(InputError, match=r"scores: not a .npy array"):
        read_score_rows(plain, None)


def _score_file(tmp_path, rows: list[tuple[str, int, int, list[float]]]) -> str:
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"image_id": [r[0] for r in rows], "subject": [r[1] for r in rows],
                             "object": [r[2] for r in rows], "scores": [r[3] for r in rows]}),
                   path)
    return str(path)


def test_score_files_checked_against_the_gt(tmp_path):
    wide = _score_file(tmp_path, [("a", 0, 1, [0.1] * 1000)])
    with pytest.raises(InputError, match=r"1000 scores per row.*30 \(one per predicate"):
        load_score_lists(wide, n_predicates=30)
    twice = _score_file(tmp_path, [("a", 0, 1, [0.1, 0.2]), ("a", 0, 1, [0.3, 0.1])])
    assert set(load_score_lists(twice, n_predicates=2)) == {"a"}  # merged elsewhere
    with pytest.raises(InputError, match=r"image a: subject/object: pair \(0, 1\) scored twice"):
        load_score_lists(twice, n_predicates=2, unique_pairs=True)


def test_json_memory_estimated_before_parsing():
    data = b"[" + b",".join([b"[0]"] * 100_000) + b"]"
    with pytest.raises(InputError, match=r"up to 10400026 bytes once parsed.*max_json_memory"):
        load_json(data, "triplets.json", ArchiveLimits(max_json_memory=2**20))
    assert len(load_json(data, "triplets.json", ArchiveLimits(max_json_memory=2**24))) == 100_000


def test_setting_documents_strict(tmp_path):
    with pytest.raises(InputError, match="key 'visibility' given twice"):
        strict_yaml("visibility: private\nvisibility: public\n", "b.yaml")
    with pytest.raises(InputError, match="key 'phases' given twice"):
        strict_yaml("phases: [1]\nphases: []\n", "b.yaml")
    with pytest.raises(InputError, match=r"b.yaml: not valid YAML .*nested more than"):
        strict_yaml("[" * 2000 + "]" * 2000, "b.yaml")
    with pytest.raises(InputError, match=r"b.yaml: not valid YAML"):
        strict_yaml("n: " + "9" * 4301, "b.yaml")
    with pytest.raises(InputError, match="not a date in UTC's range"):
        strict_yaml("end: 9999-12-31T23:00:00-05:00\n", "b.yaml")
    with pytest.raises(InputError, match="key 'head' given twice"):
        strict_json('{"head": ["on"], "head": ["in"]}', "g.json")
    with pytest.raises(InputError, match=r"g.json: nested too deeply"):
        strict_json("[" * 100_000 + "]" * 100_000, "g.json")


def test_manifest_and_cluster_file_refuse_duplicate_keys(tmp_path):
    """The other setting files, the evaluate-many manifest and a cluster file, read as
    strictly as the benchmark file."""
    from sgdask.batch.many import load_manifest
    from sgdask.cluster_file import read_cluster_file

    manifest = tmp_path / "many.yaml"
    manifest.write_text("gt: a\ngt: b\nsubmissions: []\n")
    with pytest.raises(InputError, match="key 'gt' given twice"):
        load_manifest(str(manifest))
    cluster = tmp_path / "slurm.yaml"
    cluster.write_text("class: local\nclass: slurm\n")
    with pytest.raises(InputError, match="key 'class' given twice"):
        read_cluster_file(str(cluster))


def test_benchmark_file_refuses_duplicates_and_far_dates(tmp_path):
    bench = tmp_path / "bench.yaml"
    bench.write_text("phases:\n- name: a\n  gt: gt\n  visibility: private\n"
                     "  visibility: public\n")
    with pytest.raises(InputError, match="key 'visibility' given twice"):
        load_benchmark(str(bench), str(tmp_path / "r"), str(tmp_path / "o"))
    bench.write_text("phases:\n- name: a\n  gt: gt\n  end: '9999-12-31T23:00:00-05:00'\n")
    with pytest.raises(InputError, match=r"phases\[0\].end: '9999.*is not a date"):
        load_benchmark(str(bench), str(tmp_path / "r"), str(tmp_path / "o"))


def test_predicate_groups_duplicates_depth_and_echo(tmp_path):
    groups = tmp_path / "g.json"
    groups.write_text('{"head": ["on"], "head": ["in"]}')
    with pytest.raises(InputError, match="given twice"):
        read_groups(str(groups), ["on", "in"])
    groups.write_text(json.dumps({"head": ["x" * 1_000_000]}))
    with pytest.raises(InputError, match="unknown predicate") as err:
        read_groups(str(groups), ["on", "in"])
    assert len(str(err.value)) < MAX_MESSAGE + 200


@pytest.mark.parametrize(("field", "value"), [
    ("img_size", [1e30, 10]), ("img_size", [2**63, 10]), ("img_size", [float("inf"), 10]),
    ("det_labels", [0.9]), ("det_labels", ["1"]), ("det_labels", [2**63]),
    ("rel", [[0, 0, 1e30]]), ("rel", [[0, 0, float("inf")]]), ("bbox", [["1", 2, 3, 4]]),
])
def test_open_images_fields_type_checked(field, value):
    entry = {"img_fn": "i", "img_size": [10, 10], "bbox": [[0, 0, 5, 5], [1, 1, 6, 6]],
             "det_labels": [0, 1], "rel": [[0, 1, 0]], field: value}
    if field == "det_labels":
        entry["bbox"] = [[0, 0, 5, 5]]
        entry["rel"] = []
    with pytest.raises(InputError, match=f"image i: {field}: "):
        evaluated_records([entry], "vrd.json", NAMES)


def test_training_labels_type_checked():
    entry = {"img_fn": "i", "det_labels": [99999, 0], "rel": [[0, 1, 0]]}
    with pytest.raises(InputError, match="label 99999 out of range"):
        oi_train_stats([entry], "train.json", NAMES)
    with pytest.raises(InputError, match="det_labels"):
        oi_train_stats([{**entry, "det_labels": [-5, 0]}], "train.json")
    doc = {"train_image_ids": ["1"], "thing_classes": ["a", "b"], "stuff_classes": [],
           "predicate_classes": ["on"],
           "data": [{"image_id": "1", "segments_info": [{"category_id": 99999},
                                                          {"category_id": 0}],
                     "relations": [[0, 1, 0]]}]}
    with pytest.raises(InputError, match=r"category_id: 99999 is not an index in 0..1"):
        train_stats(doc, "psg.json")
    doc["data"][0]["segments_info"][0]["category_id"] = -5
    with pytest.raises(InputError, match="-5 is not an index"):
        train_stats(doc, "psg.json")


def test_error_lines_are_cut():
    err = InputError("f.json", "y" * 100_000, field="x")
    assert len(str(err)) < MAX_MESSAGE + 50
    assert "more characters" in err.render("cli")
