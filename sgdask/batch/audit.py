"""``sgdask verify --registry``: a registry checked completely, every problem reported.

Every entry and status/visibility record parses, the store of every converted entry
verifies (``sgdask.store.verify``), every result cache entry's files match the sizes and
SHA-256 its ``entry.json`` lists, and every kept report page matches the hash kept beside
it. What nothing will use until it is computed again (an unfinished or unhashed cache entry,
a page kept without a hash) is a note, not a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sgdask.batch.cache import DamagedEntry, ResultCache, UncheckedEntry
from sgdask.batch.pages import PAGE_HASH, kept_page
from sgdask.batch.registry import Registry, parse_entry, parse_record
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.store.store import MANIFEST
from sgdask.store.verify import Attempts, verify_store

#: checked when they have a manifest (a conversion that finished before a later failure)
CONVERTED = frozenset({"ready", "evaluating", "evaluated", "ranked"})


@dataclass
class RegistryVerdict(Attempts):
    """What ``verify_registry`` found: one line per problem (damage), one per note (an
    entry nothing uses until it is computed again), and what was checked."""

    url: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: int = 0
    stores: int = 0
    cache_entries: int = 0
    pages: int = 0


def verify_registry(url: str, options: StorageOptions | None = None) -> RegistryVerdict:
    """Every problem of the registry at ``url``: its entries and logs, the stores of its
    entries, its result cache and kept report pages (``URL/cache``, where ``rerank`` and
    the service keep them)."""
    verdict = RegistryVerdict(str(url).rstrip("/"))
    fs, path = filesystem(verdict.url, options)
    if not fs.isdir(path):
        verdict.problems.append(f"{verdict.url}: not found (expected a registry folder)")
        return verdict
    for store_url in _entry_stores(verdict, options):
        verdict.stores += 1
        verdict.problems.extend(verify_store(store_url, options).problems)
    cache = ResultCache(join(verdict.url, "cache"), options)
    for key in cache.entry_keys():
        verdict.cache_entries += 1
        _check_cache_entry(cache, key, verdict)
    _check_pages(join(verdict.url, "cache", "pages"), options, verdict)
    return verdict


def _entry_stores(verdict: RegistryVerdict, options: StorageOptions | None) -> list[str]:
    """The store URLs to verify: every converted entry's, and any other entry's that has a
    manifest; every entry and log record parsed on the way (each failure a problem)."""
    registry = Registry(verdict.url, options)
    entries = [verdict.attempt(lambda p=p: parse_entry(registry.read_bytes(p), p))
               for p in registry.listing("entries")]
    status: dict[str, str] = {}
    for log in ("status", "visibility"):
        for rel in registry.listing(log):
            record = verdict.attempt(lambda r=rel: parse_record(registry.read_bytes(r), r))
            if log == "status" and record is not None:
                status[rel.rsplit("/", 2)[-2]] = str(record.get("status"))
    verdict.entries = len(entries)
    stores = []
    for entry in (e for e in entries if e is not None):
        current = status.get(entry.submission_id, entry.status)
        converted = current in CONVERTED or verdict.attempt(
            lambda u=entry.url: _has_manifest(u, options))
        if converted:
            stores.append(entry.url)
    return stores


def _has_manifest(url: str, options: StorageOptions | None) -> bool:
    fs, path = filesystem(url, options)
    return bool(fs.exists(join(path, MANIFEST)))


def _check_cache_entry(cache: ResultCache, key: str, verdict: RegistryVerdict) -> None:
    """One result cache entry: every file against ``entry.json``, no unlisted file, the
    report readable; incomplete or unchecked entries are notes (``get`` never uses them)."""
    try:
        if cache.checked(key, every=True) is None:
            verdict.notes.append(f"{cache.url}: cache entry {key}: incomplete (no entry.json: "
                                 "an evaluation that did not finish; evaluated again when "
                                 "needed)")
    except UncheckedEntry as err:
        verdict.notes.append(f"{cache.url}: {err}: not used, evaluated again when needed")
    except DamagedEntry as err:
        verdict.problems.append(f"{cache.url}: {err}")


def _check_pages(url: str, options: StorageOptions | None, verdict: RegistryVerdict) -> None:
    """Every kept report page against the hash beside it: a damaged page is a problem, a
    page without a hash a note (``rerank`` renders both again instead of publishing them)."""
    fs, path = filesystem(url, options)
    if not fs.isdir(path):
        return
    for name in sorted(n.rsplit("/", 1)[-1] for n in fs.ls(path, detail=False)):
        if not name.endswith(".html"):
            continue
        verdict.pages += 1
        data, problem = kept_page(fs, join(path, name))
        if data is not None or problem is None:
            continue
        line = f"{url}/{name}: {problem}"
        if problem.startswith("damaged"):
            verdict.problems.append(line)
        else:
            verdict.notes.append(f"{line} ({name}{PAGE_HASH} missing): rendered again when "
                                 "needed")
