"""Video phases of the service: uploads of model outputs scored as they are.

A phase whose ``upload`` names a video output format (``sgdask.formats.video_upload``)
takes an Action Genome model output (a pickle, or a ZIP of ``VIDEO.npz``; the phase names
its ``method``) or a PVSG results directory as a ZIP. Such an output is never converted
into a store: the worker's check reads the upload's head and, for a ZIP, its directory
(``SafeZip``: every entry checked against the archive limits) and finds the output in it;
its "conversion" writes the output's files under ``REGISTRY/stores/<id>/output`` (the
entry's URL, fixed at upload), opens it against the GT as an evaluation opens it (every GT
video paired; a pickle read through the bounded unpickler) and writes
``stores/<id>/complete.json`` last. The evaluation then reads it as ``evaluate-many`` reads a
model output (``Entry.output_method``: the phase's method), on the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sgdask.batch.registry import Registry
from sgdask.errors import InputError
from sgdask.formats.sniff import unscorable
from sgdask.formats.video_upload import VideoUpload, video_upload
from sgdask.io.archive import ArchiveLimits, SafeZip
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.store.store import StoreReader

#: where an entry's output is, under its folder ``stores/<id>``
OUTPUT = "output"
#: written last under ``stores/<id>``: the output is complete and paired with the GT
COMPLETE = "complete.json"
_HEAD = 16
_BLOCK = 4 << 20

Refusal = Callable[[bytes, str], "str | None"]


def entry_url(registry: Registry, submission_id: str, upload: str) -> str:
    """Where an entry's submission is read: its store, or (a video phase) its output."""
    store = registry.store_url(submission_id)
    return store if video_upload(upload) is None else join(store, OUTPUT)


def upload_refusal(upload: str) -> Refusal:
    """What refuses an uploaded file from its first bytes in a phase taking ``upload``."""
    video = video_upload(upload)
    return unscorable if video is None else video.refusal


def checked_video_upload(video: VideoUpload, upload: str, options: StorageOptions | None,
                         limits: ArchiveLimits | None, shown_as: str) -> None:
    """Refuse an upload that is not ``video``'s output: its head, and a ZIP's entries and
    layout (nothing is extracted)."""
    if _is_zip(upload, options, video, shown_as):
        with _zipped_output(video, upload, options, limits or ArchiveLimits(), shown_as):
            pass


def unpacked_video_upload(video: VideoUpload, upload: str, out: str, gt: str,
                          method: str | None, options: StorageOptions | None,
                          limits: ArchiveLimits | None, shown_as: str) -> None:
    """Write the output to ``out`` (the pickle as it is, a ZIP's output files), open it
    against the GT as an evaluation does (``InputError`` for an output that does not fit
    it), then mark it complete."""
    from sgdask.formats import opened
    from sgdask.formats.results import ResultsMethod
    from sgdask.formats.validate import GTInfo

    fs, path = filesystem(out, options)
    folder = fs._parent(path)
    if fs.exists(folder):  # what an earlier attempt left
        fs.rm(folder, recursive=True)
    fs.makedirs(folder, exist_ok=True)
    if _is_zip(upload, options, video, shown_as):
        _extract(video, upload, out, options, limits or ArchiveLimits(), shown_as)
    else:
        _copy(upload, out, options)
    gt_reader = StoreReader(gt, options, "gt")
    opened(out, options, gt_reader, GTInfo.of(gt_reader), limits,
           None if method is None else ResultsMethod(method))
    fs.pipe_file(join(folder, COMPLETE), json.dumps(
        {"upload": video.format, "method": method}).encode())


def video_ready(url: str, options: StorageOptions | None) -> bool:
    """Whether an earlier attempt left the entry's output complete."""
    fs, path = filesystem(url, options)
    return fs.exists(join(fs._parent(path), COMPLETE))


def _is_zip(upload: str, options: StorageOptions | None, video: VideoUpload,
            shown_as: str) -> bool:
    """Whether the upload is a ZIP (else the pickle a video output may be); anything
    else is refused."""
    fs, path = filesystem(upload, options)
    with fs.open(path, "rb") as f:
        head = f.read(_HEAD)
    if not video.accepts(head):
        raise InputError(shown_as, f"not {video.what}")
    return head.startswith(b"PK")


def _extract(video: VideoUpload, upload: str, out: str, options: StorageOptions | None,
             limits: ArchiveLimits, shown_as: str) -> None:
    out_fs, out_path = filesystem(out, options)
    with _zipped_output(video, upload, options, limits, shown_as) as (archive, files):
        for member, relative in sorted(files.items()):
            target = f"{out_path}/{relative}"
            out_fs.makedirs(out_fs._parent(target), exist_ok=True)
            out_fs.pipe_file(target, archive.read(member))


@contextmanager
def _zipped_output(video: VideoUpload, upload: str, options: StorageOptions | None,
                   limits: ArchiveLimits, shown_as: str
                   ) -> Iterator[tuple[SafeZip, dict[str, str]]]:
    """The uploaded ZIP, its entries checked against ``limits``, and the output's files in
    it (``VideoUpload.layout``)."""
    fs, path = filesystem(upload, options)
    with fs.open(path, "rb") as f:
        archive = SafeZip(f, shown_as, limits)
        archive.check()
        yield archive, video.layout(list(archive.entries), shown_as)


def _copy(source: str, target: str, options: StorageOptions | None) -> None:
    fs, path = filesystem(source, options)
    out_fs, out_path = filesystem(target, options)
    with fs.open(path, "rb") as src, out_fs.open(out_path, "wb") as dst:
        for block in iter(lambda: src.read(_BLOCK), b""):
            dst.write(block)
