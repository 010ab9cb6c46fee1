"""PVSG's files (OpenPVSG) → mask-tube stores, read and written one chunk of frames at a time.

Inputs, as OpenPVSG ships and reads them:

- the GT: ``pvsg.json`` (vocabulary ``objects.thing + objects.stuff`` and ``relations``; per
  video ``meta.{height, width, num_frames}``, ``objects`` ``[{object_id, category}]``,
  ``relations`` ``[[subject, object, predicate, [[start, end], ...]]]`` with inclusive frame
  spans) and one single-channel PNG per frame, ``DATA/<source>/masks/<video>/NNNN.png``
  (pixel = object id, 0 none; ``source`` from the video id as OpenPVSG derives it);
- a model's results, per video: ``<video>/quantitive/masks.txt`` (a line per mask of a tube:
  ``frame track class height width RLE``, frames from 1, COCO's compressed RLE) and
  ``<video>/relations.json`` (the ranked relations, ``sgdask.testing.pvsg.PVSG_RESULTS``).

The tube store (``URL``)::

    manifest.json                        written last: vocabulary, videos, every file's hash
    videos/<video>/tubes.parquet         tube, category (GT: object id; results: track id and
                                         its majority class, ties to the class seen first)
    videos/<video>/relations.parquet     GT: relation, subject, object, predicate, start, end
                                         (one row per span); results: rank, score too
    videos/<video>/pairs.parquet         results only: the pair proposals' ranking
    videos/<video>/masks.parquet         a row per (frame, tube) with a mask (GT: with pixels;
                                         results: every masks.txt line): box, chunk, offset
    videos/<video>/chunk-00000/          Zarr v3: the masks of frames [0, F), the store's word
                                         encoding (rows XOR-ed, sparse, zstd, CRC-32C)

Bad input is one ``VideoInputError`` naming the file, the video, the frame and the field; a
failed conversion leaves nothing behind (the output is removed, no manifest is written).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import imagecodecs
import numpy as np
import pyarrow as pa

from sgdask.errors import StoreError, VideoInputError
from sgdask.io.archive import ArchiveLimits, limit_hint, printable
from sgdask.io.bounded_json import load_json
from sgdask.io.codecs.coco_rle import checked_runs
from sgdask.io.codecs.masks_txt import PlainLines, plain_lines
from sgdask.io.codecs.words import pack_sparse, sparse_problem, unpack_sparse, xor_rows
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.kernels.bits import run_rows, word_layout
from sgdask.store.store import (
    DECODE_ERRORS,
    MANIFEST,
    _zarr,
    decode_detail,
    encoded_words,
    file_entry,
    mask_array_files,
    parquet_bytes,
    parquet_table,
    put_file,
)
from sgdask.types import BitMasks

TUBE_FORMAT = "sgdask-pvsg-tubes"
TUBE_VERSION = 1
#: frames per Zarr chunk: what a reader holds in memory at once
FRAMES_PER_CHUNK = 16
RESULTS_FILE = "relations.json"
MASKS_FILE = "quantitive/masks.txt"
DEFAULT_LIMITS = ArchiveLimits()
_INT = re.compile(r"0|[1-9][0-9]*")

MASK_SCHEMA = pa.schema([("frame", pa.int32()), ("tube", pa.int64()), ("y0", pa.int32()),
                         ("x0", pa.int32()), ("y1", pa.int32()), ("x1", pa.int32()),
                         ("chunk", pa.int32()), ("offset", pa.int64())])


def data_source(video: str) -> str:
    """The folder of a video's frames, as OpenPVSG derives it from the id."""
    head = video.split("_")[0]
    if video.startswith("P"):
        return "epic_kitchen"
    return "vidor" if head.isdigit() and len(head) == 4 else "ego4d"


@dataclass(frozen=True)
class Video:
    """One video of the annotation, checked."""

    video_id: str
    height: int
    width: int
    frames: int
    tubes: np.ndarray        # object ids
    categories: np.ndarray   # class index per object
    relations: np.ndarray    # (n, 6): relation, subject, object, predicate, start, end


@dataclass(frozen=True)
class Annotation:
    classes: list[str]
    predicates: list[str]
    videos: list[Video]
    things: int = 0  # classes[:things] are the thing classes, the rest stuff


@dataclass(frozen=True)
class FrameChunk:
    """The masks of frames ``first .. first + len(tubes) - 1``: per frame, the tubes with
    pixels there and their word masks."""

    first: int
    tubes: list[np.ndarray]
    masks: list[BitMasks]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(doc: dict, file: str) -> tuple[list[str], list[str]]:
    objects, predicates = doc.get("objects"), doc.get("relations")
    if not isinstance(objects, dict) or not all(
            isinstance(objects.get(k), list) for k in ("thing", "stuff")):
        raise VideoInputError(file, "missing or not {thing: [...], stuff: [...]}", field="objects")
    classes = objects["thing"] + objects["stuff"]
    for field, names in (("objects", classes), ("relations", predicates)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise VideoInputError(file, "missing or not a list of names", field=field)
    return classes, predicates


def _video(rec: Any, index: int, file: str, classes: list[str], predicates: list[str],
           limits: ArchiveLimits) -> Video:
    if not isinstance(rec, dict) or not isinstance(rec.get("video_id"), str):
        raise VideoInputError(file, "not a video record with a string video_id",
                              field=f"data[{index}]")
    vid = rec["video_id"]
    meta = rec.get("meta")

    def bad(field: str, what: str, expected: Any = None) -> VideoInputError:
        return VideoInputError(file, what, video=printable(vid[:80]), field=field,
                               expected=expected)

    if not isinstance(meta, dict) or not all(_int(meta.get(k)) and meta[k] > 0
                                             for k in ("height", "width", "num_frames")):
        raise bad("meta", "missing or not positive integers",
                  "{height, width, num_frames}")
    if meta["num_frames"] > limits.max_video_frames:
        raise bad("meta.num_frames", f"is {meta['num_frames']}",
                  limit_hint(limits, "max_video_frames"))
    if meta["height"] * meta["width"] > limits.max_layer_pixels:
        raise bad("meta", f"{meta['height']} x {meta['width']} pixels per frame",
                  limit_hint(limits, "max_layer_pixels"))
    objects = rec.get("objects")
    if not isinstance(objects, list) or len(objects) > limits.max_instances_per_image:
        raise bad("objects", "missing, not a list or too long",
                  limit_hint(limits, "max_instances_per_image"))
    ids, cats = [], []
    for j, obj in enumerate(objects):
        if not isinstance(obj, dict) or not _int(obj.get("object_id")) or \
                not 0 < obj["object_id"] < 1 << 16:
            raise bad(f"objects[{j}].object_id", "missing or not an id in 1..65535")
        if obj.get("category") not in classes:
            raise bad(f"objects[{j}].category", "not one of the annotation's object classes")
        ids.append(obj["object_id"])
        cats.append(classes.index(obj["category"]))
    if len(set(ids)) != len(ids):
        raise bad("objects", "an object_id given twice")
    rels = rec.get("relations")
    if not isinstance(rels, list) or len(rels) > limits.max_triplets_per_image:
        raise bad("relations", "missing, not a list or too long",
                  limit_hint(limits, "max_triplets_per_image"))
    rows = []
    for j, rel in enumerate(rels):
        field = f"relations[{j}]"
        if not (isinstance(rel, list) and len(rel) == 4 and isinstance(rel[3], list)):
            raise bad(field, "not [subject, object, predicate, [[start, end], ...]]")
        s, o, name, spans = rel
        if s not in ids or o not in ids:
            raise bad(field, "subject or object is not an object_id of the video")
        if name not in predicates:
            raise bad(field, "predicate is not one of the annotation's relations")
        for span in spans:
            if not (isinstance(span, list) and len(span) == 2 and all(map(_int, span))
                    and 0 <= span[0] <= span[1] < meta["num_frames"]):
                raise bad(field, "a span is not [start, end] inside the video",
                          f"0 <= start <= end < {meta['num_frames']}")
            rows.append((j, s, o, predicates.index(name), span[0], span[1]))
        if not spans:  # a relation without frames: still one GT relation
            rows.append((j, s, o, predicates.index(name), 0, -1))
    return Video(vid, meta["height"], meta["width"], meta["num_frames"],
                 np.asarray(ids, np.int64), np.asarray(cats, np.int64),
                 np.asarray(rows, np.int64).reshape(-1, 6))


def read_annotation(url: str, split: str | None = None,
                    storage_options: StorageOptions | None = None,
                    limits: ArchiveLimits = DEFAULT_LIMITS) -> Annotation:
    """pvsg.json, checked; ``split``: only the videos its ``split`` lists for it."""
    fs, path = filesystem(url, storage_options)
    doc = load_json(fs.cat_file(path), str(url), limits, kind="gt")
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise VideoInputError(str(url), "not a PVSG annotation: no list of videos", field="data")
    classes, predicates = _names(doc, str(url))
    wanted = None
    if split is not None:
        sources = doc.get("split")
        if not isinstance(sources, dict):
            raise VideoInputError(str(url), "missing or not an object", field="split")
        wanted = {v for s in sources.values() if isinstance(s, dict)
                  for v in (s.get(split) or [])}
    videos = [_video(rec, i, str(url), classes, predicates, limits)
              for i, rec in enumerate(doc["data"])
              if wanted is None or (isinstance(rec, dict) and rec.get("video_id") in wanted)]
    seen = Counter(v.video_id for v in videos)
    if seen and seen.most_common(1)[0][1] > 1:
        raise VideoInputError(str(url), "a video given twice",
                              video=printable(seen.most_common(1)[0][0][:80]), field="data")
    return Annotation(classes, predicates, videos, len(doc["objects"]["thing"]))


def _frame_ids(fs: Any, path: str, url: str, video: Video, frame: int) -> np.ndarray:
    """One frame's PNG as object ids, checked against the video."""
    def bad(what: str, expected: Any = None) -> VideoInputError:
        return VideoInputError(url, what, video=video.video_id, frame=frame, expected=expected)

    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        raise bad("missing (one PNG per frame, NNNN.png from 0000)") from None
    try:
        ids = imagecodecs.png_decode(data)
    except Exception as err:  # the codec's own errors: any damage of the bytes
        raise bad(f"not a PNG ({printable(str(err))[:80]})") from None
    if ids.ndim == 3 and ids.shape[2] == 1:
        ids = ids[:, :, 0]
    if ids.ndim != 2 or ids.dtype not in (np.uint8, np.uint16):
        raise bad(f"a {ids.dtype} image of shape {ids.shape}", "one channel of object ids")
    if ids.shape != (video.height, video.width):
        raise bad(f"{ids.shape[0]} x {ids.shape[1]} pixels",
                  f"meta's {video.height} x {video.width}")
    unknown = np.setdiff1d(np.unique(ids), np.concatenate([[0], video.tubes]))
    if unknown.size:
        raise bad(f"holds object id {int(unknown[0])}, not an object of the video")
    return ids


def _chunk_payload(frames: list[tuple[int, np.ndarray, BitMasks]]
                   ) -> tuple[np.ndarray, list[tuple]]:
    """One chunk's stored bytes (the store's encoding) and its mask rows."""
    rows, words, offset = [], [], 0
    for frame, tubes, masks in frames:
        if not len(tubes):
            continue
        w, offsets = encoded_words(masks)
        words.append(w)
        for i, tube in enumerate(tubes.tolist()):
            rows.append((frame, tube, *masks.boxes[i].tolist(), offset + int(offsets[i])))
        offset += len(w)
    data = np.concatenate(words) if words else np.zeros(0, np.uint64)
    return pack_sparse(data), rows


def _gt_frame(ids: np.ndarray, video: Video) -> tuple[np.ndarray, BitMasks]:
    """The tubes with pixels in a frame and their word masks."""
    present = np.intersect1d(np.unique(ids), video.tubes)
    lookup = np.zeros(int(ids.max()) + 1, np.int64)
    lookup[present] = np.arange(1, len(present) + 1)
    return present.astype(np.int64), BitMasks.from_labels(lookup[ids], len(present))


class _Output:
    """A store being written: files hashed as they go, the output removed on failure."""

    def __init__(self, url: str, storage_options: StorageOptions | None) -> None:
        self.url, self.fs_path = url, filesystem(url, storage_options)
        fs, path = self.fs_path
        if fs.exists(path) and (not fs.isdir(path) or fs.ls(path)):
            raise StoreError(f"{url}: exists already (choose a new output)")
        self.files: dict[str, dict] = {}

    def put(self, rel: str, data: bytes) -> None:
        fs, path = self.fs_path
        self.files[rel] = put_file(fs, join(path, rel), data, join(self.url, rel))

    def table(self, rel: str, table: pa.Table) -> None:
        self.put(rel, parquet_bytes(table))

    def chunk(self, rel: str, data: np.ndarray) -> None:
        for key, blob in mask_array_files(data).items():
            self.put(f"{rel}/{key}", blob)

    def finish(self, manifest: dict) -> None:
        manifest["files"] = self.files
        fs, path = self.fs_path
        put_file(fs, join(path, MANIFEST), json.dumps(manifest, indent=1).encode(),
                 join(self.url, MANIFEST))

    def remove(self) -> None:
        fs, path = self.fs_path
        if fs.exists(path):
            fs.rm(path, recursive=True)


def _write_chunks(out: _Output, vid: str, frames: int, per_chunk: int,
                  chunk_frames: Iterator[list[tuple[int, np.ndarray, BitMasks]]]) -> int:
    """Each chunk's words and the video's mask rows; returns the chunk count."""
    rows: list[tuple] = []
    n = 0
    for n, chunk in enumerate(chunk_frames):
        data, chunk_rows = _chunk_payload(chunk)
        out.chunk(f"videos/{vid}/chunk-{n:05d}", data)
        rows += [(*r[:6], n, r[6]) for r in chunk_rows]
    cols = list(zip(*rows, strict=True)) if rows else [[]] * 8
    out.table(f"videos/{vid}/masks.parquet",
              pa.Table.from_arrays([pa.array(c, t.type) for c, t in zip(cols, MASK_SCHEMA,
                                                                         strict=True)],
                                   schema=MASK_SCHEMA))
    return -(-frames // per_chunk)


def _gt_chunks(fs: Any, root: str, data_dir: str, video: Video, per_chunk: int
               ) -> Iterator[list[tuple[int, np.ndarray, BitMasks]]]:
    folder = join(root, data_source(video.video_id), "masks", video.video_id)
    for first in range(0, video.frames, per_chunk):
        chunk = []
        for f in range(first, min(first + per_chunk, video.frames)):
            name = f"{f:04d}.png"
            ids = _frame_ids(fs, join(folder, name),
                             join(data_dir, data_source(video.video_id), "masks", video.video_id,
                                  name), video, f)
            chunk.append((f, *_gt_frame(ids, video)))
        yield chunk


def ingest_pvsg_gt(annotation: str, data_dir: str, out: str, split: str | None = None,
                   frames_per_chunk: int = FRAMES_PER_CHUNK,
                   storage_options: StorageOptions | None = None,
                   limits: ArchiveLimits = DEFAULT_LIMITS) -> dict:
    """pvsg.json and its frame PNGs → a tube store at ``out``; returns its manifest.
    One chunk of frames is in memory at a time."""
    anno = read_annotation(annotation, split, storage_options, limits)
    target = _Output(out, storage_options)
    fs, root = filesystem(data_dir, storage_options)
    try:
        videos = {}
        for video in anno.videos:
            vid = video.video_id
            target.table(f"videos/{vid}/tubes.parquet", pa.table(
                {"tube": video.tubes, "category": video.categories}))
            target.table(f"videos/{vid}/relations.parquet", pa.table(
                dict(zip(("relation", "subject", "object", "predicate", "start", "end"),
                         video.relations.T, strict=True))))
            chunks = _write_chunks(target, vid, video.frames, frames_per_chunk,
                                   _gt_chunks(fs, root, data_dir, video, frames_per_chunk))
            videos[vid] = {"height": video.height, "width": video.width,
                           "frames": video.frames, "chunks": chunks}
        manifest = {"format": TUBE_FORMAT, "version": TUBE_VERSION, "kind": "gt",
                    "frames_per_chunk": frames_per_chunk, "classes": anno.classes,
                    "predicates": anno.predicates, "videos": videos}
        target.finish(manifest)
    except BaseException:
        target.remove()
        raise
    return manifest


# --------------------------------------------------------------------------- results


def _mask_lines(text: str, url: str, vid: str, info: dict, n_classes: int,
                limits: ArchiveLimits) -> list[tuple[int, int, int, np.ndarray]]:
    """masks.txt's lines checked: (frame from 0, track, class, the RLE's run lengths). A
    plain file is parsed in one compiled pass (``sgdask.io.codecs.masks_txt``); anything
    else, or a plain file that fails a check, line by line, which names what is wrong."""
    plain = plain_lines(text.encode("ascii"))
    if plain is not None and _plain_ok(plain, info, n_classes, limits):
        return [(f - 1, t, c, plain.runs[a:b]) for (f, t, c, _, _), a, b in
                zip(plain.fields.tolist(), plain.offsets[:-1].tolist(),
                    plain.offsets[1:].tolist(), strict=True)]
    out, seen = [], set()
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6 or not all(_INT.fullmatch(x) for x in fields[:5]):
            raise VideoInputError(url, "not 'frame track class height width RLE'",
                                  video=vid, field=f"line {number}")
        frame, tid, cid, h, w = (int(x) for x in fields[:5])
        field = f"line {number}"
        if not 1 <= frame <= info["frames"]:
            raise VideoInputError(url, f"frame {frame} outside the video", video=vid,
                                  field=field, expected=f"1..{info['frames']}")
        if (h, w) != (info["height"], info["width"]):
            raise VideoInputError(url, f"a {h} x {w} mask", video=vid, frame=frame - 1,
                                  field=field,
                                  expected=f"the video's {info['height']} x {info['width']}")
        if cid >= n_classes:
            raise VideoInputError(url, f"class {cid} outside the vocabulary", video=vid,
                                  frame=frame - 1, field=field,
                                  expected=f"0..{n_classes - 1}")
        runs, problem = checked_runs(fields[5], h, w)
        if problem:
            raise VideoInputError(url, f"RLE {problem}", video=vid, frame=frame - 1, field=field)
        if (frame, tid) in seen:
            raise VideoInputError(url, f"track {tid} has two masks in one frame", video=vid,
                                  frame=frame - 1, field=field)
        seen.add((frame, tid))
        out.append((frame - 1, tid, cid, runs))
    if len({t for _, t, _, _ in out}) > limits.max_instances_per_image:
        raise VideoInputError(url, "too many tracks", video=vid,
                              expected=limit_hint(limits, "max_instances_per_image"))
    return out


def _plain_ok(plain: PlainLines, info: dict, n_classes: int, limits: ArchiveLimits) -> bool:
    """Whether a plain file passes every check of ``_mask_lines``' line by line reading."""
    frame, track, cid, h, w = plain.fields.T
    if len(frame) and not ((frame >= 1).all() and (frame <= info["frames"]).all()
                           and (h == info["height"]).all() and (w == info["width"]).all()
                           and (cid < n_classes).all()):
        return False
    keys = frame * (int(track.max(initial=0)) + 1) + track
    return len(np.unique(keys)) == len(keys) and \
        len(np.unique(track)) <= limits.max_instances_per_image


def _majority(lines: list[tuple[int, int, int, np.ndarray]]) -> dict[int, int]:
    """Each track's class as OpenPVSG's ``get_pred_mask_tubes_one_video`` picks it: the most
    frequent of its lines' classes, ties to the one seen first."""
    counts: dict[int, Counter] = {}
    for _, tid, cid, _ in lines:
        counts.setdefault(tid, Counter())[cid] += 1
    return {tid: c.most_common(1)[0][0] for tid, c in sorted(counts.items())}


def _pred_chunks(lines: list[tuple[int, int, int, np.ndarray]], info: dict, per_chunk: int
                 ) -> Iterator[list[tuple[int, np.ndarray, BitMasks]]]:
    by_chunk: dict[int, list] = {}
    for line in lines:
        by_chunk.setdefault(line[0] // per_chunk, []).append(line)
    h, w = info["height"], info["width"]
    for c in range(-(-info["frames"] // per_chunk)):
        frames = []
        mine = sorted(by_chunk.get(c, []), key=lambda x: (x[0], x[1]))
        for f in range(c * per_chunk, min((c + 1) * per_chunk, info["frames"])):
            here = [x for x in mine if x[0] == f]
            tubes = np.asarray([x[1] for x in here], np.int64)
            # empty masks kept: OpenPVSG compares them (IoU 0) and counts the track present
            frames.append((f, tubes, _frame_masks([x[3] for x in here], h, w)))
        yield frames


def _frame_masks(runs: list[np.ndarray], h: int, w: int) -> BitMasks:
    """Word masks of a frame's tracks from their checked RLE runs, decoded straight into
    word rows."""
    if not runs:
        return BitMasks.empty((h, w))
    offsets = np.cumsum([0] + [len(r) for r in runs])
    return BitMasks.from_rows(run_rows(np.concatenate(runs), offsets, h, w), w)


def _ranked_relations(doc: Any, url: str, vid: str, info: dict, n_predicates: int,
                      limits: ArchiveLimits) -> tuple[dict, list[list[int]]]:
    """relations.json checked: its relations by descending score (ties keep file order), one
    row per span, and the pair ranking."""
    if not isinstance(doc, dict) or not isinstance(doc.get("relations"), list) or \
            not isinstance(doc.get("pairs", []), list):
        raise VideoInputError(url, "not {relations: [...], pairs: [...]}", video=vid)
    rels, pairs = doc["relations"], doc.get("pairs", [])
    if len(rels) > limits.max_triplets_per_image or len(pairs) > limits.max_triplets_per_image:
        raise VideoInputError(url, "too many relations or pairs", video=vid,
                              expected=limit_hint(limits, "max_triplets_per_image"))
    for j, p in enumerate(pairs):
        if not (isinstance(p, list) and len(p) == 2 and all(map(_int, p))):
            raise VideoInputError(url, "not [subject, object]", video=vid, field=f"pairs[{j}]")
    checked = []
    for j, r in enumerate(rels):
        field = f"relations[{j}]"
        if not isinstance(r, dict) or not all(_int(r.get(k)) for k in ("subject", "object",
                                                                       "relation")):
            raise VideoInputError(url, "not {subject, object, relation, score, span}",
                                  video=vid, field=field)
        if not 0 <= r["relation"] < n_predicates:
            raise VideoInputError(url, f"relation {r['relation']} outside the vocabulary",
                                  video=vid, field=field, expected=f"0..{n_predicates - 1}")
        score = r.get("score")
        if not isinstance(score, (int, float)) or isinstance(score, bool) or \
                not math.isfinite(score):
            raise VideoInputError(url, "score is not a finite number", video=vid, field=field)
        spans = r.get("span")
        if not isinstance(spans, list) or not all(
                isinstance(s, list) and len(s) == 2 and all(map(_int, s))
                and 0 <= s[0] <= s[1] < info["frames"] for s in spans):
            raise VideoInputError(url, "span is not [[start, end], ...] inside the video",
                                  video=vid, field=field,
                                  expected=f"0 <= start <= end < {info['frames']}")
        checked.append((j, r))
    order = sorted(checked, key=lambda x: -float(x[1]["score"]))
    cols: dict[str, list] = {k: [] for k in ("rank", "subject", "object", "predicate",
                                             "score", "start", "end")}
    for rank, (_, r) in enumerate(order):
        for a, b in r["span"] or [[0, -1]]:
            for k, v in (("rank", rank), ("subject", r["subject"]), ("object", r["object"]),
                         ("predicate", r["relation"]), ("score", float(r["score"])),
                         ("start", a), ("end", b)):
                cols[k].append(v)
    return cols, pairs


def ingest_pvsg_results(results: str, gt: str, out: str,
                        frames_per_chunk: int = FRAMES_PER_CHUNK,
                        storage_options: StorageOptions | None = None,
                        limits: ArchiveLimits = DEFAULT_LIMITS) -> dict:
    """A model's results directory (per GT video ``masks.txt`` and ``relations.json``) → a
    tube store at ``out`` beside the GT store ``gt``; returns its manifest. A video's mask
    lines are kept as RLE text and decoded one chunk of frames at a time."""
    gt_manifest = TubeStore(gt, storage_options).manifest
    target = _Output(out, storage_options)
    n_classes, n_predicates = len(gt_manifest["classes"]), len(gt_manifest["predicates"])
    try:
        videos = {}
        for vid, info in gt_manifest["videos"].items():
            found = read_video_results(results, vid, info, n_classes, n_predicates,
                                       storage_options, limits)
            target.table(f"videos/{vid}/tubes.parquet", pa.table(
                {"tube": np.asarray(list(found.classes), np.int64),
                 "category": np.asarray(list(found.classes.values()), np.int64)}))
            target.table(f"videos/{vid}/relations.parquet", pa.table(
                {k: pa.array(v, pa.float64() if k == "score" else pa.int64())
                 for k, v in found.relations.items()}))
            target.table(f"videos/{vid}/pairs.parquet", pa.table(
                {"subject": pa.array([p[0] for p in found.pairs], pa.int64()),
                 "object": pa.array([p[1] for p in found.pairs], pa.int64())}))
            _write_chunks(target, vid, info["frames"], frames_per_chunk,
                          _pred_chunks(found.lines, info, frames_per_chunk))
            videos[vid] = dict(info, chunks=-(-info["frames"] // frames_per_chunk))
        manifest = {"format": TUBE_FORMAT, "version": TUBE_VERSION, "kind": "results",
                    "frames_per_chunk": frames_per_chunk, "classes": gt_manifest["classes"],
                    "predicates": gt_manifest["predicates"], "videos": videos}
        target.finish(manifest)
    except BaseException:
        target.remove()
        raise
    return manifest


# --------------------------------------------------------------------------- reading


class TubeStore:
    """A tube store, read a table or a chunk of frames at a time; every file's bytes are
    checked against the manifest's hash."""

    def __init__(self, url: str, storage_options: StorageOptions | None = None) -> None:
        self.url = url
        self.fs, self.path = filesystem(url, storage_options)
        try:
            raw = self.fs.cat_file(join(self.path, MANIFEST))
        except FileNotFoundError:
            raise StoreError(f"{url}: not a PVSG tube store (no {MANIFEST}; an interrupted "
                             "conversion leaves none)") from None
        manifest = json.loads(raw)
        if not isinstance(manifest, dict) or manifest.get("format") != TUBE_FORMAT or \
                manifest.get("version") != TUBE_VERSION:
            raise StoreError(f"{url}: not a version {TUBE_VERSION} PVSG tube store")
        self.manifest = manifest

    def _bytes(self, rel: str) -> bytes:
        entry = self.manifest["files"].get(rel)
        if entry is None:
            raise StoreError(f"{join(self.url, rel)}: not in the store's manifest")
        data = self.fs.cat_file(join(self.path, rel))
        if file_entry(data) != entry:
            raise StoreError(f"{join(self.url, rel)}: corrupt (size or SHA-256 differ from "
                             "the manifest)")
        return data

    def table(self, video: str, name: str) -> pa.Table:
        """A video's ``tubes``, ``relations``, ``pairs`` or ``masks`` table."""
        return parquet_table(self._bytes(f"videos/{video}/{name}.parquet"))

    def _chunk_words(self, video: str, chunk: int) -> np.ndarray:
        """A chunk's row-XOR-ed words: its files checked, zarr decoding from memory (each
        chunk's CRC-32C verified), the sparse layout checked before decoding."""
        rel = f"videos/{video}/chunk-{chunk:05d}"
        zarr = _zarr()
        proto = zarr.core.buffer.default_buffer_prototype().buffer
        contents = {key[len(rel) + 1:]: proto.from_bytes(self._bytes(key))
                    for key in self.manifest["files"] if key.startswith(f"{rel}/")}
        try:
            data = zarr.open_array(zarr.storage.MemoryStore(contents, read_only=True),
                                   mode="r", zarr_format=3)[:]
        except DECODE_ERRORS as err:
            raise StoreError(f"{join(self.url, rel)}: corrupt ({decode_detail(err)})") from None
        problem = sparse_problem(data)
        if problem:
            raise StoreError(f"{join(self.url, rel)}: corrupt ({problem})")
        return unpack_sparse(data)

    def frame_chunks(self, video: str) -> Iterator[FrameChunk]:
        """The video's masks, one chunk of frames at a time, in frame order."""
        info = self.manifest["videos"][video]
        per = self.manifest["frames_per_chunk"]
        rows = self.table(video, "masks")
        cols = {name: rows.column(name).to_numpy() for name in rows.column_names}
        for c in range(info["chunks"]):
            words = self._chunk_words(video, c)
            pick = np.flatnonzero(cols["chunk"] == c)
            boxes = np.stack([cols[k][pick] for k in ("y0", "x0", "y1", "x1")], 1) \
                .astype(np.int64).reshape(-1, 4)
            starts = cols["offset"][pick].astype(np.int64)
            ends = starts + word_layout(boxes)[1:] - word_layout(boxes)[:-1]
            if len(pick) and (ends.max() > len(words) or starts.min() < 0):
                raise StoreError(f"{join(self.url, f'videos/{video}/masks.parquet')}: corrupt "
                                 "(offsets outside the chunk)")
            xor_rows(boxes, starts, words, True)
            first = c * per
            tubes, masks = [], []
            for f in range(first, min(first + per, info["frames"])):
                here = np.flatnonzero(cols["frame"][pick] == f)
                tubes.append(cols["tube"][pick][here].astype(np.int64))
                masks.append(BitMasks((info["height"], info["width"]), boxes[here],
                                      starts[here], words))
            yield FrameChunk(first, tubes, masks)


# --------------------------------------------------------------------------- one video's results


@dataclass(frozen=True)
class VideoResults:
    """One video of a model's results directory, read and checked (``masks.txt`` kept as its
    RLE lines, decoded a chunk of frames at a time by ``frame_chunks``): each track's
    majority class, the ranked relations (one row per span, as ``relations.parquet``) and
    the pair proposals' ranking."""

    video: str
    info: dict
    lines: list[tuple[int, int, int, np.ndarray]]
    classes: dict[int, int]
    relations: dict[str, list]
    pairs: list[list[int]]

    def frame_chunks(self, per_chunk: int) -> Iterator[FrameChunk]:
        """The tracks' masks, ``per_chunk`` frames at a time (the GT store's chunking)."""
        for frames in _pred_chunks(self.lines, self.info, per_chunk):
            yield FrameChunk(frames[0][0], [t for _, t, _ in frames], [m for _, _, m in frames])


def results_files(results: str, video: str) -> tuple[str, str]:
    """Where a video's ``masks.txt`` and ``relations.json`` are in a results directory."""
    return join(results, video, MASKS_FILE), join(results, video, RESULTS_FILE)


def read_video_results(results: str, video: str, info: dict, n_classes: int,
                       n_predicates: int, storage_options: StorageOptions | None = None,
                       limits: ArchiveLimits = DEFAULT_LIMITS) -> VideoResults:
    """One video's results, checked against the GT video ``info`` (frames, height, width):
    bad input is one ``VideoInputError`` naming the file, the video and the field."""
    fs, root = filesystem(results, storage_options)
    masks_url, rel_url = results_files(results, video)
    try:
        text = fs.cat_file(join(root, video, MASKS_FILE))
        rel_bytes = fs.cat_file(join(root, video, RESULTS_FILE))
    except FileNotFoundError:
        raise VideoInputError(join(results, video), "missing", video=video,
                              expected=f"{MASKS_FILE} and {RESULTS_FILE}") from None
    if len(text) > limits.max_json_size:
        raise VideoInputError(masks_url, f"is {len(text)} bytes", video=video,
                              expected=limit_hint(limits, "max_json_size"))
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError:
        raise VideoInputError(masks_url, "not ASCII text", video=video) from None
    lines = _mask_lines(decoded, masks_url, video, info, n_classes, limits)
    cols, pairs = _ranked_relations(load_json(rel_bytes, rel_url, limits), rel_url, video,
                                    info, n_predicates, limits)
    return VideoResults(video, info, lines, _majority(lines), cols, pairs)
