"""Formats by registry: every submission and ground-truth format sgdask reads, like the
metric registry (``sgdask.metrics``).

A ``Format`` says how a file is recognised (its first bytes and name), what it yields per
image and which schema describes it, and gives the functions that open it for an evaluation
(an input cut into per-partition slices, decoded in the tasks), convert it into a store and
validate it. ``convert``, ``validate``, ``ingest-gt``, ``evaluate`` and the service's worker
find the format here; adding one is one ``register`` call (``docs/development.md``).

Recognition tries the formats newest first, so a registered format is seen before the
built-in fallbacks: SGBench JSON for submissions and psg.json for ground truth (their
readers say what is wrong with a file that is neither). Result files are not recognisable
from their bytes (a pickle, or a directory of ``.npz`` files): ``--method`` chooses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sgdask.errors import Option, SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem
from sgdask.io.results import ResultsMethod
from sgdask.io.sources import (
    FileInput,
    ResultInput,
    StoreInput,
    SubmissionInput,
)
from sgdask.io.store import StoreReader
from sgdask.io.validate import GTInfo, Problem

SUBMISSION, GT = "submission", "gt"
#: what a format can yield per image (``Format.yields``)
YIELDS = frozenset({
    "boxes", "masks", "instance_scores", "graph", "graph_scores", "ng",  # submissions
    "relations", "training_stats",  # ground truth
})
#: bytes of a file's head that recognisers see
HEAD_BYTES = 16
#: (url, storage options, GT store, its GTInfo, limits, the format's evaluation parameter
#: such as a result file's ``ResultsMethod``) -> the submission opened for an evaluation
Opener = Callable[[str, StorageOptions | None, StoreReader, GTInfo, ArchiveLimits | None, Any],
                  SubmissionInput]


@dataclass(frozen=True)
class Format:
    """One readable format.

    - ``recognises(head, name)``: whether a file of these first bytes and this name is one.
    - ``yields``: what it gives per image (names in ``YIELDS``; a format yielding either
      boxes or masks, as SGBench's JSON and ZIP, names both).
    - ``schema``: where its fields are specified (a file under ``sgdask/schemas``).
    - ``convert(url, out, gt, storage_options, *, overwrite, progress, cluster, limits,
      **options)``: into a store (a GT store for ``kind == "gt"``); returns the manifest.
      ``options`` are the format's own conversion options, named in ``options``.
    - ``open``: a submission opened for an evaluation (None: convert it first).
    - ``validate(url, gt, storage_options, limits, max_problems)``: every problem
      (None: its conversion checks every image as it goes).
    """

    name: str
    kind: str
    recognises: Callable[[bytes, str], bool]
    yields: tuple[str, ...]
    schema: str
    convert: Callable[..., dict[str, Any]]
    open: Opener | None = None
    validate: Callable[..., list[Problem]] | None = None
    options: tuple[str, ...] = ()


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add ``fmt`` (recognised before every format registered earlier)."""
    if fmt.kind not in (SUBMISSION, GT):
        raise SgdaskError(f"format {fmt.name}: kind {fmt.kind!r} is not {SUBMISSION} or {GT}")
    unknown = sorted(set(fmt.yields) - YIELDS)
    if unknown:
        raise SgdaskError(f"format {fmt.name}: yields {unknown[0]!r}, not one of "
                          f"{', '.join(sorted(YIELDS))}")
    if fmt.name in FORMATS:
        raise SgdaskError(f"format {fmt.name} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove a registered format (tests)."""
    del FORMATS[name]


def _head(url: str, options: StorageOptions | None) -> bytes:
    """A file's first bytes; nothing for a missing file or a directory (the fallback's
    reader then says what is wrong)."""
    fs, path = filesystem(url, options)
    try:
        with fs.open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return b""


def recognised(url: str, options: StorageOptions | None, kind: str) -> Format:
    """The newest registered format of ``kind`` that recognises the file at ``url``."""
    head, name = _head(url, options), str(url).rsplit("/", 1)[-1]
    for fmt in reversed(FORMATS.values()):
        if fmt.kind == kind and fmt.recognises(head, name):
            return fmt
    raise SgdaskError(f"{url}: no {kind} format recognises this file "
                      f"(known: {', '.join(f.name for f in FORMATS.values() if f.kind == kind)})")


def submission_format(url: str, options: StorageOptions | None, method: str | None = None
                      ) -> Format:
    """A submission file's format: a model's result file when ``method`` is given, else
    the one that recognises it."""
    if method is not None:
        return FORMATS[RESULTS]
    if is_challenge(url, options):
        return FORMATS[PSG_CHALLENGE]
    return recognised(url, options, SUBMISSION)


def is_challenge(url: str, options: StorageOptions | None) -> bool:
    """Whether ``url`` is a PSG-challenge submission: a directory or ZIP of
    ``relation.json`` and ``panseg/`` is told by its member names (``sgdask.io.sniff``)."""
    from sgdask.io.sniff import PSG_CHALLENGE as FOUND
    from sgdask.io.sniff import what_is

    return what_is(url, options).kind == FOUND


def opened(url: str, options: StorageOptions | None, gt_reader: StoreReader, gt_info: GTInfo,
           limits: ArchiveLimits | None, method: ResultsMethod | None = None
           ) -> SubmissionInput:
    """The submission at ``url`` opened for an evaluation: a store (a directory; nothing
    at all too, the store reader says what is missing), else the file in its format (a
    model's result file with ``method``)."""
    if method is None:
        fs, path = filesystem(url, options)
        if not fs.isfile(path) and not is_challenge(url, options):
            return StoreInput(url, options)
    fmt = submission_format(url, options, None if method is None else method.method)
    if fmt.open is None:
        raise SgdaskError(f"{url}: {fmt.name} files are evaluated once converted "
                          "(sgdask convert)")
    return fmt.open(url, options, gt_reader, gt_info, limits, method)


def conversion_options(fmt: Format, given: dict[str, Any]) -> dict[str, Any]:
    """The options ``given`` (name -> value, only the ones set) that ``fmt`` takes; an
    option it does not take is an error."""
    other = sorted(set(given) - set(fmt.options))
    if other:
        raise SgdaskError(f"{other[0]}: does not apply to {fmt.name} files")
    return given


# --------------------------------------------------------------------------- built-ins


def _convert_sgbench(url: str, out: str, gt: str | None, options: StorageOptions | None,
                     **kwargs: Any) -> dict[str, Any]:
    from sgdask.io.ingest import convert_submission

    return convert_submission(url, out, gt, options, **kwargs)


def _convert_results(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
                     method: str, **kwargs: Any) -> dict[str, Any]:
    from sgdask.io.ingest import convert_results

    if gt is None:
        raise SgdaskError(Option("method"), " needs ", Option("gt"), ": results are paired "
                          "with the GT store's test images, in psg.json's order")
    return convert_results(url, out, gt, method, options, **kwargs)


def _ingest_psg(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
                masks_dir: str | None = None, **kwargs: Any) -> dict[str, Any]:
    from sgdask.io.ingest import ingest_gt

    return ingest_gt(url, out, masks_dir, options, **kwargs)


def _ingest_vg(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
               dicts: str, image_data: str, split: str = "test", **kwargs: Any
               ) -> dict[str, Any]:
    from sgdask.io.ingest import ingest_vg

    return ingest_vg(url, out, dicts, image_data, split, options, **kwargs)


def _ingest_oi(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
               categories: str | None = None, **kwargs: Any) -> dict[str, Any]:
    from sgdask.io.ingest import ingest_oi

    return ingest_oi(url, out, categories, options, **kwargs)


def _is_open_images(head: bytes, name: str) -> bool:
    from sgdask.io.openimages import is_open_images

    return is_open_images(head)


def _is_hdf5(head: bytes, name: str) -> bool:
    from sgdask.io.vg import is_hdf5

    return is_hdf5(head)


def _open_results(url: str, options: StorageOptions | None, gt_reader: StoreReader,
                  gt_info: GTInfo, limits: ArchiveLimits | None, how: Any) -> SubmissionInput:
    return ResultInput(url, options, gt_reader, gt_info, how, limits)


def _validate_sgbench(url: str, gt: str | None, options: StorageOptions | None,
                      limits: ArchiveLimits | None, max_problems: int) -> list[Problem]:
    from sgdask.io.validate import validate_submission

    return validate_submission(url, gt, options, limits, max_problems)


def _is_coco_panoptic(head: bytes, name: str) -> bool:
    """A JSON object whose first key is ``annotations`` (within ``HEAD_BYTES``;
    ``sniff`` looks further, for ``segments_info``)."""
    return b"".join(head.split()).startswith(b'{"annotations"')


def _scored_as_is(url: str, *args: Any, **kwargs: Any) -> Any:
    """COCO panoptic predictions are neither converted nor opened as a scene graph
    submission: ``evaluate`` scores their panoptic quality (``sgdask.pq``)."""
    raise SgdaskError(f"{url}: COCO panoptic predictions are scored as they are, for "
                      "panoptic quality: sgdask evaluate ", Option("pred"), " with ",
                      Option("pred_masks", "DIR"), ", ", Option("gt"), " GT.json and ",
                      Option("gt_masks", "DIR"))


def _open_challenge(url: str, options: StorageOptions | None, gt_reader: StoreReader,
                    gt_info: GTInfo, limits: ArchiveLimits | None, how: Any) -> SubmissionInput:
    from sgdask.io.psg_challenge import ChallengeInput

    return ChallengeInput(url, options, gt_reader, gt_info, limits)


def _convert_challenge(url: str, out: str, gt: str | None, options: StorageOptions | None,
                       **kwargs: Any) -> dict[str, Any]:
    from sgdask.io.psg_challenge import convert_challenge

    return convert_challenge(url, out, gt, options, **kwargs)


def _validate_challenge(url: str, gt: str | None, options: StorageOptions | None,
                        limits: ArchiveLimits | None, max_problems: int) -> list[Problem]:
    from sgdask.io.psg_challenge import validate_challenge

    return validate_challenge(url, gt, options, limits, max_problems)


SGBENCH, RESULTS, PSG, VG150, OIV6 = ("sgbench", "results", "psg-json", "vg150-h5",
                                       "oiv6-json")
COCO_PANOPTIC, PSG_CHALLENGE = "coco-panoptic", "psg-challenge"
#: the formats sgdask itself reads (``sgdask.io.sniff`` knows their files by content)
BUILT_IN = frozenset({SGBENCH, RESULTS, PSG, VG150, OIV6, COCO_PANOPTIC, PSG_CHALLENGE})

register(Format(
    PSG, GT, lambda head, name: True,
    ("boxes", "masks", "relations", "training_stats"),
    "psg.json (OpenPSG)", _ingest_psg, options=("masks_dir",)))
register(Format(
    VG150, GT, _is_hdf5, ("boxes", "relations", "training_stats"),
    "VG-SGG-with-attri.h5 with its dicts and image_data JSON", _ingest_vg,
    options=("dicts", "image_data", "split")))
register(Format(
    OIV6, GT, _is_open_images, ("boxes", "relations", "training_stats"),
    "vrd-test-anno.json with categories_dict.json (Open Images V6, as RelDN / PySGG)",
    _ingest_oi, options=("categories",)))
register(Format(
    SGBENCH, SUBMISSION, lambda head, name: True,
    ("boxes", "masks", "instance_scores", "graph", "graph_scores", "ng"),
    "schemas/sgbench.schema.json", _convert_sgbench,
    lambda url, options, gt_reader, gt_info, limits, _: FileInput(url, options, gt_info,
                                                                 limits),
    _validate_sgbench, ("from_scores", "rank_by", "ng_limit")))
register(Format(
    RESULTS, SUBMISSION, lambda head, name: False,
    ("boxes", "masks", "instance_scores", "graph", "ng"),
    "schemas/results.md", _convert_results, _open_results,
    options=("method", "instance_scores")))
register(Format(
    COCO_PANOPTIC, SUBMISSION, _is_coco_panoptic, ("masks",),
    "COCO panoptic format (panopticapi): JSON + PNGs, sgdask/io/coco_panoptic.py",
    _scored_as_is, _scored_as_is))
register(Format(
    PSG_CHALLENGE, SUBMISSION, lambda head, name: name == "relation.json", ("masks", "graph"),
    "relation.json + panseg/ PNGs (the PSG challenge, OpenPSG's tools/grade.py), "
    "sgdask/io/psg_challenge.py", _convert_challenge, _open_challenge, _validate_challenge))
