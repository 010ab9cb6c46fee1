"""Action Genome: the annotation files as its toolkit ships them, and the per-video outputs
of STTran-family models.

GT: ``object_bbox_and_relationship.pkl`` (frame key ``VIDEO.mp4/FRAME.png`` -> list of
object dicts: ``class``, ``bbox`` as x, y, w, h, ``visible``, the three relation lists,
``metadata.set``), ``person_bbox.pkl`` (frame key -> ``bbox``, an (n, 4) x1 y1 x2 y2 array)
and, optionally, the toolkit's ``frame_list.txt`` (every frame key must be in it). Both
pickles go through the bounded unpickler (``sgdask.io.unpickle``: nothing in a file is run).
``gt_videos`` applies STTran's loader (``dataloader/action_genome.py``, ``mode="test"``,
``filter_nonperson_box_frame=True``) to the two dicts: frames of the split with a visible
object, in ``person_bbox.pkl``'s key order, grouped by video; frames without a person box
dropped; videos left with fewer than 3 frames dropped. For SGCls and SGDet STTran reads
``object_bbox_and_relationship_filtersmall.pkl`` instead: pass that file.

Predictions: per video the arrays an STTran-family model returns (``schemas`` in
``docs/video.md``): a pickle of ``{video: {field: array}}``, or a directory of
``VIDEO.npz`` files (``numpy.savez``), read without pickles through ``SafeZip``.
Every problem is one ``InputError`` naming file, video or frame, and field.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from sgdask.errors import InputError, SgdaskError, checked_choice
from sgdask.io.archive import ArchiveLimits, SafeZip, limit_hint, printable, read_capped
from sgdask.io.fs import StorageOptions, filesystem, join, unreadable
from sgdask.io.unpickle import TORCH_HINT, OverLimit, Refused, restricted_loads
from sgdask.types_ag import (
    ATTENTION,
    CONTACTING,
    OBJECT_CLASSES,
    OFFSETS,
    PERSON,
    SETTINGS,
    SPATIAL,
    AGFrame,
    AGVideo,
    AGVideoPred,
)

DEFAULT_LIMITS = ArchiveLimits()
#: fewest frames a video keeps after the filters (STTran: ``len(video) > 2``)
MIN_FRAMES = 3
#: what a prediction field holds: (dtype kinds, columns or None for one dimension)
PRED_FIELDS = {
    "boxes": ("iuf", 5), "labels": ("iu", None), "scores": ("f", None),
    "pred_labels": ("iu", None), "pred_scores": ("f", None), "pair_idx": ("iu", 2),
    "im_idx": ("iuf", None), "attention_distribution": ("f", len(ATTENTION)),
    "spatial_distribution": ("f", len(SPATIAL)),
    "contacting_distribution": ("f", len(CONTACTING)),
}
ATTENTION_FORMS = ("probabilities", "logits")


# --------------------------------------------------------------------------- files


def loaded_pickle(url: str, limits: ArchiveLimits = DEFAULT_LIMITS,
                  storage_options: StorageOptions | None = None) -> Any:
    """The object pickled in ``url``, through the bounded unpickler, under ``limits``."""
    fs, path = filesystem(url, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data = read_capped(f, limits.max_pickle_size)
    except FileNotFoundError:
        raise InputError(url, "file not found") from None
    except ValueError:
        raise InputError(url, "too large", expected=limit_hint(limits, "max_pickle_size")) \
            from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from None
    if data.startswith(b"PK\x03\x04"):
        raise InputError(url, f"is a ZIP archive, as torch.save writes: {TORCH_HINT}")
    try:
        return restricted_loads(data, limits.max_pickle_objects, limits.max_pickle_depth)
    except OverLimit as err:
        raise InputError(url, str(err), expected=limit_hint(limits, err.limit)) from None
    except Refused as err:
        raise InputError(url, str(err)) from None
    except Exception as err:  # the unpickler raises many types for truncated or corrupt data
        raise InputError(url, f"not a readable pickle ({type(err).__name__}: "
                         f"{printable(str(err))})") from None


def frame_names(url: str, storage_options: StorageOptions | None = None,
                limits: ArchiveLimits = DEFAULT_LIMITS) -> set[str]:
    """The frame keys of the toolkit's ``frame_list.txt``, one per line."""
    fs, path = filesystem(url, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data = read_capped(f, limits.max_json_size)
    except FileNotFoundError:
        raise InputError(url, "file not found") from None
    except ValueError:
        raise InputError(url, "too large", expected=limit_hint(limits, "max_json_size")) \
            from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(url, "not UTF-8 text", expected="one frame key per line") from None
    return {line.strip() for line in text.splitlines() if line.strip()}


def read_gt(objects_url: str, persons_url: str, frame_list_url: str | None = None, *,
            split: str = "test", limits: ArchiveLimits | None = None,
            storage_options: StorageOptions | None = None) -> list[AGVideo]:
    """The GT videos of ``split`` in the two annotation pickles (see ``gt_videos``); with
    ``frame_list_url``, every frame key of ``person_bbox.pkl`` must be in that list."""
    limits = limits or DEFAULT_LIMITS
    objects = loaded_pickle(objects_url, limits, storage_options)
    persons = loaded_pickle(persons_url, limits, storage_options)
    if frame_list_url is not None and isinstance(persons, dict):
        listed = frame_names(frame_list_url, storage_options, limits)
        missing = next((key for key in persons if key not in listed), None)
        if missing is not None:
            raise InputError(persons_url, f"frame {_shown(missing)} is not in the frame list "
                             f"{frame_list_url}", expected="the frame list the annotations "
                             "came with")
    return gt_videos(objects, persons, split=split, objects_file=objects_url,
                     persons_file=persons_url)


# --------------------------------------------------------------------------- GT


def gt_videos(objects: Any, persons: Any, *, split: str = "test",
              objects_file: str = "object_bbox_and_relationship.pkl",
              persons_file: str = "person_bbox.pkl") -> list[AGVideo]:
    """STTran's loader on the two annotation dicts: the frames of ``split`` that have a
    visible object, in ``persons``' key order, grouped by video in order of first frame;
    frames without a person box dropped, videos with fewer than ``MIN_FRAMES`` left
    dropped; each frame as ``evaluate_scene_graph`` builds its GT (``AGFrame``)."""
    for value, file in ((objects, objects_file), (persons, persons_file)):
        if not isinstance(value, dict):
            raise InputError(file, f"holds a {type(value).__name__}",
                             expected="a dict of frame keys VIDEO/FRAME")
    grouped: dict[str, list[str]] = {}
    for key in persons:
        if not isinstance(key, str) or key.count("/") != 1:
            raise InputError(persons_file, f"key {_shown(key)}", expected="VIDEO/FRAME")
        entries = objects.get(key)
        if not isinstance(entries, list) or not entries:
            raise InputError(objects_file, "missing or not a non-empty list",
                             field=f"frame {_shown(key)}", expected="the frame's objects")
        if _split_of(entries[0], objects_file, key) != split:
            continue
        if any([_visible(entry, objects_file, key, i) for i, entry in enumerate(entries)]):
            grouped.setdefault(key.split("/")[0], []).append(key)
    videos = []
    for name, keys in grouped.items():
        kept = [key for key in keys if len(_person_box(persons[key], persons_file, key))]
        if len(kept) >= MIN_FRAMES:
            videos.append(AGVideo(name, tuple(
                _frame(key, objects[key], persons[key], objects_file, persons_file)
                for key in kept)))
    return videos


def _shown(value: Any) -> str:
    text = printable(str(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _split_of(entry: Any, file: str, key: str) -> str:
    metadata = entry.get("metadata") if isinstance(entry, dict) else None
    split = metadata.get("set") if isinstance(metadata, dict) else None
    if not isinstance(split, str):
        raise InputError(file, "missing or not text", field=f"frame {_shown(key)}: "
                         "[0].metadata.set", expected="'train' or 'test'")
    return split


def _visible(entry: Any, file: str, key: str, i: int) -> bool:
    visible = entry.get("visible") if isinstance(entry, dict) else None
    if not isinstance(visible, bool | np.bool_):
        raise InputError(file, "missing or not a boolean",
                         field=f"frame {_shown(key)}: [{i}].visible")
    return bool(visible)


def _person_box(entry: Any, file: str, key: str) -> np.ndarray:
    """The frame's person box: an (n, 4) array, n 0 or 1."""
    box = entry.get("bbox") if isinstance(entry, dict) else None
    if not isinstance(box, np.ndarray) or box.ndim != 2 or box.shape[1] != 4 \
            or box.shape[0] > 1 or box.dtype.kind not in "iuf":
        shape = getattr(box, "shape", type(box).__name__)
        raise InputError(file, f"{_shown(shape)}", field=f"frame {_shown(key)}: bbox",
                         expected="an array of shape (1, 4) x1 y1 x2 y2, or (0, 4) without "
                         "a person")
    if not np.isfinite(box).all():
        raise InputError(file, "not finite", field=f"frame {_shown(key)}: bbox")
    return box


def _frame(key: str, entries: list, person: dict, objects_file: str, persons_file: str
           ) -> AGFrame:
    """One frame's GT as ``evaluate_scene_graph`` builds it."""
    boxes = [_person_box(person, persons_file, key)[0].astype(float)]
    classes = [PERSON]
    relations: list[tuple[int, int, int]] = []
    for i, entry in enumerate(entries):
        if not entry["visible"]:
            continue
        where = f"frame {_shown(key)}: [{i}]."
        m = len(boxes)
        boxes.append(_object_box(entry.get("bbox"), objects_file, where + "bbox"))
        name = entry.get("class")
        if name not in OBJECT_CLASSES[1:]:
            raise InputError(objects_file, f"{_shown(repr(name))} is not an Action Genome object "
                             "class", field=where + "class")
        classes.append(OBJECT_CLASSES.index(name))
        attention = _names(entry, "attention_relationship", ATTENTION, objects_file, where)
        if len(attention) != 1:
            raise InputError(objects_file, f"{len(attention)} relations",
                             field=where + "attention_relationship", expected="exactly one")
        relations.append((0, m, OFFSETS[0] + attention[0]))
        relations += [(m, 0, OFFSETS[1] + s) for s in
                      _names(entry, "spatial_relationship", SPATIAL, objects_file, where)]
        relations += [(0, m, OFFSETS[2] + c) for c in
                      _names(entry, "contacting_relationship", CONTACTING, objects_file, where)]
    return AGFrame(key, np.array(boxes, dtype=np.float64), np.array(classes, dtype=np.int64),
                   np.array(relations, dtype=np.int64).reshape(-1, 3))


def _object_box(value: Any, file: str, field: str) -> np.ndarray:
    """x, y, w, h -> x1, y1, x2, y2, as the loader converts it."""
    try:
        box = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        box = None
    if box is None or box.shape != (4,) or not np.isfinite(box).all():
        raise InputError(file, f"{_shown(value)}", field=field,
                         expected="4 finite numbers x, y, w, h for a visible object")
    return np.array([box[0], box[1], box[0] + box[2], box[1] + box[3]])


def _names(entry: dict, field: str, vocabulary: tuple[str, ...], file: str, where: str
           ) -> list[int]:
    values = entry.get(field)
    if not isinstance(values, list | tuple):
        raise InputError(file, "missing or not a list", field=where + field)
    bad = next((v for v in values if v not in vocabulary), None)
    if bad is not None:
        raise InputError(file, f"{_shown(repr(bad))} is not one of them", field=where + field,
                         expected=", ".join(vocabulary))
    return [vocabulary.index(v) for v in values]


# --------------------------------------------------------------------------- predictions


def read_predictions(url: str, videos: list[AGVideo], setting: str, *,
                     attention: str = "probabilities", limits: ArchiveLimits | None = None,
                     storage_options: StorageOptions | None = None
                     ) -> dict[str, AGVideoPred]:
    """One checked ``AGVideoPred`` per GT video, from a pickle of ``{video: {field: array}}``
    or a directory of ``VIDEO.npz``; ``attention="logits"`` applies STTran's softmax (its
    model returns logits; TEMPURA's returns probabilities)."""
    checked_choice("setting", setting, SETTINGS, "setting")
    checked_choice("attention", attention, ATTENTION_FORMS, "form of the attention scores")
    limits = limits or DEFAULT_LIMITS
    fs, path = filesystem(url, storage_options)
    if fs.isdir(path):
        names = {p.rsplit("/", 1)[-1].removesuffix(".npz")
                 for p in fs.ls(path, detail=False) if p.endswith(".npz")}
        arrays = {v.name: npz_fields(join(url, v.name + ".npz"), v.name, limits,
                                      storage_options) for v in videos if v.name in names}
        where = {v.name: join(url, v.name + ".npz") for v in videos}
    else:
        loaded = loaded_pickle(url, limits, storage_options)
        if not isinstance(loaded, dict):
            raise InputError(url, f"holds a {type(loaded).__name__}",
                             expected="a dict of video name -> dict of numpy arrays")
        arrays, names = loaded, set(loaded)
        where = {v.name: url for v in videos}
    missing = next((v.name for v in videos if v.name not in names), None)
    if missing is not None:
        raise InputError(url, "no prediction", field=f"video {_shown(missing)}",
                         expected="one per GT video; a video without pairs has empty arrays")
    extra = next((n for n in sorted(names) if n not in {v.name for v in videos}), None)
    if extra is not None:
        raise InputError(url, "not a GT video of the split", field=f"video {_shown(extra)}")
    return {v.name: video_prediction(arrays[v.name], v.name, len(v.frames), setting, attention,
                                     where[v.name], limits) for v in videos}


def npz_fields(file: str, video: str, limits: ArchiveLimits,
                storage_options: StorageOptions | None) -> dict[str, np.ndarray]:
    fs, path = filesystem(file, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data = read_capped(f, limits.max_total_size)
    except ValueError:
        raise InputError(file, "too large", expected=limit_hint(limits, "max_total_size")) \
            from None
    except OSError as err:
        raise SgdaskError(f"{file}: {unreadable(err)}") from None
    # the .npy decoding of result files (imported here: sgdask.formats, which imports this
    # module for the Action Genome format, is loaded through it)
    from sgdask.formats.results import npy_array, npz_member

    archive = SafeZip(io.BytesIO(data), file, dataclasses.replace(limits, max_ratio=math.inf))
    out = {}
    for name in PRED_FIELDS:
        if name + ".npy" in archive:
            def fail(what: str, expected: str | None = None, n: str = name) -> InputError:
                return InputError(file, what, field=f"video {_shown(video)}: {n}",
                                  expected=expected)
            header, raw = npz_member(archive, name, video, fail)
            out[name] = npy_array(raw if raw is not None else archive.read(
                name + ".npy", image=video, field=name), header, fail)
    return out


def video_prediction(fields: Any, video: str, n_frames: int, setting: str, attention: str,
                     file: str, limits: ArchiveLimits = DEFAULT_LIMITS) -> AGVideoPred:
    """One video's arrays, checked against its ``n_frames`` GT frames (and at most
    ``max_pairs_per_image`` pairs per frame) and decoded."""
    def fail(field: str, what: str, expected: str | None = None) -> InputError:
        return InputError(file, what, field=f"video {_shown(video)}: {field}",
                          expected=expected)

    if not isinstance(fields, Mapping):
        raise fail("", f"a {type(fields).__name__}", "a dict of numpy arrays")
    labels, scores = ("labels", "scores") if setting == "predcls" else ("pred_labels",
                                                                        "pred_scores")
    needed = ("boxes", labels, scores, "pair_idx", "im_idx", "attention_distribution",
              "spatial_distribution", "contacting_distribution")
    f = {name: _array(fields.get(name), name, fail) for name in needed}
    m, p = len(f["boxes"]), len(f["pair_idx"])
    for name in needed:
        rows = m if name in ("boxes", labels, scores) else p
        if len(f[name]) != rows:
            raise fail(name, f"{len(f[name])} rows", f"{rows}, one per "
                       f"{'box' if rows == m and name in ('boxes', labels, scores) else 'pair'}")
    for name in ("boxes", scores, "attention_distribution", "spatial_distribution",
                 "contacting_distribution"):
        bad = np.flatnonzero(~np.isfinite(f[name]).reshape(len(f[name]), -1).all(1))
        if len(bad):
            raise fail(f"{name}[{bad[0]}]", "not finite")
    pairs = f["pair_idx"].astype(np.int64)
    bad = np.flatnonzero(((pairs < 0) | (pairs >= m)).any(1))
    if len(bad):
        raise fail(f"pair_idx[{bad[0]}]", f"{pairs[bad[0]].tolist()} out of range",
                   f"indices of the video's {m} boxes")
    frames = f["im_idx"]
    bad = np.flatnonzero((frames != np.round(frames)) | (frames < 0)
                         | (frames >= n_frames))
    if len(bad):
        raise fail(f"im_idx[{bad[0]}]", f"{frames[bad[0]]} is not a frame of the video",
                   f"0 to {n_frames - 1}: the video's frames after the loader's filters")
    per_frame = np.bincount(frames.astype(np.int64), minlength=n_frames)
    if len(per_frame) and per_frame.max() > limits.max_pairs_per_image:
        busiest = int(per_frame.argmax())
        raise InputError(file, f"{per_frame[busiest]} pairs",
                         field=f"video {_shown(video)}: frame {busiest}: im_idx",
                         expected=limit_hint(limits, "max_pairs_per_image"))
    distribution = f["attention_distribution"]
    if attention == "logits":
        distribution = softmax(distribution)
    return AGVideoPred(
        boxes=f["boxes"][:, 1:].astype(np.float64), labels=f[labels].astype(np.int64),
        scores=f[scores], pairs=pairs, frames=frames.astype(np.int64),
        attention=distribution.astype(np.float64),
        spatial=f["spatial_distribution"].astype(np.float64),
        contacting=f["contacting_distribution"].astype(np.float64))


def _array(value: Any, name: str, fail: Any) -> np.ndarray:
    kinds, columns = PRED_FIELDS[name]
    if value is None:
        raise fail(name, "missing", "a numpy array")
    if not isinstance(value, np.ndarray):
        raise fail(name, f"a {type(value).__name__}", "a numpy array (.cpu().numpy())")
    if value.dtype.kind not in kinds:
        raise fail(name, f"dtype {value.dtype}", "floats" if kinds == "f" else "numbers")
    shape = (None,) if columns is None else (None, columns)
    if value.ndim != len(shape) or (columns is not None and value.shape[1] != columns):
        raise fail(name, f"shape {value.shape}",
                   "(n,)" if columns is None else f"(n, {columns})")
    return value


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over each row in the logits' own dtype, as ``nn.functional.softmax(x,
    dim=1)`` computes it (exp of the shifted logits over their sum; the last bit may differ
    from torch's vectorised exp)."""
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def setting_of(fields: Mapping[str, Any]) -> str:
    """The setting a video's arrays are read in, from the data: ``sgdet`` (whose fields
    SGCls shares: ``pred_labels`` and ``pred_scores``) when the model scored its own
    labels, else ``predcls`` (``labels`` and ``scores``; STTran's PredCls output copies
    ``labels`` into ``pred_labels`` but has no ``pred_scores``)."""
    return "sgdet" if isinstance(fields, Mapping) and "pred_scores" in fields else "predcls"


def frame_outputs(pred: AGVideoPred, n_frames: int) -> list[AGVideoPred]:
    """The video's output cut into its frames: per frame the boxes its pairs name (in
    box order, re-indexed), its pairs in order and their distributions, as a one-frame
    video (``frames`` all 0). Every number the evaluation reads of a frame is the same.
    The boxes of every frame are found in one ``unique`` over (frame, box) keys, and every
    array is gathered once in frame order: a frame's arrays are slices of those."""
    order = np.argsort(pred.frames, kind="stable")
    frames = pred.frames[order]
    cuts = np.searchsorted(frames, np.arange(n_frames + 1)).tolist()
    n_boxes = max(len(pred.boxes), 1)
    keys, inverse = np.unique((frames[:, None] * n_boxes + pred.pairs[order]).ravel(),
                              return_inverse=True)
    box_cuts = np.searchsorted(keys, np.arange(n_frames + 1) * n_boxes)
    local = inverse.reshape(-1, 2).astype(np.int64) - box_cuts[frames][:, None]
    used = keys % n_boxes
    boxes, labels, scores = pred.boxes[used], pred.labels[used], pred.scores[used]
    attention, spatial = pred.attention[order], pred.spatial[order]
    contacting, zeros = pred.contacting[order], np.zeros(len(order), np.int64)
    box_cuts = box_cuts.tolist()
    out = []
    for f in range(n_frames):
        a, b, c, d = cuts[f], cuts[f + 1], box_cuts[f], box_cuts[f + 1]
        out.append(AGVideoPred(boxes[c:d], labels[c:d], scores[c:d], local[a:b], zeros[a:b],
                               attention[a:b], spatial[a:b], contacting[a:b]))
    return out
