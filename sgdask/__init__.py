"""sgdask: distributed evaluation of scene graph generation models.

``sgdask.evaluate(gt, pred)`` scores a converted submission against a converted ground
truth on a Dask cluster; ``sgdask.Evaluator`` scores images held in memory; the per-image
kernels live in ``sgdask.kernels`` and the metric definitions in ``sgdask.metrics``.

Errors: every problem a caller can act on is an ``SgdaskError`` whose message names the
arguments (``protocol: unknown protocol 'singlmpo' (did you mean 'singlempo'?)``); a bad
argument is a ``SettingError`` (a ``ValueError``), bad input to ``Evaluator.update`` an
``EvaluatorInputError`` (a ``ValueError``), a malformed file an ``InputError``, a missing or
incomplete store a ``StoreError``.

Imports are lazy: ``import sgdask.kernels`` loads numpy and numba only, not Dask, pyarrow
or zarr, and neither does ``sgdask.Evaluator`` (it runs on ``sgdask.core``, the Dask-free
core the pipeline's tasks run too).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {"evaluate": "sgdask.pipeline", "evaluate_protocols": "sgdask.pipeline",
         "Report": "sgdask.report", "Evaluator": "sgdask.evaluator",
         "EvaluatorInputError": "sgdask.evaluator", "SgdaskError": "sgdask.errors",
         "SettingError": "sgdask.errors", "InputError": "sgdask.errors",
         "StoreError": "sgdask.errors"}

__all__ = ["Evaluator", "EvaluatorInputError", "InputError", "Report", "SettingError",
           "SgdaskError", "StoreError", "__version__", "evaluate", "evaluate_protocols"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sgdask' has no attribute {name!r}")
