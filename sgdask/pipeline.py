"""The Dask bag graph: partitions -> read -> per-image kernels -> terms -> fold -> report.

This module only wires: reading is ``sgdask.io``, computing is ``sgdask.kernels`` and
``sgdask.metrics``, summing is ``sgdask.accum``, presenting is ``sgdask.report``.

A submission is a converted store, the submission file itself or a model's result file
(``--method``): a task reads its GT partition once, loads (or decodes) every submission's
predictions for it and scores every protocol on it, so many models cost one pass over the GT.
"""

from __future__ import annotations

import itertools
import math
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import dask.bag as db
import numpy as np
import pyarrow as pa
from distributed import Client, as_completed, futures_of

from sgdask.accum import AGGREGATIONS, Accumulator
from sgdask.cluster import dask_client
from sgdask.errors import InputError, InstanceMismatch, SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.consistency import check_against_gt
from sgdask.io.fs import StorageOptions, join
from sgdask.io.partition import load_gt_images
from sgdask.io.results import ResultsMethod
from sgdask.io.sources import (
    Digest,
    FileInput,
    FileSlice,
    ResultInput,
    ResultSlice,
    StoreInput,
    StoreSlice,
    open_input,
)
from sgdask.io.stats import composition_counts, read_stats, zero_shot_from
from sgdask.io.store import StoreReader
from sgdask.io.validate import GTInfo
from sgdask.kernels.image import image_hits, missing_image_hits, without_proposals
from sgdask.kernels.selection import DEFAULT_KS, KSpec, parse_ks
from sgdask.metrics import FAMILIES
from sgdask.metrics.base import IMAGE, Block, Context, Family
from sgdask.metrics.terms import (
    batch_blocks,
    inputs_of,
    skipped_diagnostics,
    with_zero_shot_all,
)
from sgdask.protocols import DEFAULT_PROTOCOL, Protocol, get_protocols
from sgdask.report import EvalSettings, Report, build_report
from sgdask.report.intervals import CISettings, add_intervals
from sgdask.stats.bootstrap import Mapper
from sgdask.stats.table import TermTable
from sgdask.types import ImageGT, ImageHits, ImagePred, ZeroShot

DEFAULT_PARTITION_SIZE: int | None = None  # whole GT store parts per task (task_count)

PredSlice = StoreSlice | FileSlice | ResultSlice


@dataclass(frozen=True)
class Submission:
    """A submission to score and the protocols to score it under; ``keep_store``: also
    write the decoded submission file as a store there."""

    name: str
    url: str
    protocols: tuple[Protocol, ...]
    with_ng: bool = True
    keep_store: str | None = None


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to score a partition (small and picklable)."""

    gt_url: str
    storage_options: StorageOptions | None
    submissions: tuple[Submission, ...]
    ks: tuple[KSpec, ...]
    zero_shot: ZeroShot | None = None
    legacy: bool = False
    match_labels: bool = True
    families: tuple[Family, ...] = ()
    gt_manifest: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __dask_tokenize__(self) -> str:
        """A fresh token, as for ``PartitionSpec``: hashing the protocols, families and GT
        manifest took 12 ms of the driver's serial time per evaluation."""
        return uuid.uuid4().hex


@dataclass(frozen=True)
class PartitionSpec:
    """The GT images one task evaluates, the GT parts that hold them, and per submission
    where its predictions for them are."""

    index: int
    image_ids: tuple[str, ...]
    gt_parts: tuple[str, ...]
    preds: tuple[PredSlice, ...]

    def __dask_tokenize__(self) -> str:
        """A fresh token: Dask would otherwise hash every image id of every partition to
        name the graph (0.2 s for VG150), and one evaluation's partitions are never meant
        to be shared with another graph."""
        return uuid.uuid4().hex


Key = tuple[str, str]  # (submission name, protocol name)


@dataclass
class PartitionResult:
    """Per (submission, protocol): an accumulator, per-image rows and the per-image terms
    (one ``TermTable`` per partition); the GT parts read; the store parts written
    (``keep_store``); per result-file submission, the digests of the files its tasks read.

    Merging is associative (accumulators merge exactly; rows and lists concatenate).
    """

    accumulators: dict[Key, Accumulator] = field(default_factory=dict)
    images: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)
    gt_parts_read: list[str] = field(default_factory=list)
    parts_written: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    terms: dict[Key, list[TermTable]] = field(default_factory=dict)
    digests: dict[str, list[Digest]] = field(default_factory=dict)

    def add(self, key: Key, hits: list[ImageHits], blocks: list[Block],
            skipped: dict[str, int] | None = None) -> None:
        """Add the hits of a partition's images and their term blocks (``skipped``: the
        diagnostics of the images the protocol left out)."""
        acc = self.accumulators.setdefault(key, Accumulator())
        self.images.setdefault(key, [])
        self.terms.setdefault(key, [])
        if skipped:
            acc.add_counts(np.empty(0, dtype=np.int64), skipped)
        if not hits:
            return
        acc.add_blocks(blocks)
        acc.add_counts(np.concatenate([h.predicates for h in hits]),
                       image_diagnostics(hits))
        self.images.setdefault(key, []).extend(image_rows(hits, blocks))
        self.terms.setdefault(key, []).append(
            TermTable.from_blocks([h.image_id for h in hits], blocks))

    def merged(self, other: PartitionResult) -> PartitionResult:
        keys = list(dict.fromkeys([*self.accumulators, *other.accumulators]))
        empty = Accumulator()
        return PartitionResult(
            {k: self.accumulators.get(k, empty).merged(other.accumulators.get(k, empty))
             for k in keys},
            {k: self.images.get(k, []) + other.images.get(k, []) for k in keys},
            self.gt_parts_read + other.gt_parts_read,
            concatenated(self.parts_written, other.parts_written),
            {k: self.terms.get(k, []) + other.terms.get(k, []) for k in keys},
            concatenated(self.digests, other.digests))


def concatenated(a: dict[str, list], b: dict[str, list]) -> dict[str, list]:
    """Per name, ``a``'s list then ``b``'s."""
    return {name: a.get(name, []) + b.get(name, []) for name in {**a, **b}}


def image_diagnostics(hits: list[ImageHits]) -> dict[str, int]:
    """Diagnostics summed over images, with the image counts."""
    out = {"images": len(hits), "images_missing": sum(h.missing for h in hits)}
    for h in hits:
        for name, value in h.diagnostics.items():
            out[name] = out.get(name, 0) + value
    return out


def image_rows(hits: list[ImageHits], blocks: list[Block]) -> list[dict[str, Any]]:
    """Rows of the per-image table: image-level values and diagnostics."""
    rows: list[dict[str, Any]] = [{"image_id": h.image_id, "missing": h.missing,
                                   "gt_triplets": h.n_gt_triplets} for h in hits]
    for block in blocks:
        if block.kind != IMAGE:
            continue
        values = np.divide(block.num, block.den, out=np.full(len(block.num), np.nan),
                           where=block.den > 0)
        for i, value in zip(block.image.tolist(), values.tolist(), strict=True):
            rows[i][block.name] = None if value != value else value
    for row, h in zip(rows, hits, strict=True):
        row.update(h.diagnostics)
    return rows


def score_partition(spec: PartitionSpec, job: Job) -> PartitionResult:
    """Read one GT partition once and score every submission and protocol on it."""
    gt_reader = StoreReader(job.gt_url, job.storage_options, manifest=job.gt_manifest)
    gts = list(load_gt_images(gt_reader, list(spec.gt_parts), list(spec.image_ids)))
    out = PartitionResult(gt_parts_read=list(spec.gt_parts))
    for sub, pred_slice in zip(job.submissions, spec.preds, strict=True):
        preds = predictions(sub, pred_slice, spec.index, job.storage_options, out)
        shared: list[dict] = [{} for _ in gts]
        for protocol in sub.protocols:
            skipped: dict[str, int] = {}
            hits = []
            for gt, cache in zip(gts, shared, strict=True):
                pred = preds.get(gt.image_id)
                if without_proposals(pred, protocol):
                    for name, value in skipped_diagnostics(pred is None).items():
                        skipped[name] = skipped.get(name, 0) + value
                    continue
                hits.append(hits_under(gt, pred, protocol, sub, job, cache))
            with_zero_shot_all(hits, job.zero_shot)
            inputs = inputs_of(protocol, sub.with_ng, job.zero_shot is not None, job.legacy)
            blocks = (batch_blocks(hits, Context(job.ks), protocol, inputs, job.families)
                      if hits else [])
            out.add((sub.name, protocol.name), hits, blocks, skipped)
    return out


def predictions(sub: Submission, pred_slice: PredSlice, index: int,
                options: StorageOptions | None, out: PartitionResult) -> dict[str, ImagePred]:
    """A partition's predictions; a decoded submission file is also written as a store
    part when the submission asks to keep its store; a result file's digests are kept."""
    if isinstance(pred_slice, ResultSlice):
        preds, digests = pred_slice.decode(options)
        out.digests.setdefault(sub.name, []).extend(digests)
        return preds
    if sub.keep_store is None or not isinstance(pred_slice, FileSlice):
        return pred_slice.load(options)
    from sgdask.io.ingest import write_decoded_part

    decoded = pred_slice.decode(options)
    if decoded:
        info = write_decoded_part(sub.keep_store, options, index, decoded)
        out.parts_written.setdefault(sub.name, []).append(info)
    return {d.image.image_id: d.prediction() for d in decoded}


def hits_under(gt: ImageGT, pred: ImagePred | None, protocol: Protocol, sub: Submission,
               job: Job, shared: dict) -> ImageHits:
    """One image's hits under one protocol (without zero-shot flags: ``with_zero_shot``
    adds them, ``with_zero_shot_all`` for many images at once)."""
    if pred is None:
        hits = missing_image_hits(gt, protocol, sub.with_ng)
    else:
        try:
            hits = image_hits(gt, pred, protocol, sub.with_ng, job.match_labels, shared,
                              job.legacy)
        except InstanceMismatch as err:  # any other kernel exception is a bug in sgdask
            raise InputError(sub.url, str(err), image=gt.image_id, field="instances") \
                from err
    return hits


def parts_holding(ids: list[str], parts: list[dict[str, Any]]) -> tuple[str, ...]:
    """Names of the store parts whose id range overlaps the (sorted) ids."""
    lo, hi = ids[0], ids[-1]
    return tuple(p["name"] for p in parts if p["first_id"] <= hi and p["last_id"] >= lo)


def evaluation_chunks(gt_images: pa.Table, partition_size: int | None,
                      tasks: int | None = None) -> list[list[str]]:
    """Sorted ids of GT images with relations, cut into ``partition_size`` chunks, or by
    store part when None: one task per part, or the parts in ``tasks`` groups of
    consecutive parts, as equal in count as they divide."""
    with_relations = gt_images["n_graph"].to_numpy(zero_copy_only=False).tolist()
    rows = sorted((image_id, part) for image_id, part, n in
                  zip(gt_images["image_id"].to_pylist(), gt_images["part"].to_pylist(),
                      with_relations, strict=True) if n)
    if partition_size is None:
        by_part: dict[str, list[str]] = {}
        for image_id, part in rows:
            by_part.setdefault(part, []).append(image_id)
        parts = [by_part[p] for p in sorted(by_part)]
        groups = min(tasks or len(parts), len(parts))
        sizes = [len(parts) // groups + (i < len(parts) % groups) for i in range(groups)]
        cuts = [0, *itertools.accumulate(sizes)]  # the larger groups first
        return [sorted(itertools.chain.from_iterable(parts[a:b]))
                for a, b in itertools.pairwise(cuts)]
    ids = [i for i, _ in rows]
    return [ids[s:s + partition_size] for s in range(0, len(ids), partition_size)]


SubmissionInput = StoreInput | FileInput | ResultInput


def pred_slices(chunks: list[list[str]], known: set[str], pred: SubmissionInput
                ) -> tuple[list[PredSlice], dict[str, int]]:
    """Per evaluation chunk, where this submission's predictions are; plus its counts."""
    pred_ids = pred.ids()
    unknown = [i for i in pred_ids if i not in known]
    if unknown:
        raise InputError(pred.url, f"not among the ground truth's test images "
                         f"({len(unknown)} such image(s))", image=unknown[0], field="id")
    pred_set = set(pred_ids)
    slices = [pred.slice([i for i in ids if i in pred_set]) for ids in chunks]
    evaluated = {i for chunk in chunks for i in chunk}
    return slices, {"submission_images": len(pred_ids),
                    "submission_images_not_evaluated": len(pred_set - evaluated)}


def plan_partitions(gt: StoreReader, preds: list[SubmissionInput], partition_size: int | None,
                    tasks: int | None = None
                    ) -> tuple[list[PartitionSpec], dict[str, int], list[dict[str, int]]]:
    """Evaluation partitions over the GT images that have relations; GT and per-submission
    counts."""
    gt_images = gt.images()
    chunks = evaluation_chunks(gt_images, partition_size, tasks)
    if not chunks:
        raise SgdaskError(f"{gt.url}: no test image has a relation: nothing to evaluate")
    known = set(gt_images["image_id"].to_pylist())
    per_pred = [pred_slices(chunks, known, p) for p in preds]
    specs = [PartitionSpec(i, tuple(ids), parts_holding(ids, gt.parts),
                           tuple(slices[i] for slices, _ in per_pred))
             for i, ids in enumerate(chunks)]
    n_evaluated = sum(len(c) for c in chunks)
    counts = {"gt_images": len(known), "evaluated_images": n_evaluated,
              "gt_images_without_relations": len(known) - n_evaluated}
    return specs, counts, [c for _, c in per_pred]


TASKS_PER_THREAD = 2
TASK_IMAGES = 256
MIN_TASK_IMAGES = 8


def spread_size(n_images: int, n_tasks: int, client: Client, partition_size: int | None
                ) -> int | None:
    """A partition size that gives every worker thread of the cluster work when the default
    (one task per GT store part) has fewer tasks than threads (a store of few large parts on
    many cores); None keeps the plan (always when ``--partition-size`` is given)."""
    if partition_size is not None:
        return None
    threads = sum(client.nthreads().values())
    if n_tasks >= threads:
        return None
    size = max(MIN_TASK_IMAGES, -(-n_images // (TASKS_PER_THREAD * threads)))
    return size if -(-n_images // size) > n_tasks else None


def task_count(n_tasks: int, n_images: int, client: Client, partition_size: int | None
               ) -> int:
    """Tasks of the default plan: ``n_tasks`` (one per GT store part), or fewer groups of
    consecutive parts of about ``TASK_IMAGES`` images, a multiple of the worker threads.
    Every task reads its GT and submission tables and folds a result; on a store of many
    small parts (PSG's 64 images) those fixed costs were a fifth of an evaluation. A fixed
    task size, not a share of the dataset, keeps a worker's memory flat in images; a
    multiple of the threads keeps every thread busy to the last round (9 tasks on 2
    threads left one thread idle for the ninth)."""
    if partition_size is not None or not n_tasks:
        return n_tasks
    threads = sum(client.nthreads().values())
    per_task = max(1, TASK_IMAGES * n_tasks // max(n_images, 1))
    groups = threads * math.ceil(math.ceil(n_tasks / per_task) / threads)
    return max(1, min(n_tasks, groups))


def run_bag(client: Client, specs: list[PartitionSpec], job: Job, progress: bool
            ) -> PartitionResult:
    """Map score_partition over a bag of partitions, show progress, fold the results."""
    bag = db.from_sequence(specs, npartitions=len(specs)).map(score_partition, job)
    scored = client.persist(bag)
    futures = futures_of(scored)
    if progress:
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=False) as bar:
            task = bar.add_task("evaluating partitions", total=len(futures))
            for _ in as_completed(futures):
                bar.advance(task)
    folded = scored.fold(PartitionResult.merged, initial=PartitionResult())
    return client.compute(folded).result()


def training_stats(gt: StoreReader, stats: str | None, options: StorageOptions | None
                   ) -> tuple[ZeroShot | None, dict[int, int] | None]:
    """Zero-shot look-up and wIMR composition counts, from ``stats`` or the GT store."""
    own = gt.manifest.get("train_stats")
    url = stats or (join(gt.url, own) if own else None)
    if url is None:
        return None, None
    table = read_stats(url, options, None if stats else gt.read_file(own))
    n_classes = len(gt.manifest["thing_classes"]) + len(gt.manifest["stuff_classes"])
    n_predicates = len(gt.manifest["predicate_classes"])
    return zero_shot_from(table, n_classes, n_predicates), composition_counts(table)


@dataclass(frozen=True)
class Options:
    """How to evaluate (the same for every submission of a job)."""

    ks: str = DEFAULT_KS
    aggregation: str = "per_predicate"
    partition_size: int | None = DEFAULT_PARTITION_SIZE
    stats: str | None = None
    legacy: bool = False
    tau: float = 0.5
    match_labels: bool = True
    ci: float | None = None
    resamples: int = 1000
    seed: int = 0
    ci_metrics: str | None = None

    @property
    def intervals(self) -> CISettings | None:
        """Bootstrap settings (``--ci``), None without intervals."""
        if self.ci is None:
            return None
        return CISettings(self.ci, self.resamples, self.seed, self.ci_metrics)

    def check(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise SgdaskError(f"--aggregation: unknown mode {self.aggregation!r} "
                              f"(expected one of: {', '.join(AGGREGATIONS)})")
        if self.partition_size is not None and self.partition_size < 1:
            raise SgdaskError("--partition-size: must be at least 1")
        if not self.tau >= 0:
            raise SgdaskError(f"--tau: {self.tau} must be a number >= 0")
        if self.intervals is not None:
            self.intervals.check()


@dataclass
class ManyResult:
    """Reports per submission name and protocol, and which GT parts the tasks read."""

    reports: dict[str, dict[str, Report]]
    gt_parts_read: list[str]


def checked_inputs(gt_reader: StoreReader, submissions: list[tuple[str, str, str]],
                   storage_options: StorageOptions | None, limits: ArchiveLimits | None,
                   methods: dict[str, ResultsMethod]) -> list[SubmissionInput]:
    """Every submission opened (a store, a submission file checked against the GT, or a
    model's result file paired with the GT's images when ``methods`` names it)."""
    gt_info = GTInfo.of(gt_reader)
    inputs: list[SubmissionInput] = [
        ResultInput(url, storage_options, gt_reader, gt_info, methods[name], limits)
        if name in methods else open_input(url, storage_options, gt_info, limits)
        for name, url, _ in submissions]
    for sub in inputs:
        if sub.manifest["instances"] == "masks" and gt_reader.manifest["instances"] != "masks":
            raise SgdaskError(f"{sub.url}: a mask submission needs a GT store with masks "
                              f"({gt_reader.url} was ingested without masks)")
        if isinstance(sub, StoreInput):
            check_against_gt(sub.reader, gt_reader)
    return inputs


def evaluate_many(gt: str, submissions: list[tuple[str, str, str]], options: Options,
                  client: Client | None = None, scheduler: str | None = None,
                  storage_options: StorageOptions | None = None, progress: bool = False,
                  limits: ArchiveLimits | None = None, keep_stores: dict[str, str] | None = None,
                  methods: dict[str, ResultsMethod] | None = None) -> ManyResult:
    """Score several submissions ``(name, URL, protocols)`` in one Dask graph that reads
    each GT partition once. A URL is a submission store or a submission file (decoded in
    the tasks; ``keep_stores[name]``: also write it as a store there), or with
    ``methods[name]`` a model's result file (decoded in the tasks too)."""
    options.check()
    if len({name for name, _, _ in submissions}) != len(submissions):
        raise SgdaskError("submission names must be unique")
    gt_reader = StoreReader(gt, storage_options, "gt")
    inputs = checked_inputs(gt_reader, submissions, storage_options, limits, methods or {})
    specs, counts, pred_counts = plan_partitions(gt_reader, inputs, options.partition_size)
    zero_shot, composition = training_stats(gt_reader, options.stats, storage_options)
    keep = keep_stores or {}
    subs = tuple(Submission(name, url, get_protocols(protocols),
                            bool(sub.manifest.get("has_ng")),
                            keep.get(name) if isinstance(sub, FileInput) else None)
                 for (name, url, protocols), sub in zip(submissions, inputs, strict=True))
    job = Job(gt, storage_options, subs, parse_ks(options.ks), zero_shot, options.legacy,
              options.match_labels, tuple(FAMILIES), gt_reader.manifest)
    with kept_stores(subs, inputs, storage_options) as writers, \
            dask_client(client, scheduler) as active:
        size = spread_size(counts["evaluated_images"], len(specs), active,
                           options.partition_size)
        tasks = task_count(len(specs), counts["evaluated_images"], active,
                           options.partition_size)
        if size is not None:
            specs, _, _ = plan_partitions(gt_reader, inputs, size)
        elif tasks < len(specs):
            specs, _, _ = plan_partitions(gt_reader, inputs, None, tasks)
        result = run_bag(active, specs, job, progress)
        writers.commit(result.parts_written)
        for sub, given in zip(subs, inputs, strict=True):
            if isinstance(given, ResultInput):
                given.finish(result.digests.get(sub.name, []))
        reports = many_reports(result, subs, inputs, pred_counts, job, options, composition,
                               gt_reader.manifest, counts)
        if options.intervals is not None:
            for by_protocol in reports.values():
                for report in by_protocol.values():
                    add_intervals(report, options.intervals, composition,
                                  cluster_mapper(active))
    return ManyResult(reports, result.gt_parts_read)


def many_reports(result: PartitionResult, subs: tuple[Submission, ...],
                 inputs: list[SubmissionInput], pred_counts: list[dict[str, int]], job: Job,
                 options: Options, composition: dict[int, int] | None,
                 gt_manifest: dict[str, Any], counts: dict[str, int]
                 ) -> dict[str, dict[str, Report]]:
    """Per submission and protocol, the report of the folded results."""
    return {
        sub.name: {p.name: build_report(
            result.accumulators[(sub.name, p.name)], result.images[(sub.name, p.name)],
            EvalSettings(p, options.aggregation, job.ks, sub.with_ng,
                         job.zero_shot is not None, options.legacy, options.tau,
                         options.match_labels),
            composition, gt_manifest, given.manifest, {**counts, **pred_count},
            TermTable.concat(result.terms[(sub.name, p.name)]))
            for p in sub.protocols}
        for sub, given, pred_count in zip(subs, inputs, pred_counts, strict=True)}


def cluster_mapper(client: Client) -> Mapper:
    """Run blocks of bootstrap resamples as tasks (the shared terms sent once)."""
    def run(func: Any, shared: tuple, blocks: list[tuple]) -> list[Any]:
        [sent] = client.scatter([shared], broadcast=True, hash=False)
        futures = [client.submit(lambda s, b: func(*s, *b), sent, block, pure=False)
                   for block in blocks]
        return client.gather(futures)

    return run


def kept_stores(subs: tuple[Submission, ...], inputs: list[SubmissionInput],
                options: StorageOptions | None) -> Any:
    """Store writers for the submissions kept as stores (removed again on failure)."""
    from sgdask.io.ingest import KeptStores

    return KeptStores({sub.name: (sub.keep_store, given) for sub, given
                       in zip(subs, inputs, strict=True) if sub.keep_store}, options)


def evaluate_protocols(gt: str, pred: str, protocols: str = DEFAULT_PROTOCOL,
                       ks: str = DEFAULT_KS, aggregation: str = "per_predicate",
                       partition_size: int | None = DEFAULT_PARTITION_SIZE,
                       client: Client | None = None, scheduler: str | None = None,
                       storage_options: StorageOptions | None = None, progress: bool = False,
                       stats: str | None = None, legacy: bool = False, tau: float = 0.5,
                       match_labels: bool = True, limits: ArchiveLimits | None = None,
                       keep_store: str | None = None, intervals: CISettings | None = None,
                       method: ResultsMethod | None = None) -> dict[str, Report]:
    """Score ``pred`` (a submission store or file; with ``method``, a model's result file)
    against ``gt`` under several protocols in one pass over the data (``intervals``: with
    bootstrap intervals, the same resamples for every protocol)."""
    options = Options(ks, aggregation, partition_size, stats, legacy, tau, match_labels)
    if intervals is not None:
        options = replace(options, ci=intervals.level, resamples=intervals.resamples,
                          seed=intervals.seed, ci_metrics=intervals.metrics)
    many = evaluate_many(gt, [("submission", pred, protocols)], options, client, scheduler,
                         storage_options, progress, limits,
                         {"submission": keep_store} if keep_store else None,
                         {"submission": method} if method else None)
    return many.reports["submission"]


def evaluate(gt: str, pred: str, protocol: str = DEFAULT_PROTOCOL, ks: str = DEFAULT_KS,
             aggregation: str = "per_predicate",
             partition_size: int | None = DEFAULT_PARTITION_SIZE,
             client: Client | None = None, scheduler: str | None = None,
             storage_options: StorageOptions | None = None, progress: bool = False,
             stats: str | None = None, legacy: bool = False, tau: float = 0.5,
             match_labels: bool = True, intervals: CISettings | None = None) -> Report:
    """Score the submission ``pred`` against the GT store ``gt`` under one protocol."""
    reports = evaluate_protocols(gt, pred, protocol, ks, aggregation, partition_size, client,
                                 scheduler, storage_options, progress, stats, legacy, tau,
                                 match_labels, intervals=intervals)
    if len(reports) != 1:
        raise SgdaskError("evaluate() takes one protocol; use evaluate_protocols() for several")
    return next(iter(reports.values()))
