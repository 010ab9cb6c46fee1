"""``sgdask evaluate-many MANIFEST``: many submissions against one GT, in one Dask graph,
through the result cache.

Manifest (YAML or JSON; schema in ``schemas/evaluate-many.schema.json``)::

    gt: s3://bucket/gt                  # GT store
    out: results/                       # optional: reports per submission and protocol
    cache: results/cache                # optional (default: OUT/cache)
    ks: "20,50,100,x1,x10"              # optional: any field of sgdask.core.settings.Settings
    aggregation: per_predicate
    protocols: [singlempo]              # the default of submissions naming none
    storage_options: {endpoint_url: ...}
    submissions:
      - {name: model-a, url: stores/model-a, protocols: [singlempo, multimpo]}
      - {name: sttran, url: outputs/sttran.pkl, method: sttran, protocols: [ag]}

A submission is a store, or a file read as it is: a model's output with its ``method``
(Action Genome: ``sttran``, ``tempura``) or a PVSG results directory. A file's cache key
covers its bytes (``sgdask.batch.video.output_manifest``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from distributed import Client

from sgdask.batch.cache import ResultCache, cache_key
from sgdask.batch.pages import page_url, render_page
from sgdask.batch.video import submission_manifest
from sgdask.cluster import Local
from sgdask.core.settings import Settings
from sgdask.errors import Choose, InputError, SettingError, SgdaskError
from sgdask.formats.methods import METHODS
from sgdask.formats.results import ResultsMethod
from sgdask.formats.sniff import existing
from sgdask.io.documents import strict_yaml
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.predicate_groups import groups_digest
from sgdask.pipeline import evaluate_many
from sgdask.protocols import get_protocols
from sgdask.report import Report
from sgdask.report.intervals import add_intervals
from sgdask.report.writers import write_reports
from sgdask.store.store import StoreReader, check_output_outside_stores
from sgdask.store.training_stats import gt_training_stats, stats_digest

Log = Callable[[str], None]
#: a manifest's top-level keys besides the settings record's fields, and a submission's
_MANIFEST_KEYS = ("gt", "out", "cache", "storage_options", "submissions")
_ENTRY_KEYS = ("name", "url", "protocols", "method")


@dataclass
class ManyJob:
    """A parsed evaluate-many manifest."""

    gt: str
    submissions: list[tuple[str, str, str]]
    options: Settings = field(default_factory=Settings)
    out: str | None = None
    cache: str | None = None
    storage_options: StorageOptions | None = None
    #: verify every submission store completely before its first evaluation (rerank)
    verify: bool = False
    #: each evaluated submission's report page is rendered and kept under ``CACHE/pages/``
    #: by its finalizing task (rerank's board: ``sgdask.batch.pages``)
    pages: bool = False
    #: submission name -> the method of a model output read as it is (``evaluate --method``)
    methods: dict[str, str] = field(default_factory=dict)


def parse_manifest(doc: Any, label: str) -> ManyJob:
    """A ManyJob from a manifest document, with errors naming the field."""
    if not isinstance(doc, dict):
        raise InputError(label, "not a mapping", expected="gt, submissions, ...")
    for key in ("gt", "submissions"):
        if key not in doc:
            raise InputError(label, "missing", field=key)
    subs = doc["submissions"]
    if not isinstance(subs, list) or not subs:
        raise InputError(label, "not a non-empty list", field="submissions")
    _check_keys(doc, (*_MANIFEST_KEYS, *(f.name for f in fields(Settings))), label, None)
    options = Settings.from_mapping(doc)
    parsed, methods = [], {}
    for i, sub in enumerate(subs):
        if not isinstance(sub, dict) or not {"name", "url"} <= set(sub):
            raise InputError(label, "needs name and url", field=f"submissions[{i}]")
        _check_keys(sub, _ENTRY_KEYS, label, f"submissions[{i}]")
        protocols = sub.get("protocols", options.protocols)
        if isinstance(protocols, list):
            protocols = ",".join(str(p) for p in protocols)
        try:
            get_protocols(protocols)
        except SettingError as err:
            what = "".join(p for p in err.pieces()[2:] if isinstance(p, str))
            raise InputError(label, what, field=f"submissions[{i}].protocols",
                             expected=err.fix) from None
        if "method" in sub:
            methods[str(sub["name"])] = _checked_method(sub["method"], label, i)
        parsed.append((str(sub["name"]), str(sub["url"]), protocols))
    return ManyJob(str(doc["gt"]), parsed, options, doc.get("out"), doc.get("cache"),
                   doc.get("storage_options"), methods=methods)


def _checked_method(given: Any, label: str, i: int) -> str:
    """A submission's ``method``: one ``evaluate --method`` takes."""
    if not isinstance(given, str) or given not in METHODS:
        raise InputError(label, f"{str(given)[:40]!r} is not a method",
                         field=f"submissions[{i}].method", expected=Choose(str(given), METHODS))
    return given


def _check_keys(doc: dict, known: tuple[str, ...], label: str, where: str | None) -> None:
    """An ``InputError`` for the first key of ``doc`` that is not ``known`` (a misspelt
    setting would otherwise be ignored), with the nearest one."""
    for key in doc:
        if key not in known:
            raise InputError(label, f"unknown key {key!r}", field=where,
                             expected=Choose(str(key), known))


def load_manifest(url: str, storage_options: StorageOptions | None = None) -> ManyJob:
    fs, path = filesystem(url, storage_options)
    try:
        with fs.open(path, "r") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(url, "file not found") from None
    doc = strict_yaml(text, url)
    job = parse_manifest(doc, url)
    if job.storage_options is None:
        job.storage_options = storage_options
    return job


@dataclass
class ManyOutcome:
    """Reports per submission and protocol, what came from the cache, and the submissions
    that failed (``run_many(isolate=True)``: each alone)."""

    reports: dict[str, dict[str, Report]]
    cached: list[tuple[str, str]]
    evaluated: list[tuple[str, str]]
    gt_parts_read: list[str]
    keys: dict[tuple[str, str], str] = field(default_factory=dict)  # result cache keys
    #: submission name -> how its instances were matched: ``masks`` or ``boxes``
    matching: dict[str, str] = field(default_factory=dict)
    failed: dict[str, SgdaskError] = field(default_factory=dict)


def _matching_mode(gt_manifest: dict[str, Any], sub_manifest: dict[str, Any]) -> str:
    """``masks`` when the GT and the submission both hold masks (mask IoU), else ``boxes``:
    numbers of the two modes are not comparable, so boards never rank them together."""
    both = gt_manifest.get("instances") == "masks" == sub_manifest.get("instances")
    return "masks" if both else "boxes"


def plan_cache(job: ManyJob, cache: ResultCache | None, log: Log = print,
               failed: dict[str, SgdaskError] | None = None, slim: bool = False
               ) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], Report],
                          dict[str, str]]:
    """Cache keys of every (submission, protocol), the reports already cached (checked:
    a damaged entry is logged and counts as absent) and each submission's matching mode;
    ``failed``: where a submission whose manifest cannot be read is named instead of
    raised; ``slim``: cached reports without per-image rows and terms."""
    gt_manifest = StoreReader(job.gt, job.storage_options, "gt").manifest
    stats_hash = (stats_digest(job.options.stats, job.storage_options) if job.options.stats
                  else None)
    groups_hash = (groups_digest(job.options.predicate_groups, job.storage_options)
                   if job.options.predicate_groups else None)
    keys, hits, matching = {}, {}, {}
    for name, url, protocols in job.submissions:
        try:
            sub_manifest = submission_manifest(url, job.methods.get(name), job.storage_options)
        except SgdaskError as err:
            if failed is None:
                raise
            failed[name] = err
            continue
        matching[name] = _matching_mode(gt_manifest, sub_manifest)
        for protocol in get_protocols(protocols):
            key = cache_key(gt_manifest, sub_manifest, protocol, job.options, stats_hash,
                            groups_hash)
            keys[(name, protocol.name)] = key
            found = cache.get(key, log, slim) if cache else None
            if found is not None:
                hits[(name, protocol.name)] = found
    return keys, hits, matching


@dataclass(frozen=True)
class Written:
    """What a submission's finalizing task writes on the worker, once its reports are
    final: their cache entries (``keys``: per protocol), its reports under ``out`` and its
    report page at ``page``."""

    cache: str | None
    out: str | None
    keys: dict[str, str]
    storage_options: StorageOptions | None
    page: str | None = None

    def __call__(self, name: str, reports: dict[str, Report]) -> None:
        if self.cache:
            cache = ResultCache(self.cache, self.storage_options)
            for protocol, report in reports.items():
                cache.put(self.keys[protocol], report,
                          {"submission": name, "protocol": protocol})
        if self.out:
            write_reports(reports, join(self.out, name), self.storage_options)
        if self.page:
            render_page(reports, name, self.page, self.storage_options)


def run_many(job: ManyJob, client: Client | None = None, scheduler: str | Local | None = None,
             progress: bool = False, dry_run: bool = False, log: Log = print,
             isolate: bool = False, slim: bool = False) -> ManyOutcome:
    """Evaluate what the cache lacks in one graph, fill the cache, write ``job.out``.

    Each evaluated submission's cache entries and reports are written by its own task on
    the cluster (with intervals, the reports are written here, once they have them).
    ``isolate``: a submission that fails fails alone (named in ``failed``), the others are
    evaluated and written; ``slim``: evaluated reports come back without per-image rows and
    terms (what a summary needs; nothing per image reaches this process), and so do cached
    ones unless this process writes them (``job.out``) or computes intervals."""
    cache_url = job.cache or (join(job.out, "cache") if job.out else None)
    existing(job.gt, job.storage_options)
    for written, what in ((job.out, "reports"), (cache_url, "the result cache")):
        if written:
            check_output_outside_stores(written, job.storage_options, what)
    cache = ResultCache(cache_url, job.storage_options) if cache_url else None
    failed: dict[str, SgdaskError] = {}
    with_ci = job.options.intervals is not None
    # cached reports are written to job.out from here, and intervals need their terms
    keys, hits, matching = plan_cache(job, cache, log, failed if isolate else None,
                                      slim and not with_ci and not job.out)
    for name, protocol in hits:
        log(f"cached: {name} / {protocol} (key {keys[(name, protocol)]})")
    missing: dict[str, list[str]] = {}
    for name, protocol in keys:
        if (name, protocol) not in hits:
            missing.setdefault(name, []).append(protocol)
            log(f"{'would evaluate' if dry_run else 'to evaluate'}: {name} / {protocol}")
    fresh: dict[str, dict[str, Report]] = {}
    parts_read: list[str] = []
    if missing and not dry_run:
        urls = {name: url for name, url, _ in job.submissions}
        out = None if with_ci else job.out
        partly_cached = {name for name, _ in hits}
        written = {name: Written(cache_url, out, {p: keys[(name, p)] for p in protocols},
                                 job.storage_options,
                                 _page_of(job, cache_url, name, keys, partly_cached))
                   for name, protocols in missing.items()} if cache_url or out else {}
        methods = {n: ResultsMethod(m) for n, m in job.methods.items() if n in missing}
        result = evaluate_many(job.gt, [(n, urls[n], ",".join(p)) for n, p in missing.items()],
                               replace(job.options, ci=None), client, scheduler,
                               job.storage_options, progress, methods=methods,
                               isolate=isolate, then=written, slim=slim and not with_ci,
                               verify=job.verify)
        fresh, parts_read = result.reports, result.gt_parts_read
        failed.update(result.failed)
    for name in failed:
        log(f"failed: {name}")
    reports: dict[str, dict[str, Report]] = {}
    for (name, protocol) in keys:
        report = hits.get((name, protocol)) or fresh.get(name, {}).get(protocol)
        if report is not None:
            reports.setdefault(name, {})[protocol] = report
    if with_ci and reports:
        with_intervals(job, reports)
    if job.out and not dry_run:
        write_outputs(job, reports if with_ci else
                      {n: by_protocol for n, by_protocol in reports.items() if n not in fresh})
        write_summary(job, reports)
    evaluated = [(n, p) for n, ps in missing.items() if n not in failed for p in ps] \
        if not dry_run else []
    return ManyOutcome(reports, sorted(hits), evaluated, parts_read, keys, matching, failed)


def _page_of(job: ManyJob, cache: str | None, name: str, keys: dict[tuple[str, str], str],
             partly_cached: set[str]) -> str | None:
    """Where a submission's finalizing task keeps its report page: with ``job.pages``,
    when every protocol of the submission is evaluated (a page shows them all; one with a
    protocol cached is rendered from the cache, ``sgdask.batch.pages.report_pages``)."""
    if not (job.pages and cache) or name in partly_cached:
        return None
    return page_url(cache, name, keys)


def with_intervals(job: ManyJob, reports: dict[str, dict[str, Report]]) -> None:
    """Bootstrap intervals on every report, cached or fresh (the cache holds none: they
    come from the cached terms, the same resamples for every report)."""
    assert job.options.intervals is not None
    gt = StoreReader(job.gt, job.storage_options, "gt")
    _, composition = gt_training_stats(gt, job.options.stats, job.storage_options)
    for by_protocol in reports.values():
        for report in by_protocol.values():
            add_intervals(report, job.options.intervals, composition)


def summary_rows(reports: dict[str, dict[str, Report]]) -> list[dict[str, Any]]:
    """One row per (submission, protocol) with every overall metric."""
    return [{"submission": name, "protocol": protocol, **report.metrics}
            for name, by_protocol in reports.items()
            for protocol, report in by_protocol.items()]


def write_outputs(job: ManyJob, reports: dict[str, dict[str, Report]]) -> None:
    """Every submission's reports under ``job.out``."""
    assert job.out is not None
    for name, by_protocol in reports.items():
        write_reports(by_protocol, join(job.out, name), job.storage_options)


def write_summary(job: ManyJob, reports: dict[str, dict[str, Report]]) -> None:
    """``summary.json``: one row per (submission, protocol) with every overall metric
    (none when every submission failed: ``job.out`` may then have no report yet)."""
    assert job.out is not None
    fs, path = filesystem(join(job.out, "summary.json"), job.storage_options)
    fs.makedirs(fs._parent(path), exist_ok=True)
    with fs.open(path, "w") as f:
        json.dump(summary_rows(reports), f, indent=1)
