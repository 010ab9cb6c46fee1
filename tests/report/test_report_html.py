"""The HTML report page: numbers, protocol deltas, embedded plots, escaping and writing."""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET

import fsspec
import numpy as np
import pytest

from sgdask.report import Report
from sgdask.report.html import fmt_delta, render_html, write_html

KS = ["20", "50", "100", "x1", "x10"]
SVG = re.compile(r'<svg role="img" aria-label="[^"]*".*?</svg>', re.DOTALL)
PREDICATES = [(0, "on", 120), (1, "<b>wearing</b>", 30), (2, "has", 80), (3, "in front of", 5)]


def make_report(name: str, recall: float, mean_recall: list[float], prank: float) -> Report:
    """A hand-made report: R@k = recall + 0.1 per k step, per-predicate mR@50 as given."""
    metrics = {"R@20": recall, "R@50": recall + 0.1, "R@100": recall + 0.2,
               "R@x1": recall + 0.05, "mR@20": 0.1, "mR@50": 0.15, "mR@100": 0.2,
               "ngR@50": recall + 0.15, "InstR": 0.9, "PRank": prank}
    per_predicate = [{"predicate": p, "name": label, "gt_count": n, "mR@20": None,
                      "mR@50": value, "mR@100": value} for (p, label, n), value
                     in zip(PREDICATES, mean_recall, strict=True)]
    return Report(protocol={"name": name, "version": "1.0"}, aggregation="per_predicate",
                  ks=KS, metrics=metrics, per_predicate=per_predicate,
                  per_image=[{"image_id": "a"}, {"image_id": "b"}],
                  diagnostics={"evaluated_images": 2, "masks_merged": 3},
                  left_out={"zR@k": "no training statistics"},
                  notes=["a note with <script>"],
                  provenance={"sgdask_version": "0.1.0",
                              "gt": {"source": "/data/gt", "content_hash": "abc123"},
                              "submission": {"source": "/data/sub", "content_hash": "def456"}})


@pytest.fixture
def reports() -> dict[str, Report]:
    return {"singlempo": make_report("singlempo", 0.25, [0.5, 0.25, None, 0.0], 1.5),
            "multimpo": make_report("multimpo", 0.30, [0.55, 0.2, 0.4, 0.0], 1.25)}


def embedded_svgs(page: str) -> list[ET.Element]:
    """The page's inline SVG plots, parsed (each must be well-formed XML)."""
    return [ET.fromstring(markup) for markup in SVG.findall(page)]


def test_overall_numbers_in_percent(reports):
    page = render_html(reports)
    assert "<td>R</td><td>25.00</td><td>35.00</td><td>45.00</td><td>30.00</td><td>-</td>" in page
    assert "<td>R</td><td>30.00</td><td>40.00</td><td>50.00</td><td>35.00</td><td>-</td>" in page
    assert "InstR 90.00, PRank 1.50" in page
    assert "evaluated images" in page and "<td>2</td>" in page
    assert "abc123" in page and "def456" in page and "/data/gt" in page


def test_protocol_delta_table(reports):
    page = render_html(reports)
    assert "<th>multimpo − singlempo</th>" in page
    # 0.30 vs 0.25: +5.00 percentage points; PRank 1.25 vs 1.5: -0.25 ranks
    assert "<td>R@20</td><td>25.00</td><td>30.00</td><td>+5.00</td>" in page
    assert "<td>mR@50</td><td>15.00</td><td>15.00</td><td>+0.00</td>" in page
    assert "<td>PRank</td><td>1.50</td><td>1.25</td><td>-0.25</td>" in page


def test_fmt_delta_sign_and_units():
    assert fmt_delta("R@20", 0.3, 0.25) == "+5.00"
    assert fmt_delta("R@20", 0.1 + 0.2, 0.3) == "+0.00"
    assert fmt_delta("R@20", 0.3 - 1e-17, 0.3) == "+0.00"
    assert fmt_delta("PRank", 2.0, 2.5) == "-0.50"


def test_embedded_plots_are_inline_svg(reports):
    page = render_html(reports)
    svgs = embedded_svgs(page)
    assert len(svgs) == 3 == page.count("<svg ") and "<img " not in page
    for svg in svgs:
        assert float(svg.get("width")) > 0 and float(svg.get("height")) > 0
    bars, delta, curve = ("".join(svg.itertext()) for svg in svgs)
    assert "in front of" in bars and "<b>wearing</b>" in bars and "singlempo" in bars
    assert "multimpo − singlempo" in delta
    assert "R (singlempo)" in curve and "mR (multimpo)" in curve
    # one bar per (protocol, predicate with a value), its value in its tooltip
    tips = [rect.find("title").text for rect in svgs[0].iter("rect")
            if rect.find("title") is not None]
    assert tips == ["singlempo: on 50.00", "singlempo: <b>wearing</b> 25.00",
                    "singlempo: in front of 0.00", "multimpo: on 55.00", "multimpo: has 40.00",
                    "multimpo: <b>wearing</b> 20.00", "multimpo: in front of 0.00"]


def test_page_is_self_contained(reports):
    page = render_html(reports)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page and "<link" not in page


def test_text_is_escaped(reports):
    page = render_html(reports, title="runs <1> & <2>")
    assert "<td>&lt;b&gt;wearing&lt;/b&gt;</td>" in page
    assert "<b>wearing" not in page
    assert "a note with &lt;script&gt;" in page
    assert "<title>runs &lt;1&gt; &amp; &lt;2&gt;</title>" in page


def test_per_predicate_table_by_frequency(reports):
    page = render_html({"singlempo": reports["singlempo"]})
    rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td>"
                      r"<td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    assert rows == [("on", "120", "-", "50.00", "50.00"), ("has", "80", "-", "-", "-"),
                    ("&lt;b&gt;wearing&lt;/b&gt;", "30", "-", "25.00", "25.00"),
                    ("in front of", "5", "-", "0.00", "0.00")]
    assert "zR@k: no training statistics" in page
    assert "<td>masks_merged</td><td>3</td>" in page


def test_single_protocol_page(reports):
    page = render_html({"singlempo": reports["singlempo"]})
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "Protocol delta" not in page and " − " not in page
    assert len(embedded_svgs(page)) == 2


def test_page_without_plottable_metrics():
    report = make_report("singlempo", 0.25, [0.5, 0.25, None, 0.0], 1.5)
    report.ks = ["x1"]
    report.metrics = {"R@x1": 0.3, "InstR": 0.9}
    report.per_predicate = [{"predicate": 0, "name": "on", "gt_count": 3, "PRank": 2.0}]
    page = render_html({"singlempo": report})
    assert embedded_svgs(page) == []
    assert "<td>R</td><td>30.00</td>" in page and "<td>on</td><td>3</td><td>2.00</td>" in page


def test_render_is_deterministic(reports):
    assert render_html(reports) == render_html(reports)


def test_write_html_local(reports, tmp_path):
    url = str(tmp_path / "out" / "report.html")
    assert write_html(reports, url) == url
    assert (tmp_path / "out" / "report.html").read_text(encoding="utf-8") == render_html(reports)


def test_write_html_memory(reports):
    url = f"memory://sgdask-html-{uuid.uuid4().hex}/report.html"
    assert write_html(reports, url) == url
    try:
        with fsspec.open(url, "r", encoding="utf-8") as f:
            assert f.read() == render_html(reports)
    finally:
        fsspec.filesystem("memory").rm(url.removeprefix("memory://"))


def test_empty_reports_rejected():
    with pytest.raises(ValueError):
        render_html({})


def test_intervals_in_tables_and_error_bars(reports):
    from sgdask.report.html import mean_columns, predicate_errors

    report = reports["singlempo"]
    report.intervals = {"R@20": [0.2, 0.3], "PRank": [1.25, 1.75]}
    report.ci = {"level": 0.9, "resamples": 50, "method": "percentile", "unit": "image",
                 "seed": 0}
    for row, (lo, hi) in zip(report.per_predicate, [(0.4, 0.6), (0.2, 0.3), (None, None),
                                                   (0.0, 0.1)], strict=True):
        row["mR@50_lo"], row["mR@50_hi"] = lo, hi
    assert mean_columns(report) == ["mR@20", "mR@50", "mR@100"]
    errors = predicate_errors(report, "mR@50", [0, 1, 2, 3])
    assert np.allclose(errors, [[10, 5, 0, 0], [10, 5, 0, 10]])
    assert predicate_errors(report, "mR@100", [0, 1]) is None
    page = render_html(reports)
    assert "<td>R</td><td>25.00 [20.00, 30.00]</td>" in page
    assert "PRank 1.50 [1.25, 1.75]" in page
    assert "Intervals: 90% percentile bootstrap over images, 50 resamples, seed 0." in page
    assert "mR@50_lo" not in page
