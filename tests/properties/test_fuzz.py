"""Fuzzing the submission reader with hypothesis (a bounded, reproducible number of examples).

Mutated bytes of a small valid JSON submission, of a small valid ZIP submission, and of a
TIFF inside a well-formed ZIP, plus structural mutations of the JSON document: reading them
(archive checks, document, every image's checks, every TIFF) either succeeds or raises
sgdask's ``InputError``; ``validate_submission`` never raises at all.
"""

from __future__ import annotations

import copy
import io
import json
import warnings
import zipfile
from itertools import count
from typing import Any

import fsspec
import numpy as np
import pytest
import tifffile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdask.errors import InputError
from sgdask.formats.sgbench import SubmissionSource, checked_submission, validate_submission
from sgdask.io.archive import ArchiveLimits

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: small limits, so that a mutated size field cannot make one example slow
LIMITS = ArchiveLimits(max_total_size=64 << 20, max_member_size=16 << 20,
                       max_json_size=1 << 20, max_tiff_layers=64, max_layer_pixels=1 << 16)
H, W = 12, 16
_names = count()


def tiff(layers: int) -> bytes:
    masks = np.zeros((layers, H, W), dtype=np.uint8)
    for i in range(layers):
        masks[i, i:i + 4, 2 * i:2 * i + 5] = 1
    buf = io.BytesIO()
    tifffile.imwrite(buf, masks, compression="deflate", photometric="minisblack")
    return buf.getvalue()


def document() -> dict[str, Any]:
    """Three images, one per instance spelling, with NG lists and scores."""
    box = [1.0, 2.0, 9.5, 11.0]
    return {"version": 1, "images": [
        {"id": 1, "seg_filename": "1.tiff", "triplets": [[0, 1, 3], [2, 0, 1]],
         "ng_triplets": [[0, 1, 3], [0, 1, 4]], "scores": [0.9, 0.5],
         "annotation": [{"bbox": box, "category": 3, "score": 0.8},
                        {"bbox": box, "category": 7, "score": 0.7},
                        {"bbox": box, "category": 1, "score": 0.1}]},
        {"id": "b", "seg_filename": "b.tiff", "triplets": [[1, 0, 2]],
         "instances": [{"bbox": box, "category": 0}, {"bbox": box, "category": 5}]},
        {"id": 3, "seg_filename": "3.tiff", "triplets": [],
         "bboxes": [box, box], "categories": [2, 2]},
    ]}


def submission_zip(doc: dict[str, Any], tiffs: dict[str, bytes] | None = None) -> bytes:
    tiffs = tiffs or {"1.tiff": tiff(3), "b.tiff": tiff(2), "3.tiff": tiff(2)}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("triplets.json", json.dumps(doc))
        for name, data in tiffs.items():
            z.writestr(name, data)
    return buf.getvalue()


VALID_JSON = json.dumps(document()).encode()
VALID_ZIP = submission_zip(document())


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with 1-8 byte edits: flips, overwrites, insertions, deletions, truncation."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate")))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[pos:pos + draw(st.integers(1, 16))]
        elif op == "truncate":
            del buf[pos:]
    return bytes(buf)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=6)
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["id", "bbox", "category", "x", "triplets"]), children,
                      max_size=3),
    max_leaves=8)


def nodes(doc: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every node of a JSON document."""
    found = [path]
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, child in children:
        found += nodes(child, (*path, key))
    return found


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def read_everything(data: bytes, suffix: str) -> None:
    """What ``convert`` reads, and ``validate``; only InputError may come out, and every
    message is one printable line."""
    url = f"memory://fuzz/{next(_names)}{suffix}"
    fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), data)
    try:
        problems = validate_submission(url, limits=LIMITS)
        assert all(isinstance(p.error, InputError) and str(p).isprintable() for p in problems)
        try:
            source = SubmissionSource(url, None, LIMITS)
            check = checked_submission(source, None)
            for img in check.images if source.is_zip else ():
                source.masks(img)
        except InputError as err:
            assert str(err).isprintable(), str(err)
    finally:
        fsspec.filesystem("memory").rm(url.removeprefix("memory://"))


@pytest.fixture(autouse=True)
def quiet() -> Any:
    """tifffile warns about some corrupt files; the reader's verdict is what is tested."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_the_fuzzing_seeds_are_valid():
    for data, suffix in ((VALID_JSON, ".json"), (VALID_ZIP, ".zip")):
        url = f"memory://fuzz/seed{suffix}"
        fsspec.filesystem("memory").pipe(url.removeprefix("memory://"), data)
        assert validate_submission(url, limits=LIMITS) == []


@FUZZ
@given(mutated(VALID_JSON))
def test_mutated_json_bytes(data):
    read_everything(data, ".json")


@FUZZ
@given(mutated(VALID_ZIP))
def test_mutated_zip_bytes(data):
    read_everything(data, ".zip")


@FUZZ
@given(st.data())
def test_mutated_tiff_in_a_sound_zip(data):
    tiffs = {"1.tiff": data.draw(mutated(tiff(3))), "b.tiff": tiff(2), "3.tiff": tiff(2)}
    read_everything(submission_zip(document(), tiffs), ".zip")


@FUZZ
@given(st.data())
def test_mutated_json_document(data):
    doc = document()
    path = data.draw(st.sampled_from(nodes(doc)))
    doc = replaced(doc, path, data.draw(JSON_VALUES))
    read_everything(json.dumps(doc).encode(), ".json")
    read_everything(submission_zip(doc), ".zip")
