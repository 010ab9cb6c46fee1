"""fsspec helpers: one place that turns a URL plus storage options into a filesystem."""

from __future__ import annotations

import contextlib
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore

from sgdask.errors import SgdaskError

StorageOptions = dict[str, Any]


def filesystem(url: str, storage_options: StorageOptions | None = None
               ) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it) for a URL, with a clear error for unusable URLs."""
    try:
        fs, path = url_to_fs(str(url), **(storage_options or {}))
    except (ImportError, ValueError, TypeError) as err:
        raise SgdaskError(f"{url}: cannot open this URL ({err})") from None
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
        raise SgdaskError(f"{url}: cannot access the object store ({detail})") from None
    with contextlib.suppress(AttributeError, TypeError):
        fs._sgdask_checked = True


def join(url: str, *parts: str) -> str:
    """``url/part/part`` without doubled slashes."""
    return "/".join([str(url).rstrip("/"), *(p.strip("/") for p in parts)])


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def zarr_store(url: str, storage_options: StorageOptions | None = None,
               read_only: bool = True) -> Store:
    """A Zarr v3 store at URL: LocalStore on local disk (fastest), FsspecStore elsewhere."""
    fs, path = filesystem(url, storage_options)
    if is_local(fs):
        return LocalStore(path, read_only=read_only)
    return FsspecStore.from_url(str(url), storage_options=storage_options or None,
                                read_only=read_only)
