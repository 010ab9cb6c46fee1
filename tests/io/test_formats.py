"""The format registry: a toy submission format defined in this one file (JSON lines of
boxes, labels and triplets) is recognised, validated, converted and evaluated through the
registry (CLI and API), with the numbers of the same submission given as SGBench JSON; the
triplet rule it uses is the one every reader shares."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from distributed import Client
from typer.testing import CliRunner

from sgdask.cli import app
from sgdask.errors import InputError, SgdaskError
from sgdask.formats.ingest import Decoded, convert_images
from sgdask.formats.sgbench import SubmissionImage
from sgdask.formats.validate import GTInfo, Problem
from sgdask.io.fs import filesystem
from sgdask.io.sources import Loaded
from sgdask.io.triplets import SUBMISSION as WORDING
from sgdask.io.triplets import row_problems
from sgdask.store.store import StoreReader
from sgdask.types import EMPTY_TRIPLETS

MAGIC = b'{"toy":'


def toy_images(url: str, options: Any) -> list[SubmissionImage]:
    """Every line of a toy file as an image (boxes, labels, triplets; no scores, no NG)."""
    fs, path = filesystem(url, options)
    with fs.open(path, "rb") as f:
        lines = [json.loads(line) for line in f.read().splitlines() if line.strip()]
    return [SubmissionImage(str(r["image"]), np.asarray(r["labels"], dtype=np.int64),
                            np.asarray(r["boxes"], dtype=np.float64).reshape(-1, 4), None,
                            np.asarray(r["triplets"], dtype=np.int64).reshape(-1, 3), None,
                            EMPTY_TRIPLETS.copy(), None) for r in lines]


def toy_problems(url: str, options: Any, gt: GTInfo | None) -> list[Problem]:
    problems = []
    for img in toy_images(url, options):
        if gt is not None and img.image_id not in gt.sizes:
            problems.append(Problem(InputError(url, "image id not in the ground truth's test "
                                               "split", image=img.image_id, field="image")))
            continue
        n_predicates = gt.classes.predicates if gt else None
        problems += [Problem(InputError(url, p.what, image=img.image_id,
                                        field=f"triplets[{p.row}]", expected=p.expected))
                     for p in row_problems(img.graph, len(img.categories), n_predicates,
                                           WORDING)]
    return problems


def toy_validate(url: str, gt: str | None, options: Any, limits: Any, max_problems: int
                 ) -> list[Problem]:
    info = GTInfo.of(StoreReader(gt, options, "gt")) if gt else None
    return toy_problems(url, options, info)[:max_problems]


def toy_convert(url: str, out: str, gt: str | None, options: Any, *, limits: Any = None,
                **kwargs: Any) -> dict[str, Any]:
    problems = toy_validate(url, gt, options, limits, 1)
    if problems:
        raise problems[0].error
    return convert_images(toy_images(url, options), out, gt, options, source=url,
                          has_ng=False, **kwargs)


@dataclass(frozen=True)
class ToySlice:
    """A partition's ids; the task reads them from the file."""

    url: str
    ids: tuple[str, ...]

    def read(self, options: Any) -> Loaded:
        wanted = set(self.ids)
        return Loaded({img.image_id: Decoded(img, (0, 0), None).prediction()
                       for img in toy_images(self.url, options) if img.image_id in wanted})


class ToyInput:
    keeps = False

    def __init__(self, url: str, options: Any, gt_info: GTInfo) -> None:
        problems = toy_problems(url, options, gt_info)
        if problems:
            raise problems[0].error
        self.url, self.options = url, options
        self.manifest = {"kind": "submission", "source": url, "has_ng": False,
                         "instances": "boxes", "content_hash": None}

    def ids(self) -> list[str]:
        return sorted(img.image_id for img in toy_images(self.url, self.options))

    def slice(self, ids: list[str]) -> ToySlice:
        return ToySlice(self.url, tuple(ids))

    def finish(self, digests: list) -> None:
        """Nothing to complete."""


def toy_format():
    from sgdask.formats import SUBMISSION, Format

    return Format(
        "toy", SUBMISSION, lambda head, name: head.startswith(MAGIC),
        ("boxes", "graph"), "tests/io/test_formats.py", toy_convert,
        lambda url, options, gt_reader, gt_info, limits, _: ToyInput(url, options, gt_info),
        toy_validate)


@pytest.fixture
def toy_registered():
    from sgdask.formats import register, unregister

    register(toy_format())
    yield
    unregister("toy")


def toy_and_sgbench(dataset, tmp_path, edit=None) -> tuple[str, str]:
    """The box submission as a toy file and as SGBench JSON with the same content (no
    scores, no NG list); ``edit(lines)`` changes both."""
    doc = json.loads(dataset.submission_boxes.read_text())
    lines = [{"toy": 1, "image": img["id"], "boxes": [a["bbox"] for a in img["annotation"]],
              "labels": [a["category"] for a in img["annotation"]],
              "triplets": img["triplets"]} for img in doc["images"]]
    if edit:
        edit(lines)
    toy, sgb = tmp_path / "pred.toyl", tmp_path / "pred.json"
    toy.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    sgb.write_text(json.dumps({"version": 1, "images": [
        {"id": line["image"], "triplets": line["triplets"],
         "annotation": [{"bbox": b, "category": c}
                        for b, c in zip(line["boxes"], line["labels"], strict=True)]}
        for line in lines]}))
    return str(toy), str(sgb)


def test_the_registry_recognises_each_format(toy_registered, dataset, tmp_path):
    from sgdask.formats import GT, PSG, SGBENCH, recognised, submission_format

    toy, sgb = toy_and_sgbench(dataset, tmp_path)
    assert submission_format(toy, None).name == "toy"
    assert submission_format(sgb, None).name == SGBENCH
    assert submission_format(str(dataset.submission_zip), None).name == SGBENCH
    assert submission_format(sgb, None, "openpsg").name == "results"
    assert recognised(str(dataset.psg_json), None, GT).name == PSG


def test_a_format_names_what_it_yields_from_the_known_list():
    from sgdask.formats import register

    with pytest.raises(SgdaskError, match="yields 'triples'"):
        register(dataclasses.replace(toy_format(), yields=("boxes", "triples")))


def test_toy_format_converts_validates_and_evaluates_like_sgbench_json(
        toy_registered, dataset, stores, tmp_path):
    from sgdask.pipeline import evaluate_protocols

    toy, sgb = toy_and_sgbench(dataset, tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["validate", toy, "--gt", stores.gt_boxes])
    assert result.exit_code == 0, result.output
    for name, given in (("toy_store", toy), ("sgb_store", sgb)):
        result = runner.invoke(app, ["convert", given, "--out", str(tmp_path / name),
                                     "--gt", stores.gt_boxes, "--in-process"])
        assert result.exit_code == 0, result.output
    toy_store = StoreReader(str(tmp_path / "toy_store"), None, "submission")
    assert toy_store.manifest["n_images"] == StoreReader(
        str(tmp_path / "sgb_store"), None, "submission").manifest["n_images"] > 0
    with Client(processes=False, n_workers=1, threads_per_worker=2,
                dashboard_address=":0") as client:
        runs = {name: evaluate_protocols(stores.gt_boxes, pred, "singlempo,sgbench",
                                         client=client)
                for name, pred in (("toy", toy), ("sgbench", sgb),
                                   ("toy_store", str(tmp_path / "toy_store")))}
    for protocol, report in runs["sgbench"].items():
        assert report.metrics["R@50"] > 0
        for name in ("toy", "toy_store"):
            assert runs[name][protocol].metrics == report.metrics
            assert runs[name][protocol].per_predicate == report.per_predicate


def test_toy_format_reports_triplet_problems_in_the_shared_words(
        toy_registered, dataset, stores, tmp_path):
    def break_first(lines):
        first = lines[0]
        n = len(first["labels"])
        first["triplets"] = [[0, 0, 1], [0, n, 1], [0, 1, 10_000], *first["triplets"]]

    toy, sgb = toy_and_sgbench(dataset, tmp_path, break_first)
    result = CliRunner().invoke(app, ["validate", toy, "--gt", stores.gt_boxes])
    assert result.exit_code == 2
    toy_lines = [line.split("]: ", 1)[1] for line in result.output.splitlines()
                 if line.startswith("error:")]
    result = CliRunner().invoke(app, ["validate", sgb, "--gt", stores.gt_boxes])
    sgb_lines = [line.split("]: ", 1)[1] for line in result.output.splitlines()
                 if line.startswith("error:")]
    assert len(toy_lines) == 3
    assert toy_lines[0] == ("subject equals object in [0, 0, 1] "
                            "(expected two different instances)")
    assert toy_lines[1].startswith("instance index out of range in [0, ")
    assert toy_lines[2].startswith("predicate 10000 out of range (expected 0..")
    assert toy_lines == sgb_lines  # the same words as SGBench JSON
    refused = CliRunner().invoke(app, ["convert", toy, "--out", str(tmp_path / "x"),
                                       "--gt", stores.gt_boxes, "--in-process"])
    assert isinstance(refused.exception, InputError)
    assert "subject equals object" in str(refused.exception)
    assert not (tmp_path / "x").exists()


def test_an_option_the_format_does_not_take_is_refused(toy_registered, dataset, stores,
                                                        tmp_path):
    toy, _ = toy_and_sgbench(dataset, tmp_path)
    refused = CliRunner().invoke(app, ["convert", toy, "--out", str(tmp_path / "x"),
                                       "--gt", stores.gt_boxes, "--in-process",
                                       "--from-scores", str(tmp_path / "scores.parquet")])
    assert isinstance(refused.exception, SgdaskError)
    assert str(refused.exception) == "from_scores: does not apply to toy files"
    assert not (tmp_path / "x").exists()
