"""PVSG as a format: OpenPVSG's annotation and frame PNGs ingested into a GT store whose
images are whole videos (unit ``video``) with the video's mask tubes beside it, and a
model's results directory (per video ``quantitive/masks.txt`` and ``relations.json``, as
OpenPVSG's code reads them) decoded per video inside the tasks that score it.

The GT store (``gt_format`` ``pvsg``) holds per video its objects' classes and its GT
relations (subject, object, predicate; one row per relation of ``pvsg.json``, in its
order, whatever its spans); its ``tubes/`` directory is the video's tube store
(``sgdask.io.pvsg``: the relations' spans, the per-frame masks in Zarr chunks of frames),
written after the store and removed with it when anything fails. The store's content hash
is pvsg.json's with the split; the tube store's manifest hashes every chunk.

A results directory is checked on the client only for its files (every GT video needs
both; other videos are ignored, as the reference ignores them); a task reads its videos'
files, checks them (one ``VideoInputError`` naming file, video and field) and hands the
protocol chunk walks over both tubes (``sgdask.protocols.pvsg``), the results' masks
decoded a chunk of frames at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sgdask.errors import InputError, Option, SgdaskError
from sgdask.formats.ingest import Progress
from sgdask.formats.psg import GTRecord, write_gt_store
from sgdask.formats.registry import (
    GT,
    SUBMISSION,
    Format,
    register,
    register_claim,
)
from sgdask.formats.results import evaluated_order
from sgdask.formats.validate import GTInfo
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.pvsg import (
    DEFAULT_LIMITS,
    FRAMES_PER_CHUNK,
    MASKS_FILE,
    RESULTS_FILE,
    TubeStore,
    VideoResults,
    ingest_pvsg_gt,
    read_annotation,
    read_video_results,
    results_files,
)
from sgdask.io.sources import Loaded
from sgdask.kernels.pvsg import Spans
from sgdask.store.store import StoreReader
from sgdask.store.training_stats import STATS_SCHEMA
from sgdask.types_pvsg import PVSGVideo, PVSGVideoPred

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec

GT_FORMAT, RESULTS_FORMAT = "pvsg", "pvsg-results"
TUBES = "tubes"
VIDEO = "video"
#: videos per part of the GT store, so per task: a task holds its videos' results as RLE
#: text (their masks decoded a chunk of frames at a time)
VIDEOS_PER_PART = 4


def _is_pvsg_json(head: bytes, name: str) -> bool:
    return name.endswith("pvsg.json")


# --------------------------------------------------------------------------- GT


def ingest_pvsg(annotation: str, out: str, data_dir: str, split: str = "val",
                storage_options: StorageOptions | None = None,
                partition_size: int = VIDEOS_PER_PART, overwrite: bool = False,
                progress: Progress = None, cluster: ClusterSpec = None,
                limits: ArchiveLimits | None = None,
                frames_per_chunk: int = FRAMES_PER_CHUNK) -> dict[str, Any]:
    """``pvsg.json`` (``split``'s videos) and the frame PNGs under ``data_dir`` -> a GT
    store of videos with its tube store; returns the GT store's manifest."""
    limits = limits or DEFAULT_LIMITS
    anno = read_annotation(annotation, split, storage_options, limits)
    if not anno.videos:
        raise InputError(annotation, f"no video of split {split!r}", field="split")
    records = []
    for video in anno.videos:
        first = np.unique(video.relations[:, 0], return_index=True)[1]
        rows = video.relations[first]
        index = {int(t): i for i, t in enumerate(video.tubes.tolist())}
        relations = np.asarray([[index[int(s)], index[int(o)], int(p)]
                                for s, o, p in rows[:, 1:4].tolist()], np.int64).reshape(-1, 3)
        records.append(GTRecord(video.video_id, video.height, video.width, video.categories,
                                np.zeros((len(video.tubes), 4)), None, relations, None,
                                units={VIDEO: video.video_id}))
    fs, path = filesystem(annotation, storage_options)
    digest = hashlib.sha256(fs.cat_file(path))
    digest.update(f"split={split}".encode())
    manifest = write_gt_store(
        out, storage_options, overwrite, sorted(records, key=lambda r: r.image_id),
        STATS_SCHEMA.empty_table(), partition_size, None, progress, cluster, digest,
        [v.video_id for v in anno.videos], source=str(annotation), instances="boxes",
        gt_format=GT_FORMAT, sources={"data_dir": str(data_dir), "tubes": TUBES},
        split=split, thing_classes=anno.classes[:anno.things],
        stuff_classes=anno.classes[anno.things:], predicate_classes=list(anno.predicates))
    try:
        ingest_pvsg_gt(annotation, data_dir, join(str(out), TUBES), split, frames_per_chunk,
                       storage_options, limits)
    except BaseException:
        out_fs, out_path = filesystem(str(out), storage_options)
        if out_fs.exists(out_path):
            out_fs.rm(out_path, recursive=True)
        raise
    return manifest


def gt_tubes(gt: StoreReader, options: StorageOptions | None) -> TubeStore:
    """The tube store of a PVSG GT store."""
    if gt.manifest.get("gt_format") != GT_FORMAT:
        raise SgdaskError(f"{gt.url}: PVSG results need a PVSG GT store (this one holds "
                          f"{gt.manifest.get('gt_format')}; ingest pvsg.json with its ",
                          Option("data_dir"), ")")
    return TubeStore(join(gt.url, TUBES), options)


def _ingest(url: str, out: str, gt: str | None, options: StorageOptions | None, *,
            data_dir: str | None = None, split: str = "val", **kwargs: Any) -> dict[str, Any]:
    if data_dir is None:
        raise SgdaskError(f"{url}: PVSG ground truth needs the directory of its frame "
                          "masks (", Option("data_dir"), " DATA, holding "
                          "DATA/<source>/masks/<video>/NNNN.png)")
    return ingest_pvsg(url, out, data_dir, split, options, **kwargs)


GT_FORMAT_ENTRY = register(Format(
    GT_FORMAT, GT, _is_pvsg_json, ("masks", "relations"),
    "docs/video-pvsg.md (pvsg.json with its frame masks)", _ingest,
    options=("data_dir", "split")))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ResultsSlice:
    """A partition's videos of a results directory (each read and checked in the task)."""

    url: str
    tubes: str
    videos: tuple[str, ...]
    limits: ArchiveLimits | None = field(default=None, compare=False)

    def read(self, options: StorageOptions | None) -> Loaded:
        store = TubeStore(self.tubes, options)
        manifest = store.manifest
        preds = {}
        for vid in self.videos:
            results = read_video_results(self.url, vid, manifest["videos"][vid],
                                         len(manifest["classes"]), len(manifest["predicates"]),
                                         options, self.limits or DEFAULT_LIMITS)
            preds[vid] = _video_pred(store, results)
        return Loaded(preds)


def _spans(cols: dict[str, Any], owner: str) -> Spans:
    ids = np.asarray(cols[owner], np.int64)
    return Spans(ids, np.asarray(cols["start"], np.int64), np.asarray(cols["end"], np.int64),
                 int(ids.max()) + 1 if len(ids) else 0)


def _firsts(cols: dict[str, Any], owner: str, names: tuple[str, ...]) -> list[np.ndarray]:
    """Per owner (a relation, a rank) its first row's values of ``names``."""
    first = np.unique(np.asarray(cols[owner], np.int64), return_index=True)[1]
    return [np.asarray(cols[n], np.int64)[first] for n in names]


def _video_pred(store: TubeStore, results: VideoResults) -> PVSGVideoPred:
    vid = results.video
    tubes = store.table(vid, "tubes").to_pydict()
    gt_classes = dict(zip(tubes["tube"], tubes["category"], strict=True))
    rel = store.table(vid, "relations").to_pydict()
    subject, obj, predicate = _firsts(rel, "relation", ("subject", "object", "predicate"))
    pred_subject, pred_object, pred_predicate = _firsts(results.relations, "rank",
                                                        ("subject", "object", "predicate"))
    per_chunk = store.manifest["frames_per_chunk"]
    video = PVSGVideo(
        vid, results.info["frames"], gt_classes, np.stack([subject, obj], 1).reshape(-1, 2),
        predicate, _spans(rel, "relation"), results.classes,
        np.stack([pred_subject, pred_object], 1).reshape(-1, 2), pred_predicate,
        _spans(results.relations, "rank"),
        np.asarray(results.pairs, np.int64).reshape(-1, 2),
        lambda: store.frame_chunks(vid), lambda: results.frame_chunks(per_chunk))
    tracks = sorted(results.classes)
    position = {t: i for i, t in enumerate(tracks)}
    ranked = [(position[s], position[o]) for s, o in zip(pred_subject.tolist(),
                                                          pred_object.tolist(), strict=True)
              if s in position and o in position]
    graph = np.asarray([(s, o, 0) for s, o in dict.fromkeys(ranked)], np.int64).reshape(-1, 3)
    return PVSGVideoPred(vid, np.asarray([results.classes[t] for t in tracks], np.int64),
                         graph, video=video)


def _is_results_dir(url: str, options: StorageOptions | None) -> bool:
    """A directory with a ``<video>/quantitive/masks.txt`` in its first entry."""
    fs, path = filesystem(url, options)
    try:
        if not fs.isdir(path):
            return False
        first = sorted(fs.ls(path, detail=False))[:1]
        return bool(first) and fs.exists(join(first[0], MASKS_FILE))
    except (OSError, ValueError):
        return False


class ResultsInput:
    """A results directory opened for an evaluation: every GT video must have both files;
    the content hash is of the files of the GT's videos."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None, gt: StoreReader,
                 gt_info: GTInfo, limits: ArchiveLimits | None) -> None:
        tubes = gt_tubes(gt, options)
        self.url, self.tubes, self.limits = str(url).rstrip("/"), tubes.url, limits
        self.videos = evaluated_order(gt, gt_info)
        fs, _ = filesystem(self.url, options)
        digest = hashlib.sha256()
        for vid in self.videos:
            for file in results_files(self.url, vid):
                try:
                    data = fs.cat_file(filesystem(file, options)[1])
                except FileNotFoundError:
                    raise InputError(file, "missing", field=f"video {vid[:80]}",
                                     expected=f"{MASKS_FILE} and {RESULTS_FILE} per GT "
                                     "video") from None
                digest.update(f"{vid}/{file.rsplit('/', 1)[-1]}\0".encode())
                digest.update(hashlib.sha256(data).digest())
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": False, "instances": "tubes",
            "content_hash": "sha256:" + digest.hexdigest(), "method": RESULTS_FORMAT}

    def ids(self) -> list[str]:
        return sorted(self.videos)

    def slice(self, ids: list[str]) -> ResultsSlice:
        return ResultsSlice(self.url, self.tubes, tuple(ids), self.limits)

    def finish(self, digests: list) -> None:
        """Nothing to complete: the content hash was taken when the files were paired."""


def _opened(url: str, options: StorageOptions | None, gt_reader: StoreReader,
            gt_info: GTInfo, limits: ArchiveLimits | None, how: Any) -> ResultsInput:
    return ResultsInput(url, options, gt_reader, gt_info, limits)


def _convert(url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    raise SgdaskError(f"{url}: PVSG results are evaluated as they are (",
                      Option("protocols", "pvsg"), "), not converted")


RESULTS_FORMAT_ENTRY = register(Format(
    RESULTS_FORMAT, SUBMISSION, lambda head, name: False, ("masks", "graph"),
    "docs/video-pvsg.md (OpenPVSG's results: masks.txt and relations.json per video)",
    _convert, _opened))
register_claim(RESULTS_FORMAT, _is_results_dir)
