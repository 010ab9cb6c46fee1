"""Evaluation units in a GT store: which group (video) each image (frame) belongs to.

A GT store may record units (store format 6, ``sgdask.io.store``): its manifest's
``units`` lists them (``["video"]``) and its images table holds a string column
``<unit>_id`` per unit, set for every image. A protocol whose unit is a group
(``Protocol.unit``) needs its GT store to record it; the check runs before any kernel.
The grouping is part of the GT's content: it is folded into the content hash (so two
groupings of the same frames never share a cached result).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sgdask.errors import InputError, StoreError

T = TypeVar("T")
IMAGE_UNIT = "image"
UNIT_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def unit_column(unit: str) -> str:
    """The images table's column holding each image's ``unit`` (``video`` -> ``video_id``)."""
    return f"{unit}_id"


def recorded_units(images: Sequence[tuple[str, Mapping[str, str]]], file: str
                   ) -> tuple[str, ...]:
    """The units a GT store of these (image id, units) records, sorted: every image must
    name the same units, each a non-empty id (an ``InputError`` naming file, image and
    field otherwise)."""
    if not images:
        return ()
    units = tuple(sorted(images[0][1]))
    for unit in units:
        if unit == IMAGE_UNIT or not UNIT_NAME.fullmatch(unit):
            raise InputError(file, f"unit {unit[:40]!r} is not a group name",
                             image=images[0][0], field="units",
                             expected="lower-case letters, digits, _; not 'image'")
    for image_id, given in images:
        if tuple(sorted(given)) != units:
            raise InputError(file, f"names units {sorted(given)}, the first image "
                             f"{list(units)}", image=image_id, field="units",
                             expected="every image of one store in the same units")
        for unit, value in given.items():
            if not isinstance(value, str) or not value:
                raise InputError(file, "empty or not a string", image=image_id,
                                 field=unit_column(unit))
    return units


def grouping_digest(images: Sequence[tuple[str, Mapping[str, str]]]) -> bytes:
    """SHA-256 of the images' units (sorted by image id): folded into the GT's content
    hash when the store records units (a store without them hashes as before)."""
    doc = [[image_id, dict(sorted(given.items()))] for image_id, given in sorted(images)]
    return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).digest()


def grouped_chunks(items: Sequence[T], groups: Sequence[str] | None, size: int
                   ) -> list[list[T]]:
    """``items`` (in id order) cut into consecutive chunks of at most ``size``, cut only
    where the group changes, so that a group's members (a video's frames, consecutive in id
    order) stay in one chunk; a group of more than ``size`` members takes whole chunks of
    its own and the rest (per-image state merges exactly, so splitting one changes no
    number). ``groups`` None: every ``size`` items, as without units."""
    if groups is None:
        return [list(items[s:s + size]) for s in range(0, len(items), size)]
    out: list[list[T]] = []
    current: list[T] = []
    start = 0
    for end in range(1, len(items) + 1):
        if end < len(items) and groups[end] == groups[start]:
            continue
        run = list(items[start:end])
        start = end
        if current and len(current) + len(run) > size:
            out.append(current)
            current = []
        while len(current) + len(run) > size:
            out.append(run[:size])
            run = run[size:]
        current += run
    return [*out, current] if current else out


def check_units(units: Sequence[str], manifest: Mapping[str, Any], url: str) -> None:
    """Refuse, before any work, a protocol unit the GT store does not record."""
    recorded = manifest.get("units") or []
    for unit in units:
        if unit != IMAGE_UNIT and unit not in recorded:
            raise StoreError(f"{url}: records no {unit} of its images (the protocol "
                             f"resamples by {unit}; the store records "
                             f"{', '.join(recorded) or 'no units'})")
