"""sgdask: distributed evaluation of scene graph generation models.

``sgdask.evaluate(gt, pred)`` scores a converted submission against a converted ground
truth on a Dask cluster; the single-image kernels live in ``sgdask.kernels``.
"""

__version__ = "0.1.0"

from sgdask.pipeline import evaluate
from sgdask.report import Report

__all__ = ["Report", "__version__", "evaluate"]
