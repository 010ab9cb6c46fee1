"""``sgdask compare A B [C ...] --gt GT``: is model B better than model A?

Each input is a report directory (``evaluate --out``; its ``per_image_terms.parquet`` is
all compare needs), a submission store, a submission file as ``evaluate --pred`` takes it
(with ``method``, a model's result file), or a registry name (``--registry URL``; the
registry's result cache is used, so what ``rerank`` evaluated is not evaluated again).
Stores, files and registry entries that need evaluation are scored in one
``evaluate_many`` graph (each GT partition read once). The statistics are ``sgdask.stats.paired``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from distributed import Client

from sgdask.batch.cache import ResultCache, cache_key
from sgdask.batch.registry import Registry
from sgdask.core.settings import Settings
from sgdask.errors import Option, SettingError, SgdaskError, checked_choice
from sgdask.formats.methods import METHODS
from sgdask.formats.registry import claimed
from sgdask.formats.results import ResultsMethod
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.predicate_groups import groups_digest
from sgdask.io.sources import is_store
from sgdask.metrics import check_metric_names, metric_of
from sgdask.pipeline import evaluate_many
from sgdask.protocols import DEFAULT_PROTOCOL, get_protocols
from sgdask.report import Report
from sgdask.report.intervals import derive_context, scoring_of, selected
from sgdask.stats.paired import DEFAULT_PERMUTATIONS, Comparison, Model, compare
from sgdask.store.store import StoreReader
from sgdask.store.training_stats import gt_training_stats, stats_digest

REEVALUATE = ("was written before sgdask kept per-image terms (no per_image_terms.parquet): "
              "evaluate it again, writing its report (", Option("out"), "), or pass its "
              "submission store")


@dataclass
class CompareJob:
    """What to compare: models in order (the first is the baseline), each a name and its
    inputs (one, or several for a group of runs)."""

    gt: str
    models: list[tuple[str, list[str]]]
    protocol: str = DEFAULT_PROTOCOL
    options: Settings = field(default_factory=Settings)
    all_pairs: bool = False
    level: float = 0.95
    resamples: int = 1000
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    metrics: str | None = None
    registry: str | None = None
    storage_options: StorageOptions | None = None
    #: the models given as files are result files of this method (``evaluate --method``)
    method: str | None = None

    def check(self) -> None:
        if sum(len(inputs) for _, inputs in self.models) < 2 or len(self.models) < 2:
            raise SgdaskError("compare: give at least two models (or groups)")
        names = [name for name, _ in self.models]
        if len(set(names)) != len(names):
            raise SgdaskError(f"compare: model names must be unique ({', '.join(names)})")
        if len(get_protocols(self.protocol)) != 1:
            raise SettingError("protocol", "compare takes one protocol")
        if not 0 < self.level < 1:
            raise SettingError("ci", f"{self.level} is not a level between 0 and 1 (e.g. "
                               "0.95)")
        if self.resamples < 1 or self.permutations < 1:
            raise SgdaskError(Option("resamples"), " and ", Option("permutations"),
                              ": at least 1")
        self.options.checked()
        check_metric_names(self.metrics, "metrics")
        if self.method is not None:
            checked_choice("method", self.method, METHODS, "method")

    @property
    def pairs(self) -> list[tuple[int, int]]:
        n = len(self.models)
        if self.all_pairs:
            return [(i, j) for i in range(n) for j in range(i + 1, n)]
        return [(0, j) for j in range(1, n)]


def labels(inputs: list[str]) -> list[str]:
    """Short model names: the last path component of each input, or the input itself when
    two would share one."""
    short = [text.rstrip("/").rsplit("/", 1)[-1] or text for text in inputs]
    return short if len(set(short)) == len(short) else list(inputs)


def parse_group(text: str) -> tuple[str, list[str]]:
    """``NAME=A1,A2,A3`` -> (NAME, [A1, A2, A3])."""
    name, sep, members = text.partition("=")
    inputs = [m.strip() for m in members.split(",") if m.strip()]
    if not sep or not name.strip() or not inputs:
        raise SettingError("group", f"{text!r} is not NAME=RUN1,RUN2,...")
    return name.strip(), inputs


def report_dir(url: str, protocol: str, options: StorageOptions | None) -> str | None:
    """Where the report of ``protocol`` is in a report directory (the directory itself, or
    its ``<protocol>/`` folder), None when ``url`` is no report directory."""
    fs, path = filesystem(url, options)
    for candidate in (join(path, protocol), path):
        if fs.exists(join(candidate, "metrics.json")):
            return candidate
    return None


@dataclass
class Inputs:
    """Each input resolved: reports read (report dirs, cache hits) and what to evaluate."""

    reports: dict[str, Report] = field(default_factory=dict)
    to_evaluate: dict[str, str] = field(default_factory=dict)  # input -> store URL
    cache_keys: dict[str, str] = field(default_factory=dict)  # registry inputs


def resolve(job: CompareJob, gt_manifest: dict[str, Any], cache: ResultCache | None
            ) -> Inputs:
    """Read the report directories and cached registry results; list what needs
    evaluating."""
    found = Inputs()
    protocol = get_protocols(job.protocol)[0]
    registry = Registry(job.registry, job.storage_options) if job.registry else None
    stats_hash = (stats_digest(job.options.stats, job.storage_options) if job.options.stats
                  else None)
    groups_hash = (groups_digest(job.options.predicate_groups, job.storage_options)
                   if job.options.predicate_groups else None)
    for text in dict.fromkeys(i for _, inputs in job.models for i in inputs):
        where = report_dir(text, protocol.name, job.storage_options)
        if where is not None:
            found.reports[text] = checked_report(text, where, protocol.name, gt_manifest, job)
        elif (is_store(text, job.storage_options)
              or is_submission_file(text, job.method, job.storage_options)):
            found.to_evaluate[text] = text
        elif registry is not None:
            url = registry_store(registry, text)
            manifest = StoreReader(url, job.storage_options, "submission").manifest
            key = cache_key(gt_manifest, manifest, protocol, job.options, stats_hash,
                            groups_hash)
            hit = cache.get(key) if cache else None
            if hit is not None:
                found.reports[text] = hit
            else:
                found.to_evaluate[text], found.cache_keys[text] = url, key
        else:
            raise SgdaskError(f"{text}: not a report directory (metrics.json), a submission "
                              "store (manifest.json), a submission file or, with ",
                              Option("registry"), ", a registry name")
    return found


def is_submission_file(url: str, method: str | None, options: StorageOptions | None) -> bool:
    """Whether ``url`` is a submission file, evaluated as ``evaluate --pred`` takes it: a
    file, a directory a format claims (PVSG results), or with ``method`` a model's result
    file or directory of .npz files."""
    fs, path = filesystem(url, options)
    if method is not None:
        return fs.exists(path)
    return fs.isfile(path) or claimed(url, options) is not None


def registry_store(registry: Registry, name: str) -> str:
    """The store of the newest ready entry with this name (or submission id)."""
    matches = [e for e in registry.entries()
               if e.status == "ready" and name in (e.name, e.submission_id)]
    if not matches:
        raise SgdaskError(f"{name}: no ready submission of this name or id in the registry "
                          f"{registry.url}")
    return matches[-1].url


def checked_report(text: str, where: str, protocol: str, gt_manifest: dict[str, Any],
                   job: CompareJob) -> Report:
    """A report directory's report, checked: its protocol, its GT, its per-image terms."""
    report = Report.read(where, job.storage_options)
    if report.protocol.get("name") != protocol:
        raise SgdaskError(f"{text}: a {report.protocol.get('name')} report, not {protocol} (",
                          Option("protocol"), ")")
    gt_hash = (report.provenance.get("gt") or {}).get("content_hash")
    if gt_hash != gt_manifest.get("content_hash"):
        raise SgdaskError(f"{text}: evaluated against another ground truth ({gt_hash}, ",
                          Option("gt"), f" has {gt_manifest.get('content_hash')})")
    if report.terms is None:
        raise SgdaskError(f"{text}: ", *REEVALUATE)
    return report


def gather_reports(job: CompareJob, client: Client | None = None,
                   scheduler: Any = None, progress: bool = False) -> dict[str, Report]:
    """Every input's report: read, from the registry's cache, or evaluated (one graph)."""
    gt_manifest = StoreReader(job.gt, job.storage_options, "gt").manifest
    cache = ResultCache(join(job.registry, "cache"), job.storage_options) \
        if job.registry else None
    found = resolve(job, gt_manifest, cache)
    if found.to_evaluate:
        names = {text: f"input-{i}" for i, text in enumerate(found.to_evaluate)}
        methods = {names[t]: ResultsMethod(job.method) for t in found.to_evaluate
                   if job.method is not None and not is_store(t, job.storage_options)}
        many = evaluate_many(job.gt, [(names[t], url, job.protocol)
                                      for t, url in found.to_evaluate.items()],
                             job.options, client, scheduler, job.storage_options, progress,
                             methods=methods)
        for text in found.to_evaluate:
            report = next(iter(many.reports[names[text]].values()))
            found.reports[text] = report
            if cache is not None and text in found.cache_keys:
                cache.put(found.cache_keys[text], report,
                          {"submission": text, "protocol": report.protocol["name"]})
    return found.reports


def run_compare(job: CompareJob, client: Client | None = None, scheduler: Any = None,
                progress: bool = False) -> Comparison:
    """Resolve, evaluate what is missing, compare."""
    job.check()
    reports = gather_reports(job, client, scheduler, progress)
    gt = StoreReader(job.gt, job.storage_options, "gt")
    _, composition = gt_training_stats(gt, job.options.stats, job.storage_options)
    first = reports[job.models[0][1][0]]
    scoring = scoring_of(first, composition, job.options.aggregation)
    models = [Model(name, [reports[i].terms for i in inputs],  # type: ignore[misc]
                    [reports[i].states for i in inputs]) for name, inputs in job.models]
    names = selected(first, job.metrics) if job.metrics else None
    lower = frozenset(n for r in reports.values() for n in r.metrics
                      if (m := metric_of(n)) is not None and m.lower_is_better)
    protocol = get_protocols(job.protocol)[0]
    refusal = protocol.compare_refusal()
    if refusal is not None and any(r.states is None for r in reports.values()):
        raise SgdaskError("compare ", Option("protocols", protocol.name), ": ", *refusal)
    context = derive_context(first, composition)
    context.n_predicates = len(first.per_predicate)
    comparison = compare(models, job.pairs, scoring, job.level, job.resamples,
                         job.permutations, job.seed, names, lower, context)
    comparison.settings.update(protocol=first.protocol["name"],
                               gt=gt.manifest.get("content_hash"),
                               inputs={name: inputs for name, inputs in job.models})
    names_of = gt.manifest.get("predicate_classes", [])
    for row in comparison.per_predicate:
        p = row["predicate"]
        row["name"] = names_of[p] if p < len(names_of) else str(p)
    return comparison


def write_comparison(comparison: Comparison, out: str,
                     storage_options: StorageOptions | None = None) -> list[str]:
    """``comparison.json`` (one row per pair and metric), ``comparison_details.json``
    (settings, models with mean ± sd and intervals, per-predicate differences) and the
    self-contained ``comparison.html``."""
    from sgdask.report.compare_html import render_comparison

    fs, path = filesystem(out, storage_options)
    fs.makedirs(path, exist_ok=True)
    details = {"settings": comparison.settings, "models": comparison.models,
               "per_predicate": comparison.per_predicate}
    files = {"comparison.json": json.dumps(comparison.rows, indent=1),
             "comparison_details.json": json.dumps(details, indent=1),
             "comparison.html": render_comparison(comparison)}
    written = []
    for name, text in files.items():
        with fs.open(join(path, name), "w", encoding="utf-8") as f:
            f.write(text)
        written.append(join(out, name))
    return written
