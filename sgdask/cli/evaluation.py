"""Commands that score: ``evaluate``, ``compare``, ``evaluate-many``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from sgdask.cli.console import (
    compile_note,
    err_console,
    print_comparison,
    print_delta,
    print_lint,
    print_many,
    print_report,
    progress_bar,
)
from sgdask.cli.options import (
    CLUSTER,
    INPUT,
    INTERVALS,
    PROTOCOL,
    ClusterFile,
    Gateway,
    Limits,
    Processes,
    Scheduler,
    StorageOpt,
    Workers,
    cluster_choice,
    storage_options,
)
from sgdask.cli.process import freeze_imports
from sgdask.core.settings import DEFAULTS
from sgdask.errors import SgdaskError, checked_choice
from sgdask.io.archive import ArchiveLimits
from sgdask.method_names import METHODS
from sgdask.protocols import PROTOCOLS

Aggregation = Annotated[str, typer.Option(
    metavar="NAME", rich_help_panel=PROTOCOL, help="per_predicate, pooled or image")]
CacheDir = Annotated[str | None, typer.Option(
    "--cache-dir", metavar="DIR", rich_help_panel=INPUT,
    help="cache of GT stores ingested from psg.json (default: ~/.cache/sgdask)")]
_Ks = Annotated[str, typer.Option(
    "--k", metavar="K[,K...]", rich_help_panel=PROTOCOL,
    help="top-k cut-offs: integers, or xF for F times the image's GT relations")]
_PartitionSize = Annotated[int | None, typer.Option(
    metavar="N", rich_help_panel=CLUSTER,
    help="images per Dask task (default: GT store parts, about 256 images each)")]
_Stats = Annotated[str | None, typer.Option(
    metavar="PATH", rich_help_panel=INPUT,
    help="training statistics from `sgdask stats` (default: the GT store's)")]
_PROTOCOLS = ", ".join(PROTOCOLS)


def evaluate(gt: Annotated[str, typer.Option(
                 "--gt", metavar="PATH", help="GT store, or psg.json (ingested once, cached)")],
             pred: Annotated[str, typer.Option(
                 "--pred", metavar="PATH",
                 help="submission store, SGBench ZIP or JSON, a PVSG results directory, or "
                 "(with --method) result file")],
             gt_masks: Annotated[str | None, typer.Option(
                 "--gt-masks", "--masks", metavar="DIR", rich_help_panel=INPUT,
                 help="with --gt psg.json: the panoptic PNGs (omit for box-only GT)")] = None,
             pred_masks: Annotated[str | None, typer.Option(
                 "--pred-masks", metavar="DIR", rich_help_panel=INPUT,
                 help="--pred is COCO panoptic predictions: their PNGs (PQ only)")] = None,
             keep_store: Annotated[str | None, typer.Option(
                 "--keep-store", metavar="PATH",
                 help="also keep a submission file converted, as a store here")] = None,
             method: Annotated[str | None, typer.Option(
                 metavar="METHOD", rich_help_panel=INPUT,
                 help=f"--pred is a model's result file: {', '.join(METHODS)}")]
             = None,
             instance_scores: Annotated[bool, typer.Option(
                 "--instance-scores", rich_help_panel=INPUT,
                 help="with --method: keep refine_bboxes' scores as instance scores")]
             = False,
             cache_dir: CacheDir = None,
             protocol: Annotated[str, typer.Option(
                 metavar="NAME[,...]", rich_help_panel=PROTOCOL,
                 help=f"one or more of {_PROTOCOLS}")]
             = DEFAULTS.protocols,
             k: _Ks = DEFAULTS.ks,
             aggregation: Aggregation = DEFAULTS.aggregation,
             partition_size: _PartitionSize = DEFAULTS.partition_size,
             scheduler: Scheduler = None, workers: Workers = None,
             processes: Processes = None,
             cluster_file: ClusterFile = None, gateway_url: Gateway = None,
             out: Annotated[str | None, typer.Option(
                 metavar="DIR", help="write metrics.json, Parquet tables and reports here")]
             = None,
             stats: _Stats = DEFAULTS.stats,
             predicate_groups: Annotated[str | None, typer.Option(
                 "--predicate-groups", metavar="PATH", rich_help_panel=INPUT,
                 help="JSON groups of predicates for mR@k[G] (default: head/body/tail)")]
             = DEFAULTS.predicate_groups,
             legacy_metrics: Annotated[bool, typer.Option(
                 "--legacy-metrics", rich_help_panel=PROTOCOL,
                 help="also compute the legacy pair accuracy A@k")] = DEFAULTS.legacy,
             tau: Annotated[float, typer.Option(
                 metavar="TAU", rich_help_panel=PROTOCOL, help="wIMR weight exponent")]
             = DEFAULTS.tau,
             match_labels: Annotated[bool, typer.Option(
                 "--match-labels/--no-match-labels", rich_help_panel=PROTOCOL,
                 help="match only GT instances of the predicted category (docs: Metrics)")]
             = DEFAULTS.match_labels,
             ci: Annotated[float | None, typer.Option(
                 "--ci", metavar="LEVEL", rich_help_panel=INTERVALS,
                 help="bootstrap intervals at this level, e.g. 0.95")] = DEFAULTS.ci,
             resamples: Annotated[int, typer.Option(
                 metavar="N", rich_help_panel=INTERVALS, help="bootstrap resamples")]
             = DEFAULTS.resamples,
             seed: Annotated[int, typer.Option(
                 metavar="N", rich_help_panel=INTERVALS, help="seed of the resamples")]
             = DEFAULTS.seed,
             ci_metrics: Annotated[str | None, typer.Option(
                 "--ci-metrics", metavar="NAME[,...]", rich_help_panel=INTERVALS,
                 help="intervals only for these metrics (mR@50) or families (mR)")]
             = DEFAULTS.ci_metrics,
             limit: Limits = None, storage_option: StorageOpt = None,
             overwrite: Annotated[bool, typer.Option(
                 help="replace an existing report at --out")] = False) -> None:
    """Score a submission against the ground truth.

    Prints the table of every metric. The submission is a store or a file (SGBench ZIP or
    JSON; with --method a model's result file); the ground truth a store or psg.json.
    COCO panoptic predictions (a JSON and --pred-masks) are scored for panoptic quality
    against a COCO panoptic GT (a JSON and --gt-masks), as panopticapi's pq_compute.
    Scoring runs on a Dask cluster."""
    from sgdask.cli.setting_files import check_setting_files
    from sgdask.cluster import dask_client
    from sgdask.core.settings import Settings
    from sgdask.formats.methods import ResultsMethod
    from sgdask.formats.sniff import evaluation_inputs
    from sgdask.pipeline import evaluate_protocols
    from sgdask.report.writers import check_report_target, write_reports
    from sgdask.store.store import check_output_outside_stores, check_store_target

    freeze_imports()
    if pred_masks is not None or is_coco_panoptic(pred, storage_options(storage_option)):
        return _evaluate_pq(gt, gt_masks, pred, pred_masks, out, limit, storage_option,
                            cluster_choice(scheduler, False, workers, processes,
                                           cluster=cluster_file, gateway=gateway_url))
    settings = Settings(protocols=protocol, ks=k, aggregation=aggregation,
                        partition_size=partition_size, stats=stats,
                        predicate_groups=predicate_groups, legacy=legacy_metrics, tau=tau,
                        match_labels=match_labels, ci=ci, resamples=resamples, seed=seed,
                        ci_metrics=ci_metrics).checked()
    options = storage_options(storage_option)
    if instance_scores and method is None:
        raise SgdaskError("--instance-scores: only with --method")
    if method is not None:
        checked_choice("method", method, METHODS, "method")
    check_setting_files(settings, options)
    evaluation_inputs(gt, pred, gt_masks, method, options)
    if out:
        check_output_outside_stores(out, options)
        check_report_target(out, overwrite, options)
    elif overwrite:
        raise SgdaskError("--overwrite: only with --out")
    if keep_store:
        check_store_target(keep_store, "submission", options)
    start = time.perf_counter()
    limits = ArchiveLimits.from_pairs(limit)
    how = None if method is None else ResultsMethod(method, instance_scores)
    note = compile_note()
    if note:
        err_console.print(note)
    with dask_client(None, cluster_choice(scheduler, False, workers, processes,
                                          cluster=cluster_file, gateway=gateway_url)) as client:
        gt_store = _gt_store(gt, gt_masks, cache_dir, options, client, limits)
        if how is not None and keep_store is not None:
            from sgdask.formats import submission_format

            with progress_bar("converting results", None) as advance:
                submission_format(pred, options, how.method).convert(
                    pred, keep_store, gt_store, options, progress=advance, cluster=client,
                    limits=limits, method=how.method, instance_scores=how.instance_scores)
            pred, keep_store, how = keep_store, None, None
        reports = evaluate_protocols(gt_store, pred, settings=settings, client=client,
                                     storage_options=options, progress=True, limits=limits,
                                     keep_store=keep_store, method=how, states=False)
    for report in reports.values():
        print_report(report)
    if len(reports) > 1:
        print_delta(reports)
    print_lint(next(iter(reports.values())))
    err_console.print(f"evaluated in {time.perf_counter() - start:.1f} s")
    if out:
        for path in write_reports(reports, out, options, overwrite):
            err_console.print(f"wrote {path}")


def is_coco_panoptic(url: str, options: Any) -> bool:
    """Whether ``url`` is a COCO panoptic JSON (``evaluate`` then scores PQ alone)."""
    from sgdask.formats.sniff import COCO_PANOPTIC, what_is

    try:
        return what_is(url, options).kind == COCO_PANOPTIC
    except SgdaskError:  # unreadable: the usual checks, GT first, say so in their order
        return False


def _evaluate_pq(gt: str, gt_masks: str | None, pred: str, pred_masks: str | None,
                 out: str | None, limit: Any, storage_option: Any, cluster: Any) -> None:
    """``evaluate`` of COCO panoptic predictions: panoptic quality (``sgdask.pq``)."""
    from sgdask.cluster import dask_client
    from sgdask.formats.sniff import coco_panoptic_inputs
    from sgdask.pq import evaluate_pq
    from sgdask.report.writers import write_reports
    from sgdask.store.store import check_output_outside_stores

    options = storage_options(storage_option)
    coco_panoptic_inputs(gt, gt_masks, pred, pred_masks, options)
    if out:
        check_output_outside_stores(out, options)
    start = time.perf_counter()
    assert gt_masks is not None and pred_masks is not None  # checked above
    with dask_client(None, cluster) as client:
        report = evaluate_pq(gt, gt_masks, pred, pred_masks, client, options,
                             ArchiveLimits.from_pairs(limit))
    _print_pq(report)
    err_console.print(f"evaluated in {time.perf_counter() - start:.1f} s")
    if out:
        for path in write_reports({report.protocol["name"]: report}, out, options):
            err_console.print(f"wrote {path}")


def _print_pq(report: Any) -> None:
    """Panoptic quality as panopticapi prints it: PQ, SQ, RQ (%) and the number of
    categories, for all, things and stuff; then the notes."""
    from rich.markup import escape
    from rich.table import Table

    from sgdask.cli.console import out_console

    out_console.print(escape(report.heading))
    table = Table()
    for name in ("", "PQ", "SQ", "RQ", "N"):
        table.add_column(name, justify="right" if name else "left")
    groups = {"": "All", "_th": "Things", "_st": "Stuff"}
    things = {"": None, "_th": True, "_st": False}
    for suffix, group in groups.items():
        if "PQ" + suffix not in report.metrics:
            continue
        n = sum(1 for row in report.per_category if row["PQ"] is not None
                and things[suffix] in (None, row["isthing"]))
        table.add_row(group, *(f"{100 * report.metrics[m + suffix]:.1f}"
                               for m in ("PQ", "SQ", "RQ")), str(n))
    out_console.print(table)
    for note in report.notes:
        out_console.print(escape(f"note: {note}"))


def _gt_store(gt: str, masks: str | None, cache_dir: str | None, options: Any,
              client: Any, limits: ArchiveLimits | None = None) -> str:
    """``--gt``'s store (``sgdask.cli.gtcache.gt_store``), with a progress bar while a
    psg.json's store is found in the cache or ingested into it."""
    from sgdask.cli.gtcache import cache_entry, cached_gt_store, given_store, is_cached

    store = given_store(gt, masks, options)
    if store is not None:
        return store
    entry = cache_entry(gt, masks, cache_dir, options)
    if is_cached(entry):  # no progress bar: nothing is ingested
        return cached_gt_store(gt, masks, cache_dir, options, client, log=err_console.print,
                               entry=entry)
    with progress_bar("ingesting GT images (cached for the next run)", None) as advance:
        return cached_gt_store(gt, masks, cache_dir, options, client, advance,
                               log=err_console.print, limits=limits, entry=entry)


def compare(gt: Annotated[str, typer.Option(
                "--gt", metavar="PATH", help="GT store, or psg.json (ingested once, cached)")],
            models: Annotated[list[str] | None, typer.Argument(
                metavar="MODEL", help="report directories (evaluate --out), submission "
                "stores, submission files (SGBench ZIP or JSON; with --method, result files) "
                "or, with --registry, registry names; the first is the baseline")] = None,
            out: Annotated[str | None, typer.Option(
                metavar="DIR", help="write comparison.json, its details and an HTML page here")]
            = None,
            group: Annotated[list[str] | None, typer.Option(
                "--group", metavar="NAME=RUN,RUN...", rich_help_panel=INPUT,
                help="several runs of one model, as mean ± sd (repeatable)")] = None,
            all_pairs: Annotated[bool, typer.Option(
                "--all-pairs", help="compare every pair, not only each model with the first")]
            = False,
            protocol: Annotated[str, typer.Option(
                metavar="NAME", rich_help_panel=PROTOCOL, help="the protocol to compare under")]
            = DEFAULTS.protocols,
            metrics: Annotated[str | None, typer.Option(
                "--metrics", metavar="NAME[,...]", rich_help_panel=PROTOCOL,
                help="only these metrics (mR@50) or families (mR)")] = None,
            ci: Annotated[float, typer.Option(
                "--ci", metavar="LEVEL", rich_help_panel=INTERVALS, help="interval level")]
            = 0.95,
            level: Annotated[float | None, typer.Option(
                "--level", hidden=True, help="the former name of --ci")] = None,
            gt_masks: Annotated[str | None, typer.Option(
                "--gt-masks", metavar="DIR", rich_help_panel=INPUT,
                help="with --gt psg.json: the panoptic PNGs (as evaluate)")] = None,
            method: Annotated[str | None, typer.Option(
                metavar="METHOD", rich_help_panel=INPUT,
                help="models given as files are result files of this method (as evaluate)")]
            = None,
            resamples: Annotated[int, typer.Option(
                metavar="N", rich_help_panel=INTERVALS, help="bootstrap resamples")]
            = DEFAULTS.resamples,
            permutations: Annotated[int, typer.Option(
                metavar="N", rich_help_panel=INTERVALS,
                help="approximate-randomization permutations")] = 1000,
            seed: Annotated[int, typer.Option(
                metavar="N", rich_help_panel=INTERVALS,
                help="seed of resamples and permutations")] = DEFAULTS.seed,
            registry: Annotated[str | None, typer.Option(
                metavar="PATH", rich_help_panel=INPUT,
                help="registry: models may be its names (its cache is used)")] = None,
            k: Annotated[str, typer.Option(
                "--k", metavar="K[,K...]", rich_help_panel=PROTOCOL,
                help="top-k cut-offs of stores evaluated here")] = DEFAULTS.ks,
            aggregation: Aggregation = DEFAULTS.aggregation,
            stats: _Stats = DEFAULTS.stats,
            partition_size: _PartitionSize = DEFAULTS.partition_size,
            scheduler: Scheduler = None, workers: Workers = None,
            processes: Processes = None,
            cluster_file: ClusterFile = None, gateway_url: Gateway = None,
            cache_dir: CacheDir = None, storage_option: StorageOpt = None) -> None:
    """Is model B better than model A?

    For every metric: paired bootstrap intervals of the differences,
    approximate-randomization p-values (Holm-corrected), per-predicate differences and
    per-image wins. --group takes the runs of one model (training seeds) as
    NAME=RUN1,RUN2,... after the positional models."""
    from sgdask.batch.compare import (
        CompareJob,
        labels,
        parse_group,
        run_compare,
        write_comparison,
    )
    from sgdask.cli.setting_files import check_setting_files
    from sgdask.cluster import dask_client
    from sgdask.core.settings import Settings
    from sgdask.formats.sniff import expect
    from sgdask.store.store import check_output_outside_stores

    freeze_imports()
    options = storage_options(storage_option)
    expect(gt, "gt", options)
    if out:
        check_output_outside_stores(out, options, "the comparison")
    entries = [(name, [m]) for name, m in zip(labels(models or []), models or [],
                                                strict=True)]
    entries += [parse_group(g) for g in group or []]
    settings = Settings(protocols=protocol, ks=k, aggregation=aggregation,
                        partition_size=partition_size, stats=stats).checked()
    job = CompareJob(gt, entries, protocol, settings, all_pairs,
                     ci if level is None else level, resamples, permutations, seed, metrics,
                     registry, options, method)
    job.check()
    check_setting_files(settings, options)
    with dask_client(None, cluster_choice(scheduler, False, workers, processes,
                                          cluster=cluster_file, gateway=gateway_url)) as client:
        job.gt = _gt_store(gt, gt_masks, cache_dir, options, client)
        comparison = run_compare(job, client, progress=True)
    print_comparison(comparison, metrics)
    if out:
        for path in write_comparison(comparison, out, options):
            err_console.print(f"wrote {path}")


def evaluate_many(manifest: Annotated[str, typer.Argument(
                      metavar="MANIFEST",
                      help="YAML or JSON: gt, submissions, out, cache, options")],
                  scheduler: Scheduler = None, workers: Workers = None,
                  processes: Processes = None,
                  cluster_file: ClusterFile = None, gateway_url: Gateway = None,
                  dry_run: Annotated[bool, typer.Option(
                      "--dry-run", help="list what would be evaluated, then stop")] = False,
                  storage_option: StorageOpt = None) -> None:
    """Evaluate many submissions in one Dask graph.

    Every submission of the manifest is scored against its one GT, through the cache: results
    already there are not computed again. A submission that fails its checks fails alone:
    the others are evaluated and written."""
    from sgdask.batch.many import load_manifest, run_many

    freeze_imports()
    job = load_manifest(manifest, storage_options(storage_option))
    outcome = run_many(job, scheduler=cluster_choice(scheduler, False, workers, processes,
                                                     batch=True,
                                                     cluster=cluster_file, gateway=gateway_url),
                       progress=True, dry_run=dry_run,
                       log=err_console.print, isolate=True, slim=True)
    print_many(outcome)
    if outcome.failed:  # each failed alone: the others are evaluated and written
        (_, first), *others = outcome.failed.items()
        for name, err in others:
            err_console.print(f"{name}: {err.render('cli')}", markup=False, highlight=False,
                              soft_wrap=True)
        raise first
