"""The ``sgdask`` command. Every user-facing error is one line and a non-zero exit code;
``--debug`` (anywhere on the command line) shows the traceback instead."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from sgdask import __version__
from sgdask.cluster import LOCAL, Local
from sgdask.core.settings import DEFAULT_PARTITION_SIZE
from sgdask.errors import SgdaskError, SgdaskWarning
from sgdask.io.archive import ArchiveLimits, limits_help
from sgdask.io.lock import DEFAULT_LEASE
from sgdask.io.methods import METHODS
from sgdask.kernels.selection import DEFAULT_KS
from sgdask.metrics import RANK_BY, board_columns, format_value, units_note
from sgdask.protocols import DEFAULT_PROTOCOL
from sgdask.report import Report, interval_caption
from sgdask.versions import dependency_versions

if TYPE_CHECKING:
    from sgdask.stats.paired import Comparison

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Distributed evaluation of scene graph generation models.")
err_console = Console(stderr=True)
out_console = Console()

EXIT_ERROR = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130

StorageOpt = Annotated[list[str] | None, typer.Option(
    "--storage-option", "-S", help="fsspec storage option KEY=VALUE (repeatable), "
    "e.g. endpoint_url=http://127.0.0.1:5000")]
Overwrite = Annotated[bool, typer.Option(help="replace an existing store at --out")]
Scheduler = Annotated[str | None, typer.Option(
    help="address of an existing Dask scheduler (default: Dask's scheduler-address setting, "
    "e.g. DASK_SCHEDULER_ADDRESS, else an in-process LocalCluster)")]
InProcess = Annotated[bool, typer.Option(
    "--in-process", help="convert in this process, without Dask (small inputs)")]
Workers = Annotated[int | None, typer.Option(
    "--workers", min=1, help="workers of the local Dask cluster (default: the cores this "
    "process may use)")]
Aggregation = Annotated[str, typer.Option(help="per_predicate, pooled or image")]
CacheDir = Annotated[str | None, typer.Option(
    "--cache-dir", help="where GT stores ingested from psg.json are cached "
    "(default: $XDG_CACHE_HOME/sgdask, i.e. ~/.cache/sgdask)")]
Limits = Annotated[list[str] | None, typer.Option(
    "--limit", help="raise a limit on untrusted input, NAME=VALUE (repeatable; sizes in bytes "
    f"or e.g. 4GiB); defaults: {limits_help()}")]


def cluster_choice(scheduler: str | None, in_process: bool = False,
                   workers: int | None = None) -> str | Local | None:
    """What work runs on: nothing (in process), a scheduler, or a LocalCluster."""
    if in_process:
        return None
    if scheduler and workers:
        raise SgdaskError("--workers: only for the local cluster (not with --scheduler)")
    return scheduler or (Local(workers) if workers else LOCAL)


def parse_value(text: str) -> Any:
    """'true'/'false' -> bool, integers -> int, anything else stays a string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        return text


def storage_options(pairs: list[str] | None) -> dict[str, Any] | None:
    """``["key=value", "config_kwargs.connect_timeout=2", ...]`` -> fsspec storage options
    (dotted keys build nested dicts; None when empty)."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or "" in key.split("."):
            raise SgdaskError(f"--storage-option: {pair!r} is not KEY=VALUE")
        *parents, leaf = key.split(".")
        target = options
        for name in parents:
            target = target.setdefault(name, {})
            if not isinstance(target, dict):
                raise SgdaskError(f"--storage-option: {pair!r} conflicts with an earlier option")
        target[leaf] = parse_value(value)
    return options or None


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Any]:
    """A rich progress bar on stderr; yields the ``advance(n)`` callback."""
    with Progress(console=err_console, transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def print_report(report: Report, console: Console = out_console) -> None:
    header, rows = report.grid(sep="\n", template="{lo}–{hi}")
    title = (f"protocol {report.protocol['name']} v{report.protocol['version']} · "
             f"aggregation {report.aggregation} · "
             f"{report.diagnostics.get('evaluated_images', 0)} images")
    table = Table(title=title, caption=units_note())
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("  ".join(f"{name} {value}" for name, value in report.scalars()))
    for metric, why in report.left_out.items():
        console.print(f"left out {metric}: {why}")
    for note in report.notes:
        console.print(f"note: {note}")
    if report.ci:
        console.print(f"intervals: {interval_caption(report.ci)}")
    missing = report.diagnostics.get("images_missing", 0)
    if missing:
        console.print(f"{missing} evaluated image(s) have no prediction (scored 0)")


def print_delta(reports: dict[str, Report], console: Console = out_console) -> None:
    """Metrics of every protocol side by side, with the difference to the first one."""
    from sgdask.report.writers import protocol_delta

    names = list(reports)
    table = Table(title=f"protocol delta (percentage points, vs {names[0]})")
    table.add_column("metric")
    for name in names:
        table.add_column(name, justify="right")
    for name in names[1:]:
        table.add_column(f"{name} − {names[0]}", justify="right")
    for row in protocol_delta(reports):
        table.add_row(row["metric"], *[fmt(row[n]) for n in names],
                      *[fmt(row[f"delta_{n}"], signed=True) for n in names[1:]])
    console.print(table)


def fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"


@app.callback(invoke_without_command=True)
def main_options(version: Annotated[bool, typer.Option(
                     "--version", help="print sgdask's version and exit")] = False,
                 verbose: Annotated[bool, typer.Option(
                     "--verbose", help="with --version: also the versions of the libraries "
                     "that decide the numbers (what a report's provenance records)")]
                 = False) -> None:
    """The options that come before any command (the group's callback)."""
    if version:
        print(f"sgdask {__version__}")
        if verbose:
            for name, number in dependency_versions().items():
                print(f"{name} {number}")
        raise typer.Exit()
    if verbose:
        raise SgdaskError("--verbose applies to --version")


@app.command()
def synth(out: Annotated[Path, typer.Argument(help="directory to write the dataset into")],
          images: Annotated[int, typer.Option(help="number of test images")] = 200,
          seed: Annotated[int, typer.Option(help="random seed")] = 0,
          height: int = 480, width: int = 640) -> None:
    """Write a synthetic PSG-shaped dataset: psg.json, panoptic PNGs, submission ZIP + JSON."""
    from sgdask.synth import write_dataset

    with progress_bar("synthesizing images", images) as advance:
        paths = write_dataset(out, images, seed, height=height, width=width, progress=advance)
    out_console.print(f"wrote {paths.psg_json}, {paths.masks_dir}/, {paths.submission_zip}, "
                      f"{paths.submission_boxes}")


@app.command("ingest-gt")
def ingest_gt_cmd(psg_json: Annotated[str, typer.Argument(
                      help="psg.json, Visual Genome's VG-SGG-with-attri.h5 or Open Images "
                      "V6's vrd-test-anno.json (path or URL)")],
                  out: Annotated[str, typer.Option("--out", help="store URL to create")],
                  masks: Annotated[str | None, typer.Option(
                      "--masks", "--gt-masks",
                      help="directory of panoptic PNGs (omit for box-only GT)")] = None,
                  dicts: Annotated[str | None, typer.Option(
                      "--dicts", help="Visual Genome: VG-SGG-dicts-with-attri.json")] = None,
                  image_data: Annotated[str | None, typer.Option(
                      "--image-data", help="Visual Genome: image_data.json")] = None,
                  split: Annotated[str | None, typer.Option(
                      help="Visual Genome: test (split flag 2, the default) or val (the first "
                      "5000 usable images of flag 0)")] = None,
                  categories: Annotated[str | None, typer.Option(
                      "--categories", help="Open Images V6: categories_dict.json (default: "
                      "beside the annotation file; --dicts is taken too)")] = None,
                  storage_option: StorageOpt = None, overwrite: Overwrite = False,
                  scheduler: Scheduler = None, in_process: InProcess = False,
                  workers: Workers = None, limit: Limits = None) -> None:
    """Convert OpenPSG, Visual Genome (VG150) or Open Images V6 ground truth into a GT store
    (Parquet + Zarr).

    psg.json's size and nesting depth and each PNG's pixel count are limited (--limit
    max_json_size, max_json_depth, max_layer_pixels), so are the sizes a VG150 h5 file's
    datasets declare (max_h5_dataset_size, max_h5_total_size)."""
    from sgdask.io.formats import FORMATS, GT, OIV6, VG150, recognised

    options = storage_options(storage_option)
    fmt = FORMATS[VG150] if image_data is not None else recognised(psg_json, options, GT)
    if fmt.name == OIV6:
        if masks is not None or split is not None:
            raise SgdaskError(f"{psg_json}: Open Images V6 ground truth has no --masks or "
                              "--split (the file is the split)")
        categories, dicts = categories or dicts, None
    elif categories is not None:
        raise SgdaskError("--categories applies to Open Images V6 ground truth")
    visual_genome = fmt.name == VG150
    if visual_genome and (dicts is None or image_data is None or masks is not None):
        raise SgdaskError(f"{psg_json}: Visual Genome ground truth needs --dicts and "
                          "--image-data (and has no --masks)")
    if split is not None and not visual_genome:
        raise SgdaskError("--split applies to Visual Genome ground truth (psg.json's test "
                          "split is test_image_ids)")
    cluster = cluster_choice(scheduler, in_process, workers)
    given = {"masks_dir": masks, "dicts": dicts, "image_data": image_data, "split": split,
             "categories": categories}
    with progress_bar("ingesting GT images", None) as advance:
        manifest = fmt.convert(psg_json, out, None, options, overwrite=overwrite,
                               progress=advance, cluster=cluster,
                               limits=ArchiveLimits.from_pairs(limit),
                               **{k: v for k, v in given.items() if v is not None})
    dropped = manifest.get("dropped_images")
    note = (f" ({dropped['no_boxes']} without boxes and {dropped['no_relations']} without "
            "relations dropped)" if dropped else "")
    out_console.print(f"GT store {out}: {manifest['n_images']} {manifest.get('split', 'test')} "
                      f"images{note}, {manifest['instances']}, {manifest['content_hash']}")


@app.command()
def convert(submission: Annotated[str, typer.Argument(
                help="SGBench JSON or ZIP; with --method, a model's result file (a pickled "
                "list of Result objects) or a directory of per-image .npz files")],
            out: Annotated[str, typer.Option("--out", help="store URL to create")],
            gt: Annotated[str | None, typer.Option(
                help="GT store to validate ids, sizes and classes against (required with "
                "--method: results are paired with its test images)")] = None,
            storage_option: StorageOpt = None, overwrite: Overwrite = False,
            scheduler: Scheduler = None, in_process: InProcess = False,
            workers: Workers = None, limit: Limits = None,
            from_scores: Annotated[str | None, typer.Option(
                "--from-scores", help="derive the triplet lists from per-pair predicate "
                "scores (Parquet or NPZ, see schemas/scores.md)")] = None,
            rank_by: Annotated[str, typer.Option(
                "--rank-by", help="with --from-scores: rank pairs by the best predicate "
                "score (predicate) or by predicate x subject x object score (triplet, as "
                "Scene-Graph-Benchmark.pytorch and OpenPSG; needs instance scores)")]
            = "predicate",
            ng_limit: Annotated[int | None, typer.Option(
                "--ng-limit", min=0, help="with --from-scores: keep only the first N "
                "triplets of each NG list (Scene-Graph-Benchmark.pytorch evaluates 100)")]
            = None,
            method: Annotated[str | None, typer.Option(
                help="read OpenPSG-family results and derive the lists as SGBench's "
                f"conversion scripts do: {'|'.join(METHODS)} (see schemas/results.md)")]
            = None,
            instance_scores: Annotated[bool, typer.Option(
                "--instance-scores", help="with --method: keep the score column of "
                "refine_bboxes as instance scores (singlempo then merges masks in score "
                "order; SGBench's scripts drop it)")] = False) -> None:
    """Convert an SGBench submission, or a model's result file, into a submission store.

    SGBench files: runs `sgdask validate`'s checks first and stops at the first error.
    Result files (--method): every image is checked as it is converted; any problem stops
    the conversion and leaves no store."""
    from sgdask.io.formats import conversion_options, submission_format
    from sgdask.kernels.scores import RANK_BY

    if rank_by not in RANK_BY:
        raise SgdaskError(f"--rank-by: {rank_by!r} is not one of {', '.join(RANK_BY)}")
    if not from_scores and (rank_by != "predicate" or ng_limit is not None):
        raise SgdaskError("--rank-by and --ng-limit apply to lists derived --from-scores")
    limits = ArchiveLimits.from_pairs(limit)
    check_method_options(method, gt, from_scores, instance_scores)
    cluster = cluster_choice(scheduler, in_process, workers)
    options = storage_options(storage_option)
    fmt = submission_format(submission, options, method)
    given = {"method": method, "instance_scores": instance_scores or None,
             "from_scores": from_scores, "rank_by": rank_by if from_scores else None,
             "ng_limit": ng_limit}
    chosen = conversion_options(fmt, {k: v for k, v in given.items() if v is not None})
    with progress_bar("converting images", None) as advance:
        manifest = fmt.convert(submission, out, gt, options, overwrite=overwrite,
                               progress=advance, cluster=cluster, limits=limits, **chosen)
    ranked = f", ranked by {rank_by}" if from_scores else ""
    out_console.print(f"submission store {out}: {manifest['n_images']} images, "
                      f"{manifest['instances']}{ranked}, {manifest['content_hash']}")


def check_method_options(method: str | None, gt: str | None, from_scores: str | None,
                         instance_scores: bool) -> None:
    """The option combinations ``convert`` accepts."""
    if method is None:
        if instance_scores:
            raise SgdaskError("--instance-scores: only with --method (SGBench files carry "
                              "their own instance scores)")
        return
    if gt is None:
        raise SgdaskError("--method needs --gt: results are paired with the GT store's test "
                          "images, in psg.json's order")
    if from_scores is not None:
        raise SgdaskError("--from-scores and --method: choose one way to derive the lists")


@app.command()
def validate(submission: Annotated[str, typer.Argument(
                 help="SGBench JSON or ZIP, or a file of another registered format")],
             gt: Annotated[str | None, typer.Option(
                 help="GT store to check ids, sizes and classes against")] = None,
             max_problems: Annotated[int, typer.Option(
                 min=1, help="stop after this many problems")] = 50,
             storage_option: StorageOpt = None, limit: Limits = None) -> None:
    """Check a submission without converting it: print every problem, one per line.

    Exit code 2 if there is any error, 0 otherwise (warnings included)."""
    from sgdask.io.formats import submission_format

    options = storage_options(storage_option)
    fmt = submission_format(submission, options)
    if fmt.validate is None:
        raise SgdaskError(f"{submission}: {fmt.name} files are checked as they are converted")
    problems = fmt.validate(submission, gt, options, ArchiveLimits.from_pairs(limit),
                            max_problems)
    for problem in problems:
        print(problem)
    errors = sum(p.is_error for p in problems)
    more = " (stopped at --max-problems)" if len(problems) >= max_problems else ""
    print(f"sgdask: {submission}: {errors} error(s), {len(problems) - errors} warning(s)"
          f"{more}", file=sys.stderr)
    if errors:
        raise typer.Exit(EXIT_ERROR)


@app.command()
def verify(urls: Annotated[list[str] | None, typer.Argument(
               help="store URLs (GT or submission)")] = None,
           registry: Annotated[str | None, typer.Option(
               help="also check a registry: its entries, the stores of its submissions, "
               "every result cache entry and kept report page against its hashes")] = None,
           storage_option: StorageOpt = None) -> None:
    """Check stores completely: the manifest, every file's size and SHA-256, every Parquet
    file and its page checksums, every mask chunk and its CRC-32C, the tables' consistency.

    --registry: every entry and status record parses, every converted submission's store
    verifies so, every result cache entry's files match the sizes and SHA-256 its
    entry.json lists, every kept report page matches the hash beside it (entries and pages
    without hashes, or unfinished, are listed: never used, not damage).

    One line per problem, or per intact store or registry. Exit codes: 0 all intact, 2 a
    problem."""
    from sgdask.batch.audit import verify_registry
    from sgdask.io.verify import verify_store

    if not urls and registry is None:
        raise SgdaskError("verify: give store URLs, or --registry URL")
    options = storage_options(storage_option)
    damaged = 0
    for url in urls or []:
        verdict = verify_store(url, options)
        for problem in verdict.problems:
            print(one_line(problem))
        if verdict.intact:
            checksums = (f"{verdict.files} files checked against their SHA-256"
                         if verdict.files else f"format version {verdict.version}: "
                         "no checksums to check")
            print(f"{verdict.url}: intact ({checksums})")
        else:
            damaged += 1
    if registry is not None:
        found = verify_registry(registry, options)
        for line in (*found.problems, *found.notes):
            print(one_line(line))
        checked = (f"{found.entries} entries, {found.stores} stores, {found.cache_entries} "
                   f"cache entries, {found.pages} report pages checked")
        print(f"{found.url}: intact ({checked})" if found.intact else
              f"{found.url}: {len(found.problems)} problem(s) ({checked})")
        damaged += not found.intact
    if damaged:
        raise typer.Exit(EXIT_ERROR)


@app.command()
def stats(psg_json: Annotated[str, typer.Argument(
              help="psg.json, or Open Images V6's vrd-train-anno.json (path or URL)")],
          out: Annotated[str, typer.Option("--out", help="Parquet file URL to write")],
          storage_option: StorageOpt = None) -> None:
    """Training-split triplet statistics (zero-shot types, wIMR weights) as Parquet."""
    from sgdask.io.ingest import read_bytes
    from sgdask.io.openimages import oi_train_stats
    from sgdask.io.sgbench import load_json
    from sgdask.io.training_stats import train_stats, write_stats

    options = storage_options(storage_option)
    doc = load_json(read_bytes(psg_json, options, "psg.json"), psg_json)
    table = (oi_train_stats if isinstance(doc, list) else train_stats)(doc, psg_json)
    if not len(table):
        raise SgdaskError(f"{psg_json}: train_image_ids: no training relation found")
    write_stats(table, out, options)
    out_console.print(f"wrote {out}: {len(table)} triplet types")


@app.command()
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
                 help="singlempo, sgbench, multimpo, sgbpytorch (Scene-Graph-Benchmark."
                 "pytorch on boxes), oiv6 (Open Images V6: R@50, AP, score_wtd), or several: "
                 "singlempo,multimpo")]
             = DEFAULT_PROTOCOL,
             k: Annotated[str, typer.Option("--k", help="ks: integers and relative xF")]
             = DEFAULT_KS,
             aggregation: Aggregation = "per_predicate",
             partition_size: Annotated[int | None, typer.Option(
                 help="images per Dask task (default: whole GT store parts, grouped to "
                 "about 256 images)")]
             = DEFAULT_PARTITION_SIZE,
             scheduler: Scheduler = None, workers: Workers = None,
             out: Annotated[str | None, typer.Option(
                 help="directory for metrics.json, per_predicate/per_image.parquet, "
                 "report.md, report.html")] = None,
             stats: Annotated[str | None, typer.Option(
                 help="training statistics from `sgdask stats` (default: the GT store's)")]
             = None,
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
                        partition_size=partition_size, stats=stats, legacy=legacy_metrics,
                        tau=tau, match_labels=match_labels, ci=ci, resamples=resamples,
                        seed=seed, ci_metrics=ci_metrics).checked()
    options = storage_options(storage_option)
    if instance_scores and method is None:
        raise SgdaskError("--instance-scores: only with --method")
    start = time.perf_counter()
    limits = ArchiveLimits.from_pairs(limit)
    how = None if method is None else ResultsMethod(method, instance_scores)
    with dask_client(None, cluster_choice(scheduler, False, workers)) as client:
        gt_store = gt_store_of(gt, gt_masks, cache_dir, options, client, limits)
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


def gt_store_of(gt: str, masks: str | None, cache_dir: str | None, options: Any,
                client: Any, limits: ArchiveLimits | None = None) -> str:
    """The GT store to evaluate against: ``gt`` itself, or the cached store of a psg.json."""
    from sgdask.io.fs import filesystem
    from sgdask.io.gtcache import cached_gt_store
    from sgdask.io.sources import is_store
    from sgdask.io.store import missing_manifest

    if is_store(gt, options):
        if masks:
            raise SgdaskError(f"--gt-masks: {gt} is a GT store already (masks come with it)")
        return gt
    fs, path = filesystem(gt, options)
    if fs.isdir(path):  # neither a store nor a psg.json
        raise missing_manifest(gt)
    with progress_bar("ingesting GT images (cached for the next run)", None) as advance:
        return cached_gt_store(gt, masks, cache_dir, options, client, advance,
                               log=err_console.print, limits=limits)


@app.command()
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
    with dask_client(None, cluster_choice(scheduler, False, workers)) as client:
        job.gt = gt_store_of(gt, None, cache_dir, options, client)
        comparison = run_compare(job, client, progress=True)
    print_comparison(comparison, metrics)
    if out:
        for path in write_comparison(comparison, out, options):
            err_console.print(f"wrote {path}")


def print_comparison(comparison: Comparison, metrics: str | None,
                     console: Console = out_console) -> None:
    """The models and the differences of the leaderboard's columns (every metric with
    ``--metrics``; all of them are in comparison.json)."""
    from sgdask.report.compare_html import model_rows, p_text, points

    rows = comparison.rows
    names = list(dict.fromkeys(r["metric"] for r in rows))
    shown = names if metrics else [c for c in board_columns() if c in names] or names
    settings = comparison.settings
    models = Table(title=f"{len(comparison.models)} models · protocol "
                   f"{settings['protocol']} · {settings['images']} images · "
                   f"{100 * settings['level']:g}% intervals")
    for name in ("model", "runs", *shown):
        models.add_column(name, justify="left" if name == "model" else "right")
    for row in model_rows(comparison, shown, sep="\n", template="{lo}–{hi}"):
        models.add_row(*row)
    console.print(models)
    diffs = Table(title="b − a (percentage points; PRank in ranks, lower is better)",
                  caption=f"interval: paired bootstrap, {settings['resamples']} resamples; "
                  f"p: paired approximate randomization, {settings['permutations']} "
                  "permutations; Holm over all pairs; W/T/L: images b wins/ties/loses")
    for name in ("metric", "a", "b", "Δ", "low", "high", "p", "p Holm", "W/T/L"):
        diffs.add_column(name, justify="left" if name in ("metric", "a", "b") else "right")
    for r in rows:
        if r["metric"] in shown:
            diffs.add_row(r["metric"], r["a"], r["b"], points(r["metric"], r["delta"]),
                          points(r["metric"], r["ci_low"]), points(r["metric"], r["ci_high"]),
                          p_text(r["p_value"]), p_text(r["p_holm"]),
                          "-" if r["wins"] is None
                          else f"{r['wins']}/{r['ties']}/{r['losses']}")
    console.print(diffs)


@app.command("evaluate-many")
def evaluate_many_cmd(manifest: Annotated[str, typer.Argument(
                          help="YAML/JSON manifest: gt, submissions, out, cache, options")],
                      scheduler: Scheduler = None, workers: Workers = None,
                      dry_run: Annotated[bool, typer.Option(
                          "--dry-run", help="list what would be evaluated, then stop")] = False,
                      storage_option: StorageOpt = None) -> None:
    """Evaluate many submissions against one GT in one Dask graph, through the cache."""
    from sgdask.batch.many import load_manifest, run_many, summary_rows

    job = load_manifest(manifest, storage_options(storage_option))
    outcome = run_many(job, scheduler=cluster_choice(scheduler, False, workers),
                       progress=True, dry_run=dry_run,
                       log=err_console.print)
    rows = summary_rows(outcome.reports)
    if rows:
        table = Table(title=f"{len(outcome.reports)} submissions "
                      f"({len(outcome.cached)} cached, {len(outcome.evaluated)} evaluated)")
        columns = [c for c in board_columns() if any(c in r for r in rows)]
        for name in ("submission", "protocol", *columns):
            table.add_column(name, justify="left" if name in ("submission", "protocol")
                             else "right")
        for r in rows:
            table.add_row(r["submission"], r["protocol"],
                          *[format_value(c, r.get(c)) for c in columns])
        out_console.print(table)


@app.command()
def submit(submission: Annotated[str, typer.Argument(help="SGBench ZIP or JSON")],
           name: Annotated[str, typer.Option(help="model name shown on the leaderboard")],
           registry: Annotated[str | None, typer.Option(
               help="registry URL (convert and register here; or --server)")] = None,
           server: Annotated[str | None, typer.Option(
               help="benchmark server URL (upload through its API; or --registry)")] = None,
           token: Annotated[str | None, typer.Option(
               envvar="SGDASK_TOKEN", help="token for --server (or $SGDASK_TOKEN)")] = None,
           gt: Annotated[str | None, typer.Option(
               help="GT store URL (validates against it; with --registry)")] = None,
           approved: Annotated[bool, typer.Option(help="show on the approved board")] = False,
           paper: Annotated[str | None, typer.Option(help="paper link")] = None,
           wait: Annotated[bool, typer.Option(
               "--wait", help="with --server: wait until ranked, rejected or failed")] = False,
           wait_timeout: Annotated[float, typer.Option(
               help="seconds --wait waits at most")] = 3600,
           scheduler: Scheduler = None, in_process: InProcess = False,
           workers: Workers = None, storage_option: StorageOpt = None) -> None:
    """Submit a model: convert and register it (--registry), or upload it (--server).

    With --server --wait the exit code is 0 when ranked, 2 when rejected or failed."""
    if (registry is None) == (server is None):
        raise SgdaskError("submit: give exactly one of --registry URL or --server URL")
    if server is not None:
        submit_to_server(submission, server, token, name, paper, approved, wait, wait_timeout)
        return
    if gt is None:
        raise SgdaskError("submit --registry: --gt is required")
    from sgdask.batch.registry import submit as register

    entry = register(submission, registry, gt, name, approved, paper,
                     storage_options(storage_option),
                     cluster=cluster_choice(scheduler, in_process, workers))
    out_console.print(f"registered {entry.submission_id}: {entry.name} "
                      f"({'approved' if entry.approved else 'not approved'}) -> {entry.url}")


def submit_to_server(submission: str, server: str, token: str | None, name: str,
                     paper: str | None, approved: bool, wait: bool, timeout: float) -> None:
    from sgdask.service import client

    answer = client.upload(server, token, submission, name, paper,
                           "approved" if approved else "public")
    print(f"uploaded {answer['id']}: {answer['status']} -> {answer['url']}", flush=True)
    if not wait:
        return
    doc = client.wait(server, token, answer["id"], timeout,
                      lambda status: print(f"{answer['id']}: {status}", file=sys.stderr))
    for line in doc.get("errors", []):
        print(line, file=sys.stderr)
    if doc["status"] != "ranked":
        raise SgdaskError(f"{answer['id']}: {doc['status']}")
    metrics = doc.get("metrics") or {}
    rank = doc.get("rank")
    print(f"{answer['id']}: ranked{f' #{rank}' if rank else ''}, {RANK_BY} "
          f"{format_value(RANK_BY, metrics.get(RANK_BY))}")


@app.command()
def rerank(registry: Annotated[str, typer.Option(help="registry URL")],
           gt: Annotated[str, typer.Option(help="GT store URL")],
           out: Annotated[str, typer.Option(help="leaderboard URL (publishes here)")],
           scheduler: Scheduler = None, workers: Workers = None,
           dry_run: Annotated[bool, typer.Option(
               "--dry-run", help="list what would be evaluated, then stop")] = False,
           lease: Annotated[float, typer.Option(
               min=0.5, help="seconds without a heartbeat after which the holder of "
               "OUT/lock.json is presumed dead and its lock taken over (a holder on this host "
               "whose process is gone: at once)")] = DEFAULT_LEASE,
           stale_lock_after: Annotated[float | None, typer.Option(
               min=0.5, hidden=True, help="deprecated: use --lease")] = None,
           storage_option: StorageOpt = None) -> None:
    """Evaluate what is missing under the current protocols and publish the leaderboard.

    Exit codes: 0 published or up to date, 2 bad input, 3 another rerank holds the lock.
    """
    from sgdask.batch.rerank import EXIT_LOCKED
    from sgdask.batch.rerank import rerank as run_rerank
    from sgdask.io.lock import LockHeld

    if stale_lock_after is not None:
        print("sgdask: warning: --stale-lock-after is deprecated: use --lease", file=sys.stderr)
        lease = stale_lock_after
    try:
        outcome = run_rerank(registry, gt, out, storage_options=storage_options(storage_option),
                             scheduler=cluster_choice(scheduler, False, workers),
                             dry_run=dry_run, progress=True,
                             log=err_console.print, lease=lease)
    except LockHeld as err:
        print(f"sgdask: {err}", file=sys.stderr)
        sys.exit(EXIT_LOCKED)
    for row in outcome.board:
        out_console.print(f"{row['rank']:3d}. {row['name']}  {RANK_BY} "
                          f"{format_value(RANK_BY, row['metrics'].get(RANK_BY))}")


# --- the benchmarking service ----------------------------------------------------------------

Registry = Annotated[str, typer.Option(help="registry URL (entries, uploads, stores, cache)")]
GT = Annotated[str, typer.Option(help="GT store URL")]
Board = Annotated[str, typer.Option(help="leaderboard URL (rerank publishes here)")]
TokensFile = Annotated[str | None, typer.Option(
    help="tokens file (from `sgdask tokens add`); without it only --open-uploads work")]
DailyLimit = Annotated[int, typer.Option(
    min=0, help="submissions per team per rolling 24 hours (0: no limit)")]
TotalLimit = Annotated[int, typer.Option(min=0, help="submissions per team in total (0: none)")]
OpenUploads = Annotated[bool, typer.Option(
    "--open-uploads", help="the public board takes uploads without a token (a local lab)")]
Poll = Annotated[float, typer.Option(min=0.05, help="seconds between queue polls")]
Lease = Annotated[float, typer.Option(
    min=0.5, help="seconds without a heartbeat after which a worker, an upload or the holder "
    "of the board's lock is presumed dead and what it held is taken over; orphaned uploads "
    "are swept after 3 leases")]
MaxAttempts = Annotated[int, typer.Option(
    min=1, help="claims of one entry before it is marked failed")]


def worker_config(registry: str, gt: str, out: str, options: dict[str, Any] | None,
                  tokens: str | None, daily_limit: int, total_limit: int,
                  open_uploads: bool, poll: float, lease: float, max_attempts: int,
                  limit: list[str] | None) -> Any:
    from sgdask.service.limits import Limits
    from sgdask.service.worker import WorkerConfig

    return WorkerConfig(registry, gt, out, options, poll, lease, max_attempts, tokens=tokens,
                        limits=Limits(daily_limit or None, total_limit or None),
                        open_uploads=open_uploads,
                        archive_limits=ArchiveLimits.from_pairs(limit))


@app.command()
def serve(registry: Registry, gt: GT,
          out: Board,
          scheduler: Scheduler = None,
          host: Annotated[str, typer.Option(
              help="address to listen on (put a TLS proxy in front for anything public)")]
          = "127.0.0.1",
          port: Annotated[int, typer.Option(help="port (0: any free port)")] = 8000,
          tokens: TokensFile = None,
          no_worker: Annotated[bool, typer.Option(
              "--no-worker", help="only take uploads; run `sgdask worker` separately")] = False,
          max_upload_mb: Annotated[float, typer.Option(
              min=0.001, help="largest upload in MiB (413 beyond)")] = 2048,
          daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
          concurrent_limit: Annotated[int, typer.Option(
              min=0, help="uploads per team streaming in at the same time, across every "
              "server sharing the registry; they count against the daily and total limits "
              "too (0: no limit)")] = 5,
          open_uploads: OpenUploads = False,
          title: Annotated[str, typer.Option(help="the leaderboard's title")]
          = "sgdask leaderboard",
          poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
          limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Serve the benchmark: upload form, status pages, leaderboard, JSON API, and the queue
    worker (in this process unless --no-worker)."""
    from sgdask.service.app import ServiceConfig
    from sgdask.service.limits import Limits
    from sgdask.service.server import serve as run_server

    options = storage_options(storage_option)
    service = ServiceConfig(registry, out, options, tokens, max_upload_mb,
                            Limits(daily_limit or None, total_limit or None,
                                   concurrent_limit or None), open_uploads, title, lease)
    worker = None if no_worker else worker_config(
        registry, gt, out, options, tokens, daily_limit, total_limit, open_uploads, poll, lease,
        max_attempts, limit)
    run_server(service, worker, scheduler, host, port)


@app.command()
def worker(registry: Registry, gt: GT, out: Board,
           scheduler: Scheduler = None, tokens: TokensFile = None,
           daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
           open_uploads: OpenUploads = False,
           poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
           limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Work the service's queue and inbox: validate, convert, evaluate, publish.

    Any number of workers may poll one registry; each entry and inbox file is taken once.
    Tokens and limits apply to inbox submissions."""
    from sgdask.service.server import work

    work(worker_config(registry, gt, out, storage_options(storage_option), tokens, daily_limit,
                       total_limit, open_uploads, poll, lease, max_attempts, limit), scheduler)


tokens_app = typer.Typer(no_args_is_help=True, help="Create and revoke upload tokens.")
app.add_typer(tokens_app, name="tokens")


@tokens_app.command("add")
def tokens_add(file: Annotated[Path, typer.Argument(help="tokens file (created if absent)")],
               team: Annotated[str, typer.Option(help="team name")],
               role: Annotated[str, typer.Option(help="participant or maintainer")]
               = "participant") -> None:
    """Create a token for a team; the token is the last line of the output (shown once:
    only its hash is stored)."""
    from sgdask.service.tokens import add_token

    token = add_token(file, team, role)
    print(f"added a {role} token for team {team} to {file}; it is not shown again:")
    print(token)


@tokens_app.command("revoke")
def tokens_revoke(file: Annotated[Path, typer.Argument(help="tokens file")],
                  team: Annotated[str, typer.Argument(help="team whose tokens to remove")]
                  ) -> None:
    """Remove every token of a team (a running server notices the change)."""
    from sgdask.service.tokens import revoke_team

    removed = revoke_team(file, team)
    if not removed:
        raise SgdaskError(f"{file}: team {team!r} has no token")
    print(f"revoked {removed} token(s) of team {team}")


def quiet_dask_logs() -> None:
    """Task failures are reported once, as sgdask's one-line error: keep Dask's own logs
    (with their tracebacks) out of the terminal, here and in worker processes we start.
    asyncio's and tornado's loggers too: a comm close that times out on a loaded machine
    while the cluster shuts down after a failure would otherwise print its traceback
    ("TimeoutError: Timeout") after sgdask's own message."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def one_line(text: str) -> str:
    return " ".join(text.split())


def show_warnings_as_lines() -> None:
    """``SgdaskWarning``s print as one ``sgdask: warning: ...`` line on stderr; others as
    Python prints them."""
    default = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if issubclass(category, SgdaskWarning):
            print(f"sgdask: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app, turning sgdask errors into one line and exit code 2.

    As the ``sgdask`` command (``argv`` None) the process ends with ``os._exit`` once its
    output is flushed: every file is written and closed by then, and tearing down numba's,
    LLVM's and Dask's objects would take about a second more and write nothing. Called with
    ``argv`` (tests, scripts), it raises ``SystemExit`` as usual.
    """
    try:
        run_command(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:
        if argv is not None:
            raise
        end_process(done.code)
    if argv is None:
        end_process(0)


def end_process(code: int | str | None) -> NoReturn:
    """Exit now with ``code`` as ``sys.exit`` would (None: 0; a message: printed, 1), after
    flushing the standard streams and the logs, without the interpreter's tear-down."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def run_command(args: list[str]) -> None:
    """The app on ``args``: ends in ``SystemExit`` with the exit code (under ``--debug``, an
    error propagates with its traceback)."""
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    show_warnings_as_lines()
    if not debug:
        quiet_dask_logs()
    try:
        app(args, prog_name="sgdask", standalone_mode=True)
    except SgdaskError as err:
        if debug:
            raise
        exit_with(f"sgdask: error: {err}", EXIT_ERROR)
    except Exception as err:  # a bug in sgdask: never reported as bad input
        if debug:
            raise
        exit_with(f"sgdask: internal error: {type(err).__name__}: {one_line(str(err))} "
                  "(a bug in sgdask; run again with --debug for the traceback)", EXIT_BUG)
    except KeyboardInterrupt:
        exit_with("sgdask: interrupted", EXIT_INTERRUPTED)


def exit_with(message: str, code: int) -> NoReturn:
    """Print the one-line message and exit; nothing logged while the interpreter shuts down
    (a Dask comm closing late, an asyncio task collected) comes after it."""
    print(message, file=sys.stderr)
    logging.disable(logging.CRITICAL)
    sys.exit(code)


if __name__ == "__main__":
    main()
