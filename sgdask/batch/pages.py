"""The board's report pages: one HTML page per submission, rendered once on the cluster and
kept under ``CACHE/pages/<key>.html`` with its SHA-256 beside it.

A page is rendered where its reports already are: by the submission's finalizing task when
it is evaluated (``ManyJob.pages``), or, for a submission whose results were cached before
its page was (or whose page is damaged), by a task that reads the cache entries on the
worker. The driver never sends reports back to the cluster; it reads kept pages only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed import Client

from sgdask import __version__
from sgdask.batch.cache import ResultCache
from sgdask.io.fs import StorageOptions, filesystem, is_local, join
from sgdask.report import Report
from sgdask.report.html import render_html

if TYPE_CHECKING:
    from sgdask.batch.many import ManyOutcome

#: beside a kept report page: its SHA-256, written after it
PAGE_HASH = ".sha256"


def write_atomic(fs: Any, path: str, data: bytes) -> None:
    """Replace a file in one step: rename on local disk, a single PUT on object stores."""
    if is_local(fs):
        tmp = f"{path}.tmp-{os.getpid()}"
        with fs.open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def report_title(submission_id: str) -> str:
    return f"sgdask report: {submission_id}"


def page_key(submission_id: str, keys: dict[tuple[str, str], str]) -> str:
    """Names a rendered report page: the submission's result cache keys (so a new protocol
    or metric version renders anew), its title and the sgdask version that renders it."""
    mine = sorted((p, k) for (name, p), k in keys.items() if name == submission_id)
    text = json.dumps([__version__, report_title(submission_id), mine])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def page_url(cache: str, submission_id: str, keys: dict[tuple[str, str], str]) -> str:
    """Where a submission's report page is kept in the result cache ``cache``."""
    return join(cache, "pages", page_key(submission_id, keys) + ".html")


def render_page(by_protocol: dict[str, Report], submission_id: str, url: str,
                storage_options: StorageOptions | None) -> bytes:
    """Render one report page and keep it at ``url``, its SHA-256 beside it, written after
    it (runs on a worker)."""
    data = render_html(by_protocol, title=report_title(submission_id), public=True).encode()
    fs, path = filesystem(url, storage_options)
    fs.makedirs(fs._parent(path), exist_ok=True)
    write_atomic(fs, path, data)
    write_atomic(fs, path + PAGE_HASH, hashlib.sha256(data).hexdigest().encode())
    return data


def _page_from_cache(cache: str, submission_id: str, keys: dict[str, str], url: str,
                     storage_options: StorageOptions | None) -> bytes:
    """The task for a page whose reports are cached: read them here (``keys``: protocol ->
    cache key, in the submission's protocol order) and render the page."""
    entries = ResultCache(cache, storage_options)
    by_protocol = {}
    for protocol, key in keys.items():
        report = entries.checked(key)
        if report is None:
            raise FileNotFoundError(f"result cache entry {key} of {submission_id} is gone")
        by_protocol[protocol] = report
    return render_page(by_protocol, submission_id, url, storage_options)


def kept_page(fs: Any, path: str) -> tuple[bytes | None, str | None]:
    """A kept page whose bytes match the hash written after it, or (None, why not): absent,
    kept without a hash (by an sgdask before pages were hashed) or damaged."""
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        return None, None
    try:
        digest = fs.cat_file(path + PAGE_HASH).decode("ascii", "replace").strip()
    except FileNotFoundError:
        return None, "kept without a hash"
    if hashlib.sha256(data).hexdigest() != digest:
        return None, "damaged (SHA-256 differs from the one kept beside it)"
    return data, None


def report_pages(outcome: ManyOutcome, cache: str, storage_options: StorageOptions | None,
                 client: Client | None = None, log: Callable[[str], None] | None = None
                 ) -> dict[str, bytes]:
    """Every submission of a ``ManyOutcome``: its HTML report page, as kept under
    ``CACHE/pages/`` (evaluated submissions' pages were kept by their finalizing tasks).
    A page that is missing, or fails its hash (never published), is rendered again from
    the cache entries (``outcome`` may hold slim reports): with a client by a task on a
    worker, else here."""
    fs, _ = filesystem(cache, storage_options)
    pages, missing = {}, {}
    for submission_id in outcome.reports:
        url = page_url(cache, submission_id, outcome.keys)
        data, problem = kept_page(fs, filesystem(url, storage_options)[1])
        if data is not None:
            pages[submission_id] = data
            continue
        if problem is not None and log is not None:
            log(f"report page of {submission_id}: {problem}; rendering it again")
        missing[submission_id] = url
    tasks = {sid: (cache, sid, {p: k for (name, p), k in outcome.keys.items() if name == sid},
                   url, storage_options) for sid, url in missing.items()}
    if client is not None:
        futures = {sid: client.submit(_page_from_cache, *args, pure=False)
                   for sid, args in tasks.items()}
        pages.update({sid: future.result() for sid, future in futures.items()})
    else:
        pages.update({sid: _page_from_cache(*args) for sid, args in tasks.items()})
    return pages
