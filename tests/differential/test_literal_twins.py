"""Every registered protocol against its literal twin (``tests/literal/``): one test per
protocol, failing for a protocol that has none.

Each check draws a fixed (derandomized) set of hypothesis examples with the strategies and
comparisons of the twin's own long test, so a new protocol needs a twin in ``tests/literal/``,
its line in ``TWINS`` and its check in ``CHECKS`` here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings

from sgdask.protocols import PROTOCOLS
from tests.differential import test_literal as spec_tests
from tests.helpers import scenes
from tests.helpers.adapters import report_view, score_image
from tests.kernels import test_ag_kernel as ag_kernel_tests
from tests.literal import TWINS
from tests.literal import spec as literal
from tests.protocols import test_ag_protocol as ag_tests
from tests.protocols import test_oiv6 as oiv6_tests
from tests.protocols import test_sgbpytorch as sgbpytorch_tests

EXAMPLES = settings(max_examples=5, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def spec_twin(protocol: str) -> None:
    """Per-image terms of mask and box images, and the dataset values of every aggregation,
    equal the SPEC's literal ones (``tests/literal/spec.py``)."""

    @EXAMPLES
    @given(scenes.datasets(boxes=False), scenes.k_lists(), scenes.trainings())
    def masks(images, ks, training) -> None:
        agrees(images, ks, training)

    @EXAMPLES
    @given(scenes.datasets(boxes=True), scenes.k_lists(), scenes.trainings())
    def boxes(images, ks, training) -> None:
        agrees(images, ks, training)

    def agrees(images, ks, training) -> None:
        scored = [score_image(im, protocol, ks, training=training)
                  for im in images]
        terms = [literal.image_terms(im.gt, im.pred, protocol, ks, training=training)
                 for im in images]
        for expected, actual in zip(terms, (s.terms for s in scored), strict=True):
            assert expected == actual, spec_tests.differences(expected, actual)
        for aggregation in literal.AGGREGATIONS:
            expected = literal.aggregate(terms, protocol, aggregation, ks, training=training,
                                         n_predicates=scenes.N_PREDICATES)
            view = report_view(scored, protocol, aggregation, ks, training=training,
                               n_predicates=scenes.N_PREDICATES)
            spec_tests.assert_same_dataset(expected, terms, view, f"{protocol}/{aggregation}")

    masks()
    boxes()


def sgbpytorch_twin(protocol: str) -> None:
    """Scene-Graph-Benchmark.pytorch's evaluator, literally (``tests/literal/sgbpytorch.py``)."""

    @EXAMPLES
    @given(sgbpytorch_tests.vg_datasets())
    def agrees(images) -> None:
        sgbpytorch_tests.assert_agrees(images, [1, 5, 20, 100], None)

    assert protocol == sgbpytorch_tests.SGBPYTORCH.name
    agrees()


def oiv6_twin(protocol: str) -> None:
    """PySGG's Open Images V6 evaluation, literally (``tests/literal/oiv6.py``)."""

    @EXAMPLES
    @given(oiv6_tests.datasets())
    def agrees(data) -> None:
        images, n_predicates, parts = data
        expected = oiv6_tests.literal_oiv6.evaluate(images, n_predicates)
        rep = oiv6_tests.report(images, n_predicates, parts)
        assert oiv6_tests.bits(rep.metrics) == oiv6_tests.bits(expected["metrics"])
        assert oiv6_tests.bits(oiv6_tests.ap_column(rep, "rel")) == \
            oiv6_tests.bits(expected["AP_rel"])

    assert protocol == oiv6_tests.OIV6.name
    agrees()


def ag_twin(protocol: str) -> None:
    """STTran's and TEMPURA's Action Genome evaluation, literally (``tests/literal/ag.py``):
    the protocol's per-frame hits at every k."""

    @EXAMPLES
    @given(ag_kernel_tests.frames())
    def agrees(case) -> None:
        ag_tests.assert_agrees(case, protocol)

    agrees()


def pvsg_twin(protocol: str) -> None:
    """OpenPVSG's rel_test_full.py and rel_test.py, literally (``tests/literal/pvsg.py``), on
    two small generated sets through the whole pipeline (``test_pvsg_pipeline.py`` holds the
    golden set)."""
    import tempfile
    from pathlib import Path

    from distributed import Client, LocalCluster

    from sgdask.formats.pvsg import ingest_pvsg
    from sgdask.pipeline import evaluate_protocols
    from sgdask.testing.pvsg import write_pvsg
    from tests.literal import pvsg as literal_pvsg

    weak = {"pvsg": "reference", "pvsg-oneweak": "once"}[protocol]
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        for seed in (2, 3):
            raw = write_pvsg(Path(tmp, str(seed)), n_videos=3, n_frames=8, seed=seed)
            gt = str(Path(tmp, f"gt{seed}.store"))
            ingest_pvsg(str(raw.annotation), gt, str(raw.data_dir), frames_per_chunk=3)
            got = evaluate_protocols(gt, str(raw.results), protocol, client=client)[protocol]
            expected = literal_pvsg.evaluate(raw.annotation, raw.data_dir, raw.results,
                                             weak)["metrics"]
            assert max(abs(got.metrics[m] - v) for m, v in expected.items()) < 1e-9, seed


CHECKS: dict[str, Callable[[str], None]] = {
    "singlempo": spec_twin,
    "sgbench": spec_twin,
    "sgbench2": spec_twin,
    "multimpo": spec_twin,
    "sgbpytorch": sgbpytorch_twin,
    "oiv6": oiv6_twin,
    "ag-with": ag_twin,
    "ag-semi": ag_twin,
    "ag-no": ag_twin,
    "pvsg": pvsg_twin,
    "pvsg-oneweak": pvsg_twin,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_protocol_equals_its_literal_twin(protocol):
    assert protocol in TWINS, (f"protocol {protocol!r} has no literal twin: write one in "
                               "tests/literal/ and name it in tests.literal.TWINS")
    importlib.import_module(TWINS[protocol])
    assert protocol in CHECKS, (f"protocol {protocol!r}: add the check against its twin "
                                f"{TWINS[protocol]} to CHECKS in {__name__}")
    CHECKS[protocol](protocol)


def test_every_twin_names_a_registered_protocol():
    """No stale twin: a protocol that was removed takes its twin's entries with it."""
    assert set(TWINS) <= set(PROTOCOLS) and set(CHECKS) == set(TWINS)
