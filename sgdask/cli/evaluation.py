"""Commands that score: ``evaluate``, ``compare``, ``evaluate-many``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from sgdask.cli.console import (
    err_console,
    print_comparison,
    print_delta,
    print_many,
    print_report,
    progress_bar,
)
from sgdask.cli.options import (
    Limits,
    Processes,
    Scheduler,
    StorageOpt,
    Workers,
    cluster_choice,
    storage_options,
)
from sgdask.core.settings import DEFAULT_PARTITION_SIZE
from sgdask.errors import SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.methods import METHODS
from sgdask.kernels.selection import DEFAULT_KS
from sgdask.protocols import DEFAULT_PROTOCOL

Aggregation = Annotated[str, typer.Option(help="per_predicate, pooled or image")]
CacheDir = Annotated[str | None, typer.Option(
    "--cache-dir", help="where GT stores ingested from psg.json are cached "
    "(default: $XDG_CACHE_HOME/sgdask, i.e. ~/.cache/sgdask)")]


def evaluate(gt: Annotated[str, typer.Option(
                 "--gt", help="GT store URL, or psg.json (ingested once, then cached)")],
             pred: Annotated[str, typer.Option(
                 "--pred", help="submission store URL, or an SGBench ZIP or JSON file "
                 "(decoded and checked on the cluster as it is scored); with --method, a "
                 "model's result file or .npz directory")],
             gt_masks: Annotated[str | None, typer.Option(
                 "--gt-masks", "--masks", help="with --gt psg.json: the panoptic PNGs "
                 "(omit for box-only GT)")] = None,
             keep_store: Annotated[str | None, typer.Option(
                 "--keep-store", help="with a submission file: also keep it converted, "
                 "as a submission store at this URL")] = None,
             method: Annotated[str | None, typer.Option(
                 help="--pred is a model's result file (as `convert --method`): "
                 f"{'|'.join(METHODS)}; each image decoded and checked by the task that "
                 "scores it (--keep-store: converted into that store first, then scored)")]
             = None,
             instance_scores: Annotated[bool, typer.Option(
                 "--instance-scores", help="with --method: keep the score column of "
                 "refine_bboxes as instance scores (as `convert --instance-scores`)")]
             = False,
             cache_dir: CacheDir = None,
             protocol: Annotated[str, typer.Option(
                 help="singlempo, sgbench (SGBench 1.0.0), sgbench2 (SGBench 2.0.0), "
                 "multimpo, sgbpytorch (Scene-Graph-Benchmark.pytorch on boxes), or "
                 "several: singlempo,multimpo")]
             = DEFAULT_PROTOCOL,
             k: Annotated[str, typer.Option("--k", help="ks: integers and relative xF")]
             = DEFAULT_KS,
             aggregation: Aggregation = "per_predicate",
             partition_size: Annotated[int | None, typer.Option(
                 help="images per Dask task (default: whole GT store parts, grouped to "
                 "about 256 images)")]
             = DEFAULT_PARTITION_SIZE,
             scheduler: Scheduler = None, workers: Workers = None,
             processes: Processes = None,
             out: Annotated[str | None, typer.Option(
                 help="directory for metrics.json, per_predicate/per_image.parquet, "
                 "report.md, report.html")] = None,
             stats: Annotated[str | None, typer.Option(
                 help="training statistics from `sgdask stats` (default: the GT store's)")]
             = None,
             predicate_groups: Annotated[str | None, typer.Option(
                 "--predicate-groups", help="predicate groups of mR@k[G]: a JSON file, group "
                 "name -> predicate names (default: VG150's head/body/tail split, else the "
                 "training frequency in thirds)")] = None,
             legacy_metrics: Annotated[bool, typer.Option(
                 "--legacy-metrics", help="also compute the legacy pair accuracy A@k")]
             = False,
             tau: Annotated[float, typer.Option(help="wIMR weight exponent")] = 0.5,
             match_labels: Annotated[bool, typer.Option(
                 "--match-labels/--no-match-labels",
                 help="match predictions only to GT instances of the same category "
                 "(SPEC section 4; recorded in the report)")] = True,
             ci: Annotated[float | None, typer.Option(
                 "--ci", help="bootstrap intervals at this level (e.g. 0.95) for every "
                 "metric: percentile bootstrap over images")] = None,
             resamples: Annotated[int, typer.Option(
                 help="with --ci: bootstrap resamples")] = 1000,
             seed: Annotated[int, typer.Option(
                 help="with --ci: seed of the resamples (the same for every protocol)")] = 0,
             ci_metrics: Annotated[str | None, typer.Option(
                 "--ci-metrics", help="with --ci: only these metrics, comma separated "
                 "(names like mR@50 or families like mR)")] = None,
             limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Score a submission (store or file) against the GT (store or psg.json) on a Dask
    cluster and print the table."""
    from sgdask.cluster import dask_client
    from sgdask.core.settings import Settings
    from sgdask.io.results import ResultsMethod
    from sgdask.pipeline import evaluate_protocols
    from sgdask.report.writers import write_reports

    settings = Settings(protocols=protocol, ks=k, aggregation=aggregation,
                        partition_size=partition_size, stats=stats,
                        predicate_groups=predicate_groups, legacy=legacy_metrics, tau=tau,
                        match_labels=match_labels, ci=ci, resamples=resamples, seed=seed,
                        ci_metrics=ci_metrics).checked()
    options = storage_options(storage_option)
    if instance_scores and method is None:
        raise SgdaskError("--instance-scores: only with --method")
    start = time.perf_counter()
    limits = ArchiveLimits.from_pairs(limit)
    how = None if method is None else ResultsMethod(method, instance_scores)
    with dask_client(None, cluster_choice(scheduler, False, workers, processes)) as client:
        gt_store = _gt_store(gt, gt_masks, cache_dir, options, client, limits)
        if how is not None and keep_store is not None:
            from sgdask.io.formats import submission_format

            with progress_bar("converting results", None) as advance:
                submission_format(pred, options, how.method).convert(
                    pred, keep_store, gt_store, options, progress=advance, cluster=client,
                    limits=limits, method=how.method, instance_scores=how.instance_scores)
            pred, keep_store, how = keep_store, None, None
        reports = evaluate_protocols(gt_store, pred, settings=settings, client=client,
                                     storage_options=options, progress=True, limits=limits,
                                     keep_store=keep_store, method=how)
    for report in reports.values():
        print_report(report)
    if len(reports) > 1:
        print_delta(reports)
    err_console.print(f"evaluated in {time.perf_counter() - start:.1f} s")
    if out:
        for path in write_reports(reports, out, options):
            err_console.print(f"wrote {path}")


def _gt_store(gt: str, masks: str | None, cache_dir: str | None, options: Any,
              client: Any, limits: ArchiveLimits | None = None) -> str:
    """``--gt``'s store (``sgdask.io.gtcache.gt_store``), with a progress bar while a
    psg.json's store is found in the cache or ingested into it."""
    from sgdask.io.gtcache import cached_gt_store, given_store

    store = given_store(gt, masks, options)
    if store is not None:
        return store
    with progress_bar("ingesting GT images (cached for the next run)", None) as advance:
        return cached_gt_store(gt, masks, cache_dir, options, client, advance,
                               log=err_console.print, limits=limits)


def compare(gt: Annotated[str, typer.Option(
                "--gt", help="GT store URL, or psg.json (ingested once, then cached)")],
            models: Annotated[list[str] | None, typer.Argument(
                help="report directories (evaluate --out), submission stores or, with "
                "--registry, registry names; the first is the baseline")] = None,
            out: Annotated[str | None, typer.Option(
                help="directory for comparison.json, comparison_details.json and "
                "comparison.html")] = None,
            group: Annotated[list[str] | None, typer.Option(
                "--group", help="several runs of one model (training seeds) as "
                "NAME=RUN1,RUN2,...: mean ± sd over runs (repeatable; after the positional "
                "models)")] = None,
            all_pairs: Annotated[bool, typer.Option(
                "--all-pairs", help="compare every pair, not only each model with the "
                "first")] = False,
            protocol: Annotated[str, typer.Option(help="the protocol to compare under")]
            = DEFAULT_PROTOCOL,
            metrics: Annotated[str | None, typer.Option(
                "--metrics", help="only these metrics, comma separated (mR@50 or mR)")]
            = None,
            level: Annotated[float, typer.Option(help="interval level")] = 0.95,
            resamples: Annotated[int, typer.Option(help="bootstrap resamples")] = 1000,
            permutations: Annotated[int, typer.Option(
                help="approximate-randomization permutations")] = 1000,
            seed: Annotated[int, typer.Option(help="seed of resamples and permutations")]
            = 0,
            registry: Annotated[str | None, typer.Option(
                help="registry URL: models may be registry names (its cache is used)")]
            = None,
            k: Annotated[str, typer.Option("--k", help="ks of stores evaluated here")]
            = DEFAULT_KS,
            aggregation: Aggregation = "per_predicate",
            stats: Annotated[str | None, typer.Option(
                help="training statistics (default: the GT store's)")] = None,
            partition_size: Annotated[int | None, typer.Option(
                help="images per Dask task when stores are evaluated")]
            = DEFAULT_PARTITION_SIZE,
            scheduler: Scheduler = None, workers: Workers = None,
            processes: Processes = None,
            cache_dir: CacheDir = None, storage_option: StorageOpt = None) -> None:
    """Is model B better than model A? Paired bootstrap intervals of the differences,
    approximate-randomization p-values (Holm-corrected), per-predicate differences and
    per-image wins, for every metric."""
    from sgdask.batch.compare import (
        CompareJob,
        labels,
        parse_group,
        run_compare,
        write_comparison,
    )
    from sgdask.cluster import dask_client
    from sgdask.core.settings import Settings

    options = storage_options(storage_option)
    entries = [(name, [m]) for name, m in zip(labels(models or []), models or [],
                                                strict=True)]
    entries += [parse_group(g) for g in group or []]
    settings = Settings(protocols=protocol, ks=k, aggregation=aggregation,
                        partition_size=partition_size, stats=stats).checked()
    job = CompareJob(gt, entries, protocol, settings,
                     all_pairs, level, resamples, permutations, seed, metrics, registry,
                     options)
    job.check()
    with dask_client(None, cluster_choice(scheduler, False, workers, processes)) as client:
        job.gt = _gt_store(gt, None, cache_dir, options, client)
        comparison = run_compare(job, client, progress=True)
    print_comparison(comparison, metrics)
    if out:
        for path in write_comparison(comparison, out, options):
            err_console.print(f"wrote {path}")


def evaluate_many(manifest: Annotated[str, typer.Argument(
                      help="YAML/JSON manifest: gt, submissions, out, cache, options")],
                  scheduler: Scheduler = None, workers: Workers = None,
                  processes: Processes = None,
                  dry_run: Annotated[bool, typer.Option(
                      "--dry-run", help="list what would be evaluated, then stop")] = False,
                  storage_option: StorageOpt = None) -> None:
    """Evaluate many submissions against one GT in one Dask graph, through the cache (a
    submission that fails its checks fails alone: the others are evaluated and written)."""
    from sgdask.batch.many import load_manifest, run_many

    job = load_manifest(manifest, storage_options(storage_option))
    outcome = run_many(job, scheduler=cluster_choice(scheduler, False, workers, processes,
                                                     batch=True),
                       progress=True, dry_run=dry_run,
                       log=err_console.print, isolate=True, slim=True)
    print_many(outcome)
    if outcome.failed:  # each failed alone: the others are evaluated and written
        (_, first), *others = outcome.failed.items()
        for name, err in others:
            err_console.print(f"{name}: {err.render('cli')}", markup=False, highlight=False)
        raise first
