"""What every format's conversion into a store shares: reading a source file's bytes
within its limits, parts cut like the GT's, submission images written as store parts
(``convert_images``, what a registered format's ``convert`` calls), and the stores kept
while a submission file is evaluated. Each format's own ingest or conversion lives in its
module (``psg.ingest_gt``, ``sgbench.convert_submission``, ...); they all validate everything
before the manifest is written, and any error removes the partial store.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from sgdask import __version__
from sgdask.errors import InputError, Option, SgdaskError
from sgdask.io.archive import ArchiveLimits, limit_hint
from sgdask.io.fs import (
    StorageOptions,
    file_digest,
    filesystem,
    unreadable,
)
from sgdask.store.store import (
    PartTables,
    StoreReader,
    StoreWriter,
    add_instance_rows,
    add_triplet_rows,
    part_name,
    write_part,
)
from sgdask.types import BitMasks, ImagePred

if TYPE_CHECKING:
    from sgdask.cluster import ClusterSpec
    from sgdask.formats.sgbench import SubmissionImage

DEFAULT_STORE_PARTITION = 64
# Box-only images are ~100 times smaller than mask images: larger parts keep a task's
# fixed cost (three Parquet reads per store, the fold) small against its kernels.
BOX_STORE_PARTITION = 1024


class _Imaged(Protocol):
    image_id: str


#: anything with an ``image_id`` (a submission's image, a result file's entry)
Item = TypeVar("Item", bound=_Imaged)
Progress = Callable[[int], None] | None


def map_tasks(func: Callable[..., Any], args: list[tuple], cluster: ClusterSpec,
              progress: Callable[[Any], None] | None = None) -> list[Any]:
    """``sgdask.cluster.map_tasks``, imported when a conversion runs: a process that only
    reads a format (a worker decoding its partition, ``sniff``) never imports Dask's
    client for it."""
    from sgdask.cluster import map_tasks as mapped

    return mapped(func, args, cluster, progress)


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def read_bytes(url: str, options: StorageOptions | None, what: str | Option,
               cap: tuple[ArchiveLimits, str] | None = None) -> bytes:
    """A file's bytes; with ``cap`` (limits, name of a size limit), refused past that
    size before it is read."""
    fs, path = filesystem(url, options)
    try:
        if cap is not None:
            limits, name = cap
            size = fs.size(path)
            if size is not None and size > getattr(limits, name):
                raise InputError(url, f"is {size} bytes", field=what,
                                 expected=limit_hint(limits, name))
        with fs.open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise InputError(url, "file not found", field=what) from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from err


def submission_parts(images: list[Item], gt: StoreReader | None,
                     partition_size: int) -> list[list[Item]]:
    """Images (anything with an ``image_id``, sorted by it) cut like the GT's parts when a
    GT is given, so that an evaluation task reads one GT part and one submission part; else
    by ``partition_size``."""
    if gt is None:
        return list(chunks(images, partition_size))
    starts = [p["first_id"] for p in gt.parts]
    groups: dict[int, list[Item]] = {}
    for img in images:
        groups.setdefault(max(bisect.bisect_right(starts, img.image_id) - 1, 0), []).append(img)
    return [groups[k] for k in sorted(groups)]


def convert_images(images: list[SubmissionImage], out: str, gt: str | None,
                   storage_options: StorageOptions | None, *, source: str, has_ng: bool,
                   overwrite: bool = False, progress: Progress = None,
                   cluster: ClusterSpec = None,
                   partition_size: int = DEFAULT_STORE_PARTITION) -> dict[str, Any]:
    """Box images a format read and checked on the client -> submission store (what a
    registered format's ``convert`` calls, ``docs/development.md``); cut like the GT's
    parts when ``gt`` is given. The content hash is the file's."""
    gt_reader = StoreReader(gt, storage_options, "gt") if gt else None
    parts = submission_parts(sorted(images, key=lambda i: i.image_id), gt_reader,
                             partition_size)
    with StoreWriter(out, "submission", storage_options, overwrite) as writer:
        tasks = [(writer.write_url, storage_options, i,
                  [Decoded(img, (0, 0), None) for img in part]) for i, part in enumerate(parts)]
        infos = map_tasks(write_decoded_part, tasks, cluster,
                          (lambda info: progress(info["n_images"])) if progress else None)
        return writer.finish(
            infos, sgdask_version=__version__, content_hash=file_digest(source, storage_options),
            source=source, instances="boxes", has_ng=has_ng, n_images=len(images),
            partition_size=partition_size, triplets_from=None)


def write_decoded_part(out: str, options: StorageOptions | None, index: int,
                       decoded: list[Decoded]) -> dict[str, Any]:
    """A submission store part from decoded images; returns its manifest entry."""
    tables = PartTables.empty()
    for d in decoded:
        add_submission_rows(tables, d.image, d.shape, part_name(index), d.masks)
    return write_part(out, options, index, tables)


class KeptStores:
    """Stores written while a submission file is evaluated (``evaluate --keep-store``):
    created on entry, committed (manifest written) by ``commit``, removed on failure."""

    def __init__(self, stores: dict[str, tuple[str, Any]], options: StorageOptions | None
                 ) -> None:
        self.writers = {name: (StoreWriter(url, "submission", options), given)
                        for name, (url, given) in stores.items()}

    def __enter__(self) -> KeptStores:
        for writer, _ in self.writers.values():
            writer.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for writer, _ in self.writers.values():
            writer.__exit__(*exc)

    def commit(self, parts_by_name: dict[str, list[dict[str, Any]]]) -> None:
        """Write each kept store's manifest, listing the parts its tasks wrote."""
        for name, (writer, given) in self.writers.items():
            parts = sorted(parts_by_name.get(name, []), key=lambda info: info["name"])
            manifest = given.manifest
            writer.finish(parts, sgdask_version=__version__,
                          content_hash=manifest["content_hash"], source=manifest["source"],
                          instances=manifest["instances"], has_ng=manifest["has_ng"],
                          n_images=sum(p["n_images"] for p in parts),
                          partition_size=DEFAULT_STORE_PARTITION, triplets_from=None)


def add_submission_rows(tables: PartTables, img: SubmissionImage, shape: tuple, part: str,
                        masks: BitMasks | None) -> None:
    cols = tables.images
    for name, value in (("image_id", img.image_id), ("height", int(shape[0])),
                        ("width", int(shape[1])), ("n_instances", len(img.categories)),
                        ("n_graph", len(img.graph)), ("n_ng", len(img.ng)),
                        ("n_pairs", 0 if img.pairs is None else len(img.pairs)),
                        ("mask_array", None if masks is None else part), ("mask_offset", None),
                        ("source_file", img.seg_filename)):
        cols[name].append(value)
    add_instance_rows(tables, img.image_id, img.categories, img.boxes, img.scores, masks)
    add_triplet_rows(tables, img.image_id, "graph", img.graph, img.graph_scores)
    add_triplet_rows(tables, img.image_id, "ng", img.ng, None)
    if img.pairs is not None:
        pairs = img.pairs
        add_triplet_rows(tables, img.image_id, "pair",
                         np.stack([pairs.subjects, pairs.objects, pairs.predicates], 1),
                         pairs.scores.astype(np.float64))


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
