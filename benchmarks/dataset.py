"""The benchmark dataset: synthesized once, cached, with its GT and submission stores.

The cache key holds the image count, the seed and a hash of ``sgdask/testing/psg.py`` (a new
generator gives a new dataset); the stores are keyed by a hash of every ``sgdask/**.py`` (the
store format is spread over the io and mask-kernel modules, so any sgdask change gives new
stores). Ingesting the GT and converting the submission for B are not measured: a benchmark
host does both once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import sgdask
import sgdask.testing.psg
from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.store.store import MANIFEST, SELF_HASH, file_entry, manifest_digest
from sgdask.testing.psg import SynthPaths, synth_paths, write_dataset

Log = Callable[[str], None]
COMPLETE = ".complete"


@dataclass(frozen=True)
class Dataset:
    """A cached synthetic dataset and its two stores."""

    n_images: int
    seed: int
    root: Path
    raw: SynthPaths
    gt_store: Path
    pred_store: Path
    models: tuple[Path, ...] = ()

    @property
    def scratch_store(self) -> Path:
        """Where the end-to-end run C converts to (overwritten by every run)."""
        return self.root / "scratch-pred.store"


def files_hash(paths: Iterable[Path]) -> str:
    """Short sha256 of the contents of ``paths`` (in sorted order)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def synth_hash() -> str:
    return files_hash([Path(sgdask.testing.psg.__file__)])


def package_hash() -> str:
    return files_hash(Path(next(iter(sgdask.__path__))).rglob("*.py"))


def progress_logger(log: Log, what: str, total: int) -> Callable[[int], None]:
    """A ``progress(n)`` callback that logs every 10 %."""
    done = [0]
    step = max(1, total // 10)

    def advance(n: int = 1) -> None:
        before = done[0] // step
        done[0] += n
        if done[0] // step > before or done[0] == total:
            log(f"  {what}: {done[0]}/{total}")

    return advance


def synthesize(raw: Path, n_images: int, seed: int, log: Log) -> SynthPaths:
    """The raw dataset (psg.json, PNGs, submission.zip), written unless already complete."""
    if (raw / COMPLETE).exists():
        return synth_paths(raw)
    shutil.rmtree(raw, ignore_errors=True)
    log(f"synthesizing {n_images} images into {raw} (once; cached)")
    paths = write_dataset(raw, n_images, seed,
                          progress=progress_logger(log, "synthesized", n_images))
    (raw / COMPLETE).touch()
    return paths


def is_store(path: Path) -> bool:
    return (path / "manifest.json").exists()


def build_stores(raw: SynthPaths, gt: Path, pred: Path, n_images: int, log: Log) -> None:
    """Ingest the GT and convert the submission unless they already exist."""
    if not is_store(gt):
        log(f"ingesting the GT into {gt} (once; cached; not measured)")
        manifest = ingest_gt(str(raw.psg_json), str(gt), str(raw.masks_dir), overwrite=True,
                             progress=progress_logger(log, "ingested", n_images))
        log(f"  GT store: {manifest['n_images']} images")
    if not is_store(pred):
        log(f"converting the submission into {pred} (once; cached; run C measures it)")
        manifest = convert_submission(str(raw.submission_zip), str(pred), str(gt),
                                      overwrite=True,
                                      progress=progress_logger(log, "converted", n_images))
        log(f"  submission store: {manifest['n_images']} images")


def prune(pattern_dir: Path, pattern: str, keep: Iterable[Path], log: Log) -> None:
    """Remove cache entries matching ``pattern`` that an sgdask change made stale."""
    kept = {p.resolve() for p in keep}
    for stale in pattern_dir.glob(pattern):
        if stale.resolve() not in kept:
            log(f"removing stale cache entry {stale}")
            shutil.rmtree(stale, ignore_errors=True)


def rotated_graph_lists(table: pa.Table, shift: int) -> pa.Table:
    """The triplets table with every image's graph list rotated by ``shift`` positions
    (same triplets and counts, another ranking: another model's scores)."""
    images = np.asarray(pc.fill_null(table["image_id"], "").cast(pa.string()).to_numpy(
        zero_copy_only=False))
    lists = np.asarray(table["list"].cast(pa.string()).to_numpy(zero_copy_only=False))
    n = len(images)
    if n == 0:
        return table
    new_group = np.r_[True, (images[1:] != images[:-1]) | (lists[1:] != lists[:-1])]
    starts = np.flatnonzero(new_group)
    lengths = np.diff(np.r_[starts, n])
    group = np.repeat(np.arange(len(starts)), lengths)
    position = np.arange(n) - starts[group]
    rolled = starts[group] + (position + shift) % lengths[group]
    order = np.where(lists == "graph", rolled, np.arange(n))
    columns = {name: table[name].take(order) if name in ("subject", "object", "predicate")
               else table[name] for name in table.column_names}
    return pa.table(columns, schema=table.schema)


def perturbed_store(pred: Path, out: Path, shift: int) -> None:
    """A copy of the submission store whose graph lists are rotated (``shift``), with its
    manifest's file hashes and self-hash brought up to date (a store sgdask would write)."""
    if is_store(out):
        return
    shutil.rmtree(out, ignore_errors=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(pred, tmp)
    manifest = json.loads((tmp / MANIFEST).read_text())
    for part in sorted((tmp / "triplets").glob("*.parquet")):
        pq.write_table(rotated_graph_lists(pq.read_table(part), shift), part,
                       compression="zstd", write_page_checksum=True)
        manifest["files"][f"triplets/{part.name}"] = file_entry(part.read_bytes())
    rotated = f"{manifest['content_hash']}+rotated{shift}".encode()
    manifest["content_hash"] = "sha256:" + hashlib.sha256(rotated).hexdigest()
    manifest[SELF_HASH] = manifest_digest(manifest)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    tmp.rename(out)


def prepare(cache: Path, n_images: int, seed: int, log: Log, models: int = 0) -> Dataset:
    """The cached dataset of ``n_images`` test images, made if missing; ``models``: also that
    many submission stores (the first is the submission, the others perturbed copies)."""
    root = cache / f"psg-{n_images}-seed{seed}-synth{synth_hash()}"
    prune(cache, f"psg-{n_images}-seed{seed}-synth*", [root], log)
    raw = synthesize(root / "raw", n_images, seed, log)
    suffix = package_hash()
    gt, pred = root / f"gt-{suffix}.store", root / f"pred-{suffix}.store"
    others = tuple(root / f"pred-{suffix}-m{i}.store" for i in range(1, models))
    prune(root, "*.store", [gt, pred, *others], log)
    build_stores(raw, gt, pred, n_images, log)
    if others:
        log(f"writing {len(others)} perturbed copies of the submission store (once; cached)")
    for shift, store in enumerate(others, start=1):
        perturbed_store(pred, store, shift)
    return Dataset(n_images, seed, root, raw, gt, pred, (pred, *others) if models else ())


def tree_bytes(path: Path) -> int:
    """Apparent size of a file or of every file under a directory (like ``du -sb``)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_files(path: Path) -> int:
    return 1 if path.is_file() else sum(1 for p in path.rglob("*") if p.is_file())
