"""The Report object (what an evaluation found) and its writers: JSON, Parquet, Markdown, table."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sgdask import __version__
from sgdask.accum import Accumulator
from sgdask.errors import SgdaskError
from sgdask.kernels.selection import KSpec, parse_ks
from sgdask.metrics import (
    FAMILIES,
    available,
    format_value,
    left_out,
    left_out_lines,
    metric_of,
    name_at,
    row_label,
    sort_key,
    split_name,
    units_note,
)
from sgdask.metrics import (
    metrics as registered,
)
from sgdask.metrics.base import DERIVED, Context, Finals, Metric
from sgdask.metrics.groups import PredicateGroups
from sgdask.metrics.recall import VOCABULARY_MEANS
from sgdask.metrics.terms import inputs_of
from sgdask.protocols import METRICS_VERSION, Protocol
from sgdask.stats.table import TermTable
from sgdask.versions import dependency_versions

if TYPE_CHECKING:
    from sgdask.core.settings import Settings
    from sgdask.errors import Audience
    from sgdask.io.fs import StorageOptions

# What the reference tool prints when a predicate of the vocabulary is absent.
TABLES = ("per_predicate", "per_image", "per_category", "terms", "states")
TERMS_FILE = "per_image_terms.parquet"
CATEGORY_FILE = "per_category.parquet"


@dataclass
class Report:
    """Overall numbers, per-predicate and per-image tables, diagnostics and provenance.

    Metric values are fractions in [0, 1], or a mean 0-based rank for rank metrics
    (``sgdask.metrics``: display RANK, lower is better). ``terms``: the per-image terms
    (``per_image_terms.parquet``; None in reports written before they were kept).
    ``intervals``: metric -> [low, high] bootstrap interval, with ``ci`` its settings
    (``evaluate --ci``; None without). ``mean_over_occurring``: under a protocol that prints
    mR@k / mNgR@k over every predicate of the vocabulary, their means over the predicates
    that occur in the evaluated GT (a diagnostic; empty otherwise). ``predicate_groups``:
    the predicate groups of the grouped metrics (``mR@50[head]``), their ``source`` and
    ``members`` (group -> predicate ids); empty without groups. ``per_category``: one
    row per category of the vocabulary when a metric family reports per category
    (panoptic quality), else empty. ``states``: the final form of the families' declared
    states (``StateSpec.final``; a ranking protocol's detections), kept in memory for intervals
    and comparisons (None in reports read back). ``lint``: the protocol lint's counts and
    warnings (``sgdask.core.lint``; empty for an in-memory ``Evaluator`` and in reports
    written before it).
    """

    protocol: dict[str, Any]
    aggregation: str
    ks: list[str]
    metrics: dict[str, float]
    per_predicate: list[dict[str, Any]]
    per_image: list[dict[str, Any]]
    diagnostics: dict[str, int]
    left_out: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, list[float]] | None = None
    ci: dict[str, Any] | None = None
    mean_over_occurring: dict[str, float] = field(default_factory=dict)
    predicate_groups: dict[str, Any] = field(default_factory=dict)
    per_category: list[dict[str, Any]] = field(default_factory=list)
    lint: dict[str, Any] = field(default_factory=dict)
    terms: TermTable | None = field(default=None, compare=False, repr=False)
    states: dict[str, dict[int, Any]] | None = field(default=None, compare=False,
                                                     repr=False)

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
    return SgdaskError(f"{url}: no report here (no metrics.json; sgdask evaluate --out and "
                       "Report.write write one)")


def lint_warnings(report: Report) -> list[dict[str, str]]:
    """The report's protocol lint warnings (``{"code", "message"}``; none in a report
    without lint)."""
    return list(report.lint.get("warnings", []))


def interval_caption(ci: dict[str, Any]) -> str:
    """How the intervals were computed, in one line."""
    return (f"{100 * ci['level']:g}% {ci['method']} bootstrap over images, "
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


def as_float(value: Fraction | float | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class EvalSettings:
    """What one report was asked to compute: the run's settings record under one of its
    protocols (decides what is reported or left out; the report's provenance). ``data``:
    what the data hold beyond lists (``sgdask.metrics.terms.inputs_of``); ``categories``:
    the category names; ``things``: the thing categories (None: the split is unknown)."""

    protocol: Protocol
    settings: Settings
    with_ng: bool
    has_stats: bool
    groups: PredicateGroups | None = None
    data: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    things: frozenset[int] | None = None

    def options(self) -> dict[str, Any]:
        """The evaluation options a report records next to its protocol."""
        return {"match_labels": self.match_labels, "legacy_metrics": self.legacy,
                "tau": self.settings.tau}

    @property
    def aggregation(self) -> str:
        return self.settings.aggregation

    @property
    def ks(self) -> tuple[KSpec, ...]:
        """The settings' ks, or the protocol's own (a protocol of one k: 50)."""
        if self.protocol.ks is not None:
            return parse_ks(self.protocol.ks)
        return self.settings.k_specs

    @property
    def legacy(self) -> bool:
        return self.settings.legacy

    @property
    def match_labels(self) -> bool:
        return self.settings.match_labels

    @property
    def inputs(self) -> set[str]:
        """What the report's metrics may need (``sgdask.metrics.base.NEEDS``): the terms'
        inputs (with what the data hold), predicate groups, per-predicate values that make a
        mean (not under the ``image`` aggregation)."""
        inputs = inputs_of(self.protocol, self.with_ng, self.has_stats, self.legacy, self.data)
        if self.groups is not None:
            inputs.add("groups")
        if self.aggregation != "image":
            inputs.add("predicate_means")
        return inputs

    def context(self, composition: dict[int, int] | None = None,
                valued: Callable[[str], Iterable[int]] | None = None,
                names: Iterable[str] = (), n_predicates: int | None = None) -> Context:
        """The derive functions' view (``valued(name)``: the predicates with a value of the
        mean metric ``name`` of ``names``, read under a protocol whose means run over the
        vocabulary; ``n_predicates``: the GT's predicate vocabulary, when known)."""
        return Context(self.ks, self.aggregation, self.settings.tau, composition,
                       None if self.groups is None else self.groups.members,
                       vocabulary_sets(self.protocol.means_over_vocabulary() and
                                       self.groups is not None, self.aggregation, valued,
                                       names), things=self.things, n_predicates=n_predicates)


def final_metrics(acc: Accumulator, settings: EvalSettings) -> dict[str, float]:
    """Every non-derived metric's dataset value under the settings' aggregation, in report
    order."""
    protocol, aggregation = settings.protocol, settings.aggregation
    values: dict[str, Fraction | float | None] = {}
    for name in acc.image_metric_names():
        values[name] = acc.image_value(name)
    for name in acc.mean_metric_names():
        metric = metric_of(name)
        over_cells = metric is not None and protocol.mean_over_cells(metric.prefix)
        values[name] = acc.mean_metric(name, aggregation, over_cells)
    for name in acc.ratio_metric_names():
        values[name] = acc.ratio_value(name)
    return in_order(values)


def in_order(values: Mapping[str, Fraction | float | None]) -> dict[str, float]:
    """The defined values as floats, in report order."""
    return {n: float(v) for n, v in sorted(values.items(), key=lambda kv: sort_key(kv[0]))
            if v is not None}


def derived_metrics(acc: Accumulator, settings: EvalSettings,
                    composition: dict[int, int] | None,
                    values: Mapping[str, float] | None = None,
                    n_predicates: int | None = None,
                    state: Callable[[str], dict[int, Any] | None] | None = None
                    ) -> dict[str, Fraction | float]:
    """Values of the DERIVED metrics whose inputs the evaluation has (e.g. wIMR@k), from
    the per-predicate values, the declared states and ``values``: the non-derived metrics
    as reported (``build_report`` passes them after a protocol's vocabulary means, as the
    bootstrap derives; default: ``final_metrics``)."""
    known = final_metrics(acc, settings) if values is None else values
    finals = _finals_of(acc, settings, known, state)
    inputs = settings.inputs
    ctx = settings.context(composition, lambda name: acc.predicate_values(
        name, settings.aggregation), acc.mean_metric_names(), n_predicates)
    out: dict[str, Fraction | float] = {}
    for family in FAMILIES:
        derivable = [m for m in family.metrics if m.kind == DERIVED
                     and available(m, inputs) is None]
        if family.derive and derivable:
            out.update({name: value for name, value in family.derive(finals, ctx).items()
                        if _named(name, derivable)})
    return out


def _named(name: str, candidates: list[Metric]) -> bool:
    """Whether ``name`` is the name of one of ``candidates`` (a family's own metric: a
    protocol's own R@50 is not recall's R@k, which ``metric_of`` would name)."""
    prefix, _, group = split_name(name)
    return any(m.prefix == prefix and m.grouped == (group is not None) if m.per_k
               else m.prefix == name for m in candidates)


def vocabulary_sets(over_vocabulary: bool, aggregation: str,
                    valued: Callable[[str], Iterable[int]] | None, names: Iterable[str]
                    ) -> dict[str, frozenset[int]] | None:
    """``Context.occurring``: when the protocol's mean metrics run over the vocabulary (not
    under the ``image`` aggregation), per such metric of ``names`` the predicates with a
    value on the data (``valued``); else None."""
    if not over_vocabulary or aggregation == "image" or valued is None:
        return None
    return {name: frozenset(valued(name)) for name in names
            if split_name(name)[0] in VOCABULARY_MEANS and split_name(name)[1] != "inf"}


def _finals_of(acc: Accumulator, settings: EvalSettings, values: Mapping[str, float],
               state: Callable[[str], dict[int, Any] | None] | None = None) -> Finals:
    """The finals derived metrics and per-category rows read (``state``: the states'
    final forms, default ``acc.state_final``)."""
    return Finals(lambda name: acc.predicate_values(name, settings.aggregation), values.get,
                  state or acc.state_final)


def _category_table(acc: Accumulator, settings: EvalSettings,
                   composition: dict[int, int] | None, values: Mapping[str, float]
                   ) -> list[dict[str, Any]]:
    """The per-category table: when a family reports per category (panoptic quality), one
    row per category of the vocabulary and every other one it reports, with its name,
    whether it is a thing (None: unknown) and the families' columns (None where a
    category has no value); else empty."""
    finals, ctx = _finals_of(acc, settings, values), settings.context(composition)
    found: dict[int, dict[str, Any]] = {}
    for family in FAMILIES:
        if family.category_rows and any(available(m, settings.inputs) is None
                                        for m in family.metrics):
            for row in family.category_rows(finals, ctx):
                found.setdefault(row["category"], {}).update(row)
    if not found:
        return []
    names, things = settings.categories, settings.things
    columns = list(dict.fromkeys(k for row in found.values() for k in row if k != "category"))
    return [{"category": c, "name": names[c] if c < len(names) else str(c),
             "isthing": None if things is None else c in things,
             **{k: found.get(c, {}).get(k) for k in columns}}
            for c in sorted(set(found) | set(range(len(names))))]


def _cached_states(acc: Accumulator) -> Callable[[str], dict[int, Any] | None]:
    """``acc.state_final``, each state put in its final order once (a sort of every row:
    a ranking protocol's detections are a million rows on Open Images V6)."""
    found: dict[str, dict[int, Any] | None] = {}

    def state(name: str) -> dict[int, Any] | None:
        if name not in found:
            found[name] = acc.state_final(name)
        return found[name]

    return state


def _derived_predicate_values(settings: EvalSettings, state: Callable[[str], Any],
                              n_predicates: int | None) -> dict[str, dict[int, float]]:
    """Per-predicate values the active families derive from their state (an AP)."""
    out: dict[str, dict[int, float]] = {}
    for family in FAMILIES:
        if family.derive_predicates and any(available(m, settings.inputs) is None
                                            for m in family.metrics):
            out.update(family.derive_predicates(Finals(lambda _: {}, state=state),
                                                settings.context(None, n_predicates=n_predicates)))
    return out


def _state_diagnostics(settings: EvalSettings, state: Callable[[str], Any]) -> dict[str, int]:
    """Counts the active families read from their state (tied detections)."""
    out: dict[str, int] = {}
    for family in FAMILIES:
        if family.state_diagnostics and any(available(m, settings.inputs) is None
                                            for m in family.metrics):
            out.update(family.state_diagnostics(Finals(lambda _: {}, state=state)))
    return out


def predicate_table(acc: Accumulator, names: list[str], aggregation: str,
                    groups: PredicateGroups | None = None,
                    derived: Mapping[str, Mapping[int, float]] | None = None
                    ) -> list[dict[str, Any]]:
    """One row per predicate occurring in the evaluated GT, or given a ``derived`` value
    (an AP of every predicate of the vocabulary): GT count, its group (with predicate
    groups; None in none), every mean metric and the derived per-predicate values."""
    values: dict[str, Mapping[int, Any]] = {
        m: acc.predicate_values(m, aggregation) for m in acc.mean_metric_names()}
    values.update(derived or {})
    counts = acc.gt_per_predicate
    group_of = None if groups is None else groups.group_of()
    rows = []
    for p in sorted({*counts, *(q for v in (derived or {}).values() for q in v)}):
        row: dict[str, Any] = {"predicate": p, "name": names[p] if p < len(names) else str(p),
                               "gt_count": counts.get(p, 0)}
        if group_of is not None:
            row["group"] = group_of.get(p)
        row.update({m: as_float(v.get(p)) for m, v in values.items()})
        rows.append(row)
    return rows


def uniform_rows(rows: list[dict[str, Any]], metric_names: list[str]) -> list[dict[str, Any]]:
    """Per-image rows sorted by image id, every row with every column (None where an image
    has no value: a missing image has no diagnostics, zR only exists with zero-shot triplets).

    Columns: image_id, missing, gt_triplets, the image-level metrics in report order, then
    the diagnostics in order of first appearance. A Parquet table built from the rows then
    has every column whatever the first row holds.
    """
    head = ["image_id", "missing", "gt_triplets", *metric_names]
    present = dict.fromkeys(chain.from_iterable(rows))
    columns = [c for c in head if c in present] + [k for k in present if k not in head]
    return [dict(zip(columns, map(r.get, columns), strict=True))
            for r in sorted(rows, key=itemgetter("image_id"))]


def submission_provenance(manifest: dict[str, Any]) -> dict[str, Any]:
    """Source and content hash; for a store whose lists were derived from scores
    (``convert --from-scores``), the score file, the ranking and the NG cut; for a store
    converted from model results (``convert --method``), the method and whether instance
    scores were kept."""
    out = {"source": manifest.get("source"), "content_hash": manifest.get("content_hash")}
    if manifest.get("triplets_from"):
        out.update(triplets_from=manifest["triplets_from"],
                   rank_by=manifest.get("rank_by", "predicate"),
                   ng_limit=manifest.get("ng_limit"))
    if manifest.get("method"):
        out.update(method=manifest["method"],
                   instance_scores=bool(manifest.get("instance_scores")))
    return out


def build_report(acc: Accumulator, images: list[dict[str, Any]], settings: EvalSettings,
                 composition: dict[int, int] | None, gt_manifest: dict[str, Any],
                 pred_manifest: dict[str, Any], counts: dict[str, int],
                 terms: TermTable | None = None, lint: dict[str, Any] | None = None
                 ) -> Report:
    """Finalize the accumulator under an aggregation mode into a Report (``terms``: the
    per-image terms it was summed from, kept for intervals and comparisons; ``lint``: the
    protocol lint, as ``sgdask.core.lint.lint_report`` words it)."""
    protocol = settings.protocol
    metrics = final_metrics(acc, settings)
    names = gt_manifest.get("predicate_classes", [])
    notes = []
    absent = len(names) - len(acc.gt_per_predicate)
    occurring, vocabulary_notes = vocabulary_means(acc, metrics, settings, len(names), absent)
    notes += vocabulary_notes
    state = _cached_states(acc)
    metrics = in_order({**metrics, **derived_metrics(acc, settings, composition, metrics,
                                                     len(names) or None, state)})
    reasons = left_out(settings.inputs, metrics, protocol.name)
    metrics, withheld = protocol.withheld(metrics, acc.diagnostics)
    reasons.update(withheld)
    notes += protocol.notes(absent)
    if not settings.match_labels:
        notes.append("--no-match-labels: predictions matched GT instances of any category "
                     "(docs: Metrics and protocols, matching); not comparable with "
                     "category-matched results")
    notes += [m.note for m in registered() if m.note and any(
        metric_of(name) is m for name in metrics)]
    groups = settings.groups if any(
        (m := metric_of(name)) is not None and m.grouped for name in metrics) else None
    if groups is not None:
        notes.append(groups.note())
    notes += [line for family in FAMILIES if family.notes and any(
        metric_of(name) in family.metrics for name in metrics)
        for line in family.notes(acc.diagnostics)]
    diagnostics = {**counts, **{k: v for k, v in acc.diagnostics.items() if k != "images"},
                   **_state_diagnostics(settings, state)}
    if protocol.means_over_vocabulary() and names:
        diagnostics["predicates_absent"] = max(absent, 0)
    provenance = {"sgdask_version": __version__, "metrics_version": METRICS_VERSION,
                  "gt": {"source": gt_manifest.get("source"),
                         "content_hash": gt_manifest.get("content_hash")},
                  "submission": submission_provenance(pred_manifest),
                  "packages": dependency_versions()}
    return Report(protocol=protocol.as_dict(), aggregation=settings.aggregation,
                  ks=[k.label for k in settings.ks], metrics=metrics,
                  per_predicate=predicate_table(
                      acc, names, settings.aggregation, groups,
                      _derived_predicate_values(settings, state, len(names) or None)),
                  per_image=uniform_rows(images, acc.image_metric_names()),
                  diagnostics=diagnostics, left_out=reasons,
                  notes=notes, provenance=provenance, options=settings.options(),
                  mean_over_occurring=occurring,
                  predicate_groups={} if groups is None else groups.as_dict(),
                  per_category=_category_table(acc, settings, composition, metrics),
                  lint=lint or {}, terms=terms,
                  states={name: state(name) for name in acc.states})


def vocabulary_means(acc: Accumulator, metrics: dict[str, float], settings: EvalSettings,
                     n_vocabulary: int, absent: int) -> tuple[dict[str, float], list[str]]:
    """Under a protocol whose means run over the vocabulary: mR@k and mNgR@k in ``metrics``
    replaced (in place) by the mean over every predicate of the vocabulary (an absent one
    counts 0); returns the replaced means over the occurring predicates and the notes."""
    if not settings.protocol.means_over_vocabulary() or not n_vocabulary:
        return {}, []
    if settings.aggregation == "image":
        return {}, ["--aggregation image averages each image's predicates: mR@k and mNgR@k "
                    "are not the vocabulary-wide means this protocol prints otherwise"]
    occurring = {}
    for name in list(metrics):
        if name.partition("@")[0] not in VOCABULARY_MEANS or name.endswith("@inf"):
            continue
        values = acc.predicate_values(name, settings.aggregation)
        occurring[name] = metrics[name]
        metrics[name] = float(sum(values.values(), Fraction(0)) / n_vocabulary)
    if not occurring:
        return {}, []
    others = [n for n in ("mzR@k", "mR@inf") if any(
        name == n or name.startswith(n.replace("@k", "@")) for name in metrics)]
    unlike = (f"; {' and '.join(others)} average the occurring predicates only, so "
              "they can exceed mR@k" if others else "")
    return occurring, [
        f"mR@k and mNgR@k are means over all {n_vocabulary} predicates of the vocabulary, "
        f"{max(absent, 0)} of them absent from the evaluated GT (counted 0), as the legacy "
        "tools print them; the means over the occurring predicates are under "
        f"mean_over_occurring{unlike}"]
