"""Result cache: a report per (GT, submission, protocol, evaluation options, metric version).

Keys are content hashes, so a re-run skips exactly what is already computed, and a new
protocol version, GT or metric definition misses the cache. An entry is complete only
when its ``entry.json`` exists (written last). Entries hold the per-image terms
(``per_image_terms.parquet``), so intervals, ``compare`` and ``rerank``'s rank ranges
never re-evaluate.

Entries are checked like stores: ``entry.json`` lists every file of the entry with its size
and SHA-256 (``files``) and carries the SHA-256 of its own canonical JSON (``SELF_HASH``).
``get`` reads each file's bytes once, checks them, then parses those same bytes; a damaged
entry, or one written before entries carried hashes, counts as absent: it is reported and
evaluated again, never used.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable
from typing import Any

from sgdask import __version__
from sgdask.core.settings import Settings
from sgdask.errors import SgdaskError, SgdaskWarning
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.protocols import METRICS_VERSION, Protocol
from sgdask.report import CATEGORY_FILE, TERMS_FILE, Report
from sgdask.stats.table import TermTable
from sgdask.store.store import (
    DECODE_ERRORS,
    SELF_HASH,
    decode_detail,
    file_entry,
    manifest_digest,
    parquet_table,
)

ENTRY = "entry.json"
#: the files ``get`` parses into a report (every entry lists at least these)
REPORT_FILES = ("metrics.json", "per_predicate.parquet", "per_image.parquet", TERMS_FILE)
#: what a cache key looks like (``cache_key``); other folders of the cache hold no entry
KEY_PATTERN = re.compile(r"[0-9a-f]{32}")

Log = Callable[[str], None]


def cache_key(gt_manifest: dict[str, Any], sub_manifest: dict[str, Any], protocol: Protocol,
              options: Settings, stats_hash: str | None = None,
              groups_hash: str | None = None) -> str:
    """Hex digest naming one cached evaluation: every input by content (``stats_hash``: the
    content hash of ``options.stats``, ``groups_hash`` that of ``options.predicate_groups``),
    every option that can change a number."""
    fields = {"gt": gt_manifest["content_hash"], "submission": sub_manifest["content_hash"],
              "protocol": protocol.name, "protocol_version": protocol.version,
              "metrics_version": METRICS_VERSION, "aggregation": options.aggregation,
              "ks": options.ks, "stats": stats_hash, "predicate_groups": groups_hash,
              "legacy": options.legacy, "tau": options.tau,
              "match_labels": options.match_labels}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


class DamagedEntry(SgdaskError):
    """A cache entry that must not be used: ``cache entry KEY: FILE damaged (...)``."""

    def __init__(self, key: str, file: str, what: str) -> None:
        self.key, self.file, self.what = key, file, what
        super().__init__(f"cache entry {key}: {file} damaged ({what})")

    def __reduce__(self) -> tuple:
        return (DamagedEntry, (self.key, self.file, self.what))


class UncheckedEntry(SgdaskError):
    """An entry written before entries carried hashes: nothing shows it damaged, nothing
    shows it intact, so it is never used either."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"cache entry {key}: {ENTRY} carries no hashes (written by an "
                         "older sgdask)")

    def __reduce__(self) -> tuple:
        return (UncheckedEntry, (self.key,))


class ResultCache:
    """Reports stored under ``URL/<key>/``."""

    def __init__(self, url: str, storage_options: StorageOptions | None = None) -> None:
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)

    def location(self, key: str) -> str:
        return join(self.url, key)

    def get(self, key: str, log: Log | None = None, slim: bool = False) -> Report | None:
        """The cached report, checked; None when absent, incomplete, damaged or unchecked
        (the last two reported through ``log``, or as a warning without one); ``slim``:
        without per-image rows and terms (every file is checked all the same)."""
        try:
            return self.checked(key, slim=slim)
        except (DamagedEntry, UncheckedEntry) as err:
            message = f"{err}; evaluating again"
            if log is None:
                warnings.warn(message, SgdaskWarning, stacklevel=2)
            else:
                log(message)
            return None

    def checked(self, key: str, every: bool = False, slim: bool = False) -> Report | None:
        """The entry's report, every file checked before it is parsed (None: no
        ``entry.json``, an absent or incomplete entry); ``DamagedEntry`` or
        ``UncheckedEntry`` otherwise. ``every``: a file in the entry's folder that
        ``entry.json`` does not list is damage too (``get`` reads only listed files);
        ``slim``: the report without per-image rows and terms, which are not parsed."""
        try:
            raw = self.fs.cat_file(join(self.path, key, ENTRY))
        except FileNotFoundError:
            return None
        listed = _listed_files(key, raw)
        files = {name: self._checked_file(key, name, expected)
                 for name, expected in listed.items()}
        if every:
            self.fs.invalidate_cache(join(self.path, key))
            for path in self.fs.ls(join(self.path, key), detail=False):
                name = path.rstrip("/").rsplit("/", 1)[-1]
                if name != ENTRY and name not in listed:
                    raise DamagedEntry(key, name, "not listed in entry.json")
        return _report_of(key, files, slim)

    def _checked_file(self, key: str, name: str, expected: dict[str, Any]) -> bytes:
        try:
            data = self.fs.cat_file(join(self.path, key, name))
        except FileNotFoundError:
            raise DamagedEntry(key, name, "missing") from None
        except (IsADirectoryError, NotADirectoryError) as err:
            raise DamagedEntry(key, name, type(err).__name__) from None
        if len(data) != expected["size"]:
            raise DamagedEntry(key, name, f"size {len(data)} bytes, entry.json says "
                               f"{expected['size']}")
        if hashlib.sha256(data).hexdigest() != expected["sha256"]:
            raise DamagedEntry(key, name, "SHA-256 differs from entry.json's")
        return data

    def entry_keys(self) -> list[str]:
        """Every entry's key, complete or not (the folders named like a key: ``pages/``
        and others hold no entry)."""
        self.fs.invalidate_cache(self.path)  # other processes add entries
        if not self.fs.isdir(self.path):
            return []
        names = [info["name"].rstrip("/").rsplit("/", 1)[-1]
                 for info in self.fs.ls(self.path, detail=True) if info["type"] == "directory"]
        return sorted(n for n in names if KEY_PATTERN.fullmatch(n))

    def put(self, key: str, report: Report, meta: dict[str, Any]) -> str:
        """Store a report, ``entry.json`` last with every file's size and SHA-256 (read back
        as stored); returns its location. An entry being replaced (a damaged one) loses its
        ``entry.json`` first, so it reads as absent, not damaged, while it is rewritten."""
        entry_path = join(self.path, key, ENTRY)
        if self.fs.exists(entry_path):
            self.fs.rm(entry_path)
        written = report.write(self.location(key), self.options, html=False)
        names = sorted(url.rsplit("/", 1)[-1] for url in written)
        entry = {**meta, "key": key, "sgdask_version": __version__,
                 "files": {n: file_entry(self.fs.cat_file(join(self.path, key, n)))
                           for n in names}}
        entry[SELF_HASH] = manifest_digest(entry)
        with self.fs.open(entry_path, "w") as f:
            json.dump(entry, f, indent=1)
        return self.location(key)


def _listed_files(key: str, raw: bytes) -> dict[str, dict[str, Any]]:
    """``entry.json``'s file list, the entry checked: JSON, its own hash, every listed name
    a plain file name with a size and a SHA-256, every report file listed."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise DamagedEntry(key, ENTRY, f"not JSON: {' '.join(str(err).split())}") from None
    if not isinstance(entry, dict):
        raise DamagedEntry(key, ENTRY, f"a JSON {type(entry).__name__}, expected an object")
    if "files" not in entry and SELF_HASH not in entry:
        raise UncheckedEntry(key)
    if entry.get(SELF_HASH) != manifest_digest(entry):
        raise DamagedEntry(key, ENTRY, f"{SELF_HASH} does not match its contents")
    files = entry.get("files")
    if not isinstance(files, dict) or not all(
            _plain_name(n) and isinstance(e, dict) and isinstance(e.get("size"), int)
            and isinstance(e.get("sha256"), str) for n, e in files.items()):
        raise DamagedEntry(key, ENTRY, "files: expected file name -> size and sha256")
    for name in REPORT_FILES:
        if name not in files:
            raise DamagedEntry(key, ENTRY, f"files: {name} is not listed")
    return files


def _plain_name(name: str) -> bool:
    """A file name inside the entry's folder (no folder, no way out of it)."""
    return bool(name) and "/" not in name and "\\" not in name \
        and name not in (".", "..", ENTRY)


def _report_of(key: str, files: dict[str, bytes], slim: bool = False) -> Report:
    """The report held by an entry's checked bytes (what ``Report.read`` reads from its
    folder, parsed from the bytes already in hand); ``slim``: without per-image rows and
    terms (what a board or a summary needs)."""
    tables: dict[str, Any] = {name: [] if slim and name == "per_image"
                              else _parsed(key, f"{name}.parquet", files).to_pylist()
                              for name in ("per_predicate", "per_image")}
    if CATEGORY_FILE in files:  # with panoptic quality
        tables["per_category"] = _parsed(key, CATEGORY_FILE, files).to_pylist()
    tables["terms"] = None if slim else _parsed(key, TERMS_FILE, files, TermTable.from_arrow)
    summary = _parsed(key, "metrics.json", files)
    try:
        return Report(**summary, **tables)
    except TypeError as err:
        raise DamagedEntry(key, "metrics.json", f"not a report: {decode_detail(err)}") \
            from None


def _parsed(key: str, name: str, files: dict[str, bytes],
            then: Callable[[Any], Any] | None = None) -> Any:
    """One file of an entry parsed (JSON or Parquet, then ``then``), or ``DamagedEntry``."""
    try:
        value = json.loads(files[name]) if name.endswith(".json") \
            else parquet_table(files[name])
        return value if then is None else then(value)
    except (*DECODE_ERRORS, ValueError, RecursionError) as err:
        raise DamagedEntry(key, name, f"not readable: {decode_detail(err)}") from None
