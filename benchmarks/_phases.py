"""Measured subprocess of the per-phase table: where the CPU of one evaluation goes.

``python -m benchmarks._phases --gt G --pred P`` evaluates every image of the stores in one
process, one thread, once per protocol, and times each phase with the process CPU clock:
reading + decoding the GT and submission parts, normalization (mask merge, deduplication),
IoU, matching, the list walks that give the hit positions, the metric terms and the
accumulator. It calls the same functions as ``sgdask.kernels.image.image_hits`` and
``sgdask.core.partition.scored_partition``, step by step, and checks that the hits equal
``image_hits``'s, so the table describes the code that runs. One JSON line:
``{protocol: {phase: ms per image}}`` and the image count.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from sgdask.core.accum import Accumulator
from sgdask.kernels.image import gt_relations, instance_iou
from sgdask.kernels.lists import mapped_hits, triplet_level_hits
from sgdask.kernels.matching import IOU_THRESHOLD, match_many_to_one, match_one_to_one
from sgdask.kernels.normalize import normalize_prediction
from sgdask.kernels.selection import DEFAULT_KS, parse_ks
from sgdask.metrics.base import Context
from sgdask.metrics.terms import batch_blocks, inputs_of
from sgdask.protocols import Protocol, get_protocol, image_hits, missing_image_hits
from sgdask.store.partition import load_gt_images, load_predictions
from sgdask.store.store import StoreReader

PHASES = ("read GT", "read submission", "normalize (merge, dedup)", "IoU", "matching",
          "hit positions", "metric terms", "accumulate")


class Clock:
    """CPU seconds per phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def timed(self, phase: str, func: Callable[..., Any], *args: Any) -> Any:
        start = time.process_time()
        out = func(*args)
        self.seconds[phase] += time.process_time() - start
        return out


def gt_images(reader: StoreReader, part: str, ids: list[str]) -> list:
    return list(load_gt_images(reader, [part], ids))


def hit_positions(relations: np.ndarray, norm: Any, iou: np.ndarray, n_gt: int,
                  protocol: Protocol, clock: Clock) -> tuple:
    if protocol.matching == "triplet":
        hit = iou >= IOU_THRESHOLD
        return clock.timed("hit positions", triplet_level_hits, relations, norm.graph,
                           norm.ng, hit, n_gt, True)
    match = match_one_to_one if protocol.matching == "one_to_one" else match_many_to_one
    mapping = clock.timed("matching", match, iou, IOU_THRESHOLD)
    return clock.timed("hit positions", mapped_hits, relations, norm.graph, norm.ng, mapping,
                       n_gt, True, protocol.first_triplet_per_remapped_pair)


def measure(gt_url: str, pred_url: str, protocol_name: str) -> tuple[dict[str, float], int]:
    protocol = get_protocol(protocol_name)
    gt_reader, pred_reader = StoreReader(gt_url, kind="gt"), StoreReader(pred_url)
    ctx, acc, clock, n = Context(parse_ks(DEFAULT_KS)), Accumulator(), Clock(), 0
    inputs = inputs_of(protocol, True, False, False)
    for part in gt_reader.parts:
        ids = gt_reader.table("images", [part["name"]]).column("image_id").to_pylist()
        gts = clock.timed("read GT", gt_images, gt_reader, part["name"], ids)
        preds = clock.timed("read submission", load_predictions, pred_reader,
                            [p["name"] for p in pred_reader.parts
                             if p["first_id"] <= ids[-1] and p["last_id"] >= ids[0]], ids)
        hits = []
        for gt in gts:
            pred = preds.get(gt.image_id)
            if pred is None:  # an image the submission lacks: nothing to compute
                hits.append(missing_image_hits(gt, protocol))
                continue
            relations = gt_relations(gt)
            norm = clock.timed("normalize (merge, dedup)", normalize_prediction, pred,
                               protocol.normalization)
            iou = clock.timed("IoU", instance_iou, gt, norm, True,
                              protocol.zero_area_boxes_match)
            stepwise = hit_positions(relations, norm, iou, gt.n_instances, protocol, clock)
            reference = image_hits(gt, pred, protocol)
            if not np.array_equal(stepwise[0], reference.graph_first):
                raise SystemExit(f"{gt.image_id}: stepwise hits differ from image_hits")
            hits.append(reference)
        blocks = clock.timed("metric terms", batch_blocks, hits, ctx, protocol, inputs)
        clock.timed("accumulate", acc.add_blocks, blocks)
        n += len(gts)
    return {phase: 1000 * clock.seconds[phase] / n for phase in PHASES}, n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._phases")
    parser.add_argument("--gt", required=True)
    parser.add_argument("--pred", required=True)
    parser.add_argument("--protocols", default="sgbench,singlempo")
    args = parser.parse_args(argv)
    protocols = args.protocols.split(",")
    measure(args.gt, args.pred, protocols[0])  # warm-up: numba's cache, file cache
    out: dict[str, Any] = {}
    for name in protocols:
        out[name], out["images"] = measure(args.gt, args.pred, name)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
