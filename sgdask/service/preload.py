"""What every job process of the service needs before its first check or conversion,
done once in the fork server the job processes are forked from (``JOB_PRELOAD`` names this
module; importing it is the preparation).

An upload is checked in one job process and converted in another, each forked fresh so its
memory cap and a crash stay its own. Without this, each of them imported the modules a job
runs and zarr, compiled the SGBench schema's and the store manifest's validators and, at
its first kernel call, filled numba's CPU target (its typing and lowering registries, the
BLAS check: about half a second), all again: a 10-image upload's check took 0.7 s and its
conversion 0.9 s, now 0.2 s each.

Nothing here starts a thread: a thread of the fork server would be missing from every
process forked from it, with whatever lock it held (zarr's and fsspec's event loops start
at the first read or write, which a job does itself).
"""

from __future__ import annotations

import zarr
import zarr.codecs
import zarr.core.buffer
import zarr.storage
from numba.core.registry import cpu_target

import sgdask.formats.ingest
import sgdask.formats.validate
import sgdask.service.worker
from sgdask.formats.registry import load_built_in
from sgdask.formats.sgbench import validators
from sgdask.store.schemas import STORE_MANIFEST, validator

#: what a job runs, imported here so that job processes share it
MODULES = (zarr, zarr.codecs, zarr.core.buffer, zarr.storage, sgdask.formats.ingest,
           sgdask.formats.validate, sgdask.service.worker)

load_built_in()  # every format's module, which a job's first sniff would import
cpu_target.target_context.refresh()
cpu_target.typing_context.refresh()
validators()
validator(STORE_MANIFEST)
