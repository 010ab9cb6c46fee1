"""Commands that make and check data: ``synth``, ``ingest-gt``, ``convert``, ``validate``,
``verify``, ``stats``, ``export-sgb``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sgdask.cli.console import out_console, progress_bar
from sgdask.cli.options import (
    INPUT,
    ClusterFile,
    Gateway,
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
from sgdask.errors import SgdaskError, checked_choice
from sgdask.io.archive import ArchiveLimits
from sgdask.method_names import METHODS

if TYPE_CHECKING:
    import pyarrow as pa

    from sgdask.io.fs import StorageOptions

_VISUAL_GENOME, _SCORES, _RESULTS = "Visual Genome", "From scores", "Result files"
_OPEN_IMAGES, _ACTION_GENOME, _PVSG = "Open Images V6", "Action Genome", "PVSG"

Overwrite = Annotated[bool, typer.Option(help="replace an existing store at --out")]
_StoreOut = Annotated[str, typer.Option("--out", metavar="PATH", help="store to create")]


def synth(out: Annotated[Path, typer.Argument(
              metavar="DIR", help="directory to write the dataset into")],
          images: Annotated[int, typer.Option(metavar="N", help="number of test images")] = 200,
          seed: Annotated[int, typer.Option(metavar="N", help="random seed")] = 0,
          height: Annotated[int, typer.Option(metavar="PIXELS", help="image height")] = 480,
          width: Annotated[int, typer.Option(metavar="PIXELS", help="image width")] = 640
          ) -> None:
    """Write a synthetic PSG-shaped dataset with a submission.

    psg.json, its panoptic PNGs, and a submission as SGBench ZIP (masks) and JSON (boxes)."""
    from sgdask.testing.psg import write_dataset

    with progress_bar("synthesizing images", images) as advance:
        paths = write_dataset(out, images, seed, height=height, width=width, progress=advance)
    out_console.print(f"wrote {paths.psg_json}, {paths.masks_dir}/, {paths.submission_zip}, "
                      f"{paths.submission_boxes}")


def ingest_gt(psg_json: Annotated[str, typer.Argument(
                  metavar="GT_FILE", help="psg.json, Visual Genome's VG-SGG-with-attri.h5, "
                  "Open Images V6's vrd-test-anno.json or Action Genome's "
                  "object_bbox_and_relationship.pkl (with --persons)")],
              out: _StoreOut,
              masks: Annotated[str | None, typer.Option(
                  "--masks", "--gt-masks", metavar="DIR", rich_help_panel=INPUT,
                  help="the panoptic PNGs (omit for box-only GT)")] = None,
              dicts: Annotated[str | None, typer.Option(
                  "--dicts", metavar="PATH", rich_help_panel=_VISUAL_GENOME,
                  help="VG-SGG-dicts-with-attri.json")] = None,
              image_data: Annotated[str | None, typer.Option(
                  "--image-data", metavar="PATH", rich_help_panel=_VISUAL_GENOME,
                  help="image_data.json")] = None,
              split: Annotated[str | None, typer.Option(
                  metavar="SPLIT", rich_help_panel=_VISUAL_GENOME,
                  help="test (split flag 2, the default) or val (5000 images of flag 0)")]
              = None,
              categories: Annotated[str | None, typer.Option(
                  "--categories", metavar="PATH", rich_help_panel=_OPEN_IMAGES,
                  help="categories_dict.json (default: beside the annotation file)")] = None,
              persons: Annotated[str | None, typer.Option(
                  "--persons", metavar="PATH", rich_help_panel=_ACTION_GENOME,
                  help="person_bbox.pkl (GT_FILE: object_bbox_and_relationship.pkl)")]
              = None,
              frame_list: Annotated[str | None, typer.Option(
                  "--frame-list", metavar="PATH", rich_help_panel=_ACTION_GENOME,
                  help="frame_list.txt: every frame of person_bbox.pkl must be in it")]
              = None,
              data_dir: Annotated[str | None, typer.Option(
                  "--data-dir", metavar="DIR", rich_help_panel=_PVSG,
                  help="the frame masks' root, DIR/<source>/masks/<video>/NNNN.png (GT_FILE: "
                  "pvsg.json; --split: its split, val by default)")] = None,
              storage_option: StorageOpt = None, overwrite: Overwrite = False,
              scheduler: Scheduler = None, in_process: InProcess = False,
              workers: Workers = None, processes: Processes = None,
              cluster_file: ClusterFile = None, gateway_url: Gateway = None,
              limit: Limits = None) -> None:
    """Convert ground truth (OpenPSG, VG150, Open Images V6, Action Genome, PVSG) to a store.

    The store is Parquet tables and Zarr masks. psg.json's size and nesting depth and each
    PNG's pixel count are limited (--limit max_json_size, max_json_depth, max_layer_pixels),
    so are the sizes a VG150 h5 file's datasets declare (max_h5_dataset_size,
    max_h5_total_size) and Action Genome's pickles (max_pickle_size, max_pickle_objects)."""
    from sgdask.formats import FORMATS, GT, OIV6, VG150, recognised
    from sgdask.formats.sniff import existing, expect
    from sgdask.store.store import check_store_target

    options = storage_options(storage_option)
    if persons is not None or frame_list is not None or _action_genome(psg_json, options):
        _ingest_action_genome(psg_json, out, persons, frame_list, split, options, overwrite,
                              cluster_choice(scheduler, in_process, workers, processes,
                                             cluster=cluster_file, gateway=gateway_url),
                              ArchiveLimits.from_pairs(limit),
                              (masks, dicts, image_data, categories))
        return
    if data_dir is not None:
        _ingest_pvsg(psg_json, out, data_dir, split, options, overwrite,
                     cluster_choice(scheduler, in_process, workers, processes,
                                    cluster=cluster_file, gateway=gateway_url),
                     ArchiveLimits.from_pairs(limit), (masks, dicts, image_data, categories))
        return
    if split is not None:
        from sgdask.formats.vg150 import SPLITS

        checked_choice("split", split, SPLITS, "split")
    if dicts is None and image_data is None:
        expect(psg_json, "gt source", options)
    else:  # Visual Genome's h5: its reader says what else a file is
        existing(psg_json, options)
    if masks is not None:
        expect(masks, "masks", options)
    check_store_target(out, "gt", options)
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
    cluster = cluster_choice(scheduler, in_process, workers, processes,
                             cluster=cluster_file, gateway=gateway_url)
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


def _action_genome(url: str, options: StorageOptions | None) -> bool:
    """Whether ``url`` is read as Action Genome's annotations (a pickle)."""
    from sgdask.formats import GT, recognised
    from sgdask.formats.actiongenome import GT_FORMAT

    try:
        return recognised(url, options, GT).name == GT_FORMAT
    except SgdaskError:
        return False


def _ingest_action_genome(objects: str, out: str, persons: str | None,
                          frame_list: str | None, split: str | None,
                          options: StorageOptions | None, overwrite: bool, cluster: object,
                          limits: ArchiveLimits, others: tuple[str | None, ...]) -> None:
    """``ingest-gt`` of Action Genome's annotation pickles (``--persons``)."""
    from sgdask.formats import FORMATS
    from sgdask.formats.actiongenome import GT_FORMAT, SPLITS
    from sgdask.formats.sniff import existing, expect
    from sgdask.store.store import check_store_target

    if persons is None and frame_list is not None:
        raise SgdaskError("--frame-list applies to Action Genome ground truth (with --persons)")
    if persons is None:
        raise SgdaskError(f"{objects}: a pickle: as Action Genome ground truth "
                          "(object_bbox_and_relationship.pkl) it needs its person_bbox.pkl "
                          "(--persons); a model's result file is passed as --pred with "
                          "--method")
    if any(other is not None for other in others):
        raise SgdaskError(f"{objects}: Action Genome ground truth takes --persons, "
                          "--frame-list and --split only")
    if split is not None:
        checked_choice("split", split, SPLITS, "split")
    expect(objects, "gt source", options)
    for path in (persons, *(() if frame_list is None else (frame_list,))):
        existing(path, options)
    check_store_target(out, "gt", options)
    given = {"persons": persons, "frame_list": frame_list, "split": split}
    with progress_bar("ingesting GT frames", None, unit="frames") as advance:
        manifest = FORMATS[GT_FORMAT].convert(
            objects, out, None, options, overwrite=overwrite, progress=advance,
            cluster=cluster, limits=limits, **{k: v for k, v in given.items() if v is not None})
    out_console.print(f"GT store {out}: {manifest['n_images']} {manifest['split']} frames of "
                      f"Action Genome, grouped by video, {manifest['content_hash']}")


def _ingest_pvsg(annotation: str, out: str, data_dir: str, split: str | None,
                 options: StorageOptions | None, overwrite: bool, cluster: object,
                 limits: ArchiveLimits, others: tuple[str | None, ...]) -> None:
    """``ingest-gt`` of PVSG's pvsg.json with its frame masks (``--data-dir``)."""
    from sgdask.formats import FORMATS
    from sgdask.formats.pvsg import GT_FORMAT
    from sgdask.formats.sniff import existing
    from sgdask.store.store import check_store_target

    if any(other is not None for other in others):
        raise SgdaskError(f"{annotation}: PVSG ground truth takes --data-dir and --split only")
    existing(annotation, options)
    existing(data_dir, options)
    check_store_target(out, "gt", options)
    given = {"data_dir": data_dir, "split": split}
    with progress_bar("ingesting GT videos", None, unit="videos") as advance:
        manifest = FORMATS[GT_FORMAT].convert(
            annotation, out, None, options, overwrite=overwrite, progress=advance,
            cluster=cluster, limits=limits, **{k: v for k, v in given.items() if v is not None})
    out_console.print(f"GT store {out}: {manifest['n_images']} {manifest['split']} videos of "
                      f"PVSG with their mask tubes, {manifest['content_hash']}")


def convert(submission: Annotated[str, typer.Argument(
                metavar="SUBMISSION", help="SGBench JSON or ZIP; with --method, a model's "
                "result file (pickle) or directory of .npz files")],
            out: _StoreOut,
            gt: Annotated[str | None, typer.Option(
                metavar="PATH", help="GT store to check ids, sizes and classes against "
                "(required with --method)")] = None,
            storage_option: StorageOpt = None, overwrite: Overwrite = False,
            scheduler: Scheduler = None, in_process: InProcess = False,
            workers: Workers = None, processes: Processes = None,
            cluster_file: ClusterFile = None, gateway_url: Gateway = None, limit: Limits = None,
            from_scores: Annotated[str | None, typer.Option(
                "--from-scores", metavar="PATH", rich_help_panel=_SCORES,
                help="derive the lists from per-pair predicate scores (Parquet or NPZ)")]
            = None,
            rank_by: Annotated[str, typer.Option(
                "--rank-by", metavar="RANKING", rich_help_panel=_SCORES,
                help="predicate (best predicate score) or triplet (times the instances' "
                "scores)")]
            = "predicate",
            ng_limit: Annotated[int | None, typer.Option(
                "--ng-limit", min=0, metavar="N", rich_help_panel=_SCORES,
                help="keep the first N triplets of each NG list")]
            = None,
            method: Annotated[str | None, typer.Option(
                metavar="METHOD", rich_help_panel=_RESULTS,
                help=f"SUBMISSION is a model's result file: {', '.join(METHODS)}")]
            = None,
            instance_scores: Annotated[bool, typer.Option(
                "--instance-scores", rich_help_panel=_RESULTS,
                help="keep refine_bboxes' scores as instance scores")] = False) -> None:
    """Convert a submission, or a model's result file, to a store.

    SGBench files: runs `sgdask validate`'s checks first and stops at the first error.
    Result files (--method, formats in the docs' File formats pages): every image is
    checked as it is converted; any problem stops the conversion and leaves no store.
    --from-scores: see the docs' File formats (scores) page."""
    from sgdask.formats import conversion_options, submission_format
    from sgdask.formats.sniff import expect
    from sgdask.kernels.scores import RANK_BY
    from sgdask.store.store import check_store_target

    checked_choice("rank_by", rank_by, RANK_BY, "ranking")
    if not from_scores and (rank_by != "predicate" or ng_limit is not None):
        raise SgdaskError("--rank-by and --ng-limit apply to lists derived --from-scores")
    limits = ArchiveLimits.from_pairs(limit)
    _check_method_options(method, from_scores, instance_scores)
    cluster = cluster_choice(scheduler, in_process, workers, processes,
                             cluster=cluster_file, gateway=gateway_url)
    options = storage_options(storage_option)
    expect(submission, "results" if method is not None else "submission file", options)
    check_store_target(out, "submission", options)
    fmt = submission_format(submission, options, method)
    given = {"method": method, "instance_scores": instance_scores or None,
             "from_scores": from_scores, "rank_by": rank_by if from_scores else None,
             "ng_limit": ng_limit}
    chosen = conversion_options(fmt, {k: v for k, v in given.items() if v is not None})
    if from_scores is not None:  # after the format says it takes one
        expect(from_scores, "scores", options)
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
    if method is not None:
        checked_choice("method", method, METHODS, "method")
    if method is None:
        if instance_scores:
            raise SgdaskError("--instance-scores: only with --method (SGBench files carry "
                              "their own instance scores)")
        return
    if from_scores is not None:
        raise SgdaskError("--from-scores and --method: choose one way to derive the lists")


def validate(submission: Annotated[str, typer.Argument(
                 metavar="SUBMISSION", help="SGBench JSON or ZIP")],
             gt: Annotated[str | None, typer.Option(
                 metavar="PATH", help="GT store to check ids, sizes and classes against")]
             = None,
             max_problems: Annotated[int, typer.Option(
                 min=1, metavar="N", help="stop after this many problems")] = 50,
             storage_option: StorageOpt = None, limit: Limits = None) -> None:
    """Check a submission without converting it.

    Prints every problem, one per line. Exit code 2 if there is any error, 0 otherwise
    (warnings included)."""
    from sgdask.formats import submission_format
    from sgdask.formats.sniff import expect

    options = storage_options(storage_option)
    expect(submission, "submission file", options)
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
               metavar="STORE", help="GT or submission stores")] = None,
           registry: Annotated[str | None, typer.Option(
               metavar="PATH", help="also check a registry and everything it holds")] = None,
           storage_option: StorageOpt = None) -> None:
    """Check stores, or a registry, completely.

    Stores: the manifest, every file's size and SHA-256, every Parquet file and its page
    checksums, every mask chunk and its CRC-32C, the tables' consistency.

    --registry: every entry and status record parses, every converted submission's store
    verifies so, every result cache entry's files match the sizes and SHA-256 its
    entry.json lists, every kept report page matches the hash beside it (entries and pages
    without hashes, or unfinished, are listed: never used, not damage).

    One line per problem, or per intact store or registry. Exit codes: 0 all intact, 2 a
    problem."""
    from sgdask.store.verify import verify_store

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
        damaged += not _registry_intact(registry, options)
    if damaged:
        raise typer.Exit(EXIT_ERROR)


def _registry_intact(registry: str, options: StorageOptions | None) -> bool:
    """``verify --registry``: prints its problems, notes and verdict (the registry's
    modules, which convert submissions, are imported only then)."""
    from sgdask.batch.audit import verify_registry

    found = verify_registry(registry, options)
    for line in (*found.problems, *found.notes):
        print(one_line(line))
    checked = (f"{found.entries} entries, {found.stores} stores, {found.cache_entries} "
               f"cache entries, {found.pages} report pages checked")
    print(f"{found.url}: intact ({checked})" if found.intact else
          f"{found.url}: {len(found.problems)} problem(s) ({checked})")
    return found.intact


def stats(psg_json: Annotated[str, typer.Argument(
              metavar="GT_FILE", help="psg.json, or Open Images V6's vrd-train-anno.json")],
          out: Annotated[str, typer.Option(
              "--out", metavar="PATH", help="Parquet file to write")],
          storage_option: StorageOpt = None) -> None:
    """Write the training split's triplet statistics as Parquet.

    What zero-shot recall (the triplet types never seen in training) and wIMR's weights
    are computed from."""
    from sgdask.formats.sniff import expect
    from sgdask.store.training_stats import write_stats

    options = storage_options(storage_option)
    expect(psg_json, "psg", options)
    table = _training_stats(psg_json, options)
    write_stats(table, out, options)
    out_console.print(f"wrote {out}: {len(table)} triplet types")


def export_sgb(npz_dir: Annotated[Path, typer.Argument(
                   metavar="NPZ_DIR", help="one <image id>.npz per test image")],
               submission: Annotated[str, typer.Option(
                   "--submission", metavar="PATH", help="box submission JSON to write")],
               scores: Annotated[str, typer.Option(
                   "--scores", metavar="PATH", help="scores Parquet file to write")],
               keep: Annotated[int, typer.Option(
                   min=0, metavar="N", help="only pairs that can reach the first N triplets "
                   "of either list (0: every pair)")] = 100) -> None:
    """Export a Scene-Graph-Benchmark.pytorch model's test output.

    Writes a box submission and a scores file for `convert --from-scores`. Each .npz holds
    the arrays of the model's output BoxList: boxes, pred_labels, pred_scores,
    rel_pair_idxs, pred_rel_scores (docs: Visual Genome)."""
    from sgdask.formats.sgb_export import export, outputs_from_npz

    images, pairs = export(outputs_from_npz(npz_dir), submission, scores, keep or None)
    print(f"wrote {submission} ({images} images) and {scores} ({pairs} pairs); next: sgdask "
          f"convert {submission} --from-scores {scores} --rank-by triplet --ng-limit 100 "
          "--gt GT_STORE --out STORE")


def _training_stats(psg_json: str, storage_options: StorageOptions | None) -> pa.Table:
    """Triplet-type counts over the training split of the psg.json at ``psg_json`` (path or
    URL; or over Open Images V6's vrd-train-anno.json, a list of images), as ``sgdask
    stats`` writes them; an error when that split holds no relation."""
    from sgdask.formats.ingest import read_bytes
    from sgdask.formats.oiv6 import oi_train_stats
    from sgdask.io.bounded_json import load_json
    from sgdask.store.training_stats import train_stats

    doc = load_json(read_bytes(psg_json, storage_options, "psg.json"), psg_json, kind="gt")
    table = (oi_train_stats if isinstance(doc, list) else train_stats)(doc, psg_json)
    if not len(table):
        raise SgdaskError(f"{psg_json}: train_image_ids: no training relation found")
    return table
