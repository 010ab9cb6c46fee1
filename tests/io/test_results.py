"""Model result files (`convert --method`) and SGBench file format version 2.

The reference is a literal implementation of the rules of SGBench's conversion scripts
(``conversion/convert.py`` and ``cvt_*.py`` in the SGBench repository), written here from
those scripts and sharing no code with sgdask: it writes the ZIP the scripts would write
(version 2, ``bboxes`` + ``categories``, ``ng_triplets``, one deflate TIFF per image). A
store made by ``--method`` from the same result objects must score exactly as that ZIP does
under every protocol, and as ``sgbench==1.0.0`` on the ZIP in the only form it reads
(version 1, ``annotation`` entries).
"""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import fastjsonschema
import numpy as np
import pyarrow.compute as pc
import pytest
import sgbench.file
import tifffile

from sgdask.cli import main
from sgdask.errors import InputError, SgdaskError, StoreError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.results import ResultsMethod, convert_results
from sgdask.formats.sgbench import convert_submission
from sgdask.io.unpickle import Refused, restricted_loads
from sgdask.pipeline import evaluate, evaluate_protocols
from sgdask.store.store import SELF_HASH, StoreReader, manifest_digest
from sgdask.testing.psg import SynthPaths, write_dataset
from tests.helpers import ROOT

pytestmark = pytest.mark.filterwarnings(
    # SGBench's scripts let tifffile store a 3-layer stack as planar RGB, as it still does
    "ignore:<tifffile.TiffWriter.write> data with shape:DeprecationWarning")

PROTOCOLS = "singlempo,sgbench,multimpo"
KS = "20,50,100,x1"
SGBENCH_METRICS = ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "InstR", "PRank")
N_CATEGORIES, N_PREDICATES = 133, 56
SCHEMAS = ROOT / "schemas"


class Result:
    """Stands for OpenPSG's Result class: defined only here, so sgdask cannot import it."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


# --------------------------------------------------------------------------- literal rules


def literal_pairing(psg: dict) -> list:
    """SGBench's pairing: the test images with at least one relation, in `data` order."""
    return [x["image_id"] for x in psg["data"]
            if x["image_id"] in psg["test_image_ids"] and len(x["relations"]) > 0]


def literal_softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def literal_item(method: str, r: Result, image_id, seg_filename: str) -> dict:
    """One image entry as cvt_psgtr / cvt_pairnet / cvt_openpsg_2stage write it."""
    boxes = r.refine_bboxes if method == "pairnet" else r.refine_bboxes[:, :4]
    bboxes = boxes.tolist()
    categories = (r.labels - 1).tolist()
    predicate_scores = r.rel_dists[:, 1:]
    n_predicates = predicate_scores.shape[1]
    if method == "2stage":
        triplets = r.rels.copy()
        triplets[:, 2] -= 1
        node = literal_softmax(r.refine_scores)[:, 1:].max(1)
        cell_scores = predicate_scores * node[r.rel_pair_idxes].prod(1)[:, None]
    else:
        triplets = np.concatenate(
            (r.rel_pair_idxes, predicate_scores.argmax(1)[:, None]), axis=1)
        cell_scores = predicate_scores
    order = cell_scores.flatten().argsort()[::-1]
    ng = np.concatenate((r.rel_pair_idxes[order // n_predicates],
                         (order % n_predicates)[:, None]), axis=1)
    return {"id": image_id, "seg_filename": seg_filename, "bboxes": bboxes,
            "categories": categories, "triplets": triplets.tolist(), "ng_triplets": ng.tolist()}


def literal_zip(method: str, results: list, ids: list, path: Path, *, version: int = 2,
                annotation: bool = False, scores: bool = False) -> Path:
    """The ZIP SGBench's convert.py writes; ``annotation`` re-spells the instances as
    sgbench 1.0.0 reads them (optionally with each box's score as the instance score)."""
    images = []
    with zipfile.ZipFile(path, "w") as archive:
        for i, (r, image_id) in enumerate(zip(results, ids, strict=True)):
            item = literal_item(method, r, image_id, f"{i}.tiff")
            buffer = io.BytesIO()
            tifffile.imwrite(buffer, r.masks.astype(np.uint8), compression="deflate")
            archive.writestr(f"{i}.tiff", buffer.getvalue())
            if annotation:
                item["annotation"] = [
                    {"bbox": b[:4], "category": c, **({"score": b[4]} if scores else {})}
                    for b, c in zip(r.refine_bboxes.tolist(), item.pop("categories"),
                                    strict=True)]
                del item["bboxes"]
            images.append(item)
        archive.writestr("triplets.json", json.dumps({"version": version, "images": images}))
    return path


# --------------------------------------------------------------------------- generated results


def submission_images(data: SynthPaths) -> dict[str, tuple[dict, np.ndarray]]:
    """The synthetic submission's images (entry, boolean masks) by id: realistic masks."""
    out = {}
    with zipfile.ZipFile(data.submission_zip) as z:
        for img in json.loads(z.read("triplets.json"))["images"]:
            masks = tifffile.imread(io.BytesIO(z.read(img["seg_filename"])))
            out[img["id"]] = img, masks.reshape(-1, *masks.shape[-2:]).astype(bool)
    return out


def generated_result(rng: np.random.Generator, two_stage: bool, shape: tuple[int, int],
                     known: tuple[dict, np.ndarray] | None, mask_dtype: type) -> Result:
    """A result object like an OpenPSG-family model writes, from the synthetic submission's
    instances and graph list where it has the image (random instances elsewhere)."""
    h, w = shape
    if known is not None and len(known[0]["annotation"]) >= 2:
        img, masks = known
        labels = np.array([a["category"] + 1 for a in img["annotation"]])
        boxes = np.array([a["bbox"] for a in img["annotation"]], dtype=np.float32)
        wanted = [t for t in img["triplets"] if t[0] != t[1]][:30]
    else:
        masks = np.zeros((3, h, w), dtype=bool)
        for m in masks:
            y, x = rng.integers(0, h // 2), rng.integers(0, w // 2)
            m[y:y + h // 2, x:x + w // 2] = True
        labels = rng.integers(1, N_CATEGORIES + 1, size=3)
        boxes = np.array([[0, 0, w / 2, h / 2]] * 3, dtype=np.float32)
        wanted = [[0, 1, int(rng.integers(N_PREDICATES))], [2, 0, 5]]
    n = len(labels)
    extra = [[int(s), int(o), 0] for s, o in rng.integers(0, n, size=(8, 2)) if s != o]
    pairs = np.array([t[:2] for t in wanted + extra], dtype=np.int32)
    dists = rng.dirichlet(np.ones(N_PREDICATES + 1), size=len(pairs)).astype(np.float32)
    for row, t in enumerate(wanted):
        dists[row, 1 + t[2]] += np.float32(0.5)
    scores = rng.uniform(0.05, 1.0, size=(n, 1)).astype(np.float32)
    fields = dict(masks=masks.astype(mask_dtype) * mask_dtype(255 if mask_dtype is np.uint8
                                                              else 1),
                  labels=labels, refine_bboxes=np.concatenate([boxes[:, :4], scores], axis=1),
                  rel_pair_idxes=pairs, rel_dists=dists, rel_labels=dists[:, 1:].argmax(1) + 1)
    if two_stage:
        fields["refine_scores"] = rng.normal(size=(n, N_CATEGORIES + 1)).astype(np.float32)
        order = rng.permutation(len(pairs))
        fields["rels"] = np.concatenate(
            [pairs[order], dists[order, 1:].argmax(1)[:, None] + 1], axis=1).astype(np.int64)
    return Result(**fields)


@dataclass(frozen=True)
class Family:
    method: str
    results: list
    ids: list
    pickle: Path


@dataclass(frozen=True)
class Lab:
    """A small PSG-shaped dataset and its GT store (every predicate occurs: sgbench's mR)."""

    data: SynthPaths
    psg: dict
    gt: str


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    root = tmp_path_factory.mktemp("lab")
    data = write_dataset(root / "data", n_images=12, seed=11, height=64, width=96,
                         no_relation_fraction=0.1)
    ingest_gt(str(data.psg_json), str(root / "gt"), str(data.masks_dir), partition_size=4)
    return Lab(data, json.loads(data.psg_json.read_text()), str(root / "gt"))


def make_family(method: str, lab: Lab, root: Path, seed: int) -> Family:
    rng = np.random.default_rng(seed)
    psg = lab.psg
    known = submission_images(lab.data)
    sizes = {x["image_id"]: (x["height"], x["width"]) for x in psg["data"]}
    ids = literal_pairing(psg)
    dtypes = (bool, np.uint8, np.int64)
    results = [generated_result(rng, method == "2stage", sizes[i], known.get(i),
                                dtypes[k % len(dtypes)])
               for k, i in enumerate(ids)]
    # one image whose model proposed no pair at all
    results[1].rel_pair_idxes = np.empty((0, 2), dtype=np.int64)
    results[1].rel_dists = np.empty((0, N_PREDICATES + 1), dtype=np.float32)
    if method == "2stage":
        results[1].rels = np.empty((0, 3), dtype=np.int64)
    path = root / f"{method}.pkl"
    # mmcv.dump, which OpenPSG's test script uses, pickles with protocol 2
    path.write_bytes(pickle.dumps(results, protocol=2 if method == "psgtr" else 5))
    return Family(method, results, ids, path)


@pytest.fixture(scope="module", params=["psgtr", "pairnet", "2stage"])
def family(request, lab, tmp_path_factory) -> Family:
    seed = {"psgtr": 1, "pairnet": 2, "2stage": 3}[request.param]
    return make_family(request.param, lab, tmp_path_factory.mktemp("results"), seed)


def schema(name: str):
    return fastjsonschema.compile(json.loads((SCHEMAS / name).read_text()))


def comparable(report) -> dict:
    """Everything a report computes (not its provenance)."""
    return {"metrics": report.metrics, "per_predicate": report.per_predicate,
            "per_image": report.per_image, "diagnostics": report.diagnostics,
            "left_out": report.left_out}


# --------------------------------------------------------------------------- equality


def test_method_store_scores_as_the_converted_zip(family, lab, client, tmp_path):
    """Every protocol: the store from --method equals, to the last bit, the store of the
    ZIP SGBench's scripts would write; sgbench 1.0.0 on that ZIP (as version 1 with
    `annotation` entries) agrees under --protocol sgbench."""
    method_store, zip_store = str(tmp_path / "method"), str(tmp_path / "zip")
    manifest = convert_results(str(family.pickle), method_store, lab.gt, family.method,
                               cluster=client)
    assert manifest["method"] == family.method and manifest["instance_scores"] is False
    assert manifest["n_images"] == len(family.ids) and manifest["instances"] == "masks"
    v2 = literal_zip(family.method, family.results, family.ids, tmp_path / "v2.zip")
    convert_submission(str(v2), zip_store, lab.gt)

    from_method = evaluate_protocols(lab.gt, method_store, PROTOCOLS, ks=KS, client=client)
    from_zip = evaluate_protocols(lab.gt, zip_store, PROTOCOLS, ks=KS, client=client)
    for protocol in PROTOCOLS.split(","):
        assert comparable(from_method[protocol]) == comparable(from_zip[protocol]), protocol
    assert from_method["singlempo"].metrics["R@50"] > 0.2  # the data has real hits
    assert from_method["sgbench"].provenance["submission"]["method"] == family.method

    v1 = literal_zip(family.method, family.results, family.ids, tmp_path / "v1.zip",
                     version=1, annotation=True)
    reference = sgbench.file.evaluate(anno_path=str(lab.data.psg_json), pred_path=str(v1),
                                      gt_seg_dir=str(lab.data.masks_dir), workers=0)
    for metric in SGBENCH_METRICS:
        assert from_method["sgbench"].metrics[metric] == pytest.approx(
            float(reference[metric]), abs=1e-9), metric


def test_one_stage_method_names_share_the_rules(lab, tmp_path):
    """psgformer and hilo are converted by SGBench's psgtr script: same store content."""
    fam = make_family("psgtr", lab, tmp_path, seed=4)
    stores_by_method = {}
    for method in ("psgtr", "psgformer", "hilo"):
        url = str(tmp_path / method)
        convert_results(str(fam.pickle), url, lab.gt, method)
        stores_by_method[method] = StoreReader(url)
    tables = {m: [r.table(t, [p["name"] for p in r.parts]) for t in ("instances", "triplets")]
              for m, r in stores_by_method.items()}
    assert tables["psgtr"] == tables["psgformer"] == tables["hilo"]


def test_npz_directory_gives_the_pickles_store(lab, tmp_path):
    """The per-image .npz form (paired in numeric file order) makes the same store."""
    fam = make_family("2stage", lab, tmp_path, seed=5)
    folder = tmp_path / "npz"
    folder.mkdir()
    for i, r in enumerate(fam.results):
        np.savez_compressed(folder / f"{i}.npz", **vars(r))
    (folder / "notes.txt").write_text("not a result")  # other files are ignored
    from_pickle, from_npz = str(tmp_path / "p"), str(tmp_path / "n")
    convert_results(str(fam.pickle), from_pickle, lab.gt, "2stage")
    manifest = convert_results(str(folder), from_npz, lab.gt, "2stage")
    a, b = StoreReader(from_pickle), StoreReader(from_npz)
    assert manifest["content_hash"] != a.manifest["content_hash"]
    parts = [p["name"] for p in a.parts]
    for table in ("instances", "triplets"):
        assert a.table(table, parts) == b.table(table, parts)
    images_a, images_b = a.table("images", parts), b.table("images", parts)
    assert images_a.drop(["source_file"]) == images_b.drop(["source_file"])
    assert images_b["source_file"].to_pylist()[0].endswith(".npz")
    for part in parts:
        assert (a.read_masks(part, 0, 1 << 30) == b.read_masks(part, 0, 1 << 30)).all()


def npz_folder(family: Family, folder: Path) -> Path:
    folder.mkdir()
    for i, r in enumerate(family.results):
        np.savez_compressed(folder / f"{i}.npz", **vars(r))
    return folder


def test_evaluate_with_method_is_convert_then_evaluate(lab, client, tmp_path, capsys,
                                                       monkeypatch):
    """`evaluate --pred RESULTS --method M` in one command: the metrics of `convert
    --method` + `evaluate`, with the method in the provenance; the temporary store is
    removed, --keep-store keeps it, and a problem is one line with no store left."""
    import tempfile

    fam = make_family("2stage", lab, tmp_path, seed=8)
    folder = npz_folder(fam, tmp_path / "npz")
    store = str(tmp_path / "converted")
    convert_results(str(folder), store, lab.gt, "2stage", cluster=client)
    expected = evaluate_protocols(lab.gt, store, PROTOCOLS, ks=KS, client=client)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    common = ("--gt", lab.gt, "--k", KS, "--protocol", PROTOCOLS, "--scheduler",
              client.scheduler.address)
    for keep in (None, tmp_path / "kept"):
        out = tmp_path / f"out-{keep is None}"
        code, err = run_main(capsys, "evaluate", "--pred", str(folder), "--method", "2stage",
                             *common, "--out", str(out),
                             *(("--keep-store", str(keep)) if keep else ()))
        assert code == 0, err
        for protocol in PROTOCOLS.split(","):
            written = json.loads((out / protocol / "metrics.json").read_text())
            assert written["metrics"] == expected[protocol].metrics, protocol
            assert written["provenance"]["submission"]["method"] == "2stage"
            assert written["provenance"]["submission"]["source"] == str(folder)
        assert list(scratch.iterdir()) == []  # the temporary store is gone
    kept = StoreReader(str(tmp_path / "kept"))
    assert kept.manifest["method"] == "2stage"
    assert kept.manifest["content_hash"] == StoreReader(store).manifest["content_hash"]

    (folder / "3.npz").write_bytes(b"not a zip")
    code, err = run_main(capsys, "evaluate", "--pred", str(folder), "--method", "2stage",
                         *common, "--keep-store", str(tmp_path / "bad"))
    refused(code, err, tmp_path / "bad", "3.npz")
    assert list(scratch.iterdir()) == []
    code, err = run_main(capsys, "evaluate", "--pred", str(folder), "--gt", lab.gt,
                         "--instance-scores")
    assert code == 2 and "--instance-scores: only with --method" in err


@pytest.mark.parametrize("form", ["pickle", "npz"])
def test_results_decoded_in_the_tasks_score_as_their_store(form, family, lab, client,
                                                           tmp_path):
    """`evaluate --method` without a store (each task decodes its images' results) gives
    the reports of `convert --method` + evaluating that store, under every protocol: the
    same metrics, per-predicate and per-image tables, diagnostics and provenance."""
    results = (str(family.pickle) if form == "pickle"
               else str(npz_folder(family, tmp_path / "npz")))
    store = str(tmp_path / "store")
    convert_results(results, store, lab.gt, family.method, cluster=client)
    literal = evaluate_protocols(lab.gt, store, PROTOCOLS, ks=KS, client=client)
    in_tasks = evaluate_protocols(lab.gt, results, PROTOCOLS, ks=KS, client=client,
                                  method=ResultsMethod(family.method))
    for protocol in PROTOCOLS.split(","):
        assert comparable(in_tasks[protocol]) == comparable(literal[protocol]), protocol
        assert (in_tasks[protocol].provenance["submission"]
                == literal[protocol].provenance["submission"]), protocol
    assert in_tasks["singlempo"].metrics["R@50"] > 0.2  # the data has real hits


def test_results_decoded_in_small_tasks_with_instance_scores(small, lab, client, tmp_path):
    """One image per task, instance scores kept: still the store's reports, and the
    content hash (made from digests the tasks return) is the store's."""
    folder = str(npz_folder(small, tmp_path / "npz"))
    store = str(tmp_path / "store")
    convert_results(folder, store, lab.gt, "psgtr", instance_scores=True)
    literal = evaluate_protocols(lab.gt, store, PROTOCOLS, ks=KS, client=client)
    in_tasks = evaluate_protocols(lab.gt, folder, PROTOCOLS, ks=KS, partition_size=1,
                                  client=client, method=ResultsMethod("psgtr", True))
    for protocol in PROTOCOLS.split(","):
        assert comparable(in_tasks[protocol]) == comparable(literal[protocol]), protocol
    assert in_tasks["singlempo"].provenance["submission"] == {
        "source": folder, "content_hash": StoreReader(store).manifest["content_hash"],
        "method": "psgtr", "instance_scores": True}


def corrupt_member(npz: Path, member: str) -> None:
    """Flip one byte of ``member``'s compressed data (the archive's directory stays valid,
    so only its CRC-32 or the inflater can tell)."""
    data = bytearray(npz.read_bytes())
    with zipfile.ZipFile(npz) as z:
        info = z.getinfo(member)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0x55
    npz.write_bytes(bytes(data))


@pytest.mark.parametrize("field, damage, fragments", [
    ("labels", lambda r: setattr(r, "labels", r.labels * 0), ("labels[0]: 0 out of range",)),
    ("masks", None, (".npz:masks.npy", "masks: cannot be read from the archive")),
])
def test_bad_result_decoded_in_a_task_is_one_line(field, damage, fragments, small, lab,
                                                  client, tmp_path, capsys):
    """A problem found by the task that decodes the image: one line naming the file, the
    image and the field, exit 2, and no report written."""
    results = pickle.loads(small.pickle.read_bytes())
    k = len(results) - 2
    if damage is not None:
        damage(results[k])
    folder = npz_folder(Family("psgtr", results, small.ids, small.pickle), tmp_path / "npz")
    if damage is None:
        corrupt_member(folder / f"{k}.npz", "masks.npy")
    code, err = run_main(capsys, "evaluate", "--pred", str(folder), "--method", "psgtr",
                         "--gt", lab.gt, "--k", KS, "--scheduler", client.scheduler.address,
                         "--out", str(tmp_path / "report"))
    refused(code, err, tmp_path / "report", f"/{k}.npz", f"image {small.ids[k]}: {field}",
            *fragments)


def test_instance_scores_order_the_merge(small, lab, client, tmp_path):
    """--instance-scores keeps refine_bboxes' score column: singlempo then scores as the
    ZIP whose instances carry those scores, and the report's provenance says so."""
    family = small
    store, zip_store = str(tmp_path / "scored"), str(tmp_path / "zip")
    convert_results(str(family.pickle), store, lab.gt, family.method, instance_scores=True)
    scored = literal_zip(family.method, family.results, family.ids, tmp_path / "s.zip",
                         annotation=True, scores=True)
    convert_submission(str(scored), zip_store, lab.gt)
    ours = evaluate(lab.gt, store, "singlempo", ks=KS, client=client)
    theirs = evaluate(lab.gt, zip_store, "singlempo", ks=KS, client=client)
    assert comparable(ours) == comparable(theirs)
    assert ours.provenance["submission"] == {
        "source": str(family.pickle), "content_hash": StoreReader(store).manifest[
            "content_hash"], "method": "psgtr", "instance_scores": True}
    schema("metrics.schema.json")(ours.summary())
    schema("store-manifest.schema.json")(StoreReader(store).manifest)
    convert_results(str(family.pickle), str(tmp_path / "plain"), lab.gt, family.method)
    plain = StoreReader(str(tmp_path / "plain")).manifest
    assert plain["instance_scores"] is False
    assert plain["content_hash"] != ours.provenance["submission"]["content_hash"]


# --------------------------------------------------------------------------- version 2


def test_version_2_box_file_scores_as_sgbench(dataset, stores, client, tmp_path):
    """A version 2 box file (what sgbench reads: `annotation` entries, ng_triplets):
    sgbench 1.0.0's numbers equal sgdask's under --protocol sgbench."""
    doc = json.loads(dataset.submission_boxes.read_text())
    doc["version"] = 2
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps(doc))
    reference = sgbench.file.evaluate(anno_path=str(dataset.psg_json), pred_path=str(v2),
                                      workers=0)
    store = str(tmp_path / "store")
    convert_submission(str(v2), store, stores.gt_boxes)
    report = evaluate(stores.gt_boxes, store, "sgbench", ks="20,50,100", client=client)
    for metric in SGBENCH_METRICS:
        assert report.metrics[metric] == pytest.approx(float(reference[metric]), abs=1e-9)


def test_version_2_zip_with_boxes_reads_like_version_1(dataset, stores, tmp_path):
    """The converter's spelling (bboxes + categories beside seg_filename) in a version 2
    ZIP makes the same store as the version 1 ZIP with `annotation` entries."""
    from tests.helpers import rewrite_zip

    def respell(doc):
        doc["version"] = 2
        for img in doc["images"]:
            ann = img.pop("annotation")
            img["bboxes"] = [a["bbox"] + [a["score"]] for a in ann]  # a 5th column is ignored
            img["categories"] = [a["category"] for a in ann]

    v2 = rewrite_zip(dataset.submission_zip, tmp_path / "v2.zip", respell)
    convert_submission(str(v2), str(tmp_path / "store"), stores.gt)
    a, b = StoreReader(stores.pred), StoreReader(str(tmp_path / "store"))
    parts = [p["name"] for p in a.parts]
    got = b.table("instances", parts)
    want = a.table("instances", parts)
    assert got.drop(["score"]) == want.drop(["score"])
    assert pc.all(pc.is_null(got["score"])).as_py()
    assert b.table("triplets", parts).drop(["score"]) == a.table("triplets", parts).drop(
        ["score"])


# --------------------------------------------------------------------------- bad input


def run_main(capsys, *args: str) -> tuple[int, str]:
    """`sgdask ARGS` in this process (the entry point's own error handling): (exit code,
    stderr)."""
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as done:
        code = int(done.code or 0)
    return code, capsys.readouterr().err


def refused(code: int, stderr: str, out: Path, *fragments: str) -> str:
    assert code == 2, stderr
    lines = [x for x in stderr.splitlines() if x.startswith("sgdask: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not out.exists(), "a store was left behind"
    return lines[0]


class Payload:
    """Runs a command when unpickled by a plain pickle.load."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os

        return os.system, (self.command,)


@pytest.fixture(scope="module")
def small(lab, tmp_path_factory) -> Family:
    return make_family("psgtr", lab, tmp_path_factory.mktemp("small"), seed=6)


def convert_args(path: Path, out: Path, gt: str) -> tuple[str, ...]:
    return ("convert", str(path), "--method", "psgtr", "--gt", gt, "--out", str(out),
            "--in-process")


def test_pickle_that_would_run_a_command_is_refused(small, lab, tmp_path):
    """Through the installed command, in its own process."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps([Payload(f"touch {marker}"), *small.results[1:]]))
    out = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "sgdask", *convert_args(evil, out, lab.gt)],
                          capture_output=True, text=True, timeout=300)
    line = refused(proc.returncode, proc.stderr, out, "evil.pkl", "system", "not allowed")
    assert f"touch {marker}" not in line
    assert not marker.exists()


def test_truncated_pickle(small, lab, tmp_path, capsys):
    cut = tmp_path / "cut.pkl"
    data = small.pickle.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "store"
    refused(*run_main(capsys, *convert_args(cut, out, lab.gt)), out,
            "cut.pkl: not a readable pickle")


def test_wrong_shapes(small, lab, tmp_path, capsys):
    results = pickle.loads(small.pickle.read_bytes())
    results[2].rel_dists = results[2].rel_dists[:, 1:]  # no background column
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps(results))
    out = tmp_path / "store"
    refused(*run_main(capsys, *convert_args(bad, out, lab.gt)), out, f"image {small.ids[2]}",
            "results[2].rel_dists: shape", "(expected (", f", {N_PREDICATES + 1})")
    results = pickle.loads(small.pickle.read_bytes())
    results[3].masks = results[3].masks[:, :-1]
    bad.write_bytes(pickle.dumps(results))
    refused(*run_main(capsys, *convert_args(bad, out, lab.gt)), out,
            "results[3].masks: masks are", "as the GT image")


def test_result_count_must_match_the_gt(small, lab, tmp_path, capsys):
    short = tmp_path / "short.pkl"
    short.write_bytes(pickle.dumps(small.results[:-1]))
    out = tmp_path / "store"
    refused(*run_main(capsys, *convert_args(short, out, lab.gt)), out,
            f"{len(small.ids) - 1} results for {len(small.ids)} GT test images",
            "psg.json's data order")


def test_torch_tensors_get_a_hint(lab, tmp_path, capsys):
    """What pickle.dump writes for a torch tensor (torch itself is not needed to refuse it)."""
    tensor = tmp_path / "tensor.pkl"
    tensor.write_bytes(b"\x80\x02]q\x00ctorch._utils\n_rebuild_tensor_v2\nq\x01)Rq\x02a.")
    out = tmp_path / "store"
    refused(*run_main(capsys, *convert_args(tensor, out, lab.gt)), out, "torch tensors",
            "torch._utils._rebuild_tensor_v2", ".cpu().numpy()")


def test_method_options(lab, small, tmp_path, capsys):
    out = tmp_path / "store"
    refused(*run_main(capsys, "convert", str(small.pickle), "--method", "motifs", "--gt",
                      lab.gt, "--out", str(out)), out, "--method: 'motifs'", "2stage")
    refused(*run_main(capsys, "convert", str(small.pickle), "--method", "psgtr", "--out",
                      str(out)), out, "--method needs --gt")


def test_gt_store_without_image_order(lab, small, tmp_path):
    old = tmp_path / "old-gt"
    shutil.copytree(lab.gt, old)
    manifest = json.loads((old / "manifest.json").read_text())
    name = manifest.pop("image_order")
    (old / name).unlink()  # a store written before the image order existed
    del manifest["files"][name]
    manifest[SELF_HASH] = manifest_digest(manifest)
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"does not record psg\.json's image order"):
        convert_results(str(small.pickle), str(tmp_path / "s"), str(old), "psgtr")
    assert not (tmp_path / "s").exists()


def test_problem_in_a_later_part_leaves_no_store(small, lab, client, tmp_path):
    """Found by a task on the cluster: one line, the store removed after every task ends."""
    results = pickle.loads(small.pickle.read_bytes())
    results[-1].labels = results[-1].labels * 0
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(pickle.dumps(results))
    with pytest.raises(InputError, match=r"labels\[0\]: 0 out of range \(expected 1\.\.133"):
        convert_results(str(bad), str(tmp_path / "s"), lab.gt, "psgtr", cluster=client)
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- unpickler


def test_every_protocol_round_trips():
    arrays = dict(a=np.arange(6, dtype=">i4").reshape(2, 3), b=np.zeros((0, 2), np.int64),
                  c=np.asfortranarray(np.eye(3, dtype=np.float32)), d=np.array([True, False]),
                  e=np.float32(1.5), f=[np.uint8(3), (np.int16(-2),)])
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        out = restricted_loads(pickle.dumps([Result(**arrays)], protocol=protocol))
        got = out[0].fields
        for name in "abcd":
            np.testing.assert_array_equal(got[name], arrays[name])
            assert got[name].dtype == arrays[name].dtype
        assert got["e"] == np.float32(1.5) and got["e"].dtype == np.float32
        assert got["f"][0] == 3 and got["f"][1][0] == -2


@pytest.mark.parametrize("payload, fragment", [
    (np.array([1, "a"], dtype=object), "numpy dtype 'O"),
    (np.zeros(2, dtype=[("x", "f4")]), "dtype"),
    (eval, "builtins.eval"),
    (subprocess.Popen, "subprocess.Popen"),
    (np.ma.masked_array([1, 2]), "numpy.ma"),
])
def test_unpickler_refuses(payload, fragment):
    with pytest.raises(Refused, match=re.escape(fragment)):
        restricted_loads(pickle.dumps(Result(x=payload)))


def test_ndarray_cannot_be_called_with_a_huge_shape():
    crafted = b"\x80\x02cnumpy\nndarray\nq\x00J\x00\xe1\xf5\x05\x85q\x01Rq\x02."
    with pytest.raises(Refused, match=r"numpy\.ndarray called directly"):
        restricted_loads(crafted)


@pytest.mark.parametrize("crafted", [
    # BUILD with slot state {"__init__": _codecs.encode} on the numpy.ndarray stand-in
    b"\x80\x02cnumpy\nndarray\nN}X\x08\x00\x00\x00__init__c_codecs\nencode\ns\x86b.",
    # BUILD with a dict state on the _codecs.encode stand-in
    b"\x80\x02c_codecs\nencode\n}X\x03\x00\x00\x00fooK\x01sb.",
], ids=["class", "function"])
def test_one_pickle_cannot_change_how_the_next_is_read(crafted):
    with pytest.raises(Refused, match="sets"):
        restricted_loads(crafted)
    out = restricted_loads(pickle.dumps([Result(x=np.arange(3))], protocol=2))
    np.testing.assert_array_equal(out[0].fields["x"], np.arange(3))


def test_method_errors_are_sgdask_errors(small, lab, tmp_path):
    with pytest.raises(SgdaskError, match="not a method"):
        convert_results(str(small.pickle), str(tmp_path / "s"), lab.gt, "motifs")
