"""Where an evaluation task finds a submission's predictions: a converted store, the
submission file itself (an SGBench ZIP or JSON), or a model's result file or ``.npz``
directory (``evaluate --method``), decoded inside the task that scores it.

On the client an ``*Input`` checks the submission once (tables or ``triplets.json``, never
the masks) and cuts it into ``*Slice``s, one per evaluation partition; a slice is small
and picklable, and ``read`` on a worker gives the partition's ``ImagePred``s (``Loaded``).
A registered format (``sgdask.io.formats``) brings its own input and slice with the same
methods (``SubmissionInput``, ``PredSlice``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from sgdask.errors import StoreError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.partition import load_predictions
from sgdask.io.results import ResultEntry, ResultsMethod, ResultSource, loaded_pickle
from sgdask.io.sgbench import ClassCounts, SubmissionImage, SubmissionSource
from sgdask.io.store import StoreReader
from sgdask.io.validate import GTInfo, checked_submission
from sgdask.types import BitMasks, ImagePred

Digest = tuple[int, str | None]  # (a result's position, SHA-256 hex of its .npz file)


@dataclass(frozen=True)
class Loaded:
    """A partition's predictions as a task reads them; ``digests``: of the files read
    (a result file's content hash is completed from them); ``decoded``: the images of a
    submission file, for ``--keep-store`` to write as a store part."""

    preds: dict[str, ImagePred]
    digests: list[Digest] = field(default_factory=list)
    decoded: list[Decoded] = field(default_factory=list)


class PredSlice(Protocol):
    """A partition's predictions of one submission, small and picklable."""

    def read(self, options: StorageOptions | None) -> Loaded: ...


class SubmissionInput(Protocol):
    """A submission opened on the client: its ids, its slices, what its manifest says.
    ``keeps``: its decoded images can be kept as a store (``--keep-store``); ``finish``
    completes the manifest from the tasks' digests."""

    url: str
    manifest: dict[str, Any]
    keeps: bool

    def ids(self) -> list[str]: ...

    def slice(self, ids: list[str]) -> PredSlice: ...

    def finish(self, digests: list[Digest]) -> None: ...


def is_store(url: str, storage_options: StorageOptions | None = None) -> bool:
    """Whether ``url`` is a directory holding a store manifest."""
    fs, path = filesystem(url, storage_options)
    return fs.isdir(path) and fs.exists(join(path, "manifest.json"))


@dataclass(frozen=True)
class StoreSlice:
    """A partition's predictions in a submission store."""

    url: str
    parts: tuple[str, ...]
    ids: tuple[str, ...]
    manifest: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def read(self, options: StorageOptions | None) -> Loaded:
        if not self.ids:
            return Loaded({})
        reader = StoreReader(self.url, options, manifest=self.manifest)
        return Loaded(load_predictions(reader, list(self.parts), list(self.ids)))


@dataclass(frozen=True)
class Decoded:
    """One image of a submission file with its masks decoded (None: a box submission)."""

    image: SubmissionImage
    shape: tuple[int, int]
    masks: BitMasks | None

    def prediction(self) -> ImagePred:
        img = self.image
        return ImagePred(img.image_id, img.categories, img.graph, img.ng, img.boxes,
                         self.masks, img.scores)


def decoded_images(source: SubmissionSource, images: list[SubmissionImage],
                   sizes: dict[str, tuple[int, int]]) -> list[Decoded]:
    """The images with their TIFF layers decoded (each checked against its instance count
    and GT size first) into word masks."""
    out = []
    for img in images:
        if source.is_zip:
            masks = source.masks(img, sizes.get(img.image_id))
            out.append(Decoded(img, masks.shape, masks))
        else:
            out.append(Decoded(img, (0, 0), None))
    return out


@dataclass(frozen=True)
class FileSlice:
    """A partition's images of a submission file, decoded by the task that scores them."""

    url: str
    images: tuple[SubmissionImage, ...]
    sizes: tuple[tuple[str, tuple[int, int]], ...]
    limits: ArchiveLimits | None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(img.image_id for img in self.images)

    def decode(self, options: StorageOptions | None) -> list[Decoded]:
        if not self.images:
            return []
        source = SubmissionSource(self.url, options, self.limits)
        return decoded_images(source, list(self.images), dict(self.sizes))

    def read(self, options: StorageOptions | None) -> Loaded:
        decoded = self.decode(options)
        return Loaded({d.image.image_id: d.prediction() for d in decoded}, decoded=decoded)


class StoreInput:
    """A converted submission store."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None) -> None:
        self.reader = StoreReader(url, options, "submission")
        self.url, self.manifest = self.reader.url, self.reader.manifest

    def ids(self) -> list[str]:
        return sorted(self.reader.images()["image_id"].to_pylist())

    def slice(self, ids: list[str]) -> StoreSlice:
        lo, hi = (ids[0], ids[-1]) if ids else ("", "")
        parts = tuple(p["name"] for p in self.reader.parts
                      if ids and p["first_id"] <= hi and p["last_id"] >= lo)
        return StoreSlice(self.url, parts, tuple(ids), self.manifest)

    def finish(self, digests: list[Digest]) -> None:
        """Nothing to complete: the store's manifest has its content hash."""


class FileInput:
    """An SGBench submission file, checked like ``sgdask validate`` (TIFFs aside: tasks
    check each one as they decode it)."""

    keeps = True

    def __init__(self, url: str, options: StorageOptions | None, gt: GTInfo,
                 limits: ArchiveLimits | None) -> None:
        self.source = SubmissionSource(url, options, limits)
        self.url, self.limits, self.sizes = str(url), limits, gt.sizes
        check = checked_submission(self.source, gt)
        self.images = {img.image_id: img for img in check.images}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": check.has_ng,
            "instances": "masks" if self.source.is_zip else "boxes",
            "content_hash": self.source.content_hash()}

    def ids(self) -> list[str]:
        return sorted(self.images)

    def slice(self, ids: list[str]) -> FileSlice:
        return FileSlice(self.url, tuple(self.images[i] for i in ids),
                         tuple((i, self.sizes[i]) for i in ids if i in self.sizes), self.limits)

    def finish(self, digests: list[Digest]) -> None:
        """Nothing to complete: the file's content hash is known before the tasks run."""


def evaluated_order(gt: StoreReader, gt_info: GTInfo) -> list[str]:
    """The GT's test images with relations, in psg.json's ``data`` order (what model result
    files are paired with)."""
    name = gt.manifest.get("image_order")
    if not name:
        raise StoreError(f"{gt.url}: the GT store does not record psg.json's image order, "
                         "which result files are paired by (written by an older sgdask: "
                         "run sgdask ingest-gt again)")
    raw = gt.read_file(name)  # checked against the manifest's size and SHA-256
    try:
        ids = json.loads(raw)["image_ids"]
    except (ValueError, KeyError, TypeError) as err:
        raise StoreError(f"{gt.url}/{name}: unreadable ({type(err).__name__}: {err})") from None
    return [i for i in ids if i in gt_info.evaluated]


@dataclass(frozen=True)
class ResultSlice:
    """A partition's results of a model's result file, decoded and checked (against the GT
    image's size and the GT's classes) by the task that scores them."""

    url: str
    how: ResultsMethod
    entries: tuple[ResultEntry, ...]
    sizes: tuple[tuple[str, tuple[int, int]], ...]
    classes: ClassCounts
    limits: ArchiveLimits | None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(e.image_id for e in self.entries)

    def decode(self, options: StorageOptions | None
               ) -> tuple[dict[str, ImagePred], list[Digest]]:
        """The predictions, and the digests of the files read (for the content hash)."""
        if not self.entries:
            return {}, []
        source = ResultSource(self.url, self.how.method, options, self.limits,
                              self.how.instance_scores)
        sizes = dict(self.sizes)
        preds, digests = {}, []
        for entry in self.entries:
            img, digest = source.image_and_digest(entry, sizes[entry.image_id], self.classes)
            preds[entry.image_id] = img.prediction()
            digests.append((entry.position, digest))
        return preds, digests

    def read(self, options: StorageOptions | None) -> Loaded:
        return Loaded(*self.decode(options))


class ResultInput:
    """A model's result file or ``.npz`` directory, paired with the GT's test images as
    ``convert --method`` pairs them; its manifest is what that conversion would write, the
    content hash completed by ``finish`` from the digests the tasks return."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None, gt: StoreReader,
                 gt_info: GTInfo, how: ResultsMethod, limits: ArchiveLimits | None) -> None:
        self.source = ResultSource(url, how.method, options, limits, how.instance_scores)
        self.url, self.how, self.limits, self.gt_info = str(url), how, limits, gt_info
        self.entries = self.source.images(evaluated_order(gt, gt_info))
        self.by_id = {e.image_id: e for e in self.entries}
        self.manifest: dict[str, Any] = {
            "kind": "submission", "source": self.url, "has_ng": True, "instances": "masks",
            "content_hash": None, "method": how.method,
            "instance_scores": how.instance_scores}

    def ids(self) -> list[str]:
        return sorted(self.by_id)

    def slice(self, ids: list[str]) -> ResultSlice:
        return ResultSlice(self.url, self.how, tuple(self.by_id[i] for i in ids),
                           tuple((i, self.gt_info.sizes[i]) for i in ids),
                           self.gt_info.classes, self.limits)

    def finish(self, digests: list[Digest]) -> None:
        """Set the content hash (``convert --method``'s) from the tasks' digests; drop the
        parsed pickle this process holds."""
        known = dict(digests)
        self.manifest["content_hash"] = self.source.content_hash(
            self.entries, [known.get(e.position) for e in self.entries])
        loaded_pickle.cache_clear()
