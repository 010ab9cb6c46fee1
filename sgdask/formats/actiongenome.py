"""Action Genome as a format: its annotation pickles ingested into a GT store whose images
are frames grouped by video, and the per-video output of an STTran-family model
(``--method sttran`` or ``tempura``) decoded per frame inside the tasks that score it.

The readers are ``sgdask.io.actiongenome`` (``docs/video.md`` describes the files). The GT
store holds, per frame kept by STTran's loader (image id: the frame key
``VIDEO.mp4/FRAME.png``, unit ``video``), the person box and the visible objects' boxes
(x1 y1 x2 y2, float64 as the loader computes them), their classes (0-based: ``person`` is
category 0) and the GT relations in the order ``evaluate_scene_graph`` builds them,
duplicates kept; its image order is the loader's frame order, video by video (what a
model's ``im_idx`` counts). Frame sizes are ``person_bbox.pkl``'s ``bbox_size`` (0 where a
frame has none: nothing reads them).

A model output (a pickle of ``{video: {field: array}}`` or a directory of ``VIDEO.npz``) is
checked on the client only for its videos (every GT video must have one); a task reads the
videos of its frames, checks and decodes them (``video_prediction``) and cuts them into
frames (``frame_outputs``). The setting comes from the data (``setting_of``): the model's
own labels and scores (``pred_labels``, ``pred_scores``: SGCls, SGDet) when it has them,
else ``labels`` and ``scores`` (PredCls). ``sttran`` softmaxes the attention logits as
STTran's evaluator does; ``tempura`` reads probabilities.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sgdask.errors import InputError, Option, SgdaskError
from sgdask.formats.ingest import BOX_STORE_PARTITION, Progress
from sgdask.formats.methods import VIDEO_METHODS
from sgdask.formats.psg import GTRecord, write_gt_store
from sgdask.formats.registry import GT, SUBMISSION, Format, register, register_method
from sgdask.formats.results import evaluated_order
from sgdask.formats.validate import GTInfo
from sgdask.io.actiongenome import (
    DEFAULT_LIMITS,
    frame_names,
    frame_outputs,
    gt_videos,
    loaded_pickle,
    npz_fields,
    setting_of,
    video_prediction,
)
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.sources import Digest, Loaded
from sgdask.store.store import StoreReader
from sgdask.store.training_stats import STATS_SCHEMA
from sgdask.types_ag import OBJECT_CLASSES, PREDICATES, AGFramePred, AGVideo, AGVideoPred

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec

GT_FORMAT, OUTPUT_FORMAT = "action-genome", "action-genome-output"
SPLITS = ("test", "train")
PICKLE_HEAD = b"\x80"
#: the unit a frame belongs to
VIDEO = "video"


def is_pickle(head: bytes) -> bool:
    return head[:1] == PICKLE_HEAD and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


# --------------------------------------------------------------------------- GT


def frame_records(videos: list[AGVideo], sizes: Mapping[str, Any]) -> list[GTRecord]:
    """One record per frame, in the loader's order (video by video), unit ``video``."""
    records = []
    for video in videos:
        for frame in video.frames:
            width, height = _size(sizes.get(frame.name))
            records.append(GTRecord(frame.name, height, width, frame.classes - 1,
                                    frame.boxes, None, frame.relations, None,
                                    units={VIDEO: video.name}))
    return records


def _size(entry: Any) -> tuple[int, int]:
    """``person_bbox.pkl``'s ``bbox_size`` (width, height), or (0, 0)."""
    size = entry.get("bbox_size") if isinstance(entry, dict) else None
    try:
        width, height = (int(v) for v in size)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return 0, 0
    return (width, height) if width > 0 and height > 0 else (0, 0)


def ingest_ag(objects: str, out: str, persons: str, frame_list: str | None = None,
              split: str = "test", storage_options: StorageOptions | None = None,
              partition_size: int = BOX_STORE_PARTITION, overwrite: bool = False,
              progress: Progress = None, cluster: ClusterSpec = None,
              limits: ArchiveLimits | None = None) -> dict[str, Any]:
    """``object_bbox_and_relationship.pkl`` (or its ``_filtersmall`` variant) with
    ``person_bbox.pkl`` (and optionally ``frame_list.txt``) -> a box GT store of ``split``'s
    frames, grouped by video. Returns the manifest."""
    limits = limits or DEFAULT_LIMITS
    objects_doc = loaded_pickle(objects, limits, storage_options)
    persons_doc = loaded_pickle(persons, limits, storage_options)
    if frame_list is not None and isinstance(persons_doc, dict):
        listed = frame_names(frame_list, storage_options, limits)
        missing = next((key for key in persons_doc if key not in listed), None)
        if missing is not None:
            raise InputError(persons, f"frame {str(missing)[:80]} is not in the frame list "
                             f"{frame_list}", expected="the frame list the annotations "
                             "came with")
    videos = gt_videos(objects_doc, persons_doc, split=split, objects_file=objects,
                       persons_file=persons)
    if not videos:
        raise InputError(objects, f"no {split} video keeps 3 frames after the loader's "
                         "filters", field="metadata.set")
    records = frame_records(videos, persons_doc)
    digest = hashlib.sha256()
    for url in (objects, persons, *(() if frame_list is None else (frame_list,))):
        digest.update(_file_digest(url, storage_options))
    digest.update(f"split={split}".encode())
    return write_gt_store(
        out, storage_options, overwrite, sorted(records, key=lambda r: r.image_id),
        STATS_SCHEMA.empty_table(), partition_size, None, progress, cluster, digest,
        [r.image_id for r in records], source=str(objects), instances="boxes",
        gt_format=GT_FORMAT, sources={"persons": str(persons), "frame_list": frame_list},
        split=split, thing_classes=list(OBJECT_CLASSES[1:]), stuff_classes=[],
        predicate_classes=list(PREDICATES))


def _file_digest(url: str, options: StorageOptions | None) -> bytes:
    fs, path = filesystem(url, options)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            digest.update(block)
    return digest.digest()


def _ingest(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
            persons: str | None = None, frame_list: str | None = None, split: str = "test",
            **kwargs: Any) -> dict[str, Any]:
    if persons is None:
        raise SgdaskError(f"{url}: a pickle: as Action Genome ground truth "
                          "(object_bbox_and_relationship.pkl) it needs its person_bbox.pkl (",
                          Option("persons"), "); a model's result file is passed as ",
                          Option("pred"), " with ", Option("method"))
    return ingest_ag(url, out, persons, frame_list, split, options, **kwargs)


GT_FORMAT_ENTRY = register(Format(
    GT_FORMAT, GT, lambda head, name: is_pickle(head), ("boxes", "relations"),
    "docs/video.md (object_bbox_and_relationship.pkl with person_bbox.pkl)", _ingest,
    options=("persons", "frame_list", "split")))


# --------------------------------------------------------------------------- model output


@dataclass(frozen=True)
class VideoSlice:
    """One video of a slice: its name, its frames in the loader's order (what ``im_idx``
    counts) and where its arrays are."""

    name: str
    frames: tuple[str, ...]
    file: str


@dataclass(frozen=True)
class OutputSlice:
    """A partition's frames of a model output: the videos they belong to (each decoded
    whole, its frames kept when asked for)."""

    url: str
    videos: tuple[VideoSlice, ...]
    wanted: frozenset[str]
    attention: str
    pickled: bool
    limits: ArchiveLimits | None = field(default=None, compare=False)

    def read(self, options: StorageOptions | None) -> Loaded:
        limits = self.limits or DEFAULT_LIMITS
        preds: dict[str, AGFramePred] = {}
        for video in self.videos:
            if self.pickled:
                fields = _pickled(self.url, limits, options).get(video.name)
            else:
                fields = npz_fields(video.file, video.name, limits, options)
            output = video_prediction(fields, video.name, len(video.frames),
                                      setting_of(fields), self.attention, video.file, limits)
            kept = [(name, frame) for name, frame in zip(
                video.frames, frame_outputs(output, len(video.frames)), strict=True)
                if name in self.wanted]
            preds.update(_frame_preds(kept))
        return Loaded(preds)


def _frame_preds(frames: list[tuple[str, AGVideoPred]]) -> dict[str, AGFramePred]:
    """Frame name -> the frame's prediction: its output, its boxes with 0-based labels and
    one graph row (subject, object, 0) per pair (the arrays of all frames built at once,
    each frame's a slice)."""
    if not frames:
        return {}
    outputs = [frame for _, frame in frames]
    pair_at = np.cumsum([0] + [len(f.pairs) for f in outputs]).tolist()
    box_at = np.cumsum([0] + [len(f.labels) for f in outputs]).tolist()
    graph = np.zeros((pair_at[-1], 3), np.int64)
    graph[:, :2] = np.concatenate([f.pairs for f in outputs]).reshape(-1, 2)
    labels = np.concatenate([f.labels for f in outputs]) - 1
    return {name: AGFramePred(name, labels[box_at[i]:box_at[i + 1]],
                              graph[pair_at[i]:pair_at[i + 1]], boxes=frame.boxes,
                              scores=frame.scores, output=frame)
            for i, (name, frame) in enumerate(frames)}


#: the output pickle last loaded in this process: (url, version) -> its dict (the driver's
#: load serves the tasks of an in-process cluster's threads)
_LOADED: dict[tuple[str, str], Any] = {}
#: one load at a time: the first tasks of a process start together and would each load it
_LOADING = threading.Lock()


def _pickled(url: str, limits: ArchiveLimits, options: StorageOptions | None
             ) -> dict[str, Any]:
    """The output pickle, loaded once per process and file version (its tasks each read
    some of its videos)."""
    fs, path = filesystem(url, options)
    info = fs.info(path)
    key = (url, f"{info.get('size')}:{info.get('mtime') or info.get('LastModified')}")
    with _LOADING:
        found = _LOADED.get(key)
        if found is None:
            found = loaded_pickle(url, limits, options)
            _LOADED.clear()
            _LOADED[key] = found
    return found


def _is_dir(url: str, options: StorageOptions | None) -> bool:
    fs, path = filesystem(url, options)
    return fs.isdir(path)


class OutputInput:
    """A model output opened for an evaluation: its videos paired with the GT's (every
    GT video needs one; an output video the GT lacks is an error), the GT's frames in the
    loader's order; the content hash is of the files read (the pickle, or every video's
    ``.npz``)."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None, gt: StoreReader,
                 gt_info: GTInfo, method: str, limits: ArchiveLimits | None) -> None:
        if gt.manifest.get("gt_format") != GT_FORMAT:
            raise SgdaskError(f"{url}: an Action Genome model output needs an Action Genome "
                              f"GT store ({gt.url} holds {gt.manifest.get('gt_format')})")
        self.url, self.attention, self.limits = str(url), VIDEO_METHODS[method], limits
        order = evaluated_order(gt, gt_info)
        videos: dict[str, list[str]] = {}
        for frame in order:
            videos.setdefault(frame.split("/")[0], []).append(frame)
        files, digest = self._files(url, options, list(videos), limits or DEFAULT_LIMITS)
        self.pickled = not _is_dir(url, options)
        self.videos = {name: VideoSlice(name, tuple(frames), files[name])
                       for name, frames in videos.items()}
        self.video_of = {f: name for name, frames in videos.items() for f in frames}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": False, "instances": "boxes",
            "content_hash": "sha256:" + digest, "method": method}

    @staticmethod
    def _files(url: str, options: StorageOptions | None, videos: list[str],
               limits: ArchiveLimits) -> tuple[dict[str, str], str]:
        """Where each GT video's arrays are, and the SHA-256 of the files."""
        fs, path = filesystem(url, options)
        if fs.isdir(path):
            names = {p.rsplit("/", 1)[-1].removesuffix(".npz")
                     for p in fs.ls(path, detail=False) if p.endswith(".npz")}
            files = {v: join(url, v + ".npz") for v in videos}
            known = set(videos)
        else:
            loaded = _pickled(url, limits, options)
            if not isinstance(loaded, dict):
                raise InputError(url, f"holds a {type(loaded).__name__}",
                                 expected="a dict of video name -> dict of numpy arrays")
            names, files, known = set(loaded), dict.fromkeys(videos, str(url)), set(videos)
        missing = next((v for v in videos if v not in names), None)
        if missing is not None:
            raise InputError(url, "no prediction", field=f"video {missing[:80]}",
                             expected="one per GT video; a video without pairs has empty "
                             "arrays")
        extra = next((n for n in sorted(names) if n not in known), None)
        if extra is not None:
            raise InputError(url, "not a GT video of the split", field=f"video {extra[:80]}")
        digest = hashlib.sha256()
        for file in sorted(set(files.values())):
            digest.update(file.rsplit("/", 1)[-1].encode() + b"\0")
            digest.update(_file_digest(file, options))
        return files, digest.hexdigest()

    def ids(self) -> list[str]:
        return sorted(self.video_of)

    def slice(self, ids: list[str]) -> OutputSlice:
        names = dict.fromkeys(self.video_of[i] for i in ids)
        return OutputSlice(self.url, tuple(self.videos[n] for n in names), frozenset(ids),
                           self.attention, self.pickled, self.limits)

    def finish(self, digests: list[Digest]) -> None:
        """Nothing to complete: the content hash was taken when the files were paired."""


def _opened(url: str, options: StorageOptions | None, gt_reader: StoreReader,
            gt_info: GTInfo, limits: ArchiveLimits | None, how: Any) -> OutputInput:
    return OutputInput(url, options, gt_reader, gt_info, how.method, limits)


def _convert(url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    raise SgdaskError(f"{url}: an Action Genome model output is evaluated as it is "
                      "(sgdask evaluate with the method), not converted")


OUTPUT_FORMAT_ENTRY = register(Format(
    OUTPUT_FORMAT, SUBMISSION, lambda head, name: False,
    ("boxes", "instance_scores", "graph"),
    "docs/video.md (an STTran-family model's output per video)", _convert, _opened,
    options=("method",)))
for _method in VIDEO_METHODS:
    register_method(_method, OUTPUT_FORMAT)
