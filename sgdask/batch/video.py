"""Submissions read as they are (video model outputs) in the batch paths: their content
hash for the result cache, and the columns of a board of video protocols.

``evaluate-many`` and ``rerank`` mostly score converted stores, whose manifests carry a
content hash. An Action Genome model output (a pickle or a directory of ``.npz``, with its
``method``) or a PVSG results directory is never converted: it is read inside the tasks
that score it (``sgdask.formats.actiongenome``, ``sgdask.formats.pvsg``). Its cache key
then covers its bytes: ``output_manifest`` hashes every file under the URL (sorted by
relative path) with the method, so a changed file, a file added to a directory or another
method misses the cache.

``submit_output`` registers such an output: checked against the GT (its videos paired
with the GT's, as an evaluation opens it), copied into ``REGISTRY/outputs/<id>/`` and
entered with its method (``Entry.output_method``), so ``rerank`` scores it as it is.

A board of video protocols (``ag``: three constraint modes; ``pvsg``) shows every metric
the protocols define at its board's ks (``video_columns``): the first protocol's under
their own names, the others' prefixed with the protocol (``ag-semi R@20``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from sgdask.errors import InputError
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.sources import is_store
from sgdask.protocols import get_protocol
from sgdask.store.store import StoreReader

#: what a video board shows of each protocol, in this order (the metric names its
#: protocols define; a name a protocol lacks is skipped)
VIDEO_BOARD_METRICS = {
    "ag": ("R@10", "R@20", "R@50", "mR@10", "mR@20", "mR@50"),
    "pvsg": ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100", "wR@20", "wR@50",
             "wR@100", "PR@20"),
}
#: the protocols a board of a GT store of this ``gt_format`` ranks by default
VIDEO_BOARD_PROTOCOLS = {"action-genome": ("ag-with", "ag-semi", "ag-no"),
                         "pvsg": ("pvsg",)}
_BLOCK = 4 << 20


def submission_manifest(url: str, method: str | None,
                        options: StorageOptions | None) -> dict[str, Any]:
    """A store's manifest; for a submission read as it is (``method`` given, or not a
    store), what the result cache needs of it: its content hash (``output_manifest``)."""
    if method is None and is_store(url, options):
        return StoreReader(url, options, "submission").manifest
    return output_manifest(url, method, options)


def output_manifest(url: str, method: str | None, options: StorageOptions | None
                    ) -> dict[str, Any]:
    """``content_hash``: SHA-256 over every file under ``url`` (its relative path, then its
    bytes' SHA-256), then the method; an ``InputError`` when nothing is there."""
    fs, path = filesystem(url, options)
    if not fs.exists(path):
        raise InputError(str(url), "not found")
    root = path.rstrip("/")
    files = sorted(fs.find(root)) if fs.isdir(root) else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file[len(root):].lstrip("/").encode() + b"\0")
        digest.update(_file_digest(fs, file))
    digest.update(f"\0method={method}".encode())
    return {"kind": "submission", "source": str(url), "content_hash":
            "sha256:" + digest.hexdigest(), "method": method, "instances": None}


def _file_digest(fs: Any, path: str) -> bytes:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            digest.update(block)
    return digest.digest()


def is_video_board(protocols: tuple[str, ...]) -> bool:
    """Whether a board of these protocols is one of video protocols (its first's unit)."""
    return get_protocol(protocols[0]).unit == "video"


def video_columns(protocols: tuple[str, ...]) -> list[str]:
    """A video board's metric columns: the first protocol's metrics by name, the others'
    as ``PROTOCOL METRIC``."""
    columns = []
    for i, name in enumerate(protocols):
        family = name.split("-")[0]
        for metric in VIDEO_BOARD_METRICS.get(family, ()):
            columns.append(metric if i == 0 else f"{name} {metric}")
    return columns


def column_value(by_protocol: dict[str, Any], primary: str, column: str) -> float | None:
    """A board cell: ``METRIC`` of the primary protocol's report, or ``PROTOCOL METRIC``
    of that protocol's."""
    protocol, _, metric = column.rpartition(" ")
    report = by_protocol.get(protocol or primary)
    return None if report is None else report.metrics.get(metric)


def board_protocols_of(gt_manifest: dict[str, Any], given: tuple[str, ...]) -> tuple[str, ...]:
    """The protocols a board ranks by: ``given``, unless it is the image default and the
    GT is a video dataset's (its own protocols then)."""
    from sgdask.protocols import BOARD_PROTOCOLS

    if tuple(given) != tuple(BOARD_PROTOCOLS):
        return tuple(given)
    return VIDEO_BOARD_PROTOCOLS.get(gt_manifest.get("gt_format") or "", tuple(given))


def submit_output(output: str, registry_url: str, gt: str, name: str,
                  method: str | None = None, approved: bool = False, paper: str | None = None,
                  storage_options: StorageOptions | None = None) -> Any:
    """Check a model output against the GT, copy it into the registry and register it
    (``method``: an Action Genome output's, ``sttran`` or ``tempura``; None: a PVSG results
    directory). Returns the entry."""
    from sgdask.batch.registry import Entry, Registry, new_submission_id, utc_now
    from sgdask.formats import opened
    from sgdask.formats.results import ResultsMethod
    from sgdask.formats.sniff import existing
    from sgdask.formats.validate import GTInfo

    existing(output, storage_options)
    gt_reader = StoreReader(gt, storage_options, "gt")
    opened(output, storage_options, gt_reader, GTInfo.of(gt_reader), None,
           None if method is None else ResultsMethod(method))
    registry = Registry(registry_url, storage_options)
    submitted_at = utc_now()
    submission_id = new_submission_id(name, submitted_at)
    _, path = filesystem(output, storage_options)
    target = join(registry.url, "outputs", submission_id,
                  path.rstrip("/").rsplit("/", 1)[-1])
    _copy(output, target, storage_options)
    entry = Entry(submission_id, name, target, str(output), submitted_at, approved, paper,
                  "ready", output_manifest(target, method, storage_options)["content_hash"],
                  output_method=method)
    registry.add(entry)
    return entry


def _copy(source: str, target: str, options: StorageOptions | None) -> None:
    """A file, or every file of a directory, copied to ``target`` (read and written through
    fsspec: local and object stores alike)."""
    fs, path = filesystem(source, options)
    out_fs, out_path = filesystem(target, options)
    root = path.rstrip("/")
    files = sorted(fs.find(root)) if fs.isdir(root) else [root]
    for file in files:
        relative = file[len(root):].lstrip("/")
        dest = f"{out_path}/{relative}" if relative else out_path
        out_fs.makedirs(out_fs._parent(dest), exist_ok=True)
        with fs.open(file, "rb") as src, out_fs.open(dest, "wb") as dst:
            for block in iter(lambda: src.read(_BLOCK), b""):
                dst.write(block)
