"""The Report object (what an evaluation found) and its writers: JSON, Parquet, Markdown, table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sgdask import __version__
from sgdask.accum import Accumulator, metric_sort_key
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.kernels.selection import KSpec
from sgdask.protocols import Protocol
from sgdask.versions import dependency_versions

NOT_PERCENT = ("PRank",)


@dataclass
class Report:
    """Overall numbers, per-predicate and per-image tables, diagnostics and provenance.

    Metric values are fractions in [0, 1] (PRank: a mean 0-based rank, lower is better).
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

    def summary(self) -> dict[str, Any]:
        """Everything but the per-predicate and per-image tables (what metrics.json holds)."""
        data = asdict(self)
        data.pop("per_image")
        data.pop("per_predicate")
        return data

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, sort_keys=False)

    def write(self, out: str, storage_options: StorageOptions | None = None) -> list[str]:
        """Write metrics.json, per_predicate.parquet, per_image.parquet and report.md."""
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
        return written

    @classmethod
    def read(cls, url: str, storage_options: StorageOptions | None = None) -> Report:
        """A report written by ``write`` (tables come back with the union of their columns)."""
        fs, path = filesystem(url, storage_options)
        with fs.open(join(path, "metrics.json"), "r") as f:
            summary = json.load(f)
        tables = {}
        for name in ("per_predicate", "per_image"):
            with fs.open(join(path, f"{name}.parquet"), "rb") as f:
                tables[name] = pq.read_table(f).to_pylist()
        return cls(**summary, **tables)

    def grid(self) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of the overall table: metric families x ks."""
        header = ["metric", *self.ks]
        rows = []
        for family in families_with_k(self.metrics):
            cells = [fmt_metric(f"{family}@{k}", self.metrics.get(f"{family}@{k}"))
                     for k in self.ks]
            if any(c != "-" for c in cells):
                rows.append([family, *cells])
        return header, rows

    def scalars(self) -> list[tuple[str, str]]:
        """Metrics without k (InstR, PRank, R@inf...), formatted."""
        return [(name, fmt_metric(name, value)) for name, value in self.metrics.items()
                if not k_of(name, self.ks)]

    def markdown(self) -> str:
        header, rows = self.grid()
        lines = [f"# sgdask report: protocol {self.protocol['name']} "
                 f"v{self.protocol['version']}, aggregation {self.aggregation}", "",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", "Recalls in percent; PRank is a mean 0-based rank (lower is better).", ""]
        lines += ["", ", ".join(f"{name} {value}" for name, value in self.scalars())]
        lines += [f"- left out: {m}: {why}" for m, why in self.left_out.items()]
        lines += [f"- note: {n}" for n in self.notes]
        lines += [f"- {k}: {v}" for k, v in self.diagnostics.items()]
        return "\n".join(lines) + "\n"


def k_of(name: str, ks: list[str]) -> str | None:
    """The k label of a metric name (``mR@x10`` -> ``x10``), None for metrics without k."""
    _, _, k = name.partition("@")
    return k if k in ks else None


def families_with_k(metrics: dict[str, float]) -> list[str]:
    """Metric families (``R``, ``mR``...) that have a k, in report order."""
    return list(dict.fromkeys(name.partition("@")[0] for name in metrics if "@" in name
                              and not name.endswith("@inf")))


def fmt_metric(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if name in NOT_PERCENT else f"{100 * value:.2f}"


def as_float(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation was asked to compute (decides what is reported or left out)."""

    protocol: Protocol
    aggregation: str
    ks: tuple[KSpec, ...]
    with_ng: bool
    has_stats: bool
    legacy: bool
    tau: float
    match_labels: bool = True

    def options(self) -> dict[str, Any]:
        """The evaluation options a report records next to its protocol."""
        return {"match_labels": self.match_labels, "legacy_metrics": self.legacy,
                "tau": self.tau}


def left_out_metrics(settings: EvalSettings, metrics: dict[str, float]) -> dict[str, str]:
    """Metric families absent from the report, each with the reason."""
    reasons: dict[str, str] = {}
    if not settings.with_ng:
        for name in ("ngR@k", "mNgR@k", "PRank", "IMR@k", "wIMR@k"):
            reasons[name] = "the submission has no ng_triplets (NG list)"
    if settings.protocol.matching == "triplet":
        reasons.setdefault("PRank", "needs an instance mapping; multimpo matches triplets")
        if settings.legacy:
            reasons["A@k"] = "needs an instance mapping; multimpo matches triplets"
    if not settings.has_stats:
        why = ("no training statistics (the GT has no train_image_ids; "
               "give --stats from `sgdask stats`)")
        for name in ("zR@k", "mzR@k", "wIMR@k"):
            reasons.setdefault(name, why)
    elif not any(m.startswith("zR@") for m in metrics):
        reasons["zR@k"] = reasons["mzR@k"] = "no zero-shot GT triplet in the evaluated images"
    if not settings.legacy:
        reasons["A@k"] = "legacy metric, off by default (--legacy-metrics)"
    return reasons


def weighted_imr(acc: Accumulator, settings: EvalSettings, composition: dict[int, int] | None
                 ) -> dict[str, float]:
    """wIMR@k = sum_c w_c IMR_c, w_c = n_c^tau / sum n^tau over predicates of the evaluated GT."""
    if not composition:
        return {}
    out = {}
    for k in settings.ks:
        values = acc.predicate_values(f"IMR@{k.label}", settings.aggregation)
        weights = {c: composition[c] ** settings.tau if composition.get(c, 0) > 0 else 0.0
                   for c in sorted(values)}
        total = sum(weights.values())
        if values and total > 0:
            out[f"wIMR@{k.label}"] = sum(weights[c] / total * float(values[c])
                                         for c in sorted(values))
    return out


def predicate_table(acc: Accumulator, names: list[str], aggregation: str
                    ) -> list[dict[str, Any]]:
    """One row per predicate occurring in the evaluated GT: GT count and every mean metric."""
    values = {m: acc.predicate_values(m, aggregation) for m in acc.mean_metric_names()}
    rows = []
    for p in sorted(acc.gt_per_predicate):
        row: dict[str, Any] = {"predicate": p, "name": names[p] if p < len(names) else str(p),
                               "gt_count": acc.gt_per_predicate[p]}
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
    rest = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in head]
    columns = [c for c in head if any(c in r for r in rows)] + rest
    return [{c: r.get(c) for c in columns} for r in sorted(rows, key=lambda r: r["image_id"])]


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
                 pred_manifest: dict[str, Any], counts: dict[str, int]) -> Report:
    """Finalize the accumulator under an aggregation mode into a Report."""
    protocol, aggregation = settings.protocol, settings.aggregation
    metrics: dict[str, float] = {}
    for name in acc.image_metric_names():
        value = acc.image_level[name].mean()
        if value is not None:
            metrics[name] = float(value)
    for name in acc.mean_metric_names():
        over_cells = protocol.prank_over_cells and name == "PRank"
        value = acc.mean_metric(name, aggregation, over_cells)
        if value is not None:
            metrics[name] = float(value)
    for name, (num, den) in acc.pooled_totals.items():
        if den:
            metrics[name] = num / den
    metrics.update(weighted_imr(acc, settings, composition))
    metrics = dict(sorted(metrics.items(), key=lambda kv: metric_sort_key(kv[0])))
    names = gt_manifest.get("predicate_classes", [])
    notes = []
    absent = len(names) - len(acc.gt_per_predicate)
    if protocol.name == "sgbench" and absent > 0:
        notes.append(f"{absent} predicate class(es) never occur in the evaluated GT: "
                     "sgbench 1.0.0 prints NaN for mR@k then; sgdask averages over the "
                     "predicates that occur")
    if not settings.match_labels:
        notes.append("--no-match-labels: predictions matched GT instances of any category "
                     "(SPEC section 4); not comparable with category-matched results")
    if settings.legacy and any(m.startswith("A@") for m in metrics):
        notes.append("A@k is a legacy pair accuracy, not a recall: only predictions on GT "
                     "pairs count, so it is not comparable with R@k")
    diagnostics = {**counts, **{k: v for k, v in acc.diagnostics.items() if k != "images"}}
    provenance = {"sgdask_version": __version__,
                  "gt": {"source": gt_manifest.get("source"),
                         "content_hash": gt_manifest.get("content_hash")},
                  "submission": submission_provenance(pred_manifest),
                  "packages": dependency_versions()}
    return Report(protocol=protocol.as_dict(), aggregation=aggregation,
                  ks=[k.label for k in settings.ks], metrics=metrics,
                  per_predicate=predicate_table(acc, names, aggregation),
                  per_image=uniform_rows(images, acc.image_metric_names()),
                  diagnostics=diagnostics, left_out=left_out_metrics(settings, metrics),
                  notes=notes, provenance=provenance, options=settings.options())
