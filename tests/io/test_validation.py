"""Hostile and broken submissions: a corpus generated here (no binary blobs in the repo).

Each broken input gets its message and exit code 2 from ``convert`` (one line, no store left)
and from ``validate``; valid edge cases (empty triplet lists, an image without instances)
convert. Also: the schemas in ``schemas/`` describe what sgdask reads and writes, and a
SIGKILLed conversion leaves nothing that ``evaluate`` accepts.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import signal
import stat
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import fastjsonschema
import numpy as np
import pytest

from sgdask.errors import InputError
from sgdask.formats.sgbench import SCHEMA, parse_submission, validate_submission
from sgdask.io.archive import ArchiveLimits, SafeZip
from sgdask.testing.psg import SynthPaths, write_dataset
from tests.helpers import BUCKET, ROOT, rewrite_zip, run_cli, tiff_bytes

COLUMNS = {"COLUMNS": "200"}  # help text unwrapped

SCHEMAS = ROOT / "schemas"
H, W = 96, 128  # the conftest dataset's image size


def convert_cli(submission: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("convert", str(submission), "--out", str(out), "--in-process", *extra,
                   env=COLUMNS)


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one ``sgdask: error:`` line of a refused command (exit code 2, nothing else on
    stderr but a progress bar)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines()
             if line.strip() and not line.startswith("converting images")]
    assert len(lines) == 1 and lines[0].startswith("sgdask: error: "), proc.stderr
    return lines[0]


def zip_doc(dataset: SynthPaths) -> dict:
    with zipfile.ZipFile(dataset.submission_zip) as z:
        return json.loads(z.read("triplets.json"))


def first_image(dataset: SynthPaths) -> dict:
    return zip_doc(dataset)["images"][0]


def edited_zip(dataset: SynthPaths, tmp: Path, edit: Callable[[dict], None]) -> Path:
    return rewrite_zip(dataset.submission_zip, tmp / "bad.zip", edit)


def edited_json(dataset: SynthPaths, tmp: Path, edit: Callable[[dict], None]) -> Path:
    doc = json.loads(dataset.submission_boxes.read_bytes())
    edit(doc)
    path = tmp / "bad.json"
    path.write_text(json.dumps(doc))  # NaN is written as NaN, as Python's json does
    return path


def raw_zip(tmp: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]],
            base: Path | None = None) -> Path:
    """A ZIP of ``base``'s entries (if given) plus ``entries``, names taken verbatim."""
    path = tmp / "bad.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        if base is not None:
            with zipfile.ZipFile(base) as z:
                for name in z.namelist():
                    out.writestr(name, z.read(name))
        for info, data in entries:
            out.writestr(info, data)
    return path


# --------------------------------------------------------------------------- the corpus


def truncated_zip(d: SynthPaths, tmp: Path) -> Path:
    data = d.submission_zip.read_bytes()
    (tmp / "bad.zip").write_bytes(data[:len(data) // 2])
    return tmp / "bad.zip"


def zip_without_triplets(d: SynthPaths, tmp: Path) -> Path:
    return rewrite_zip(d.submission_zip, tmp / "bad.zip", drop=("triplets.json",))


def traversal_entry(d: SynthPaths, tmp: Path) -> Path:
    return raw_zip(tmp, [("../../evil.tiff", b"x")], d.submission_zip)


def absolute_entry(d: SynthPaths, tmp: Path) -> Path:
    return raw_zip(tmp, [("/etc/evil.tiff", b"x")], d.submission_zip)


def drive_letter_entry(d: SynthPaths, tmp: Path) -> Path:
    return raw_zip(tmp, [("C:\\evil.tiff", b"x")], d.submission_zip)


def symlink_entry(d: SynthPaths, tmp: Path) -> Path:
    info = zipfile.ZipInfo("link.tiff")
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return raw_zip(tmp, [(info, b"/etc/passwd")], d.submission_zip)


def zip_bomb(d: SynthPaths, tmp: Path) -> Path:
    return raw_zip(tmp, [("padding.bin", bytes(8 << 20))], d.submission_zip)


def replaced_tiff(d: SynthPaths, tmp: Path, data: bytes) -> Path:
    return rewrite_zip(d.submission_zip, tmp / "bad.zip",
                       replace={first_image(d)["seg_filename"]: data})


def tiff_too_many_layers(d: SynthPaths, tmp: Path) -> Path:
    return replaced_tiff(d, tmp, tiff_bytes(np.zeros((10_001, 1, 1), dtype=np.uint8)))


def tiff_wrong_size(d: SynthPaths, tmp: Path) -> Path:
    n = len(first_image(d)["annotation"])
    return replaced_tiff(d, tmp, tiff_bytes(np.zeros((n, H // 2, W // 2), dtype=np.uint8)))


def tiff_corrupt(d: SynthPaths, tmp: Path) -> Path:
    n = len(first_image(d)["annotation"])
    data = bytearray(tiff_bytes(np.random.default_rng(0).integers(0, 2, (n, H, W),
                                                                    dtype=np.uint8)))
    middle = len(data) // 2
    data[middle:middle + 256] = bytes(range(256))  # garbage inside the compressed strips
    return replaced_tiff(d, tmp, bytes(data))


def tiff_cut_page_chain(d: SynthPaths, tmp: Path) -> Path:
    """The first page's next-page offset zeroed: tifffile logs a warning, finds one layer."""
    n = len(first_image(d)["annotation"])
    data = bytearray(tiff_bytes(np.ones((n, H, W), dtype=np.uint8)))
    ifd = struct.unpack_from("<I", data, 4)[0]
    struct.pack_into("<I", data, ifd + 2 + 12 * struct.unpack_from("<H", data, ifd)[0], 0)
    return replaced_tiff(d, tmp, bytes(data))


def wrong_types(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"][0]["annotation"][1]["category"] = "dog"
    return edited_zip(d, tmp, edit)


def nan_box(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"][0]["annotation"][2]["bbox"][0] = math.nan
    return edited_json(d, tmp, edit)


def index_out_of_range(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"][0]["triplets"][3] = [0, len(doc["images"][0]["annotation"]) + 5, 1]
    return edited_zip(d, tmp, edit)


def subject_is_object(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"][0]["ng_triplets"][4] = [2, 2, 7]
    return edited_zip(d, tmp, edit)


def unknown_image_id(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"][0]["id"] = "no-such-image"
    return edited_zip(d, tmp, edit)


def duplicate_image_id(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["images"].append(copy.deepcopy(doc["images"][0]))
    return edited_zip(d, tmp, edit)


def wrong_version(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        doc["version"] = 3
    return edited_zip(d, tmp, edit)


def several_spellings(d: SynthPaths, tmp: Path) -> Path:
    def edit(doc: dict) -> None:
        img = doc["images"][0]
        img["categories"] = [a["category"] for a in img["annotation"]]
        img["bboxes"] = [a["bbox"] for a in img["annotation"]]
    return edited_json(d, tmp, edit)


def deep_json(d: SynthPaths, tmp: Path) -> Path:
    path = tmp / "bad.json"
    path.write_text('{"version": 1, "images": [{"id": 1, "x": ' + "[" * 100 + "]" * 100 + "}]}")
    return path


def missing_tiff(d: SynthPaths, tmp: Path) -> Path:
    return rewrite_zip(d.submission_zip, tmp / "bad.zip", drop=(first_image(d)["seg_filename"],))


@dataclass(frozen=True)
class Broken:
    build: Callable[[SynthPaths, Path], Path]
    fragments: tuple[str, ...]
    with_gt: bool = False


CORPUS = {
    "truncated zip": Broken(truncated_zip, ("bad.zip: not a readable ZIP",)),
    "zip without triplets.json": Broken(
        zip_without_triplets, ("bad.zip:triplets.json: missing from the archive",)),
    "path traversal": Broken(traversal_entry, (
        "bad.zip:../../evil.tiff: unsafe entry name: path leaving the archive root (..)",)),
    "absolute path": Broken(absolute_entry, ("/etc/evil.tiff: unsafe entry name: absolute",)),
    "drive letter": Broken(drive_letter_entry, ("unsafe entry name: path with a drive letter",)),
    "symlink": Broken(symlink_entry, ("bad.zip:link.tiff: is a symbolic link",)),
    "zip bomb": Broken(zip_bomb, ("bad.zip:padding.bin: expands", "max_ratio")),
    "too many TIFF layers": Broken(tiff_too_many_layers, (
        "TIFF has 10001 layers", "seg_filename", "--limit max_tiff_layers")),
    "TIFF of the wrong size": Broken(tiff_wrong_size, (
        "seg_filename: masks are 64x48 (expected 128x96 as the GT image)",), with_gt=True),
    "corrupt TIFF": Broken(tiff_corrupt, ("seg_filename: not a readable TIFF",)),
    "TIFF page chain cut": Broken(tiff_cut_page_chain, (
        "seg_filename: TIFF has 1 layers but the image has",)),
    "wrong JSON type": Broken(wrong_types, (
        'triplets.json: image', 'annotation[1].category: "dog" is not an integer')),
    "NaN box": Broken(nan_box, ("annotation[2].bbox: [NaN,", "is not a box",
                                "(expected [x1, y1, x2, y2], finite, x2 >= x1, y2 >= y1)")),
    "index out of range": Broken(index_out_of_range, (
        "triplets[3]: instance index out of range",)),
    "subject = object": Broken(subject_is_object, (
        "ng_triplets[4]: subject equals object in [2, 2, 7]",)),
    "unknown image id": Broken(unknown_image_id, (
        "image no-such-image: id: image id not in the ground truth's test split",),
                               with_gt=True),
    "duplicate image id": Broken(duplicate_image_id, (": id: duplicate image id",)),
    "wrong version": Broken(wrong_version, (
        "triplets.json: version: 3 is not supported (expected 1 or 2, the file format version)",)),
    "several instance spellings": Broken(several_spellings, (
        "instances: several instance spellings: bboxes + categories, annotation",)),
    "JSON nested too deeply": Broken(deep_json, ("bad.json: JSON nested too deeply",)),
    "TIFF missing from the ZIP": Broken(missing_tiff, (
        "missing from the archive", "seg_filename")),
}


@pytest.mark.parametrize("name", list(CORPUS))
def test_convert_refuses_broken_input(name, dataset, stores, tmp_path):
    case = CORPUS[name]
    bad = case.build(dataset, tmp_path)
    out = tmp_path / "store"
    gt = ("--gt", stores.gt) if case.with_gt else ()
    line = error_line(convert_cli(bad, out, *gt))
    for fragment in case.fragments:
        assert fragment in line, line
    assert not out.exists(), "a store was left behind"


@pytest.mark.parametrize("name", list(CORPUS))
def test_validate_reports_broken_input(name, dataset, stores, tmp_path):
    case = CORPUS[name]
    bad = case.build(dataset, tmp_path)
    problems = validate_submission(str(bad), stores.gt if case.with_gt else None)
    errors = [p.render("cli") for p in problems if p.is_error]  # as `sgdask validate` prints
    assert errors, problems
    assert all(f in errors[0] for f in case.fragments), errors
    assert not any("--limit" in str(p) for p in problems)  # Python's rendering: no flags


def test_validate_lists_every_problem(dataset, stores, tmp_path):
    """Problems in several images are all listed, one per line, up to --max-problems."""
    def edit(doc: dict) -> None:
        doc["images"][0]["triplets"][0] = [0, 0, 1]
        doc["images"][1]["annotation"][0]["bbox"] = [5, 5, 1, 1]
        doc["images"][2]["id"] = "no-such-image"

    bad = edited_zip(dataset, tmp_path, edit)
    proc = run_cli("validate", str(bad), "--gt", stores.gt, env=COLUMNS)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, proc.stdout
    assert "triplets[0]: subject equals object" in errors[0]
    assert "annotation[0].bbox: [5, 5, 1, 1] is not a box" in errors[1]
    assert "image no-such-image: id: image id not in the ground truth" in errors[2]
    assert "3 error(s)" in proc.stderr
    limited = run_cli("validate", str(bad), "--gt", stores.gt, "--max-problems", "2", env=COLUMNS)
    assert limited.returncode == 2
    assert len(limited.stdout.splitlines()) == 2
    assert "stopped at --max-problems" in limited.stderr


def test_validate_clean_submission_warns_about_missing_images(dataset, stores):
    """The dataset leaves some GT images without prediction: a warning, exit code 0."""
    proc = run_cli("validate", str(dataset.submission_zip), "--gt", stores.gt, env=COLUMNS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), proc.stdout
    assert "evaluated GT images have no prediction and will score 0" in lines[0]
    assert "0 error(s), 1 warning(s)" in proc.stderr
    assert run_cli("validate", str(dataset.submission_boxes), env=COLUMNS).returncode == 0


def test_limits_can_be_raised_and_lowered(dataset, tmp_path):
    """A limit given with --limit applies; an unknown limit is a one-line error."""
    tiny = convert_cli(dataset.submission_zip, tmp_path / "a", "--limit", "max_json_size=1KiB")
    assert "triplets.json: is" in error_line(tiny) and "max_json_size" in error_line(tiny)
    few = run_cli("validate", str(dataset.submission_zip), "--limit", "max_entries=5", env=COLUMNS)
    assert few.returncode == 2 and "entries (expected at most 5" in few.stdout
    bomb = zip_bomb(dataset, tmp_path)
    assert run_cli("validate", str(bomb), "--limit", "max_ratio=1e6", env=COLUMNS).returncode == 0
    unknown = run_cli("validate", str(bomb), "--limit", "max_fun=3", env=COLUMNS)
    assert "--limit: unknown limit 'max_fun'" in error_line(unknown)


def test_limit_values_parse():
    limits = ArchiveLimits.from_pairs(["max_total_size=2GiB", "max-ratio=5e3",
                                       "max_json_size=1.5MB"])
    assert limits.max_total_size == 2 << 30
    assert limits.max_ratio == 5000.0
    assert limits.max_json_size == 1_500_000
    assert limits.max_entries == ArchiveLimits().max_entries


def test_messages_stay_one_printable_line(dataset, tmp_path):
    """Control characters in entry names and image ids are escaped, never printed raw."""
    bad = raw_zip(tmp_path, [("../x\n\x1b[2Jevil", b"x")], dataset.submission_zip)
    problems = validate_submission(str(bad))
    assert "../x\\n\\x1b[2Jevil: unsafe entry name" in str(problems[0])

    def edit(doc: dict) -> None:
        doc["images"][1]["id"] = "a\nsgdask: error: b"

    problems = validate_submission(str(edited_zip(dataset, tmp_path, edit)))
    assert str(problems[0]).endswith(
        'images[1].id: "a\\nsgdask: error: b" is not an image id '
        "(expected a printable string or an integer)")
    assert all(str(p).isprintable() for p in problems)


def test_parse_submission_raises_the_first_problem(dataset):
    doc = zip_doc(dataset)
    images, has_ng = parse_submission(doc, "t.json", masks=True)
    assert len(images) == len(doc["images"]) and has_ng
    assert images[0].seg_filename == doc["images"][0]["seg_filename"]
    doc["images"][3]["triplets"][0] = [1, 1, 0]
    doc["images"][5]["triplets"][0] = [2, 2, 0]
    with pytest.raises(InputError, match=r"image \S+: triplets\[0\]: subject equals object"):
        parse_submission(doc, "t.json", masks=True)


def test_recursion_bomb_json(tmp_path):
    """Deeper than Python's own recursion limit: still one InputError."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    problems = validate_submission(str(path))
    assert len(problems) == 1 and "JSON nested too deeply" in str(problems[0])


def test_debug_shows_traceback(dataset, tmp_path):
    proc = convert_cli(zip_bomb(dataset, tmp_path), tmp_path / "s", "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "InputError" in proc.stderr


def test_convert_help_lists_in_process_and_limit():
    proc = run_cli("convert", "--help", env=COLUMNS)
    assert proc.returncode == 0
    assert "--in-process" in proc.stdout and "--limit" in proc.stdout


# --------------------------------------------------------------------------- valid edge cases


def test_empty_triplet_lists_are_valid(dataset, stores, tmp_path, client):
    from sgdask.pipeline import evaluate

    def edit(doc: dict) -> None:
        for img in doc["images"]:
            img["triplets"], img["ng_triplets"], img["scores"] = [], [], []

    path = edited_zip(dataset, tmp_path, edit)
    assert validate_submission(str(path)) == []
    out = tmp_path / "store"
    proc = convert_cli(path, out, "--gt", stores.gt)
    assert proc.returncode == 0, proc.stderr
    report = evaluate(stores.gt, str(out), client=client)
    assert report.metrics["R@50"] == 0


@pytest.mark.filterwarnings("ignore:.*writing zero-size array:UserWarning")
@pytest.mark.parametrize("with_tiff", [False, True])
def test_image_without_instances_is_valid(dataset, stores, tmp_path, with_tiff, client):
    """No instances: no TIFF needed, or a TIFF of zero layers."""
    from sgdask.pipeline import evaluate

    image = first_image(dataset)

    def edit(doc: dict) -> None:
        img = doc["images"][0]
        img["annotation"], img["triplets"], img["ng_triplets"], img["scores"] = [], [], [], []
        if not with_tiff:
            del img["seg_filename"]

    replace = {image["seg_filename"]: tiff_bytes(np.zeros((0, H, W), dtype=np.uint8))}
    path = rewrite_zip(dataset.submission_zip, tmp_path / "zero.zip", edit,
                       replace=replace if with_tiff else None,
                       drop=() if with_tiff else (image["seg_filename"],))
    assert [p for p in validate_submission(str(path), stores.gt) if p.is_error] == []
    out = tmp_path / "store"
    proc = convert_cli(path, out, "--gt", stores.gt)
    assert proc.returncode == 0, proc.stderr
    report = evaluate(stores.gt, str(out), client=client)
    row = next(r for r in report.per_image if r["image_id"] == str(image["id"]))
    assert row.get("R@50", 0) in (0, None)


# --------------------------------------------------------------------------- interrupted


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory) -> SynthPaths:
    """Large enough that a conversion takes a while: 60 images of 240x320."""
    return write_dataset(tmp_path_factory.mktemp("big"), n_images=60, seed=3, height=240,
                         width=320)


def killed_midway(cmd: list[str], started: Callable[[], bool]) -> bool:
    """Run ``cmd``, SIGKILL it as soon as ``started()``; whether it died before finishing."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not started() and proc.poll() is None:
            assert time.monotonic() < deadline, "the conversion never started writing"
            time.sleep(0.005)
        proc.kill()
    finally:
        proc.wait()
    return proc.returncode == -signal.SIGKILL


def convert_cmd(submission: Path, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sgdask", "convert", str(submission), "--out", out,
            "--in-process", *extra]


@pytest.mark.slow
def test_killed_convert_leaves_no_valid_store(big_dataset, stores, tmp_path):
    """SIGKILL mid-conversion: what is left is refused by evaluate; --overwrite then works."""
    out = tmp_path / "store"
    cmd = convert_cmd(big_dataset.submission_zip, str(out))
    # a (rare) conversion faster than the kill is tried again, over its complete store
    assert any(killed_midway(cmd + ["--overwrite"] * attempt, (out / "masks").exists)
               for attempt in range(3))
    assert out.exists() and not (out / "manifest.json").exists()
    refused = run_cli("evaluate", "--gt", stores.gt, "--pred", str(out), env=COLUMNS)
    assert "not a complete sgdask store" in error_line(refused)
    again = convert_cli(big_dataset.submission_zip, out, "--overwrite")
    assert again.returncode == 0, again.stderr
    assert (out / "manifest.json").exists()


@pytest.mark.slow
def test_killed_convert_to_s3_leaves_no_valid_store(big_dataset, stores, s3):
    options, fs = s3.cli_options(), s3.fs
    out, key = s3.url("killed", "store"), f"{BUCKET}/killed/store"

    def started() -> bool:
        fs.invalidate_cache()
        return bool(fs.find(key))

    cmd = convert_cmd(big_dataset.submission_zip, out, *options)
    assert any(killed_midway(cmd + ["--overwrite"] * attempt, started)
               for attempt in range(3))
    fs.invalidate_cache()
    assert fs.find(key) and not fs.exists(f"{key}/manifest.json")
    refused = run_cli("evaluate", "--gt", stores.gt, "--pred", out, *options, env=COLUMNS)
    assert "not a complete sgdask store" in error_line(refused)
    again = run_cli("convert", str(big_dataset.submission_zip), "--out", out, "--in-process",
                    "--overwrite", *options, env=COLUMNS)
    assert again.returncode == 0, again.stderr
    fs.invalidate_cache()
    assert fs.exists(f"{key}/manifest.json")


# --------------------------------------------------------------------------- schemas


def schema(name: str) -> Callable[[object], object]:
    return fastjsonschema.compile(json.loads((SCHEMAS / name).read_text()))


def test_sgbench_schema_file_is_the_readers_schema():
    assert json.loads((SCHEMAS / "sgbench.schema.json").read_text()) == SCHEMA


def test_submissions_match_the_sgbench_schema(dataset):
    check = schema("sgbench.schema.json")
    check(zip_doc(dataset))
    check(json.loads(dataset.submission_boxes.read_bytes()))
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        check({"version": 1, "images": [{"id": 1, "triplets": []}]})


def test_store_manifests_match_their_schema(stores):
    check = schema("store-manifest.schema.json")
    for url in (stores.gt, stores.pred, stores.gt_boxes, stores.pred_boxes):
        check(json.loads((Path(url) / "manifest.json").read_text()))


def test_metrics_and_protocol_delta_match_their_schemas(stores, client):
    from sgdask.pipeline import evaluate
    from sgdask.report.writers import protocol_delta

    reports = {p: evaluate(stores.gt, stores.pred, protocol=p, client=client)
               for p in ("singlempo", "sgbench")}
    for report in reports.values():
        schema("metrics.schema.json")(json.loads(report.to_json()))
    schema("protocol-delta.schema.json")(json.loads(json.dumps(protocol_delta(reports))))


def test_schema_index_lists_every_schema():
    index = (SCHEMAS / "README.md").read_text()
    for path in SCHEMAS.glob("*.schema.json"):
        assert path.name in index


def test_no_pickle_in_sgdask():
    """No pickle module, and numpy loads never allow pickles; the one exception is the
    restricted unpickler of model result files, which only subclasses pickle.Unpickler
    (with its own find_class) and never calls pickle.load."""
    restricted = ROOT / "sgdask" / "io" / "unpickle.py"
    # Action Genome ships its annotations as pickles: the generator writes them (pickle.dump
    # of plain dicts, never a load), as the dataset's toolkit does
    writers = {ROOT / "sgdask" / "testing" / "ag.py"}
    for path in (ROOT / "sgdask").rglob("*.py"):
        text = path.read_text()
        assert "cloudpickle" not in text and "allow_pickle=True" not in text, path
        if path == restricted:
            uses = set(re.findall(r"\bpickle\.\w+", text))
            assert uses <= {"pickle.Unpickler", "pickle.PickleBuffer"}, uses
            assert "def find_class" in text and "def persistent_load" in text
        elif path in writers:
            assert not re.findall(r"\bpickle\.(?!dumps?\b)\w+", text), path
        else:
            assert "import pickle" not in text, path


def test_zip_entries_are_read_with_a_hard_cap(tmp_path):
    """A member whose header claims fewer bytes than it holds cannot expand past the claim."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.bin", bytes(4096))
    data = bytearray(buf.getvalue())
    # central directory: uncompressed size of a.bin (offset 24 in its record) -> 100
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (100).to_bytes(4, "little")
    archive = SafeZip(io.BytesIO(bytes(data)), "lying.zip", ArchiveLimits())
    with pytest.raises(InputError, match=r"lying\.zip:a\.bin: cannot be read"):
        archive.read("a.bin")
