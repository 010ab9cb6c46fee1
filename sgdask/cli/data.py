"""Commands that make and check data: ``synth``, ``ingest-gt``, ``convert``, ``validate``,
``verify``, ``stats``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sgdask.cli.console import out_console, progress_bar
from sgdask.cli.options import (
    InProcess,
    Limits,
    Processes,
    Scheduler,
    StorageOpt,
    Workers,
    cluster_choice,
    storage_options,
)
from sgdask.cli.process import EXIT_ERROR, one_line
from sgdask.errors import SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.methods import METHODS

Overwrite = Annotated[bool, typer.Option(help="replace an existing store at --out")]


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


def ingest_gt(psg_json: Annotated[str, typer.Argument(
                  help="psg.json, or Visual Genome's VG-SGG-with-attri.h5 (path or URL)")],
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
              storage_option: StorageOpt = None, overwrite: Overwrite = False,
              scheduler: Scheduler = None, in_process: InProcess = False,
              workers: Workers = None, processes: Processes = None,
              limit: Limits = None) -> None:
    """Convert OpenPSG or Visual Genome (VG150) ground truth into a GT store (Parquet + Zarr).

    psg.json's size and nesting depth and each PNG's pixel count are limited (--limit
    max_json_size, max_json_depth, max_layer_pixels), so are the sizes a VG150 h5 file's
    datasets declare (max_h5_dataset_size, max_h5_total_size)."""
    from sgdask.io.formats import FORMATS, GT, VG150, recognised

    options = storage_options(storage_option)
    fmt = (FORMATS[VG150] if dicts is not None or image_data is not None
           else recognised(psg_json, options, GT))
    visual_genome = fmt.name == VG150
    if visual_genome and (dicts is None or image_data is None or masks is not None):
        raise SgdaskError(f"{psg_json}: Visual Genome ground truth needs --dicts and "
                          "--image-data (and has no --masks)")
    if split is not None and not visual_genome:
        raise SgdaskError("--split applies to Visual Genome ground truth (psg.json's test "
                          "split is test_image_ids)")
    cluster = cluster_choice(scheduler, in_process, workers, processes)
    given = {"masks_dir": masks, "dicts": dicts, "image_data": image_data, "split": split}
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


def convert(submission: Annotated[str, typer.Argument(
                help="SGBench JSON or ZIP; with --method, a model's result file (a pickled "
                "list of Result objects) or a directory of per-image .npz files")],
            out: Annotated[str, typer.Option("--out", help="store URL to create")],
            gt: Annotated[str | None, typer.Option(
                help="GT store to validate ids, sizes and classes against (required with "
                "--method: results are paired with its test images)")] = None,
            storage_option: StorageOpt = None, overwrite: Overwrite = False,
            scheduler: Scheduler = None, in_process: InProcess = False,
            workers: Workers = None, processes: Processes = None, limit: Limits = None,
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
    _check_method_options(method, from_scores, instance_scores)
    cluster = cluster_choice(scheduler, in_process, workers, processes)
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


def _check_method_options(method: str | None, from_scores: str | None,
                          instance_scores: bool) -> None:
    """The option combinations ``convert`` accepts (``--method`` without ``--gt``: the
    format's conversion says)."""
    if method is None:
        if instance_scores:
            raise SgdaskError("--instance-scores: only with --method (SGBench files carry "
                              "their own instance scores)")
        return
    if from_scores is not None:
        raise SgdaskError("--from-scores and --method: choose one way to derive the lists")


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
        print(problem.render("cli"))
    errors = sum(p.is_error for p in problems)
    more = " (stopped at --max-problems)" if len(problems) >= max_problems else ""
    print(f"sgdask: {submission}: {errors} error(s), {len(problems) - errors} warning(s)"
          f"{more}", file=sys.stderr)
    if errors:
        raise typer.Exit(EXIT_ERROR)


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


def stats(psg_json: Annotated[str, typer.Argument(help="psg.json (path or URL)")],
          out: Annotated[str, typer.Option("--out", help="Parquet file URL to write")],
          storage_option: StorageOpt = None) -> None:
    """Training-split triplet statistics (zero-shot types, wIMR weights) as Parquet."""
    from sgdask.io.training_stats import psg_train_stats, write_stats

    options = storage_options(storage_option)
    table = psg_train_stats(psg_json, options)
    write_stats(table, out, options)
    out_console.print(f"wrote {out}: {len(table)} triplet types")
