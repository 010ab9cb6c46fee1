"""The Dask bag graph: partitions -> read -> per-image kernels -> accumulators -> fold -> report.

This module only wires: reading is ``sgdask.io``, computing is ``sgdask.kernels`` and
``sgdask.accum``, presenting is ``sgdask.report``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dask.bag as db
import pyarrow as pa
from distributed import Client, as_completed, futures_of

from sgdask.accum import AGGREGATIONS, Accumulator
from sgdask.cluster import dask_client
from sgdask.errors import InputError, InstanceMismatch, SgdaskError
from sgdask.io.fs import StorageOptions, join
from sgdask.io.partition import load_gt_images, pred_loaders
from sgdask.io.stats import STATS_FILE, composition_counts, read_stats, zero_shot_from
from sgdask.io.store import StoreReader
from sgdask.kernels.image import ImageResult, ZeroShot, evaluate_image, missing_image_result
from sgdask.kernels.selection import DEFAULT_KS, KSpec, parse_ks
from sgdask.protocols import DEFAULT_PROTOCOL, Protocol, get_protocols
from sgdask.report import EvalSettings, Report, build_report
from sgdask.types import ImageGT, ImagePred

DEFAULT_PARTITION_SIZE: int | None = None  # one task per GT store part


@dataclass(frozen=True)
class Submission:
    """A submission store to score and the protocols to score it under."""

    name: str
    url: str
    protocols: tuple[Protocol, ...]
    with_ng: bool = True


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


@dataclass(frozen=True)
class PredSlice:
    """Where one submission's images of a partition live."""

    parts: tuple[str, ...]
    ids: tuple[str, ...]


@dataclass(frozen=True)
class PartitionSpec:
    """The GT images one task evaluates, the GT parts that hold them, and per submission
    the parts holding its predictions for them."""

    image_ids: tuple[str, ...]
    gt_parts: tuple[str, ...]
    preds: tuple[PredSlice, ...]


Key = tuple[str, str]  # (submission name, protocol name)


@dataclass
class PartitionResult:
    """Per (submission, protocol): an accumulator and per-image rows; the GT parts read.

    Merging is associative (accumulators merge exactly; rows and parts concatenate).
    """

    accumulators: dict[Key, Accumulator] = field(default_factory=dict)
    images: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)
    gt_parts_read: list[str] = field(default_factory=list)

    def add(self, key: Key, result: ImageResult) -> None:
        self.accumulators.setdefault(key, Accumulator()).update(result)
        self.images.setdefault(key, []).append(image_row(result))

    def merged(self, other: PartitionResult) -> PartitionResult:
        keys = list(dict.fromkeys([*self.accumulators, *other.accumulators]))
        empty = Accumulator()
        return PartitionResult(
            {k: self.accumulators.get(k, empty).merged(other.accumulators.get(k, empty))
             for k in keys},
            {k: self.images.get(k, []) + other.images.get(k, []) for k in keys},
            self.gt_parts_read + other.gt_parts_read)


def image_row(result: ImageResult) -> dict[str, Any]:
    """One row of the per-image table."""
    row: dict[str, Any] = {"image_id": result.image_id, "missing": result.missing,
                           "gt_triplets": result.n_gt_triplets}
    row.update({name: num / den if den else None
                for name, (num, den) in result.scalars.items()})
    row.update(result.diagnostics)
    return row


def score_partition(spec: PartitionSpec, job: Job) -> PartitionResult:
    """Read one GT partition once and score every submission and protocol on it."""
    gt_reader = StoreReader(job.gt_url, job.storage_options)
    loaders = [pred_loaders(StoreReader(sub.url, job.storage_options), list(sl.parts),
                            list(sl.ids))
               for sub, sl in zip(job.submissions, spec.preds, strict=True)]
    out = PartitionResult(gt_parts_read=list(spec.gt_parts))
    for gt in load_gt_images(gt_reader, list(spec.gt_parts), list(spec.image_ids)):
        for sub, preds in zip(job.submissions, loaders, strict=True):
            pred = preds[gt.image_id]() if gt.image_id in preds else None
            for protocol in sub.protocols:
                out.add((sub.name, protocol.name),
                        score_image_under(gt, pred, protocol, sub, job))
    return out


def score_image_under(gt: ImageGT, pred: ImagePred | None, protocol: Protocol,
                      sub: Submission, job: Job) -> ImageResult:
    """One image's terms under one protocol (the masks are read once for all protocols)."""
    if pred is None:
        return missing_image_result(gt, protocol, job.ks, sub.with_ng, job.zero_shot,
                                    job.legacy)
    try:
        return evaluate_image(gt, pred, protocol, job.ks, sub.with_ng, job.zero_shot,
                              job.legacy, job.match_labels)
    except InstanceMismatch as err:  # any other kernel exception is a bug in sgdask
        raise InputError(sub.url, str(err), image=gt.image_id, field="instances") from err


def parts_holding(ids: list[str], parts: list[dict[str, Any]]) -> tuple[str, ...]:
    """Names of the store parts whose id range overlaps the (sorted) ids."""
    lo, hi = ids[0], ids[-1]
    return tuple(p["name"] for p in parts if p["first_id"] <= hi and p["last_id"] >= lo)


def evaluation_chunks(gt_images: pa.Table, partition_size: int | None) -> list[list[str]]:
    """Sorted ids of GT images with relations, cut into ``partition_size`` chunks, or by
    store part when None (each task then reads exactly one GT part)."""
    rows = sorted((r["image_id"], r["part"]) for r in
                  gt_images.select(["image_id", "part", "n_graph"]).to_pylist() if r["n_graph"])
    if partition_size is None:
        by_part: dict[str, list[str]] = {}
        for image_id, part in rows:
            by_part.setdefault(part, []).append(image_id)
        return [by_part[p] for p in sorted(by_part)]
    ids = [i for i, _ in rows]
    return [ids[s:s + partition_size] for s in range(0, len(ids), partition_size)]


def pred_slices(chunks: list[list[str]], known: set[str], pred: StoreReader
                ) -> tuple[list[PredSlice], dict[str, int]]:
    """Per evaluation chunk, where this submission's predictions are; plus its counts."""
    pred_ids = sorted(pred.images()["image_id"].to_pylist())
    unknown = [i for i in pred_ids if i not in known]
    if unknown:
        raise InputError(pred.url, f"not among the ground truth's test images "
                         f"({len(unknown)} such image(s))", image=unknown[0], field="id")
    pred_set = set(pred_ids)
    slices = []
    for ids in chunks:
        present = [i for i in ids if i in pred_set]
        slices.append(PredSlice(parts_holding(present, pred.parts) if present else (),
                                tuple(present)))
    evaluated = {i for chunk in chunks for i in chunk}
    return slices, {"submission_images": len(pred_ids),
                    "submission_images_not_evaluated": len(pred_set - evaluated)}


def plan_partitions(gt: StoreReader, preds: list[StoreReader], partition_size: int | None
                    ) -> tuple[list[PartitionSpec], dict[str, int], list[dict[str, int]]]:
    """Evaluation partitions over the GT images that have relations; GT and per-submission
    counts."""
    gt_images = gt.images()
    chunks = evaluation_chunks(gt_images, partition_size)
    if not chunks:
        raise SgdaskError(f"{gt.url}: no test image has a relation: nothing to evaluate")
    known = set(gt_images["image_id"].to_pylist())
    per_pred = [pred_slices(chunks, known, p) for p in preds]
    specs = [PartitionSpec(tuple(ids), parts_holding(ids, gt.parts),
                           tuple(slices[i] for slices, _ in per_pred))
             for i, ids in enumerate(chunks)]
    n_evaluated = sum(len(c) for c in chunks)
    counts = {"gt_images": len(known), "evaluated_images": n_evaluated,
              "gt_images_without_relations": len(known) - n_evaluated}
    return specs, counts, [c for _, c in per_pred]


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
    url = stats or (join(gt.url, STATS_FILE) if gt.manifest.get("train_stats") else None)
    if url is None:
        return None, None
    table = read_stats(url, options)
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

    def check(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise SgdaskError(f"--aggregation: unknown mode {self.aggregation!r} "
                              f"(expected one of: {', '.join(AGGREGATIONS)})")
        if self.partition_size is not None and self.partition_size < 1:
            raise SgdaskError("--partition-size: must be at least 1")
        if not self.tau >= 0:
            raise SgdaskError(f"--tau: {self.tau} must be a number >= 0")


@dataclass
class ManyResult:
    """Reports per submission name and protocol, and which GT parts the tasks read."""

    reports: dict[str, dict[str, Report]]
    gt_parts_read: list[str]


def evaluate_many(gt: str, submissions: list[tuple[str, str, str]], options: Options,
                  client: Client | None = None, scheduler: str | None = None,
                  storage_options: StorageOptions | None = None, progress: bool = False
                  ) -> ManyResult:
    """Score several submissions ``(name, store URL, protocols)`` in one Dask graph that
    reads each GT partition once."""
    options.check()
    if len({name for name, _, _ in submissions}) != len(submissions):
        raise SgdaskError("submission names must be unique")
    gt_reader = StoreReader(gt, storage_options, "gt")
    readers = [StoreReader(url, storage_options, "submission") for _, url, _ in submissions]
    for reader in readers:
        if reader.manifest["instances"] == "masks" and gt_reader.manifest["instances"] != "masks":
            raise SgdaskError(f"{reader.url}: a mask submission needs a GT store with masks "
                              f"({gt} was ingested without --masks)")
    specs, counts, pred_counts = plan_partitions(gt_reader, readers, options.partition_size)
    zero_shot, composition = training_stats(gt_reader, options.stats, storage_options)
    subs = tuple(Submission(name, url, get_protocols(protocols),
                            bool(reader.manifest.get("has_ng")))
                 for (name, url, protocols), reader in zip(submissions, readers, strict=True))
    job = Job(gt, storage_options, subs, parse_ks(options.ks), zero_shot, options.legacy,
              options.match_labels)
    with dask_client(client, scheduler) as active:
        result = run_bag(active, specs, job, progress)
    reports = {
        sub.name: {p.name: build_report(
            result.accumulators[(sub.name, p.name)], result.images[(sub.name, p.name)],
            EvalSettings(p, options.aggregation, job.ks, sub.with_ng, zero_shot is not None,
                         options.legacy, options.tau, options.match_labels),
            composition, gt_reader.manifest, reader.manifest, {**counts, **pred_count})
            for p in sub.protocols}
        for sub, reader, pred_count in zip(subs, readers, pred_counts, strict=True)}
    return ManyResult(reports, result.gt_parts_read)


def evaluate_protocols(gt: str, pred: str, protocols: str = DEFAULT_PROTOCOL,
                       ks: str = DEFAULT_KS, aggregation: str = "per_predicate",
                       partition_size: int | None = DEFAULT_PARTITION_SIZE,
                       client: Client | None = None, scheduler: str | None = None,
                       storage_options: StorageOptions | None = None, progress: bool = False,
                       stats: str | None = None, legacy: bool = False, tau: float = 0.5,
                       match_labels: bool = True) -> dict[str, Report]:
    """Score ``pred`` against ``gt`` under several protocols in one pass over the data."""
    options = Options(ks, aggregation, partition_size, stats, legacy, tau, match_labels)
    many = evaluate_many(gt, [("submission", pred, protocols)], options, client, scheduler,
                         storage_options, progress)
    return many.reports["submission"]


def evaluate(gt: str, pred: str, protocol: str = DEFAULT_PROTOCOL, ks: str = DEFAULT_KS,
             aggregation: str = "per_predicate",
             partition_size: int | None = DEFAULT_PARTITION_SIZE,
             client: Client | None = None, scheduler: str | None = None,
             storage_options: StorageOptions | None = None, progress: bool = False,
             stats: str | None = None, legacy: bool = False, tau: float = 0.5,
             match_labels: bool = True) -> Report:
    """Score the submission store ``pred`` against the GT store ``gt`` under one protocol."""
    reports = evaluate_protocols(gt, pred, protocol, ks, aggregation, partition_size, client,
                                 scheduler, storage_options, progress, stats, legacy, tau,
                                 match_labels)
    if len(reports) != 1:
        raise SgdaskError("evaluate() takes one protocol; use evaluate_protocols() for several")
    return next(iter(reports.values()))
