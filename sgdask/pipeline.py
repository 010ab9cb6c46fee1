"""The Dask bag graph: partitions -> read -> score (``sgdask.core``) -> fold -> report.

This module only plans and wires: reading is ``sgdask.io``, scoring a partition's decoded
images and folding the results is ``sgdask.core`` (which the in-memory ``Evaluator`` runs
too), presenting is ``sgdask.report``.

A submission is a converted store, the submission file itself or a model's result file
(``--method``): a task reads its GT partition once, loads (or decodes) every submission's
predictions for it and scores every protocol on it, so many models cost one pass over the GT.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dask.bag as db
import pyarrow as pa
from distributed import Client, as_completed, futures_of

from sgdask.cluster import dask_client
from sgdask.core.finalize import report_of
from sgdask.core.partition import scored_partition
from sgdask.core.result import PartitionResult
from sgdask.core.settings import ONE_PROTOCOL, ScoringSettings, Settings, Submission
from sgdask.errors import InputError, SettingError, SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.consistency import check_against_gt
from sgdask.io.formats import opened
from sgdask.io.fs import StorageOptions, absolute
from sgdask.io.partition import load_gt_images
from sgdask.io.predicate_groups import evaluation_groups
from sgdask.io.results import ResultsMethod
from sgdask.io.sniff import expect
from sgdask.io.sources import PredSlice, StoreInput, SubmissionInput
from sgdask.io.store import CROWD_VERSION, Corrupt, StoreReader, unseen_by_workers
from sgdask.io.training_stats import gt_training_stats
from sgdask.io.validate import GTInfo
from sgdask.metrics import FAMILIES
from sgdask.metrics.groups import PredicateGroups
from sgdask.protocols import get_protocols
from sgdask.report import EvalSettings, Report
from sgdask.report.intervals import add_intervals
from sgdask.stats.bootstrap import Mapper
from sgdask.types import ImagePred


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to score a partition (small and picklable): where the GT
    is, the submissions (``keep_stores``: per submission, where to also write its decoded
    submission file as a store, or None) and what decides the numbers."""

    gt_url: str
    storage_options: StorageOptions | None
    submissions: tuple[Submission, ...]
    keep_stores: tuple[str | None, ...]
    scoring: ScoringSettings
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


def score_partition(spec: PartitionSpec, job: Job) -> PartitionResult:
    """The task: read one GT partition once, then decode each submission's predictions
    for it in turn and score them (``sgdask.core.partition.scored_partition``)."""
    gt_reader = StoreReader(job.gt_url, job.storage_options, manifest=job.gt_manifest)
    gts = list(load_gt_images(gt_reader, list(spec.gt_parts), list(spec.image_ids)))
    out = PartitionResult(gt_parts_read=list(spec.gt_parts))
    return scored_partition(gts, _decoded(spec, job, out), job.scoring, out)


def _decoded(spec: PartitionSpec, job: Job, out: PartitionResult
             ) -> Iterator[tuple[Submission, dict[str, ImagePred]]]:
    """Each submission with its predictions for the partition, decoded when asked for."""
    for sub, keep_store, pred_slice in zip(job.submissions, job.keep_stores, spec.preds,
                                           strict=True):
        yield sub, predictions(sub, keep_store, pred_slice, spec.index, job.storage_options,
                               out)


def predictions(sub: Submission, keep_store: str | None, pred_slice: PredSlice, index: int,
                options: StorageOptions | None, out: PartitionResult) -> dict[str, ImagePred]:
    """A partition's predictions, read by the slice's format; the decoded images of a
    submission file are also written as a store part at ``keep_store``; the digests of the
    files read are kept (a result file's content hash)."""
    loaded = pred_slice.read(options)
    if loaded.digests:
        out.digests.setdefault(sub.name, []).extend(loaded.digests)
    if keep_store is not None and loaded.decoded:
        from sgdask.io.ingest import write_decoded_part

        info = write_decoded_part(keep_store, options, index, loaded.decoded)
        out.parts_written.setdefault(sub.name, []).append(info)
    return loaded.preds


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


@dataclass
class ManyResult:
    """Reports per submission name and protocol, and which GT parts the tasks read."""

    reports: dict[str, dict[str, Report]]
    gt_parts_read: list[str]


def checked_inputs(gt_reader: StoreReader, submissions: list[tuple[str, str, str]],
                   storage_options: StorageOptions | None, limits: ArchiveLimits | None,
                   methods: dict[str, ResultsMethod]) -> list[SubmissionInput]:
    """Every submission opened (a store, or a file in its registered format checked
    against the GT: a model's result file paired with the GT's images when ``methods``
    names it)."""
    gt_info = GTInfo.of(gt_reader)
    for name, url, _ in submissions:
        expect(url, "results" if name in methods else "pred", storage_options)
    inputs = [opened(url, storage_options, gt_reader, gt_info, limits, methods.get(name))
              for name, url, _ in submissions]
    for sub in inputs:
        if sub.manifest["instances"] == "masks" and gt_reader.manifest["instances"] != "masks":
            raise SgdaskError(f"{sub.url}: a mask submission needs a GT store with masks "
                              f"({gt_reader.url} was ingested without masks)")
        if isinstance(sub, StoreInput):
            check_against_gt(sub.reader, gt_reader)
    return inputs


def evaluate_many(gt: str, submissions: list[tuple[str, str, str]], options: Settings,
                  client: Client | None = None, scheduler: str | None = None,
                  storage_options: StorageOptions | None = None, progress: bool = False,
                  limits: ArchiveLimits | None = None, keep_stores: dict[str, str] | None = None,
                  methods: dict[str, ResultsMethod] | None = None) -> ManyResult:
    """Score several submissions ``(name, URL, protocols)`` in one Dask graph that reads
    each GT partition once. A URL is a submission store or a submission file (decoded in
    the tasks; ``keep_stores[name]``: also write it as a store there), or with
    ``methods[name]`` a model's result file (decoded in the tasks too)."""
    options.checked()
    if len({name for name, _, _ in submissions}) != len(submissions):
        raise SgdaskError("submission names must be unique")
    # what the tasks receive: local paths made absolute here, not in each worker's directory
    gt = absolute(gt)
    submissions = [(name, absolute(url), protocols) for name, url, protocols in submissions]
    keep_stores = {name: absolute(url) for name, url in (keep_stores or {}).items()}
    gt_reader = StoreReader(gt, storage_options, "gt")
    inputs = checked_inputs(gt_reader, submissions, storage_options, limits, methods or {})
    specs, counts, pred_counts = plan_partitions(gt_reader, inputs, options.partition_size)
    zero_shot, composition = gt_training_stats(gt_reader, options.stats, storage_options)
    groups = evaluation_groups(gt_reader, options, storage_options)
    subs = tuple(Submission(name, url, get_protocols(protocols),
                            bool(sub.manifest.get("has_ng")),
                            _data_of(gt_reader.manifest, sub.manifest))
                 for (name, url, protocols), sub in zip(submissions, inputs, strict=True))
    for sub, given in zip(subs, inputs, strict=True):
        _check_pair_scores(sub, given)
    keep = tuple((keep_stores or {}).get(sub.name) if given.keeps else None
                 for sub, given in zip(subs, inputs, strict=True))
    scoring = ScoringSettings(options, zero_shot, tuple(FAMILIES))
    job = Job(gt, storage_options, subs, keep, scoring, gt_reader.manifest)
    with kept_stores(subs, keep, inputs, storage_options) as writers, \
            dask_client(client, scheduler) as active:
        size = spread_size(counts["evaluated_images"], len(specs), active,
                           options.partition_size)
        tasks = task_count(len(specs), counts["evaluated_images"], active,
                           options.partition_size)
        if size is not None:
            specs, _, _ = plan_partitions(gt_reader, inputs, size)
        elif tasks < len(specs):
            specs, _, _ = plan_partitions(gt_reader, inputs, None, tasks)
        try:
            result = run_bag(active, specs, job, progress)
        except Corrupt as err:
            raise unseen_by_workers(err, storage_options) from None
        writers.commit(result.parts_written)
        for sub, given in zip(subs, inputs, strict=True):
            given.finish(result.digests.get(sub.name, []))
        reports = many_reports(result, subs, inputs, pred_counts, job, options, composition,
                               groups, gt_reader.manifest, counts)
        if options.intervals is not None:
            for by_protocol in reports.values():
                for report in by_protocol.values():
                    add_intervals(report, options.intervals, composition,
                                  cluster_mapper(active))
    return ManyResult(reports, result.gt_parts_read)


def _data_of(gt: dict[str, Any], pred: dict[str, Any]) -> frozenset[str]:
    """What a submission and the GT hold beyond lists: masks on both sides, the GT's crowd
    flags (stores from format version 4 on), the categories' thing/stuff split."""
    masks = gt["instances"] == "masks" and pred["instances"] == "masks"
    return frozenset({"things", *(("masks",) if masks else ()),
                      *(("crowd",) if gt["format_version"] >= CROWD_VERSION else ())})


def _categories_of(gt: dict[str, Any]) -> tuple[tuple[str, ...], frozenset[int]]:
    """The GT's category names (thing classes, then stuff classes) and its thing
    categories."""
    things = list(gt.get("thing_classes", []))
    return (*things, *gt.get("stuff_classes", [])), frozenset(range(len(things)))


def _check_pair_scores(sub: Submission, given: SubmissionInput) -> None:
    """A one-line error for a submission scored under ``oiv6`` without each pair's
    predicate scores (it ranks them itself)."""
    if any(p.open_images for p in sub.protocols) and not given.manifest.get("pair_scores"):
        raise SgdaskError(f"{given.url}: the oiv6 protocol ranks each scored pair's "
                          "predicate scores, which this submission does not hold (convert "
                          "it with --from-scores; a store converted before store format 5 "
                          "holds none: convert it again)")


def many_reports(result: PartitionResult, subs: tuple[Submission, ...],
                 inputs: list[SubmissionInput], pred_counts: list[dict[str, int]], job: Job,
                 options: Settings, composition: dict[int, int] | None,
                 groups: PredicateGroups | None, gt_manifest: dict[str, Any],
                 counts: dict[str, int]) -> dict[str, dict[str, Report]]:
    """Per submission and protocol, the report of the folded results."""
    scoring = job.scoring
    categories, things = _categories_of(gt_manifest)
    return {
        sub.name: {p.name: report_of(
            result, (sub.name, p.name),
            EvalSettings(p, options, sub.with_ng, scoring.zero_shot is not None, groups,
                         sub.data, categories, things),
            composition, gt_manifest, given.manifest, {**counts, **pred_count})
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


def kept_stores(subs: tuple[Submission, ...], keep: tuple[str | None, ...],
                inputs: list[SubmissionInput], options: StorageOptions | None) -> Any:
    """Store writers for the submissions kept as stores (removed again on failure)."""
    from sgdask.io.ingest import KeptStores

    return KeptStores({sub.name: (url, given) for sub, url, given
                       in zip(subs, keep, inputs, strict=True) if url}, options)


def evaluate_protocols(gt: str, pred: str, protocols: str | None = None, *,
                       settings: Settings | None = None, client: Client | None = None,
                       scheduler: str | None = None,
                       storage_options: StorageOptions | None = None, progress: bool = False,
                       limits: ArchiveLimits | None = None, keep_store: str | None = None,
                       method: ResultsMethod | None = None, **fields: Any
                       ) -> dict[str, Report]:
    """Score ``pred`` (a submission store or file; with ``method``, a model's result file)
    against ``gt`` under several ``protocols`` in one pass over the data.

    ``settings``: the evaluation's settings record (default ``Settings()``); ``fields``:
    keyword overrides of its fields (``ks="20,50"``, ``tau=1.0``, ``ci=0.95``: bootstrap
    intervals, the same resamples for every protocol)."""
    if protocols is not None:
        fields["protocols"] = protocols
    settings = (settings or Settings()).with_fields(**fields)
    many = evaluate_many(gt, [("submission", pred, settings.protocols)], settings, client,
                         scheduler, storage_options, progress, limits,
                         {"submission": keep_store} if keep_store else None,
                         {"submission": method} if method else None)
    return many.reports["submission"]


def evaluate(gt: str, pred: str, protocol: str | None = None, *,
             settings: Settings | None = None, client: Client | None = None,
             scheduler: str | None = None, storage_options: StorageOptions | None = None,
             progress: bool = False, **fields: Any) -> Report:
    """Score the submission ``pred`` against the GT store ``gt`` under one ``protocol``
    (``settings`` and ``fields``: as ``evaluate_protocols``)."""
    try:
        reports = evaluate_protocols(gt, pred, protocol, settings=settings, client=client,
                                     scheduler=scheduler, storage_options=storage_options,
                                     progress=progress, **fields)
    except SettingError as err:
        if protocol is None:
            raise
        raise err.renamed(ONE_PROTOCOL) from None  # named as this call's argument
    if len(reports) != 1:
        raise SgdaskError("evaluate() takes one protocol; use evaluate_protocols() for several")
    return next(iter(reports.values()))
