"""sgdask: distributed evaluation of scene graph generation models.

``sgdask.evaluate(gt, pred)`` scores a converted submission against a converted ground
truth on a Dask cluster; ``sgdask.Evaluator`` scores images held in memory; the per-image
kernels live in ``sgdask.kernels`` and the metric definitions in ``sgdask.metrics``.

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
         "EvaluatorInputError": "sgdask.evaluator"}

__all__ = ["Evaluator", "EvaluatorInputError", "Report", "__version__", "evaluate",
           "evaluate_protocols"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sgdask' has no attribute {name!r}")
