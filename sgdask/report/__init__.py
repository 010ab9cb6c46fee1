"""The Report (what an evaluation found: ``sgdask.core.findings.Findings``, built by
``sgdask.core.finalize``) with its views and writers: JSON, Parquet, Markdown, table."""

from __future__ import annotations

import json
import posixpath
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from sgdask.core.findings import Findings
from sgdask.core.plan import EvalSettings
from sgdask.errors import SgdaskError
from sgdask.metrics import (
    format_value,
    left_out_lines,
    name_at,
    row_label,
    split_name,
    units_note,
)
from sgdask.stats.table import TermTable

if TYPE_CHECKING:
    from sgdask.errors import Audience
    from sgdask.io.fs import StorageOptions

__all__ = ["CATEGORY_FILE", "TABLES", "TERMS_FILE", "EvalSettings", "Report",
           "families_with_k", "interval_caption", "k_of", "lint_warnings"]
TABLES = ("per_predicate", "per_image", "per_category", "terms", "states")
TERMS_FILE = "per_image_terms.parquet"
CATEGORY_FILE = "per_category.parquet"


class Report(Findings):
    """What an evaluation found (``Findings``: its fields) with its views (``print``, a
    notebook's table, Markdown), its writer (``write``: what ``sgdask evaluate --out``
    writes) and its reader (``read``)."""

    @classmethod
    def of(cls, findings: Findings) -> Report:
        """The report of a finalised record (``sgdask.core.finalize.build_report``)."""
        return cls(**{f.name: getattr(findings, f.name) for f in fields(findings)})

    def summary(self) -> dict[str, Any]:
        """Everything but the tables (what metrics.json holds); no interval keys in a
        report without intervals."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in TABLES}
        return {k: v for k, v in data.items()
                if v is not None or k not in ("intervals", "ci")}

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, sort_keys=False)

    def write(self, out: str, storage_options: StorageOptions | None = None,
              html: bool = True) -> list[str]:
        """Write what ``sgdask evaluate --out`` writes for one protocol: metrics.json,
        per_predicate.parquet, per_image.parquet, report.md, (with rows)
        per_category.parquet, (with terms) per_image_terms.parquet and (``html``)
        report.html; the command writes through this method."""
        # imported here: building a report (the in-memory Evaluator) needs no pyarrow or zarr
        import pyarrow as pa
        import pyarrow.parquet as pq

        from sgdask.io.fs import filesystem, join

        fs, path = filesystem(out, storage_options)
        fs.makedirs(path, exist_ok=True)
        written = []
        for name, text in (("metrics.json", self.to_json()), ("report.md", self.markdown())):
            with fs.open(join(path, name), "w") as f:
                f.write(text)
            written.append(join(out, name))
        for name, rows in (("per_predicate", self.per_predicate), ("per_image", self.per_image)):
            with fs.open(join(path, f"{name}.parquet"), "wb") as f:
                pq.write_table(pa.Table.from_pylist(rows), f)
            written.append(join(out, f"{name}.parquet"))
        if self.per_category:
            with fs.open(join(path, CATEGORY_FILE), "wb") as f:
                pq.write_table(pa.Table.from_pylist(self.per_category), f)
            written.append(join(out, CATEGORY_FILE))
        if self.terms is not None:
            with fs.open(join(path, TERMS_FILE), "wb") as f:
                pq.write_table(self.terms.to_arrow(), f, compression="zstd")
            written.append(join(out, TERMS_FILE))
        if html:
            from sgdask.report.html import write_html  # only to write the page

            written.append(write_html({self.protocol["name"]: self}, join(out, "report.html"),
                                      storage_options))
        return written

    @classmethod
    def read(cls, url: str, storage_options: StorageOptions | None = None) -> Report:
        """A report written by ``write`` (tables come back with the union of their columns;
        ``terms`` is None for a report written before per-image terms were kept, and
        ``per_category`` empty without per_category.parquet)."""
        import pyarrow.parquet as pq

        from sgdask.io.fs import filesystem, join

        fs, path = filesystem(url, storage_options)
        if not fs.exists(join(path, "metrics.json")):
            raise _no_report(url, fs, path)
        with fs.open(join(path, "metrics.json"), "r") as f:
            summary = json.load(f)
        tables: dict[str, Any] = {}
        for name in ("per_predicate", "per_image"):
            with fs.open(join(path, f"{name}.parquet"), "rb") as f:
                tables[name] = pq.read_table(f).to_pylist()
        if fs.exists(join(path, CATEGORY_FILE)):
            with fs.open(join(path, CATEGORY_FILE), "rb") as f:
                tables["per_category"] = pq.read_table(f).to_pylist()
        if fs.exists(join(path, TERMS_FILE)):
            with fs.open(join(path, TERMS_FILE), "rb") as f:
                tables["terms"] = TermTable.from_arrow(pq.read_table(f))
        return cls(**summary, **tables)

    def cell(self, name: str, sep: str = " ", template: str = "[{lo}, {hi}]") -> str:
        """A metric formatted, with its interval (``template``, after ``sep``) when the
        report has one."""
        text = format_value(name, self.metrics.get(name))
        interval = (self.intervals or {}).get(name)
        if interval:
            text += sep + template.format(lo=format_value(name, interval[0]),
                                          hi=format_value(name, interval[1]))
        return text

    def grid(self, sep: str = " ", template: str = "[{lo}, {hi}]"
             ) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of the overall table: metric families (a grouped metric's groups
        in the report's group order) x ks (cells with their interval, see ``cell``, when
        the report has intervals)."""
        header = ["metric", *self.ks]
        rows = []
        groups = list((self.predicate_groups or {}).get("members", {}))
        for family in families_with_k(self.metrics, groups):
            cells = [self.cell(name_at(family, k), sep, template) for k in self.ks]
            if any(c != "-" for c in cells):
                rows.append([family, *cells])
        return header, rows

    def scalars(self) -> list[tuple[str, str]]:
        """Metrics without k (InstR, R@inf...), formatted (with intervals)."""
        return [(name, self.cell(name)) for name in self.metrics
                if not k_of(name, self.ks)]

    @property
    def heading(self) -> str:
        """What the report is: protocol, aggregation and images (the console table's title)."""
        return (f"protocol {self.protocol['name']} v{self.protocol['version']} · "
                f"aggregation {self.aggregation} · "
                f"{self.diagnostics.get('evaluated_images', 0)} images")

    def footnotes(self, audience: Audience = "api") -> list[str]:
        """What follows the table: the metrics without k, what was left out and why (one
        line per reason, options named for ``audience``), the notes and how the intervals
        were computed."""
        lines = ["  ".join(f"{name} {value}" for name, value in self.scalars())]
        lines += [f"left out {line}" for line in left_out_lines(self.left_out, audience)]
        lines += [f"note: {note}" for note in self.notes]
        if self.ci:
            lines.append(f"intervals: {interval_caption(self.ci)}")
        return [line for line in lines if line]

    def __str__(self) -> str:
        """``print(report)``: the overall table as aligned text (metric families by k, each
        value with its interval ``[lo, hi]``), then ``footnotes``."""
        header, rows = self.grid()
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        table = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                 .rstrip() for row in (header, *rows)]
        return "\n".join([self.heading, *table, units_note(self.metrics), *self.footnotes()])

    def _repr_html_(self) -> str:
        """A notebook's view: the overall table as HTML, then ``footnotes``."""
        from sgdask.report.page import esc

        header, rows = self.grid()
        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                       for row in rows)
        notes = "".join(f"<br>{esc(line)}"
                        for line in [units_note(self.metrics), *self.footnotes()])
        return (f"<div><table><caption>{esc(self.heading)}</caption><thead><tr>{head}</tr>"
                f"</thead><tbody>{body}</tbody></table><small>{notes[4:]}</small></div>")

    def markdown(self) -> str:
        header, rows = self.grid()
        lines = [f"# sgdask report: protocol {self.protocol['name']} "
                 f"v{self.protocol['version']}, aggregation {self.aggregation}", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", units_note(self.metrics) + ".", ""]
        lines += ["", ", ".join(f"{name} {value}" for name, value in self.scalars())]
        lines += [f"- left out: {line}" for line in left_out_lines(self.left_out, "cli")]
        lines += [f"- note: {n}" for n in self.notes]
        if self.ci:
            lines += [f"- intervals: {interval_caption(self.ci)}"]
        lines += [f"- {k}: {v}" for k, v in self.diagnostics.items()]
        lines += [f"- lint warning ({w['code']}): {w['message']}" for w in lint_warnings(self)]
        lines += ["", "## Provenance", "", *self._provenance_lines()]
        return "\n".join(lines) + "\n"

    def _provenance_lines(self) -> list[str]:
        """report.md's provenance: versions, inputs (source and content hash), the date
        it is written (a report written before the metrics version was recorded names
        none)."""
        from datetime import UTC, datetime

        from sgdask.report.html import conversion_note

        prov = self.provenance
        gt, sub = prov.get("gt") or {}, prov.get("submission") or {}
        metrics = prov.get("metrics_version")
        return [f"- sgdask {prov.get('sgdask_version', '?')}, protocol "
                f"{self.protocol['name']} v{self.protocol['version']}"
                + (f", metrics version {metrics}" if metrics else ""),
                f"- ground truth: {gt.get('source')} (content hash {gt.get('content_hash')})",
                f"- submission: {sub.get('source')}{conversion_note(sub)} (content hash "
                f"{sub.get('content_hash')})",
                f"- written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"]


def _no_report(url: str, fs: Any, path: str) -> SgdaskError:
    """Why ``Report.read`` finds no report at ``url``: a report of several protocols (one
    folder each, named), or nothing of a report at all."""
    from sgdask.io.fs import join

    folders = sorted(posixpath.basename(p.rstrip("/")) for p in
                     (fs.ls(path, detail=False) if fs.isdir(path) else [])
                     if fs.exists(join(p, "metrics.json")))
    if folders:
        return SgdaskError(f"{url}: a report of several protocols; read one of its folders: "
                           + ", ".join(join(url, name) for name in folders))
    return SgdaskError(f"{url}: no report here (no metrics.json, which Report.write "
                       "writes)")


def lint_warnings(report: Report) -> list[dict[str, str]]:
    """The report's protocol lint warnings (``{"code", "message"}``; none in a report
    without lint)."""
    return list(report.lint.get("warnings", []))


def interval_caption(ci: dict[str, Any]) -> str:
    """How the intervals were computed, in one line."""
    return (f"{100 * ci['level']:g}% {ci['method']} bootstrap over "
            f"{ci.get('unit', 'image')}s, "
            f"{ci['resamples']} resamples, seed {ci['seed']}")


def k_of(name: str, ks: list[str]) -> str | None:
    """The k label of a metric name (``mR@x10``, ``mR@x10[head]`` -> ``x10``), None for
    metrics without k."""
    k = split_name(name)[1]
    return k if k in ks else None


def families_with_k(metrics: dict[str, float], groups: list[str] | None = None) -> list[str]:
    """Metric rows (``R``, ``mR``, ``mR[head]``...) that have a k, in report order, a
    grouped metric's rows in ``groups`` order."""
    labels = list(dict.fromkeys(row_label(name) for name in metrics
                                if split_name(name)[1] not in ("", "inf")))
    family = {label: (split_name(label)[0], split_name(label)[2] is None) for label in labels}
    first: dict[tuple[str, bool], int] = {}
    for f in family.values():
        first.setdefault(f, len(first))
    rank = {group: i for i, group in enumerate(groups or [])}
    return sorted(labels, key=lambda label: (first[family[label]],
                                             rank.get(split_name(label)[2] or "", len(rank))))
