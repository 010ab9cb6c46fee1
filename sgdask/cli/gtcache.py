"""The GT store cache: ``sgdask evaluate --gt psg.json --gt-masks DIR`` ingests the ground
truth once and reuses the store on every later run.

An entry is named by a hash of every input byte (``psg.json`` and every PNG it names, in
the order ingest reads them) plus the store format version and the sgdask version that
writes it, so an edited PNG, a new store format or a new sgdask never reuses an old entry.
Entries are published atomically: written under a temporary name, then renamed, so two
runs filling the same entry never leave half of one. Beside the entries, the PNG names
of each psg.json (keyed by its digest) are kept, so a warm run does not parse it. The
cache is a local directory (``--cache-dir``, default ``$XDG_CACHE_HOME/sgdask``, i.e.
``~/.cache/sgdask``).

``gt_store`` is what ``--gt`` means to ``evaluate`` and ``compare``: a GT store, or a
psg.json whose store comes from this cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from sgdask import __version__
from sgdask.cluster import ClusterSpec
from sgdask.errors import Option, SgdaskError
from sgdask.formats.ingest import Progress, read_bytes
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.sources import is_store
from sgdask.store.store import FORMAT_VERSION, missing_manifest


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sgdask"


def gt_cache_key(psg_json: str, masks_dir: str | None,
                 storage_options: StorageOptions | None, root: Path | None = None) -> str:
    """Hex digest of every input byte, the store format version and the sgdask version."""
    raw = read_bytes(psg_json, storage_options, "psg.json")
    raw_digest = hashlib.sha256(raw)
    digest = hashlib.sha256(f"sgdask {__version__} store {FORMAT_VERSION}\0".encode())
    digest.update(raw_digest.digest())
    digest.update(b"masks" if masks_dir else b"boxes")
    if masks_dir is not None:
        for name in png_names(raw, raw_digest.hexdigest(), psg_json, root):
            digest.update(hashlib.sha256(read_bytes(join(masks_dir, name), storage_options,
                                                    "pan_seg_file_name")).digest())
    return digest.hexdigest()[:40]


def png_names(raw: bytes, raw_digest: str, psg_json: str, root: Path | None) -> list[str]:
    """The PNG names of psg.json's test records, in ingest order. Remembered in the cache
    directory under psg.json's digest, so that a warm run reads the PNGs' bytes without
    parsing psg.json again (a third of a second for PSG's 10 MB)."""
    from sgdask.formats.psg import gt_records  # psg.json's reader: only when --gt is one

    memo = root / f"png-names-{raw_digest[:40]}.json" if root is not None else None
    if memo is not None:
        try:
            names = json.loads(memo.read_bytes())
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return names
        except (OSError, ValueError):
            pass
    names = [r.pan_seg_file_name or "" for r in gt_records(raw, psg_json, masks=True)]
    if memo is not None:
        tmp = memo.with_name(f".tmp-{memo.name}-{uuid.uuid4().hex[:8]}")
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(names))
            tmp.replace(memo)
        except OSError:  # a cache that cannot be written only costs the next run time
            tmp.unlink(missing_ok=True)
    return names


def cache_entry(psg_json: str, masks_dir: str | None, cache_dir: str | Path | None = None,
                storage_options: StorageOptions | None = None) -> Path:
    """Where the GT store of ``psg_json`` (+ masks) is cached (see ``is_cached``)."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return root / f"gt-{gt_cache_key(psg_json, masks_dir, storage_options, root)}"


def is_cached(entry: Path) -> bool:
    return (entry / "manifest.json").exists()


def cached_gt_store(psg_json: str, masks_dir: str | None, cache_dir: str | Path | None = None,
                    storage_options: StorageOptions | None = None,
                    cluster: ClusterSpec = None, progress: Progress = None,
                    log: object = None, limits: ArchiveLimits | None = None,
                    entry: Path | None = None) -> str:
    """The GT store of ``psg_json`` (+ masks), from the cache or ingested into it
    (``entry``: its ``cache_entry``, when the caller has it already)."""
    from sgdask.formats.psg import ingest_gt

    root = Path(cache_dir) if cache_dir else default_cache_dir()
    entry = entry or cache_entry(psg_json, masks_dir, cache_dir, storage_options)
    if is_cached(entry):
        if callable(log):
            log(f"GT store from the cache: {entry}")
        return str(entry)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{entry.name}-{uuid.uuid4().hex[:8]}"
    try:
        ingest_gt(psg_json, str(tmp), masks_dir, storage_options, cluster=cluster,
                  progress=progress, limits=limits)
        try:
            tmp.rename(entry)
        except OSError:  # another run published the same entry first: use theirs
            if not (entry / "manifest.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if callable(log):
        log(f"GT store cached: {entry}")
    return str(entry)


def given_store(gt: str, masks_dir: str | None,
                storage_options: StorageOptions | None = None) -> str | None:
    """``gt`` when it is a GT store (its masks come with it: no ``masks_dir``); None when it
    is a file to ingest (a psg.json). A directory without a manifest is neither."""
    if is_store(gt, storage_options):
        if masks_dir:
            raise SgdaskError(Option("gt_masks"), f": {gt} is a GT store already (masks come "
                              "with it)")
        return gt
    fs, path = filesystem(gt, storage_options)
    if fs.isdir(path):
        raise missing_manifest(gt)
    return None


def gt_store(gt: str, masks_dir: str | None = None, cache_dir: str | Path | None = None,
             storage_options: StorageOptions | None = None, cluster: ClusterSpec = None,
             progress: Progress = None, log: object = None,
             limits: ArchiveLimits | None = None) -> str:
    """The GT store to evaluate against: ``gt`` itself when it is a store, else the cached
    store of the psg.json at ``gt`` (+ ``masks_dir``), ingested on a miss."""
    return given_store(gt, masks_dir, storage_options) or cached_gt_store(
        gt, masks_dir, cache_dir, storage_options, cluster, progress, log, limits)
