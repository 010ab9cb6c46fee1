"""Partitioning and worker count change nothing: bit-identical reports (panoptic quality's
per-category table and the protocol lint included)."""

from __future__ import annotations

import pytest
from distributed import Client, LocalCluster

from sgdask.pipeline import evaluate


def comparable(report):
    return (report.metrics, report.per_predicate, report.per_image, report.diagnostics,
            report.per_category, report.lint)


@pytest.mark.parametrize("protocol", ["singlempo", "sgbench", "sgbench2"])
def test_partition_sizes_give_identical_reports(stores, client, protocol):
    reports = [evaluate(stores.gt, stores.pred, protocol=protocol, partition_size=size,
                        client=client) for size in (1, 7, 64)]
    first = comparable(reports[0])
    assert first[-1]["counts"]["missing_images"] > 0  # the lint counted across partitions
    assert {"F@50", "ngF@x1", "mR@50[head]", "mNgR@20[tail]"} <= set(first[0])  # derived
    for other in reports[1:]:
        assert comparable(other) == first
    assert "PQ" in reports[0].metrics and reports[0].per_category  # the stores have masks


def test_one_or_two_workers_give_identical_reports(stores, client):
    two = evaluate(stores.gt, stores.pred, partition_size=5, client=client)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as one_worker:
        one = evaluate(stores.gt, stores.pred, partition_size=5, client=one_worker)
    assert comparable(one) == comparable(two)
    assert "F@50" in one.metrics and "mR@50[tail]" in one.metrics


def test_rerun_is_bit_identical(stores, client):
    a = evaluate(stores.gt_boxes, stores.pred_boxes, partition_size=3, client=client)
    b = evaluate(stores.gt_boxes, stores.pred_boxes, partition_size=3, client=client)
    assert a.to_json() == b.to_json()
