"""Formats by registry: every submission and ground-truth format sgdask reads, like the
metric registry (``sgdask.metrics``).

A ``Format`` says how a file is recognised (its first bytes and name), what it yields per
image and which schema describes it, and gives the functions that open it for an evaluation
(an input cut into per-partition slices, decoded in the tasks), convert it into a store and
validate it. ``convert``, ``validate``, ``ingest-gt``, ``evaluate`` and the service's worker
find the format here; adding one is one module that makes one ``register`` call
(``docs/development.md``), as each built-in format's module does.

The built-in formats' modules (``BUILT_IN_MODULES``) are imported the first time the
registry is read (``recognised``, ``claimed``, ``signatures``, ``sgdask.formats.FORMATS``),
not when ``sgdask.formats`` is: a command that only reads stores never imports them, nor
what they import (the readers, PyArrow's compute functions, image codecs).

Recognition tries the formats newest first, so a registered format is seen before the
built-in fallbacks: SGBench JSON for submissions and psg.json for ground truth (their
readers say what is wrong with a file that is neither). Result files are not recognisable
from their bytes (a pickle, or a directory of ``.npz`` files): ``--method`` chooses them.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgdask.errors import Option, SgdaskError, Text
from sgdask.formats.validate import GTInfo, Problem
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.sources import StoreInput, SubmissionInput

if TYPE_CHECKING:
    from sgdask.formats.results import ResultsMethod
    from sgdask.store.store import StoreReader

SUBMISSION, GT = "submission", "gt"
#: the built-in formats' names (each registered by its module: ``sgdask.formats.psg``, ...)
SGBENCH, RESULTS, PSG, VG150, OIV6 = ("sgbench", "results", "psg-json", "vg150-h5",
                                       "oiv6-json")
COCO_PANOPTIC, PSG_CHALLENGE = "coco-panoptic", "psg-challenge"
#: the formats sgdask itself reads (``sgdask.formats.sniff`` knows their files by content)
BUILT_IN = frozenset({SGBENCH, RESULTS, PSG, VG150, OIV6, COCO_PANOPTIC, PSG_CHALLENGE})
#: the built-in formats' modules, imported (each registering itself) the first time the
#: registry is read; ``FORMATS`` lists their formats in this order, whatever order they were
#: imported in, and recognition reads it newest first within a kind
BUILT_IN_MODULES = ("psg", "vg150", "oiv6", "sgbench", "results", "scores", "coco_panoptic",
                    "psg_challenge", "actiongenome", "pvsg")
#: the kinds of file ``sniff`` tells apart by the built-in formats' ``Signature``s (each
#: declared by its format's module; named here so that ``sniff`` knows them without it):
#: psg.json, a directory of its panoptic PNGs, a ZIP of PNGs (``psg``); Visual Genome's
#: h5 file and its dicts JSON (``vg150``); Open Images V6's annotation list and
#: categories_dict.json (``oiv6``); an SGBench ZIP and JSON (``sgbench``); a pickle, a
#: directory of ``.npz`` files, one ``.npz`` file (``results``); a Parquet file
#: (``scores``); COCO panoptic segments, a COCO JSON whose image list comes first
#: (``coco_panoptic``)
PSG_JSON, PNG_DIR, MASK_ZIP = "psg json", "png directory", "mask zip"
VG_H5, VG_DICTS = "vg h5", "vg dicts"
OI_ANNO, OI_CATEGORIES = "oi annotations", "oi categories"
SGBENCH_ZIP, SGBENCH_JSON = "sgbench zip", "sgbench json"
PICKLE, NPZ_DIR, NPZ = "pickle", "npz directory", "npz"
PARQUET = "parquet"
COCO_PANOPTIC_JSON, COCO_JSON = "coco panoptic", "coco json"
#: what a format can yield per image (``Format.yields``)
YIELDS = frozenset({
    "boxes", "masks", "instance_scores", "graph", "graph_scores", "ng",  # submissions
    "relations", "training_stats",  # ground truth
})
#: bytes of a file's head that recognisers see
HEAD_BYTES = 16
#: (url, storage options, GT store, its GTInfo, limits, the format's evaluation parameter
#: such as a result file's ``ResultsMethod``) -> the submission opened for an evaluation
Opener = Callable[[str, StorageOptions | None, "StoreReader", GTInfo, ArchiveLimits | None, Any],
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
    """Add ``fmt`` (recognised before every format registered earlier; a built-in module's
    formats keep their place in ``BUILT_IN_MODULES``' order)."""
    if fmt.kind not in (SUBMISSION, GT):
        raise SgdaskError(f"format {fmt.name}: kind {fmt.kind!r} is not {SUBMISSION} or {GT}")
    unknown = sorted(set(fmt.yields) - YIELDS)
    if unknown:
        raise SgdaskError(f"format {fmt.name}: yields {unknown[0]!r}, not one of "
                          f"{', '.join(sorted(YIELDS))}")
    if fmt.name in FORMATS:
        raise SgdaskError(f"format {fmt.name} is registered already")
    FORMATS[fmt.name] = fmt
    ordered = sorted(FORMATS.values(), key=_place)
    FORMATS.clear()
    FORMATS.update((f.name, f) for f in ordered)
    return fmt


def _place(fmt: Format) -> int:
    """Where ``fmt`` goes in ``FORMATS``: a built-in module's formats in that module's
    place (a module imported before the registry was first read registers out of order),
    every other after them, in the order registered (the sort is stable)."""
    return _module_place(fmt.convert.__module__)


def _module_place(module: str) -> int:
    """A built-in format module's place in ``BUILT_IN_MODULES``; after them, any other's."""
    name = module.removeprefix(f"{__package__}.")
    return BUILT_IN_MODULES.index(name) if name in BUILT_IN_MODULES else len(BUILT_IN_MODULES)


_LOADING = threading.RLock()
_loaded = False


def load_built_in() -> None:
    """Import the built-in formats' modules (each registers its formats, signatures and
    claims) once, before the registry is first read."""
    global _loaded
    if _loaded:
        return
    with _LOADING:
        if not _loaded:
            for module in BUILT_IN_MODULES:
                importlib.import_module(f"{__package__}.{module}")
            _loaded = True


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
    load_built_in()
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
    load_built_in()
    if method is not None:
        return FORMATS[_METHOD_FORMATS.get(method, RESULTS)]
    found = claimed(url, options)
    if found is not None:
        return found
    return recognised(url, options, SUBMISSION)


#: result-file methods that a registered format reads instead of the results format
_METHOD_FORMATS: dict[str, str] = {}


def register_method(method: str, fmt: str) -> None:
    """Let format ``fmt`` read the result files of ``--method method`` (Action Genome's
    ``sttran``: an STTran-family model's per-video output)."""
    _METHOD_FORMATS[method] = fmt


def claimed(url: str, options: StorageOptions | None) -> Format | None:
    """The format that claims ``url`` by more than its first bytes (a directory, a ZIP's
    member names: ``register_claim``), if one does; never a store (a directory with a
    store's manifest.json: told without importing any format)."""
    from sgdask.store.store import MANIFEST, store_kind

    fs, path = filesystem(url, options)
    if store_kind(fs, join(path, MANIFEST)) is not None:
        return None
    load_built_in()
    return next((FORMATS[name] for name, test in _CLAIMS if name in FORMATS
                 and test(url, options)), None)


def register_claim(name: str, test: Callable[[str, StorageOptions | None], bool]) -> None:
    """Let format ``name`` claim paths ``test`` recognises before recognition by first bytes
    (``submission_format``) and before a directory is taken for a store (``opened``;
    ``test`` is never asked about a store)."""
    _CLAIMS.append((name, test))
    _CLAIMS.sort(key=lambda claim: _module_place(claim[1].__module__))


def opened(url: str, options: StorageOptions | None, gt_reader: StoreReader, gt_info: GTInfo,
           limits: ArchiveLimits | None, method: ResultsMethod | None = None
           ) -> SubmissionInput:
    """The submission at ``url`` opened for an evaluation: a store (a directory; nothing
    at all too, the store reader says what is missing), else the file in its format (a
    model's result file with ``method``)."""
    if method is None:
        fs, path = filesystem(url, options)
        if not fs.isfile(path) and claimed(url, options) is None:
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


# --------------------------------------------------------------------------- sniffing


#: where ``sgdask.formats.sniff`` looks for a signature, and what ``matches`` is given:
#: a file's first bytes (``head``); a JSON object's first bytes and keys (``object``:
#: ``head, keys``); its keys alone (``keys``: the first key decides, then any); a JSON
#: list's first bytes and keys (``list``: ``head, keys``); a ZIP's member names
#: (``zip``: ``names, files``, lower case); a directory's file names (``dir``: ``names``)
PLACES = ("head", "object", "keys", "list", "zip", "dir")


def _no_hint(role: str) -> Text | None:
    return None


@dataclass(frozen=True)
class Signature:
    """How ``sniff`` knows one kind of file or directory by its content, declared by the
    format it belongs to (``sgdask.formats.psg``: psg.json, a directory of its PNGs).

    - ``kind``: its name in messages' logic (``"psg json"``); ``what``: how a message calls
      it (``"a ground-truth file (psg.json)"``).
    - ``place`` (one of ``PLACES``) and ``order``: signatures of one place are tried in
      ``order`` (lower first; the order of the checks is part of what a file is said to be).
    - ``matches``: the test, given what ``place`` says; or ``keys``, for place ``keys``.
    - ``accepted_as``: the roles (``sniff.ROLES``: where a path was given) that take it.
    - ``hint(role)``: the option or command that fixes it when given as ``role`` (None:
      nothing to say).
    - ``format``: the registered format whose files these are, where a caller asks.
    """

    kind: str
    what: str
    place: str
    order: int
    matches: Callable[..., bool] | None = None
    keys: frozenset[str] = frozenset()
    accepted_as: frozenset[str] = frozenset()
    hint: Callable[[str], Text | None] = _no_hint
    format: str | None = None


SIGNATURES: dict[str, Signature] = {}
#: (format name, test) of the formats that claim paths by more than their first bytes
_CLAIMS: list[tuple[str, Callable[[str, StorageOptions | None], bool]]] = []


def register_signature(sig: Signature) -> Signature:
    """Add ``sig`` to what ``sniff`` tells apart."""
    if sig.place not in PLACES:
        raise SgdaskError(f"signature {sig.kind}: place {sig.place!r} is not one of "
                          f"{', '.join(PLACES)}")
    if sig.kind in SIGNATURES:
        raise SgdaskError(f"signature {sig.kind} is registered already")
    SIGNATURES[sig.kind] = sig
    return sig


def signatures(place: str) -> list[Signature]:
    """The registered signatures of ``place``, in the order they are tried."""
    load_built_in()
    return sorted((s for s in SIGNATURES.values() if s.place == place), key=lambda s: s.order)


def signature(kind: str) -> Signature | None:
    """The registered signature of ``kind``, if any."""
    load_built_in()
    return SIGNATURES.get(kind)


def accepted_in(role: str) -> frozenset[str]:
    """The kinds of file the formats' signatures say ``role`` takes."""
    load_built_in()
    return frozenset(s.kind for s in SIGNATURES.values() if role in s.accepted_as)


#: hints several formats give: a ground-truth file where a submission was expected
GROUND_TRUTH: Text = "ground truth: ingest it with sgdask ingest-gt"
#: the option that fixes a ground-truth file or store given anywhere but ``psg``
PASS_AS_GT: Text = ("pass it as ", Option("gt"))
