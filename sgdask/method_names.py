"""The names ``--method`` takes (model result files), apart from the rules that read them
(``sgdask.formats.methods``): the command line lists and checks them without importing the
formats, whose package registers every reader (pyarrow, zarr, numba) when imported."""

from __future__ import annotations

#: the names SGBench's converter accepts for --method, and the rules each uses
ONE_STAGE = ("psgtr", "psgformer", "hilo", "pairnet")
#: video models' per-video outputs (read by ``sgdask.formats.actiongenome``, not by these
#: rules): how each family's attention scores come (STTran: logits; TEMPURA: probabilities)
VIDEO_METHODS = {"sttran": "logits", "tempura": "probabilities"}
METHODS = ("2stage", *ONE_STAGE, *VIDEO_METHODS)
