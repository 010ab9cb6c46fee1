"""Formats by registry: every submission and ground-truth format sgdask reads, like the
metric registry (``sgdask.metrics``).

A ``Format`` says how a file is recognised (its first bytes and name), what it yields per
image and which schema describes it, and gives the functions that open it for an evaluation
(an input cut into per-partition slices, decoded in the tasks), convert it into a store and
validate it. ``convert``, ``validate``, ``ingest-gt``, ``evaluate`` and the service's worker
find the format here; adding one is one module that makes one ``register`` call
(``docs/development.md``), as each built-in format's module does.

Recognition tries the formats newest first, so a registered format is seen before the
built-in fallbacks: SGBench JSON for submissions and psg.json for ground truth (their
readers say what is wrong with a file that is neither). Result files are not recognisable
from their bytes (a pickle, or a directory of ``.npz`` files): ``--method`` chooses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgdask.errors import Option, SgdaskError, Text
from sgdask.formats.validate import GTInfo, Problem
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem
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
    member names: ``register_claim``), if one does."""
    return next((FORMATS[name] for name, test in _CLAIMS if name in FORMATS
                 and test(url, options)), None)


def register_claim(name: str, test: Callable[[str, StorageOptions | None], bool]) -> None:
    """Let format ``name`` claim paths ``test`` recognises before recognition by first bytes
    (``submission_format``) and before a directory is taken for a store (``opened``)."""
    _CLAIMS.append((name, test))


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
    return sorted((s for s in SIGNATURES.values() if s.place == place), key=lambda s: s.order)


#: hints several formats give: a ground-truth file where a submission was expected
GROUND_TRUTH: Text = "ground truth: ingest it with sgdask ingest-gt"
#: the option that fixes a ground-truth file or store given anywhere but ``psg``
PASS_AS_GT: Text = ("pass it as ", Option("gt"))
