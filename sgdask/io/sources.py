"""Where an evaluation task finds a submission's predictions: what every input shares
(``SubmissionInput``, ``PredSlice``, ``Loaded``) and a converted store (``StoreInput``);
the submission file itself (an SGBench ZIP or JSON: ``sgdask.formats.sgbench.FileInput``)
or a model's result file (``sgdask.formats.results.ResultInput``) is opened by its format,
decoded inside the task that scores it.

On the client an ``*Input`` checks the submission once (tables or ``triplets.json``, never
the masks) and cuts it into ``*Slice``s, one per evaluation partition; a slice is small
and picklable, and ``read`` on a worker gives the partition's ``ImagePred``s (``Loaded``).
A registered format (``sgdask.formats``) brings its own input and slice with the same
methods (``SubmissionInput``, ``PredSlice``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.types import ImagePred

if TYPE_CHECKING:
    from sgdask.formats.ingest import Decoded

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
        from sgdask.store.partition import load_predictions  # pyarrow, zarr: when read
        from sgdask.store.store import StoreReader

        reader = StoreReader(self.url, options, manifest=self.manifest)
        return Loaded(load_predictions(reader, list(self.parts), list(self.ids)))


class StoreInput:
    """A converted submission store."""

    keeps = False

    def __init__(self, url: str, options: StorageOptions | None) -> None:
        from sgdask.store.store import StoreReader  # pyarrow, zarr: when opened

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


