"""Job processes are forked from a fork server that prepared them once
(``sgdask.service.preload``): each check and conversion starts with numba's CPU target
filled, zarr imported and the validators compiled, and with no thread but its own."""

from __future__ import annotations

import sys
import threading

from sgdask.service.worker import Job, Verdict, run_capped

#: modules only a filled numba CPU target, zarr and the SGBench reader have imported
PREPARED = ("numba.np.arraymath", "numba.typed.dictimpl", "zarr.codecs", "zarr.storage",
            "sgdask.formats.ingest", "sgdask.formats.validate", "fastjsonschema")


def _what_a_job_process_holds(job: Job) -> Verdict:
    """Before doing anything: the prepared modules it holds and its thread count."""
    from sgdask.formats.sgbench import validators

    held = [m for m in PREPARED if m in sys.modules]
    return Verdict(warnings=(*held, f"threads {threading.active_count()}",
                             f"validators compiled {validators.cache_info().currsize}"))


def test_a_job_process_starts_prepared_and_alone(tmp_path):
    job = Job(str(tmp_path / "up.zip"), str(tmp_path / "gt"), str(tmp_path / "out"), None,
              None, "up.zip", {}, 20, 512)
    verdict = run_capped(_what_a_job_process_holds, job)
    assert verdict.failure is None, verdict.trace
    assert verdict.warnings == (*PREPARED, "threads 1", "validators compiled 1")
