"""Formats that describe themselves: one module per format sgdask reads, each holding its
reader, how ``sniff`` knows its files, the hints that fix a misplaced one, its ingest or
conversion into a store and its validation, and registering itself (``registry``).

The built-in formats register in a fixed order (ground truth: psg.json, VG150, Open Images
V6; submissions: SGBench, result files, COCO panoptic); recognition tries the newest first,
so a format registered later (a plug-in, such as the toy format of ``tests/test_formats.py``)
is seen before the built-in fallbacks. Their modules are imported the first time the
registry is read (``registry.load_built_in``; ``FORMATS`` here is the registry's, read), not
with this package: evaluating stores imports none of them.
"""

from __future__ import annotations

from sgdask.formats.registry import (
    BUILT_IN,
    BUILT_IN_MODULES,
    COCO_PANOPTIC,
    GT,
    HEAD_BYTES,
    OIV6,
    PSG,
    PSG_CHALLENGE,
    RESULTS,
    SGBENCH,
    SUBMISSION,
    VG150,
    YIELDS,
    Format,
    Opener,
    claimed,
    conversion_options,
    opened,
    recognised,
    register,
    submission_format,
    unregister,
)
from sgdask.formats.registry import FORMATS as _FORMATS
from sgdask.formats.registry import load_built_in as _load_built_in


def __getattr__(name: str) -> object:
    """``FORMATS``: the registry's formats, the built-in ones imported first."""
    if name == "FORMATS":
        _load_built_in()
        return _FORMATS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILT_IN",
    "BUILT_IN_MODULES",
    "COCO_PANOPTIC",
    "FORMATS",
    "GT",
    "HEAD_BYTES",
    "OIV6",
    "PSG",
    "PSG_CHALLENGE",
    "RESULTS",
    "SGBENCH",
    "SUBMISSION",
    "VG150",
    "YIELDS",
    "Format",
    "Opener",
    "claimed",
    "conversion_options",
    "opened",
    "recognised",
    "register",
    "submission_format",
    "unregister",
]
