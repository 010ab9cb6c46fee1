"""fsspec helpers: one place that turns a URL plus storage options into a filesystem."""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import TYPE_CHECKING, Any

from sgdask.errors import SgdaskError

if TYPE_CHECKING:  # fsspec (0.25 s with asyncio and ssl) loads with the first filesystem
    import fsspec

StorageOptions = dict[str, Any]


def filesystem(url: str, storage_options: StorageOptions | None = None
               ) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it) for a URL, with a clear error for unusable URLs."""
    from fsspec.core import url_to_fs

    try:
        fs, path = url_to_fs(str(url), **(storage_options or {}))
    except (ImportError, ValueError, TypeError) as err:
        raise SgdaskError(f"{url}: cannot open this URL ({err})") from err
    if not is_local(fs):
        check_access(fs, path, url)
    return fs, path


def check_access(fs: fsspec.AbstractFileSystem, path: str, url: str) -> None:
    """One cheap request per remote filesystem instance (fsspec caches instances per storage
    options), so that an unreachable endpoint or refused credentials become one line naming
    the URL instead of a botocore/aiohttp traceback from deep inside a read. A path that
    does not exist (yet) is fine: readers and writers report that themselves."""
    if getattr(fs, "_sgdask_checked", False):
        return
    try:
        fs.exists(path)
    except Exception as err:  # botocore, aiohttp, gcsfs... errors share no base class
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise SgdaskError(f"{url}: cannot access the object store ({detail})") from err
    with contextlib.suppress(AttributeError, TypeError):
        fs._sgdask_checked = True


#: the top-level packages whose exceptions are faults of the storage (with OSError): fsspec
#: backends raise their clients' own types (botocore's, aiohttp's...), which share no base
STORAGE_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "google", "adlfs",
                    "azure", "fsspec")


def is_storage_fault(err: BaseException) -> bool:
    """Whether ``err`` is the storage failing (an unreachable endpoint, a dropped connection,
    a refused request), not a bug: no import of the clients needed to tell."""
    return isinstance(err, OSError) or any(
        (cls.__module__ or "").split(".")[0] in STORAGE_PACKAGES for cls in type(err).__mro__)


def fault_detail(err: BaseException) -> str:
    """An exception as one short line: ``Type: message``."""
    return " ".join(f"{type(err).__name__}: {err}".split())[:300]


def unreadable(err: OSError) -> str:
    """Why a file cannot be read, in words (no exception names or host paths)."""
    if isinstance(err, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(err, NotADirectoryError):
        return "a part of the path is a file, not a directory"
    if isinstance(err, PermissionError):
        return "cannot read (permission denied)"
    return f"cannot read ({err.strerror or type(err).__name__})"


def join(url: str, *parts: str) -> str:
    """``url/part/part`` without doubled slashes."""
    return "/".join([str(url).rstrip("/"), *(p.strip("/") for p in parts)])


def absolute(url: str) -> str:
    """``url``, a local path made absolute against this process's directory: what a task
    receives, so that a worker started in another directory reads the same file (URLs
    with a scheme are unchanged)."""
    return str(url) if "://" in str(url) else os.path.abspath(url)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def file_digest(url: str, storage_options: StorageOptions | None = None) -> str:
    """``sha256:<hex>`` of a file's bytes, streamed (never held whole in memory)."""
    fs, path = filesystem(url, storage_options)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def combined_digest(*digests: str) -> str:
    """One ``sha256:`` digest naming several inputs together (order matters)."""
    return "sha256:" + hashlib.sha256("\0".join(digests).encode()).hexdigest()
