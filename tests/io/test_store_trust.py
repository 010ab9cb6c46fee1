"""Issue 12: evaluate trusts no store.

A corpus of damaged stores (each file kind truncated, zeroed, replaced by garbage, deleted;
a mask chunk changed and re-encoded so that it still decodes; manifests with a wrong hash,
a wrong or newer version, an extra or a missing part) and of stores inconsistent with the
GT (size, categories, predicates, instance indices, crop boxes), all built from one small
good store. Every case: exit 2, one ``sgdask: error:`` line naming the file, no output.
Plus a property test: flipping any byte of any file changes no number silently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdask.errors import SgdaskError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.pipeline import evaluate_protocols
from sgdask.store.store import (
    SELF_HASH,
    StoreReader,
    file_entry,
    manifest_digest,
    parquet_bytes,
)
from sgdask.testing.psg import write_dataset
from tests.helpers import FIXTURES, run_main

FIXTURE_V1 = FIXTURES / "store-v1"
FIXTURE_V3 = FIXTURES / "store-v3"
FIXTURE_V4 = FIXTURES / "store-v4"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A 10-image dataset, its mask GT store and its submission store (2 parts each)."""
    root = tmp_path_factory.mktemp("trust")
    paths = write_dataset(root / "raw", n_images=10, seed=5, height=48, width=64,
                          missing_fraction=0.0, no_relation_fraction=0.0)
    gt, pred = root / "gt", root / "pred"
    ingest_gt(str(paths.psg_json), str(gt), str(paths.masks_dir), partition_size=5)
    convert_submission(str(paths.submission_zip), str(pred), str(gt), partition_size=5)
    return paths, gt, pred


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("sgdask: error:")]


def assert_one_line(code: int, err: str, *fragments: str) -> str:
    lines = error_lines(err)
    assert code == 2, err
    assert len(lines) == 1, err
    assert "unexpected" not in err and "internal error" not in err and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def evaluate_cli(capsys, client, gt, pred, out: Path) -> tuple[int, str, str]:
    return run_main(capsys, "evaluate", "--gt", str(gt), "--pred", str(pred), "--scheduler",
                   client.scheduler.address, "--out", str(out))


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def manifest_of(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


def write_manifest(store: Path, manifest: dict, rehash: bool = True) -> None:
    if rehash:
        manifest[SELF_HASH] = manifest_digest(manifest)
    (store / "manifest.json").write_text(json.dumps(manifest, indent=1))


def rewrite_table(store: Path, rel: str, edit) -> None:
    """Replace a Parquet file by an edited copy and record its new size and hash (an
    inconsistent store with intact checksums: what a buggy writer would produce)."""
    table = edit(pq.read_table(store / rel))
    data = parquet_bytes(table)
    (store / rel).write_bytes(data)
    manifest = manifest_of(store)
    manifest["files"][rel] = file_entry(data)
    write_manifest(store, manifest)


def set_value(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table[column].to_pylist()
    values[row] = value
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


# --------------------------------------------------------------- damaged files, each kind

FILES = ["images/part-00000.parquet", "instances/part-00000.parquet",
         "triplets/part-00001.parquet", "masks/part-00000/c/0", "masks/part-00001/zarr.json"]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def garbage(path: Path) -> None:
    path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))


def delete(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [truncate, zero, garbage, delete],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("rel", FILES)
def test_damaged_submission_file(good, tmp_path, capsys, client, rel, damage):
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    damage(store / rel)
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, gt, store, out)
    assert_one_line(code, err, f"{store}/{rel}")
    assert not out.exists()
    code, text, _ = run_main(capsys, "verify", str(store))
    assert code == 2
    assert any(f"{store}/{rel}" in line for line in text.splitlines()), text


@pytest.mark.parametrize("rel", ["images/part-00001.parquet", "masks/part-00000/c/0",
                                 "train_stats.parquet"])
def test_damaged_gt_file(good, tmp_path, capsys, client, rel):
    """GT masks are read on the workers: the error crosses the cluster intact."""
    _, gt, pred = good
    store = copy_store(gt, tmp_path / "gt")
    garbage(store / rel)
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, store, pred, out)
    assert_one_line(code, err, f"{store}/{rel}", "corrupt")
    assert not out.exists()


def test_chunk_reencoded_so_it_still_decodes(good, tmp_path, capsys, client):
    """A bad copy tool or a hand edit: decode, flip bits, encode again (valid zstd, valid
    CRC-32C). Only the manifest's hash can tell, and does."""
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    array = zarr.open_array(str(store / "masks" / "part-00000"), mode="r+")
    data = array[:]
    data[len(data) // 2] ^= 0x10
    array[:] = data
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, gt, store, out)
    assert_one_line(code, err, f"{store}/masks/part-00000/c/0", "corrupt")
    assert not out.exists()


# ------------------------------------------------------------------------ damaged manifests

def wrong_hash(m):
    rel = "instances/part-00001.parquet"
    m["files"][rel]["sha256"] = "0" * 64
    return rel


def newer_version(m):
    m["format_version"] = 99
    return "manifest.json"


def wrong_version(m):
    m["format_version"] = "three"
    return "manifest.json"


def extra_part(m):
    m["parts"].append({"name": "part-00002", "first_id": "zz1", "last_id": "zz2",
                       "n_images": 1})
    m["n_images"] += 1
    return "part-00002"


def missing_part(m):
    m["n_images"] -= m["parts"].pop()["n_images"]
    return "part-00001"


def missing_part_and_files(m):
    m["n_images"] -= m["parts"].pop()["n_images"]
    m["files"] = {k: v for k, v in m["files"].items() if "part-00001" not in k}
    return "manifest.json"


def missing_file_entry(m):
    del m["files"]["triplets/part-00000.parquet"]
    return "triplets/part-00000.parquet"


def evaluated_after(edit, good, tmp_path, capsys, client):
    """A copy of the good submission store with ``edit`` applied to its manifest, evaluated
    through the CLI: (store, --out, what the edit names, exit code, stderr)."""
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    manifest = manifest_of(store)
    named = edit(manifest)
    write_manifest(store, manifest)
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, gt, store, out)
    return store, out, named, code, err


@pytest.mark.parametrize("edit", [wrong_hash, newer_version, wrong_version, extra_part,
                                  missing_part, missing_part_and_files, missing_file_entry],
                         ids=lambda f: f.__name__)
def test_damaged_manifest(good, tmp_path, capsys, client, edit):
    store, out, named, code, err = evaluated_after(edit, good, tmp_path, capsys, client)
    if edit is missing_part_and_files:
        # a consistent manifest without a part: its images look unsubmitted; verify sees
        # the part's files the manifest does not list
        code, text, _ = run_main(capsys, "verify", str(store))
        assert code == 2 and "part-00001.parquet: not listed in the manifest" in text, text
        return
    line = assert_one_line(code, err, f"{store}", named)
    if edit is newer_version:
        assert "newer sgdask" in line
    assert not out.exists()


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b"\x00" * 40,
                                     b'{"format": "sgdask-store"}'])
def test_garbage_manifest(good, tmp_path, capsys, client, content):
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    (store / "manifest.json").write_bytes(content)
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, gt, store, out)
    assert_one_line(code, err, f"{store}")
    assert not out.exists()


def sha256_not_hex(m):
    m["files"]["images/part-00000.parquet"]["sha256"] = "Z" * 64
    return "files.images/part-00000.parquet.sha256"


def unknown_instances(m):
    m["instances"] = "polygons"
    return "instances"


def content_hash_of_another_kind(m):
    m["content_hash"] = "md5:" + "0" * 32
    return "content_hash"


def submission_without_has_ng(m):
    del m["has_ng"]
    return "has_ng"


def part_with_no_images(m):
    m["parts"][0]["n_images"] = 0
    m["n_images"] = sum(p["n_images"] for p in m["parts"])
    return "parts[0].n_images"


@pytest.mark.parametrize("edit", [sha256_not_hex, unknown_instances,
                                  content_hash_of_another_kind, submission_without_has_ng,
                                  part_with_no_images], ids=lambda f: f.__name__)
def test_manifest_against_its_schema(good, tmp_path, capsys, client, edit):
    """Manifests are checked against the shipped schema when read (its own hash intact:
    only the schema sees these): one line naming the manifest and the field, exit 2."""
    store, out, field, code, err = evaluated_after(edit, good, tmp_path, capsys, client)
    line = assert_one_line(code, err, f"{store}/manifest.json: corrupt (against the store "
                           "manifest schema: ", f"{field}: ")
    assert not out.exists()
    code, text, _ = run_main(capsys, "verify", str(store))
    assert code == 2 and line.removeprefix("sgdask: error: ") in text, text


def test_manifest_value_edited_without_rehash(good, tmp_path, capsys, client):
    """A manifest field changed by hand (here a part's id range) breaks its own hash."""
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    manifest = manifest_of(store)
    manifest["parts"][1]["first_id"] = "0"
    write_manifest(store, manifest, rehash=False)
    code, _, err = evaluate_cli(capsys, client, gt, store, tmp_path / "out")
    assert_one_line(code, err, f"{store}/manifest.json", SELF_HASH)


# ----------------------------------------------------------- inconsistent with the GT store

def shorter(t):
    return set_value(t, "height", 0, t["height"][0].as_py() - 7)


def bad_category(t):
    return set_value(t, "category", 0, 4000)


def bad_predicate(t):
    return set_value(t, "predicate", 0, 999)


def bad_subject(t):
    return set_value(t, "subject", 0, 500)


def crop_outside(t):
    return set_value(t, "mask_y1", 0, 4000)


def crop_missing(t):
    return set_value(t, "mask_offset", 0, None)


@pytest.mark.parametrize(("rel", "edit", "fragments"), [
    ("images/part-00000.parquet", shorter, ["height x width", "expected 48x64"]),
    ("instances/part-00000.parquet", bad_category, ["instances", "category 4000"]),
    ("triplets/part-00000.parquet", bad_predicate, ["triplets", "predicate 999"]),
    ("triplets/part-00000.parquet", bad_subject, ["triplets", "subject 500"]),
    ("instances/part-00000.parquet", crop_outside, ["mask crop", "inside the 48x64 image"]),
    ("instances/part-00000.parquet", crop_missing, ["without its mask crop"]),
    # in the second part: the check reads a part at a time and names the image there
    ("instances/part-00001.parquet", bad_category, ["instances", "category 4000"]),
    ("triplets/part-00001.parquet", bad_subject, ["triplets", "subject 500"]),
    ("instances/part-00001.parquet", crop_outside, ["mask crop", "inside the 48x64 image"]),
], ids=["size", "category", "predicate", "instance-index", "crop-outside", "crop-missing",
        "category-part-2", "instance-index-part-2", "crop-outside-part-2"])
def test_inconsistent_with_gt(good, tmp_path, capsys, client, rel, edit, fragments):
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    rewrite_table(store, rel, edit)
    part = int(rel.split("part-")[1].split(".")[0])
    first_id = manifest_of(store)["parts"][part]["first_id"]
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, gt, store, out)
    assert_one_line(code, err, str(store), f"image {first_id}", *fragments)
    assert not out.exists()


def test_short_masks_converted_without_gt_are_refused(good, tmp_path, capsys, client):
    """Issue 12's first finding: masks 7 rows short, converted without --gt (the size is
    unknown then), must not be scored against GT images of another size."""
    import zipfile

    from tests.helpers import rewrite_zip, tiff_bytes

    paths, gt, _ = good
    with zipfile.ZipFile(paths.submission_zip) as z:
        doc = json.loads(z.read("triplets.json"))
        name = doc["images"][0]["seg_filename"]
        import tifffile

        layers = tifffile.imread(z.open(name))
    short = rewrite_zip(paths.submission_zip, tmp_path / "short.zip",
                        replace={name: tiff_bytes(layers[..., :-7, :])})
    store = tmp_path / "pred"
    code, _, err = run_main(capsys, "convert", str(short), "--out", str(store), "--in-process")
    assert code == 0, err
    code, _, err = evaluate_cli(capsys, client, gt, store, tmp_path / "out")
    assert_one_line(code, err, str(store), f"image {doc['images'][0]['id']}",
                    "41x64", "expected 48x64")


# --------------------------------------------------------------- files where a store belongs

def test_submission_file_where_a_store_is_expected(good, tmp_path, capsys):
    paths, _, _ = good
    code, text, _ = run_main(capsys, "verify", str(paths.submission_zip))
    assert code == 2 and "is a submission file (ZIP)" in text and "sgdask convert" in text
    code, _, err = run_main(capsys, "convert", str(paths.submission_zip), "--out",
                           str(tmp_path / "s"), "--gt", str(paths.psg_json), "--in-process")
    assert_one_line(code, err, str(paths.psg_json), "sgdask ingest-gt")
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------ verify

def test_verify_intact_stores(good, capsys):
    _, gt, pred = good
    code, text, _ = run_main(capsys, "verify", str(gt), str(pred))
    assert code == 0, text
    assert f"{gt}: intact" in text and f"{pred}: intact" in text


def test_verify_reports_every_problem(good, tmp_path, capsys):
    _, _, pred = good
    store = copy_store(pred, tmp_path / "pred")
    garbage(store / "images/part-00001.parquet")
    delete(store / "masks/part-00000/c/0")
    (store / "stray.txt").write_text("x")
    code, text, _ = run_main(capsys, "verify", str(store))
    assert code == 2
    for rel in ("images/part-00001.parquet", "masks/part-00000/c/0", "stray.txt"):
        assert any(line.startswith(f"{store}/{rel}:") for line in text.splitlines()), text


# ------------------------------------------------------------------- older store formats

def test_v1_fixture_warns_and_gives_the_recorded_numbers(client, capsys, recwarn):
    expected = json.loads((FIXTURE_V1 / "expected_metrics.json").read_text())
    for kind, (gt, pred) in {"masks": ("gt", "pred"), "boxes": ("gt_boxes", "pred_boxes")
                             }.items():
        reports = evaluate_protocols(str(FIXTURE_V1 / gt), str(FIXTURE_V1 / pred),
                                     ",".join(expected[kind]), client=client,
                                     legacy=True)
        for protocol, metrics in expected[kind].items():
            got = reports[protocol].metrics
            for name, value in metrics.items():
                assert got[name] == pytest.approx(value, abs=1e-12), (kind, protocol, name)
    messages = [str(w.message) for w in recwarn]
    assert any("carries no checksums" in m for m in messages)


def test_v3_fixture_gives_the_recorded_numbers_without_panoptic_quality(client):
    """A version-3 store pair (no iscrowd; tests/fixtures/store-v3/README.md says how it was
    written): every number the sgdask that wrote it printed, and PQ left out with why."""
    expected = json.loads((FIXTURE_V3 / "expected_metrics.json").read_text())
    reports = evaluate_protocols(str(FIXTURE_V3 / "gt"), str(FIXTURE_V3 / "pred"),
                                 ",".join(expected), client=client)
    for protocol, metrics in expected.items():
        got = reports[protocol].metrics
        assert set(metrics) <= set(got), protocol
        newer = {name for name in set(got) - set(metrics)  # metrics added since (issue 26)
                 if name.split("@")[0] not in ("F", "ngF") and "[" not in name}
        assert not newer, (protocol, newer)
        for name, value in metrics.items():
            assert got[name] == pytest.approx(value, abs=1e-12), (protocol, name)
        assert "ingest the GT again" in reports[protocol].left_out["PQ"]


def test_v4_fixture_gives_the_recorded_numbers_panoptic_quality_included(client):
    """A version-4 store pair (iscrowd, no pair rows; tests/fixtures/store-v4/README.md says
    how it was written) reads under format 5: every number the sgdask that wrote it
    printed, PQ included, and nothing else."""
    assert StoreReader(str(FIXTURE_V4 / "pred")).version == 4
    expected = json.loads((FIXTURE_V4 / "expected_metrics.json").read_text())
    reports = evaluate_protocols(str(FIXTURE_V4 / "gt"), str(FIXTURE_V4 / "pred"),
                                 ",".join(expected), client=client)
    for protocol, metrics in expected.items():
        assert reports[protocol].metrics == metrics, protocol


# ------------------------------------------------------------------- property: flip a byte

@pytest.fixture(scope="module")
def baseline(good, client):
    _, gt, pred = good
    return evaluate_protocols(str(gt), str(pred), "singlempo", client=client)[
        "singlempo"].metrics


def store_files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipped_byte_is_detected_or_changes_nothing(good, baseline, client, tmp_path_factory,
                                                     data):
    _, gt, pred = good
    which = data.draw(st.sampled_from(["gt", "pred"]))
    source = gt if which == "gt" else pred
    rel = data.draw(st.sampled_from(store_files(source)))
    size = (source / rel).stat().st_size
    offset = data.draw(st.integers(0, max(size - 1, 0)))
    bit = data.draw(st.integers(0, 7))
    store = copy_store(source, tmp_path_factory.mktemp("flip") / which)
    raw = bytearray((store / rel).read_bytes())
    raw[offset] ^= 1 << bit
    (store / rel).write_bytes(bytes(raw))
    stores = {"gt": gt, "pred": pred, which: store}
    try:
        metrics = evaluate_protocols(str(stores["gt"]), str(stores["pred"]), "singlempo",
                                     client=client)["singlempo"].metrics
    except SgdaskError:
        return
    assert metrics == baseline, (which, rel, offset, bit)


def test_flipped_byte_in_every_file_kind(good, baseline, client, tmp_path):
    """The property's cases that matter most, each file of the submission store once."""
    _, gt, pred = good
    for rel in store_files(pred):
        store = tmp_path / rel.replace("/", "_")
        copy_store(pred, store)
        raw = bytearray((store / rel).read_bytes())
        raw[len(raw) // 2] ^= 0x04
        (store / rel).write_bytes(bytes(raw))
        try:
            metrics = evaluate_protocols(str(gt), str(store), "singlempo",
                                         client=client)["singlempo"].metrics
        except SgdaskError as err:
            assert str(store) in str(err)
            continue
        assert metrics == baseline, rel


def test_unchanged_manifest_layout_is_fine(good, tmp_path, client, baseline):
    """Only values are hashed: re-indenting the manifest changes nothing."""
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    manifest = manifest_of(store)
    (store / "manifest.json").write_text(json.dumps(manifest))
    metrics = evaluate_protocols(str(gt), str(store), "singlempo", client=client)[
        "singlempo"].metrics
    assert metrics == baseline


# ------------------------------------------------------------------------------- rerank

def test_rerank_verifies_a_store_before_first_ranking_it(good, tmp_path, client):
    """A store damaged where evaluation would not look (the masks group's zarr.json) is
    still refused by rerank, whose first ranking of a store verifies it completely."""
    from sgdask.batch.registry import submit
    from sgdask.batch.rerank import rerank

    paths, gt, _ = good
    registry = str(tmp_path / "registry")
    entry = submit(str(paths.submission_zip), registry, str(gt), "model", approved=True,
                   cluster=client)
    store = Path(entry.url)
    garbage(store / "masks" / "zarr.json")
    out = tmp_path / "board"
    with pytest.raises(SgdaskError, match=f"{store}/masks/zarr.json: corrupt"):
        rerank(registry, str(gt), str(out), client=client, log=lambda _: None)
    assert not (out / "current.json").exists()


# ---------------------------------------------------------------------- archive limits

def test_npz_score_file_gets_the_archive_limits(good, tmp_path, capsys):
    """An NPZ is a ZIP: an entry expanding 1000-fold is refused from the central
    directory, before numpy decompresses it (like a submission ZIP's TIFFs)."""
    paths, _, _ = good
    bomb = tmp_path / "scores.npz"
    np.savez_compressed(bomb, image_id=np.array(["1"]), subject=np.zeros(1, np.int64),
                        object=np.zeros(1, np.int64), scores=np.zeros((1, 8 << 20), np.float32))
    out = tmp_path / "s"
    code, _, err = run_main(capsys, "convert", str(paths.submission_boxes), "--from-scores",
                           str(bomb), "--out", str(out), "--in-process")
    assert_one_line(code, err, f"{bomb}:scores.npy", "zip bomb", "--limit max_ratio")
    assert not out.exists()
    code, _, err = run_main(capsys, "convert", str(paths.submission_boxes), "--from-scores",
                           str(bomb), "--out", str(out), "--in-process", "--limit",
                           "max_member_size=1MiB", "--limit", "max_ratio=1e9")
    assert_one_line(code, err, f"{bomb}:scores.npy", "--limit max_member_size")
    assert not out.exists()


@pytest.mark.parametrize(("limit", "fragment"), [
    ("max_json_size=1000", "psg.json: psg.json: is "),
    ("max_json_depth=2", "JSON nested too deeply"),
    ("max_layer_pixels=1000", "PNG is 64x48 pixels"),
])
def test_ingest_gt_limits(good, tmp_path, capsys, limit, fragment):
    paths, _, _ = good
    out = tmp_path / "gt"
    code, _, err = run_main(capsys, "ingest-gt", str(paths.psg_json), "--masks",
                           str(paths.masks_dir), "--out", str(out), "--in-process",
                           "--limit", limit)
    assert_one_line(code, err, fragment, f"--limit {limit.split('=')[0]}")
    assert not out.exists()


# ------------------------------------------------------------------- faults of the storage

@pytest.mark.slow
def test_s3_server_stopped_between_reads(good, tmp_path, capsys, monkeypatch, client):
    """A real moto S3 server stops after a reader opened a store: the next read is one
    line naming the object's URL (after s3fs's retries), never an internal error; the CLI
    then writes no --out."""
    import s3fs
    from moto.server import ThreadedMotoServer

    from sgdask.store.partition import load_predictions
    from sgdask.store.store import StoreReader
    from tests.helpers import AWS_ENV

    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    _, gt, pred = good
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                   "config_kwargs": {"retries": {"max_attempts": 2}}}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("fault")
        fs.put(str(pred), "fault/pred", recursive=True)
        reader = StoreReader("s3://fault/pred", options)
        ids = reader.images()["image_id"].to_pylist()
    finally:
        server.stop()
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(SgdaskError) as err:
        load_predictions(reader, [reader.parts[0]["name"]], ids)
    message = str(err.value)
    assert message.startswith("s3://fault/pred/instances/part-00000.parquet: cannot read") or \
        message.startswith("s3://fault/pred/images/part-00000.parquet: cannot read"), message
    out = tmp_path / "out"
    code, _, err_text = run_main(capsys, "evaluate", "--gt", str(gt), "--pred", "s3://fault/pred",
                                "--scheduler", client.scheduler.address, "--out",
                                str(out), "-S", f"endpoint_url={endpoint}", "-S", "key=testing",
                                "-S", "secret=testing")
    assert_one_line(code, err_text, "s3://fault/pred")
    assert not out.exists()


@pytest.mark.parametrize("content", [b"\xff\xfe garbage", b"[]", b'{"submission_id": 3}'])
def test_damaged_registry_entry_is_one_line(good, tmp_path, capsys, client, content):
    registry = tmp_path / "registry"
    entry = registry / "entries" / "broken.json"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(content)
    _, gt, _ = good
    out = tmp_path / "board"
    code, _, err = run_main(capsys, "rerank", "--registry", str(registry), "--gt", str(gt),
                           "--out", str(out), "--scheduler", client.scheduler.address)
    assert_one_line(code, err, str(entry))
    assert not (out / "current.json").exists()


# ------------------------------------------------- stores without checksums, stats files

@pytest.mark.parametrize(("rel", "damage"), [
    ("instances/part-00001.parquet", garbage), ("triplets/part-00000.parquet", truncate),
    ("images/part-00000.parquet", delete), ("masks/part-00000/c/0", garbage),
    ("masks/part-00001/c/0", delete), ("masks/part-00000/zarr.json", zero)],
    ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_damaged_v1_store_is_one_line(tmp_path, capsys, client, rel, damage):
    """Version 1 stores carry no checksums, but a file that does not read, decode or exist
    is still one line naming it (a missing chunk is not read as zeros)."""
    store = copy_store(FIXTURE_V1 / "pred", tmp_path / "pred")
    damage(store / rel)
    out = tmp_path / "out"
    code, _, err = evaluate_cli(capsys, client, FIXTURE_V1 / "gt", store, out)
    named = "/".join(rel.split("/")[:2]) if rel.startswith("masks/") else rel
    assert_one_line(code, err, f"{store}/{named}")
    assert not out.exists()


def test_damaged_stats_file_is_one_line(good, tmp_path, capsys, client):
    _, gt, pred = good
    stats = tmp_path / "stats.parquet"
    stats.write_bytes(b"PAR1" + bytes(100) + b"PAR1")
    out = tmp_path / "out"
    code, _, err = run_main(capsys, "evaluate", "--gt", str(gt), "--pred", str(pred),
                           "--stats", str(stats), "--scheduler", client.scheduler.address,
                           "--out", str(out))
    assert_one_line(code, err, str(stats), "not a readable Parquet file")
    assert not out.exists()


def test_evaluate_many_checks_each_store_against_the_gt(good, tmp_path, capsys, client):
    """evaluate-many: the inconsistent store is named and fails alone: nothing of it is
    cached or written, the consistent one is evaluated and written."""
    _, gt, pred = good
    store = copy_store(pred, tmp_path / "pred")
    rewrite_table(store, "instances/part-00001.parquet", bad_category)
    out = tmp_path / "many"
    job = tmp_path / "many.json"
    job.write_text(json.dumps({"gt": str(gt), "out": str(out), "submissions": [
        {"name": "good", "url": str(pred)}, {"name": "bad", "url": str(store)}]}))
    code, _, err = run_main(capsys, "evaluate-many", str(job), "--scheduler",
                           client.scheduler.address)
    assert_one_line(code, err, str(store), "category 4000")
    assert not (out / "bad").exists()
    assert (out / "good" / "metrics.json").exists()
    assert [row["submission"] for row in json.loads((out / "summary.json").read_text())] \
        == ["good"]
