"""Error classes at the command line: a ValueError raised inside a kernel is a bug (an internal
error), not bad input."""

from __future__ import annotations

import json

from tests.processes import run_sgdask as sgdask

BUG = '''
import sgdask.kernels.image as image

def broken(*args, **kwargs):
    raise ValueError("simulated kernel bug")

image.instance_iou = broken
'''


def test_kernel_bug_is_an_internal_error(stores, tmp_path):
    """Item 3: a ValueError inside a kernel is a bug: exit 1, 'internal error', and the
    traceback (with the kernel's frame) under --debug. The bug is injected into the real
    worker processes with Dask's own preload mechanism."""
    plugin = tmp_path / "inject_bug.py"
    plugin.write_text(BUG)
    env = {**__import__("os").environ,
           "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(plugin)])}
    proc = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, env=env)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("sgdask: internal error: ValueError: simulated kernel bug"), \
        proc.stderr
    assert "--debug" in line
    debug = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--debug", env=env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "in broken" in debug.stderr and "simulated kernel bug" in debug.stderr
