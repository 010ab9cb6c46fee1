"""Formats that describe themselves: one module per format sgdask reads, each holding its
reader, how ``sniff`` knows its files, the hints that fix a misplaced one, its ingest or
conversion into a store and its validation, and registering itself (``registry``).

Importing the package registers the built-in formats in a fixed order (ground truth:
psg.json, VG150, Open Images V6; submissions: SGBench, result files, COCO panoptic);
recognition tries the newest first, so a format registered later (a plug-in, such as the
toy format of ``tests/test_formats.py``) is seen before the built-in fallbacks.
"""

from __future__ import annotations

import importlib

from sgdask.formats.registry import (
    BUILT_IN,
    COCO_PANOPTIC,
    FORMATS,
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

#: the built-in formats' modules, imported (each registering itself) in this order: the
#: order of ``FORMATS``, which recognition reads newest first within a kind
BUILT_IN_MODULES = ("psg", "vg150", "oiv6", "sgbench", "results", "scores", "coco_panoptic",
                    "psg_challenge", "actiongenome", "pvsg")
for _module in BUILT_IN_MODULES:
    importlib.import_module(f"{__name__}.{_module}")

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
