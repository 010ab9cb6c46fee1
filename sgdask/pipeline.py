"""The Dask bag graph: partitions -> read -> per-image kernels -> accumulators -> fold -> report.

This module only wires: reading is ``sgdask.io``, computing is ``sgdask.kernels`` and
``sgdask.accum``, presenting is ``sgdask.report``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dask.bag as db
from distributed import Client, LocalCluster, as_completed, futures_of

from sgdask.accum import AGGREGATIONS, Accumulator
from sgdask.errors import InputError, SgdaskError
from sgdask.io.fs import StorageOptions
from sgdask.io.partition import load_gt_images, pred_loaders
from sgdask.io.store import StoreReader
from sgdask.kernels.image import ImageResult, evaluate_image, missing_image_result
from sgdask.kernels.selection import DEFAULT_KS, KSpec, parse_ks
from sgdask.protocols import DEFAULT_PROTOCOL, Protocol, get_protocol
from sgdask.report import Report, build_report

DEFAULT_PARTITION_SIZE = 32


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to score a partition (small and picklable)."""

    gt_url: str
    pred_url: str
    storage_options: StorageOptions | None
    protocol: Protocol
    ks: tuple[KSpec, ...]
    with_ng: bool


@dataclass(frozen=True)
class PartitionSpec:
    """The GT images one task evaluates and the store parts that hold them."""

    image_ids: tuple[str, ...]
    gt_parts: tuple[str, ...]
    pred_parts: tuple[str, ...]
    pred_ids: tuple[str, ...]


@dataclass
class PartitionResult:
    """A partition's accumulator and its per-image rows; merging is associative."""

    accumulator: Accumulator = field(default_factory=Accumulator)
    images: list[dict[str, Any]] = field(default_factory=list)

    def merged(self, other: PartitionResult) -> PartitionResult:
        return PartitionResult(self.accumulator.merged(other.accumulator),
                               self.images + other.images)


def image_row(result: ImageResult) -> dict[str, Any]:
    """One row of the per-image table."""
    row: dict[str, Any] = {"image_id": result.image_id, "missing": result.missing,
                           "gt_triplets": result.n_gt_triplets}
    row.update({name: num / den if den else None
                for name, (num, den) in result.scalars.items()})
    row.update(result.diagnostics)
    return row


def score_partition(spec: PartitionSpec, job: Job) -> PartitionResult:
    """Read one partition and run every image through the kernels (runs on a worker)."""
    gt_reader = StoreReader(job.gt_url, job.storage_options)
    pred_reader = StoreReader(job.pred_url, job.storage_options)
    preds = pred_loaders(pred_reader, list(spec.pred_parts), list(spec.pred_ids))
    out = PartitionResult()
    for gt in load_gt_images(gt_reader, list(spec.gt_parts), list(spec.image_ids)):
        if gt.image_id in preds:
            try:
                result = evaluate_image(gt, preds[gt.image_id](), job.protocol, job.ks,
                                        job.with_ng)
            except ValueError as err:
                raise SgdaskError(f"{job.pred_url}: image {gt.image_id}: {err}") from None
        else:
            result = missing_image_result(gt, job.protocol, job.ks, job.with_ng)
        out.accumulator.update(result)
        out.images.append(image_row(result))
    return out


def parts_holding(ids: list[str], parts: list[dict[str, Any]]) -> tuple[str, ...]:
    """Names of the store parts whose id range overlaps the (sorted) ids."""
    lo, hi = ids[0], ids[-1]
    return tuple(p["name"] for p in parts if p["first_id"] <= hi and p["last_id"] >= lo)


def plan_partitions(gt: StoreReader, pred: StoreReader, partition_size: int
                    ) -> tuple[list[PartitionSpec], dict[str, int]]:
    """Evaluation partitions over the GT images that have relations, plus counts."""
    gt_images = gt.images()
    evaluated = sorted(i for i, n in zip(gt_images["image_id"].to_pylist(),
                                         gt_images["n_graph"].to_pylist(), strict=True) if n)
    pred_ids = sorted(pred.images()["image_id"].to_pylist())
    known = set(gt_images["image_id"].to_pylist())
    unknown = [i for i in pred_ids if i not in known]
    if unknown:
        raise InputError(pred.url, f"not among the ground truth's test images "
                         f"({len(unknown)} such image(s))", image=unknown[0], field="id")
    if not evaluated:
        raise SgdaskError(f"{gt.url}: no test image has a relation: nothing to evaluate")
    pred_set = set(pred_ids)
    specs = []
    for start in range(0, len(evaluated), partition_size):
        ids = evaluated[start:start + partition_size]
        present = [i for i in ids if i in pred_set]
        specs.append(PartitionSpec(tuple(ids), parts_holding(ids, gt.parts),
                                   parts_holding(present, pred.parts) if present else (),
                                   tuple(present)))
    counts = {"gt_images": len(known), "evaluated_images": len(evaluated),
              "gt_images_without_relations": len(known) - len(evaluated),
              "submission_images": len(pred_ids),
              "submission_images_not_evaluated": len(pred_set - set(evaluated))}
    return specs, counts


@contextmanager
def dask_client(client: Client | None = None, scheduler: str | None = None
                ) -> Iterator[Client]:
    """The given client, a client of ``scheduler``, or an in-process LocalCluster."""
    if client is not None:
        yield client
    elif scheduler:
        try:
            with Client(scheduler, timeout="20s") as connected:
                yield connected
        except OSError as err:
            raise SgdaskError(f"--scheduler {scheduler}: cannot connect ({err})") from None
    else:
        workers = max(1, min(2, os.cpu_count() or 1))
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as local:
            yield local


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
    folded = scored.fold(lambda a, b: a.merged(b), initial=PartitionResult())
    return client.compute(folded).result()


def evaluate(gt: str, pred: str, protocol: str = DEFAULT_PROTOCOL, ks: str = DEFAULT_KS,
             aggregation: str = "per_predicate", partition_size: int = DEFAULT_PARTITION_SIZE,
             client: Client | None = None, scheduler: str | None = None,
             storage_options: StorageOptions | None = None, progress: bool = False) -> Report:
    """Score the submission store ``pred`` against the GT store ``gt``; returns a Report."""
    if aggregation not in AGGREGATIONS:
        raise SgdaskError(f"--aggregation: unknown mode {aggregation!r} "
                          f"(expected one of: {', '.join(AGGREGATIONS)})")
    if partition_size < 1:
        raise SgdaskError("--partition-size: must be at least 1")
    proto = get_protocol(protocol)
    gt_reader = StoreReader(gt, storage_options, "gt")
    pred_reader = StoreReader(pred, storage_options, "submission")
    if pred_reader.manifest["instances"] == "masks" and gt_reader.manifest["instances"] != "masks":
        raise SgdaskError(f"{pred}: a mask submission needs a GT store with masks "
                          f"({gt} was ingested without --masks)")
    specs, counts = plan_partitions(gt_reader, pred_reader, partition_size)
    job = Job(gt, pred, storage_options, proto, parse_ks(ks),
              bool(pred_reader.manifest.get("has_ng")))
    with dask_client(client, scheduler) as active:
        result = run_bag(active, specs, job, progress)
    return build_report(result.accumulator, result.images, proto, aggregation, job.ks,
                        job.with_ng, gt_reader.manifest, pred_reader.manifest, counts)
