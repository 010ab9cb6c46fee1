"""Protocols plug in: a toy protocol defined in this one file registers itself (with a metric
family and an input of its own, a per-image hit function and a report note) and reaches the
console table, metrics.json, report.html and ``sgdask compare``, through the real command
line (in-process, a threaded local cluster) on the synthetic stores."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from typer.testing import CliRunner

from sgdask.cli import app
from sgdask.errors import Text
from sgdask.metrics import FAMILIES
from sgdask.metrics.base import IMAGE, Context, Family, Metric, Terms
from sgdask.protocols import PROTOCOLS, Protocol, get_protocol, register, unregister
from sgdask.types import ImageGT, ImageHits, ImagePred

NAME = "toyproto"
TOY_INPUT = "toy_first"


def top1_terms(hits: ImageHits, ctx: Context) -> Terms:
    """Top1: GT triplets hit by the graph list's first entry, over the image's GT triplets."""
    terms = Terms()
    terms.image["Top1"] = (int(np.count_nonzero(hits.graph_first == 0)), hits.n_gt_triplets)
    return terms


TOP1 = Family("toy_top1", (Metric("Top1", IMAGE, "GT triplets hit by the first graph entry",
                                  per_k=False, needs=(TOY_INPUT,)),), top1_terms)


@dataclass(frozen=True)
class ToyProtocol(Protocol):
    """multimpo's per-image rules (no normalization, triplet matching, means over the
    occurring predicates), a metric of its own (Top1), its own count of scored images and a
    note."""

    families: ClassVar[tuple[Family, ...]] = (TOP1,)
    needs: ClassVar[dict[str, Text]] = {TOY_INPUT: "not part of this protocol (toyproto)"}
    not_listed: ClassVar[frozenset[str]] = frozenset({TOY_INPUT})

    def image_hits(self, gt: ImageGT, pred: ImagePred, with_ng: bool = True,
                   match_labels: bool = True, shared: dict | None = None,
                   legacy: bool = True) -> ImageHits:
        hits = super().image_hits(gt, pred, with_ng, match_labels, shared, legacy)
        hits.diagnostics["toy_scored"] = 1
        return hits

    def inputs(self, with_ng: bool, has_stats: bool, legacy: bool,
               data: frozenset[str] = frozenset()) -> set[str]:
        return {*super().inputs(with_ng, has_stats, legacy, data), TOY_INPUT}

    def notes(self, absent: int) -> list[str]:
        return ["toyproto: a toy protocol of tests/test_protocol_plugin.py"]


TOY = ToyProtocol(name=NAME, version="0.1", normalization="none", matching="triplet",
                  missing_counts_in_means=True, prank_over_cells=False,
                  description="a toy protocol (tests)")


@pytest.fixture
def toy_protocol():
    register(TOY)
    yield TOY
    unregister(NAME)
    assert NAME not in PROTOCOLS and all(f.name != TOP1.name for f in FAMILIES)


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.timeout(600)
def test_toy_protocol_reaches_every_output(toy_protocol, stores, tmp_path):
    assert get_protocol(NAME) is TOY
    cluster = ("--threads", "--workers", "1")
    out = tmp_path / "out"
    table = cli("evaluate", "--gt", stores.gt_boxes, "--pred", stores.pred_boxes,
                "--protocol", f"{NAME},multimpo", "--out", str(out), *cluster)
    toy = json.loads((out / NAME / "metrics.json").read_text())
    legacy = json.loads((out / "multimpo" / "metrics.json").read_text())
    # the same per-image rules as multimpo: the same image-level numbers
    assert toy["metrics"]["R@50"] == legacy["metrics"]["R@50"] > 0
    assert 0 < toy["metrics"]["Top1"] <= toy["metrics"]["R@20"]
    assert "Top1" not in legacy["metrics"] and "Top1" not in json.dumps(legacy["left_out"])
    assert toy["protocol"]["name"] == NAME and toy["protocol"]["version"] == "0.1"
    assert toy["diagnostics"]["toy_scored"] > 0
    assert "toyproto: a toy protocol of tests/test_protocol_plugin.py" in toy["notes"]
    assert "Top1" in table and f"{100 * toy['metrics']['Top1']:.2f}" in table
    page = (out / "report.html").read_text()
    assert f"<h3>{NAME}</h3>" in page  # its own section, Top1 among its metrics
    assert f"Top1 {100 * toy['metrics']['Top1']:.2f}" in page
    other = tmp_path / "other"
    shutil.copytree(stores.pred_boxes, other)
    cli("compare", "--gt", stores.gt_boxes, stores.pred_boxes, str(other), "--protocol", NAME,
        "--resamples", "50", "--permutations", "50", "--out", str(tmp_path / "cmp"), *cluster)
    rows = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    details = json.loads((tmp_path / "cmp" / "comparison_details.json").read_text())
    assert details["settings"]["protocol"] == NAME
    row = next(r for r in rows if r["metric"] == "Top1")
    assert row["delta"] == 0 and row["p_value"] == 1
