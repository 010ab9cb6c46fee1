"""The Dask graph: chunks of GT images -> read -> score (``sgdask.core``) -> fold -> report.

This module only plans and wires: reading is ``sgdask.io``, scoring a partition's decoded
images and folding the results is ``sgdask.core`` (which the in-memory ``Evaluator`` runs
too), presenting is ``sgdask.report``. The graph is futures submitted by hand
(``scored_and_finalized``) to a ``distributed`` client or, by default, to threads of this
process (``sgdask.thread_client``): per chunk and group of submissions a scoring task, per
submission its share of each chunk's result and one task merging them in chunk order and
finalizing. A ``dask.bag`` with a tree reduction per model says the same and was measured
slower (docs/decisions.md, "The evaluation graph is futures, not a bag").

A submission is a converted store, the submission file itself or a model's result file
(``--method``): a task reads its GT partition once, loads (or decodes) every submission's
predictions for it and scores every protocol on it, so many models cost one pass over the GT.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sgdask.cluster import Local, dask_client
from sgdask.core.finalize import report_of
from sgdask.core.partition import scored_partition
from sgdask.core.plan import EvalSettings
from sgdask.core.result import PartitionResult
from sgdask.core.settings import ONE_PROTOCOL, ScoringSettings, Settings, Submission
from sgdask.errors import InputError, SettingError, SgdaskError
from sgdask.formats import claimed, opened
from sgdask.formats.methods import ResultsMethod
from sgdask.formats.sniff import expect
from sgdask.formats.validate import GTInfo
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, absolute, filesystem
from sgdask.io.predicate_groups import evaluation_groups
from sgdask.io.sources import PredSlice, StoreInput, SubmissionInput
from sgdask.io.units import check_units, grouped_chunks, unit_column
from sgdask.metrics import FAMILIES, Family, families_of
from sgdask.metrics.groups import PredicateGroups
from sgdask.protocols import get_protocols
from sgdask.report import Report
from sgdask.report.intervals import add_intervals
from sgdask.stats.bootstrap import Mapper
from sgdask.store.consistency import check_against_gt
from sgdask.store.partition import load_gt_images
from sgdask.store.store import CROWD_VERSION, Corrupt, StoreReader, unseen_by_workers
from sgdask.store.training_stats import gt_training_stats
from sgdask.thread_client import as_completed
from sgdask.types import ImagePred

if TYPE_CHECKING:
    from sgdask.cluster import AnyClient


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
    """Each submission with its predictions for the partition, decoded when asked for; one
    whose predictions cannot be read is left out, its error kept in ``out.failed`` (it
    fails alone: ``PartitionResult.of``)."""
    for sub, keep_store, pred_slice in zip(job.submissions, job.keep_stores, spec.preds,
                                           strict=True):
        try:
            preds = predictions(sub, keep_store, pred_slice, spec.index, job.storage_options,
                                out)
        except SgdaskError as err:
            out.failed[sub.name] = err
            continue
        yield sub, preds


def predictions(sub: Submission, keep_store: str | None, pred_slice: PredSlice, index: int,
                options: StorageOptions | None, out: PartitionResult) -> dict[str, ImagePred]:
    """A partition's predictions, read by the slice's format; the decoded images of a
    submission file are also written as a store part at ``keep_store``; the digests of the
    files read are kept (a result file's content hash)."""
    loaded = pred_slice.read(options)
    if loaded.digests:
        out.digests.setdefault(sub.name, []).extend(loaded.digests)
    if keep_store is not None and loaded.decoded:
        from sgdask.formats.ingest import write_decoded_part

        info = write_decoded_part(keep_store, options, index, loaded.decoded)
        out.parts_written.setdefault(sub.name, []).append(info)
    return loaded.preds


def parts_holding(ids: list[str], parts: list[dict[str, Any]]) -> tuple[str, ...]:
    """Names of the store parts whose id range overlaps the (sorted) ids."""
    lo, hi = ids[0], ids[-1]
    return tuple(p["name"] for p in parts if p["first_id"] <= hi and p["last_id"] >= lo)


def evaluation_chunks(gt_images: pa.Table, partition_size: int | None,
                      tasks: int | None = None, unit: str | None = None) -> list[list[str]]:
    """Sorted ids of GT images with relations, cut into ``partition_size`` chunks, or by
    store part when None: one task per part, or the parts in ``tasks`` groups of
    consecutive parts, as equal in count as they divide. ``unit``: a unit the store
    records, whose members a chunk keeps together (``sgdask.io.units.grouped_chunks``; the
    store's parts already do)."""
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
    if unit is None:
        return [ids[s:s + partition_size] for s in range(0, len(ids), partition_size)]
    of = dict(zip(gt_images["image_id"].to_pylist(), gt_images[unit_column(unit)].to_pylist(),
                  strict=True))
    return grouped_chunks(ids, [of[i] for i in ids], partition_size)


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


def checked_chunks(gt: StoreReader, chunks: list[list[str]]) -> list[list[str]]:
    """The chunks, or the error that there is nothing to evaluate."""
    if not chunks:
        raise SgdaskError(f"{gt.url}: no test image has a relation: nothing to evaluate")
    return chunks


def chunk_counts(chunks: list[list[str]], known: set[str]) -> dict[str, int]:
    """The GT's image counts of an evaluation."""
    n_evaluated = sum(len(c) for c in chunks)
    return {"gt_images": len(known), "evaluated_images": n_evaluated,
            "gt_images_without_relations": len(known) - n_evaluated}


TASKS_PER_THREAD = 2
TASK_IMAGES = 256
MIN_TASK_IMAGES = 8
#: submissions one task scores at most: a task reads its GT partition once for all of them,
#: and a cap keeps tasks small enough that, with many models, no worker idles at the end
MODELS_PER_TASK = 8


def spread_size(n_images: int, n_tasks: int, client: AnyClient, partition_size: int | None,
                groups: int = 1) -> int | None:
    """A partition size that gives every worker thread of the cluster work when the default
    (one task per GT store part) has fewer tasks than threads (a store of few large parts on
    many cores); None keeps the plan (always when ``--partition-size`` is given). Each of
    ``groups`` groups of submissions has tasks of its own: they share the threads."""
    if partition_size is not None:
        return None
    threads = _threads_per_group(client, groups)
    if n_tasks >= threads:
        return None
    size = max(MIN_TASK_IMAGES, -(-n_images // (TASKS_PER_THREAD * threads)))
    return size if -(-n_images // size) > n_tasks else None


def task_count(n_tasks: int, n_images: int, client: AnyClient, partition_size: int | None,
               groups: int = 1) -> int:
    """Tasks of the default plan: ``n_tasks`` (one per GT store part), or fewer groups of
    consecutive parts of about ``TASK_IMAGES`` images, a multiple of the worker threads.
    Every task reads its GT and submission tables and folds a result; on a store of many
    small parts (PSG's 64 images) those fixed costs were a fifth of an evaluation. A fixed
    task size, not a share of the dataset, keeps a worker's memory flat in images; a
    multiple of the threads keeps every thread busy to the last round (9 tasks on 2
    threads left one thread idle for the ninth). ``groups``: as for ``spread_size``."""
    if partition_size is not None or not n_tasks:
        return n_tasks
    threads = _threads_per_group(client, groups)
    per_task = max(1, TASK_IMAGES * n_tasks // max(n_images, 1))
    groups = threads * math.ceil(math.ceil(n_tasks / per_task) / threads)
    return max(1, min(n_tasks, groups))


def _threads_per_group(client: AnyClient, groups: int) -> int:
    return max(1, -(-sum(client.nthreads().values()) // groups))


def sized_chunks(gt: StoreReader, gt_images: pa.Table, partition_size: int | None,
                 client: AnyClient, groups: int) -> list[list[str]]:
    """The evaluation's chunks of GT image ids, one per task of each of ``groups`` groups
    of submissions, sized to the cluster (``spread_size``, ``task_count``)."""
    unit = gt.units[0] if gt.units else None
    chunks = checked_chunks(gt, evaluation_chunks(gt_images, partition_size, unit=unit))
    n_images = sum(len(c) for c in chunks)
    size = spread_size(n_images, len(chunks), client, partition_size, groups)
    tasks = task_count(len(chunks), n_images, client, partition_size, groups)
    if size is not None:
        return evaluation_chunks(gt_images, size, unit=unit)
    if tasks < len(chunks):
        return evaluation_chunks(gt_images, None, tasks)
    return chunks


def model_groups(n_models: int) -> list[range]:
    """Consecutive groups of at most ``MODELS_PER_TASK`` submissions, as equal as they
    divide: every task scores one chunk of images for one group."""
    n_groups = max(1, -(-n_models // MODELS_PER_TASK))
    sizes = [n_models // n_groups + (i < n_models % n_groups) for i in range(n_groups)]
    cuts = [0, *itertools.accumulate(sizes)]
    return [range(a, b) for a, b in itertools.pairwise(cuts) if b > a]


@dataclass
class ManyResult:
    """Reports per submission name and protocol, which GT parts the tasks read, and the
    submissions that failed (``isolate``: each alone, the others scored)."""

    reports: dict[str, dict[str, Report]]
    gt_parts_read: list[str]
    failed: dict[str, SgdaskError] = field(default_factory=dict)


def checked_inputs(gt_reader: StoreReader, submissions: list[tuple[str, str, str]],
                   storage_options: StorageOptions | None, limits: ArchiveLimits | None,
                   methods: dict[str, ResultsMethod]
                   ) -> tuple[list[SubmissionInput], list[dict[str, int]]]:
    """Every submission opened (a store, or a file in its registered format checked
    against the GT: a model's result file paired with the GT's images when ``methods``
    names it); and per submission what its store's check gives the protocol lint."""
    gt_info = GTInfo.of(gt_reader)
    for name, url, _ in submissions:
        expect(url, "results" if name in methods else "pred", storage_options)
    inputs = [opened(url, storage_options, gt_reader, gt_info, limits, methods.get(name))
              for name, url, _ in submissions]
    lint = []
    for sub in inputs:
        if sub.manifest["instances"] == "masks" and gt_reader.manifest["instances"] != "masks":
            raise SgdaskError(f"{sub.url}: a mask submission needs a GT store with masks "
                              f"({gt_reader.url} was ingested without masks)")
        lint.append(check_against_gt(sub.reader, gt_reader) if isinstance(sub, StoreInput)
                    else {})
    return inputs, lint


@dataclass(frozen=True)
class Planned:
    """One submission checked against the GT and cut into the evaluation's chunks (what its
    first-wave task returns: slices name parts and ids, never predictions); ``keeps``: its
    decoded images can be kept as a store."""

    sub: Submission
    manifest: dict[str, Any]
    keeps: bool
    slices: tuple[PredSlice, ...]
    counts: dict[str, int]


@dataclass(frozen=True)
class GTPlan:
    """What every first-wave task shares: the GT and the evaluation's chunks of image ids."""

    url: str
    storage_options: StorageOptions | None
    manifest: dict[str, Any]
    chunks: list[list[str]]
    known: frozenset[str]


def opened_plan(gt: GTPlan, name: str, url: str, protocols: str, limits: ArchiveLimits | None,
                method: ResultsMethod | None, verify: bool = False
                ) -> tuple[Planned, SubmissionInput]:
    """One submission verified completely (``verify``), opened and checked against the GT
    before any of its kernels runs (SPEC), cut into the chunks; and the opened input."""
    if verify:
        from sgdask.store.verify import check_intact

        check_intact(url, gt.storage_options)
    gt_reader = StoreReader(gt.url, gt.storage_options, manifest=gt.manifest)
    [given], [lint] = checked_inputs(gt_reader, [(name, url, protocols)],
                                     gt.storage_options, limits,
                                     {name: method} if method else {})
    slices, counts = pred_slices(gt.chunks, set(gt.known), given)
    counts.update(lint)  # the report's lint takes them out (sgdask.core.finalize)
    sub = Submission(name, url, get_protocols(protocols), bool(given.manifest.get("has_ng")),
                     _data_of(gt.manifest, given.manifest))
    _check_pair_scores(sub, given)
    check_units([p.unit for p in sub.protocols], gt.manifest, gt.url)
    return Planned(sub, given.manifest, given.keeps, tuple(slices), counts), given


def planned(gt: GTPlan, name: str, url: str, protocols: str, limits: ArchiveLimits | None,
            verify: bool) -> Planned:
    """A submission store's first-wave task (``opened_plan`` on a worker)."""
    return opened_plan(gt, name, url, protocols, limits, None, verify)[0]


def _is_file(url: str, method: ResultsMethod | None, options: StorageOptions | None) -> bool:
    """Whether the submission is a file (or a model's result files), not a store: opened
    in this process, which parses it anyway, as ``sgdask.formats.opened`` decides (a
    PSG-challenge directory too)."""
    if method is not None:
        return True
    fs, path = filesystem(url, options)
    return fs.isfile(path) or (fs.isdir(path) and claimed(url, options) is not None)


def first_wave(client: AnyClient, gt: GTPlan, submissions: list[tuple[str, str, str]],
               limits: ArchiveLimits | None, methods: dict[str, ResultsMethod], verify: bool,
               isolate: bool
               ) -> tuple[list[Planned], dict[str, SubmissionInput], dict[str, SgdaskError]]:
    """Every submission planned: a store by a task of its own (checked on a worker), a
    file in this process (its input kept: ``finish``, kept stores; ``verify`` applies to
    stores). A submission whose
    check fails is left out and named (``isolate``), else its error is raised before any
    kernel runs."""
    # on every worker: a worker lost with the only copy would fail the tasks that need it
    [shared] = client.scatter([gt], hash=False, broadcast=True)
    files = {name for name, url, _ in submissions
             if _is_file(url, methods.get(name), gt.storage_options)}
    futures = {name: client.submit(planned, shared, name, url, protocols, limits, verify,
                                   pure=False)
               for name, url, protocols in submissions if name not in files}
    plans, inputs, failed = [], {}, {}
    for name, url, protocols in submissions:
        try:
            if name in files:  # verified as opened (``verify`` checks stores)
                plan, inputs[name] = opened_plan(gt, name, url, protocols, limits,
                                                 methods.get(name))
            else:
                plan = futures[name].result()
            plans.append(plan)
        except SgdaskError as err:
            if not isolate:
                client.cancel(list(futures.values()))
                raise
            failed[name] = err
    return plans, inputs, failed


@dataclass(frozen=True)
class ReportContext:
    """What finalizing a submission's reports needs besides its results (small, shared)."""

    options: Settings
    zero_shot: bool
    groups: PredicateGroups | None
    composition: dict[int, int] | None
    gt_manifest: dict[str, Any]
    counts: dict[str, int]
    families: tuple[Family, ...]


Finish = Callable[[str, dict[str, Report]], None]


@dataclass(frozen=True)
class Returned:
    """What of a report a finalizing task sends back besides its numbers: the per-image
    rows and terms (``rows``: for the driver to write or resample), the families' final
    states (``states``: what intervals and paired tests read; a ranking protocol's are every
    candidate of the test set)."""

    rows: bool = True
    states: bool = True

    def of(self, report: Report) -> Report:
        dropped: dict[str, Any] = {} if self.rows else {"per_image": [], "terms": None}
        return replace(report, **dropped, **({} if self.states else {"states": None}))


def finalized(sub: Submission, manifest: dict[str, Any], counts: dict[str, int],
              ctx: ReportContext, then: Finish | None, returned: Returned,
              *results: PartitionResult) -> dict[str, Report]:
    """One submission's per-model task: its shares of the chunks' results merged in chunk
    order, its reports finalized (``manifest``: the submission's, complete), ``then``
    (writing them: reports, cache entry) run here on the worker; what of them is
    ``returned``."""
    own = PartitionResult.merged_all(results)
    categories, things = _categories_of(ctx.gt_manifest)
    with families_of(ctx.families):
        reports = {p.name: Report.of(report_of(
            own, (sub.name, p.name),
            EvalSettings(p, ctx.options, sub.with_ng, ctx.zero_shot, ctx.groups, sub.data,
                         categories, things),
            ctx.composition, ctx.gt_manifest, manifest, {**ctx.counts, **counts}))
            for p in sub.protocols}
        if then is not None:  # written as the reports name their metrics
            then(sub.name, reports)
    return {name: returned.of(r) for name, r in reports.items()}


def task_io(*results: PartitionResult) -> PartitionResult:
    """What the tasks' I/O reports, without scores: GT parts read, store parts written,
    result files' digests."""
    io = PartitionResult()
    for r in results:
        io = io.merged(PartitionResult(gt_parts_read=r.gt_parts_read,
                                       parts_written=r.parts_written, digests=r.digests))
    return io


def scored_and_finalized(client: AnyClient, plans: list[Planned],
                         inputs: dict[str, SubmissionInput], chunks: list[list[str]],
                         gt_reader: StoreReader, job: Job, ctx: ReportContext,
                         then: dict[str, Finish], returned: Returned, progress: bool
                         ) -> tuple[list[Any], Any]:
    """Per group of submissions, a task per chunk scoring them, then one finalizing task
    per submission (fed by tasks taking its share of each chunk's result: what moves
    between workers is one submission's, not the group's); the futures of the finalizing
    tasks (in ``plans`` order) and of the tasks' I/O record. Groups are submitted in order,
    so the first groups' reports are written while later groups are scored. A file whose
    manifest the tasks' digests complete (a result file's content hash) is finalized once
    they are in (``inputs``: the files opened in this process)."""
    gt_parts = [parts_holding(ids, gt_reader.parts) for ids in chunks]
    finals: list[Any] = []
    scored_all: list[Any] = []
    later = []
    for group in model_groups(len(plans)):
        members = [plans[i] for i in group]
        group_job = replace(job, submissions=tuple(p.sub for p in members),
                            keep_stores=tuple(job.keep_stores[i] for i in group))
        scored = [client.submit(score_partition,
                                PartitionSpec(i, tuple(ids), gt_parts[i],
                                              tuple(p.slices[i] for p in members)),
                                group_job, pure=False)
                  for i, ids in enumerate(chunks)]
        for p in members:  # each chunk's share of a submission taken where the chunk is
            shares = [client.submit(PartitionResult.of, r, p.sub.name, pure=False)
                      for r in scored]
            if p.manifest.get("content_hash") is None:
                later.append((len(finals), p, shares))
                finals.append(None)
            else:
                finals.append(client.submit(finalized, p.sub, p.manifest, p.counts, ctx,
                                            then.get(p.sub.name), returned, *shares,
                                            pure=False))
        scored_all += scored
    io = client.submit(task_io, *scored_all, pure=False) if scored_all else None
    if progress:
        _show_progress(scored_all)
    if later:
        digests = io.result().digests
        for i, p, shares in later:
            given = inputs[p.sub.name]
            given.finish(digests.get(p.sub.name, []))
            finals[i] = client.submit(finalized, p.sub, given.manifest, p.counts, ctx,
                                      then.get(p.sub.name), returned, *shares, pure=False)
    return finals, io


def _show_progress(futures: list[Any]) -> None:
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("evaluating partitions", total=len(futures))
        for _ in as_completed(futures):
            bar.advance(task)


def evaluate_many(gt: str, submissions: list[tuple[str, str, str]], options: Settings,
                  client: AnyClient | None = None, scheduler: str | Local | None = None,
                  storage_options: StorageOptions | None = None, progress: bool = False,
                  limits: ArchiveLimits | None = None, keep_stores: dict[str, str] | None = None,
                  methods: dict[str, ResultsMethod] | None = None, *, isolate: bool = False,
                  then: dict[str, Finish] | None = None, slim: bool = False,
                  states: bool = True, verify: bool = False) -> ManyResult:
    """Score several submissions ``(name, URL, protocols)`` in one Dask graph that reads
    each GT partition once per group of submissions. A URL is a submission store or a
    submission file (decoded in the tasks; ``keep_stores[name]``: also write it as a store
    there), or with ``methods[name]`` a model's result file (decoded in the tasks too).

    The driver only plans and waits: each submission's check is a task of the first wave
    (``verify``: its store verified completely first; ``isolate``: a submission that fails
    fails alone, named in ``failed``), each submission's reports are finalized by a task of
    its own, which also runs ``then[name](name, reports)`` (writing them) on the worker;
    ``slim``: the reports come back without per-image rows and terms; ``states``: with
    their final states (always when ``options`` asks for intervals)."""
    options.checked()
    if len({name for name, _, _ in submissions}) != len(submissions):
        raise SgdaskError("submission names must be unique")
    # what the tasks receive: local paths made absolute here, not in each worker's directory
    gt = absolute(gt)
    submissions = [(name, absolute(url), protocols) for name, url, protocols in submissions]
    keep_stores = {name: absolute(url) for name, url in (keep_stores or {}).items()}
    gt_reader = StoreReader(gt, storage_options, "gt")
    zero_shot, composition = gt_training_stats(gt_reader, options.stats, storage_options)
    groups = evaluation_groups(gt_reader, options, storage_options)
    scoring = ScoringSettings(options, zero_shot, tuple(FAMILIES))
    with dask_client(client, scheduler) as active:
        gt_images = gt_reader.images()
        chunks = sized_chunks(gt_reader, gt_images, options.partition_size, active,
                              len(model_groups(len(submissions))))
        known = frozenset(gt_images["image_id"].to_pylist())
        gt_plan = GTPlan(gt, storage_options, gt_reader.manifest, chunks, known)
        try:
            plans, inputs, failed = first_wave(active, gt_plan, submissions, limits,
                                               methods or {}, verify, isolate)
            keep = tuple((keep_stores or {}).get(p.sub.name) if p.keeps else None
                         for p in plans)
            subs = tuple(p.sub for p in plans)
            job = Job(gt, storage_options, subs, keep, scoring, gt_reader.manifest)
            ctx = ReportContext(options, zero_shot is not None, groups, composition,
                                gt_reader.manifest, chunk_counts(chunks, known),
                                scoring.families)
            with kept_stores(subs, keep, [inputs.get(p.sub.name) for p in plans],
                             storage_options) as writers:
                returned = Returned(not slim, states or options.intervals is not None)
                finals, io_future = scored_and_finalized(active, plans, inputs, chunks, gt_reader,
                                                         job, ctx, then or {}, returned, progress)
                reports = _gathered(plans, finals, failed, isolate)
                io = _io_of(io_future, failed)
                writers.commit(io.parts_written)
        except Corrupt as err:  # a store part missing on a worker, not in this process
            raise unseen_by_workers(err, storage_options) from None
        failed = {name: unseen_by_workers(err, storage_options) if isinstance(err, Corrupt)
                  else err for name, err in failed.items()}
        if options.intervals is not None:
            for by_protocol in reports.values():
                for report in by_protocol.values():
                    add_intervals(report, options.intervals, composition,
                                  cluster_mapper(active))
    return ManyResult(reports, io.gt_parts_read, failed)


def _io_of(future: Any, failed: dict[str, SgdaskError]) -> PartitionResult:
    """The tasks' I/O record; an empty one when there were no tasks, or when a task failed
    and its submissions are named in ``failed`` (``isolate``)."""
    if future is None:
        return PartitionResult()
    try:
        return future.result()
    except SgdaskError:
        if not failed:
            raise
        return PartitionResult()


def _gathered(plans: list[Planned], finals: list[Any], failed: dict[str, SgdaskError],
              isolate: bool) -> dict[str, dict[str, Report]]:
    """The finalizing tasks' reports, in submission order (``isolate``: a submission whose
    tasks failed is named in ``failed``, the others kept)."""
    reports = {}
    for plan, future in zip(plans, finals, strict=True):
        try:
            reports[plan.sub.name] = future.result()
        except SgdaskError as err:
            if not isolate:
                raise
            failed[plan.sub.name] = err
    return reports


def _data_of(gt: dict[str, Any], pred: dict[str, Any]) -> frozenset[str]:
    """What a submission and the GT hold beyond lists: masks on both sides (or on the GT's:
    what a box submission is not scored for is then listed as left out), the GT's crowd
    flags (stores from format version 4 on), the categories' thing/stuff split."""
    masks = gt["instances"] == "masks" and pred["instances"] == "masks"
    return frozenset({"things", *(("masks",) if masks else ()),
                      *(("gt_masks",) if gt["instances"] == "masks" else ()),
                      *(("crowd",) if gt["format_version"] >= CROWD_VERSION else ())})


def _categories_of(gt: dict[str, Any]) -> tuple[tuple[str, ...], frozenset[int]]:
    """The GT's category names (thing classes, then stuff classes) and its thing
    categories."""
    things = list(gt.get("thing_classes", []))
    return (*things, *gt.get("stuff_classes", [])), frozenset(range(len(things)))


def _check_pair_scores(sub: Submission, given: SubmissionInput) -> None:
    """A one-line error for a submission one of its protocols cannot score (a protocol
    that ranks each pair's predicate scores, without them)."""
    for protocol in sub.protocols:
        refusal = protocol.submission_refusal(given.manifest)
        if refusal is not None:
            raise SgdaskError(f"{given.url}: ", *refusal)


def cluster_mapper(client: AnyClient) -> Mapper:
    """Run blocks of bootstrap resamples as tasks (the shared terms sent once)."""
    def run(func: Any, shared: tuple, blocks: list[tuple]) -> list[Any]:
        [sent] = client.scatter([shared], broadcast=True, hash=False)
        futures = [client.submit(lambda s, b: func(*s, *b), sent, block, pure=False)
                   for block in blocks]
        return client.gather(futures)

    return run


def kept_stores(subs: tuple[Submission, ...], keep: tuple[str | None, ...],
                inputs: list[SubmissionInput | None], options: StorageOptions | None) -> Any:
    """Store writers for the submissions kept as stores (removed again on failure)."""
    from sgdask.formats.ingest import KeptStores

    return KeptStores({sub.name: (url, given) for sub, url, given
                       in zip(subs, keep, inputs, strict=True) if url}, options)


def evaluate_protocols(gt: str, pred: str, protocols: str | None = None, *,
                       settings: Settings | None = None, client: AnyClient | None = None,
                       scheduler: str | None = None,
                       storage_options: StorageOptions | None = None, progress: bool = False,
                       limits: ArchiveLimits | None = None, keep_store: str | None = None,
                       method: ResultsMethod | None = None, states: bool = True,
                       **fields: Any) -> dict[str, Report]:
    """Score ``pred`` (a submission store or file; with ``method``, a model's result file)
    against ``gt`` under several ``protocols`` in one pass over the data.

    ``settings``: the evaluation's settings record (default ``Settings()``); ``fields``:
    keyword overrides of its fields (``ks="20,50"`` or ``ks=[20, 50]``, ``tau=1.0``,
    ``ci=0.95``: bootstrap intervals, the same resamples for every protocol); ``states``:
    the reports keep their families' final states (``Report.states``), which later
    intervals or paired tests read."""
    if protocols is not None:
        fields["protocols"] = protocols
    settings = (settings or Settings()).with_fields(**fields)
    many = evaluate_many(gt, [("submission", pred, settings.protocols)], settings, client,
                         scheduler, storage_options, progress, limits,
                         {"submission": keep_store} if keep_store else None,
                         {"submission": method} if method else None, states=states)
    return many.reports["submission"]


def evaluate(gt: str, pred: str, protocol: str | None = None, *,
             settings: Settings | None = None, client: AnyClient | None = None,
             scheduler: str | None = None, storage_options: StorageOptions | None = None,
             progress: bool = False, states: bool = True, **fields: Any) -> Report:
    """Score the submission ``pred`` against the GT store ``gt`` under one ``protocol``
    (``settings``, ``states`` and ``fields``: as ``evaluate_protocols``)."""
    try:
        reports = evaluate_protocols(gt, pred, protocol, settings=settings, client=client,
                                     scheduler=scheduler, storage_options=storage_options,
                                     progress=progress, states=states, **fields)
    except SettingError as err:
        if protocol is None:
            raise
        raise err.renamed(ONE_PROTOCOL) from None  # named as this call's argument
    if len(reports) != 1:
        raise SgdaskError("evaluate() takes one protocol; use evaluate_protocols() for several")
    return next(iter(reports.values()))
