"""Shared fixtures: one real LocalCluster per session and one synthetic dataset + stores."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.synth import SynthPaths, write_dataset


@pytest.fixture(scope="session")
def client():
    """A real two-process distributed cluster on 127.0.0.1."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> SynthPaths:
    """40 small test images with missing and relation-less images, every predicate present."""
    root = tmp_path_factory.mktemp("synth")
    return write_dataset(root, n_images=40, seed=7, height=96, width=128,
                         missing_fraction=0.1, no_relation_fraction=0.05)


@dataclass(frozen=True)
class Stores:
    gt: str
    pred: str
    gt_boxes: str
    pred_boxes: str


@pytest.fixture(scope="session")
def stores(dataset: SynthPaths, tmp_path_factory) -> Stores:
    """The dataset converted: mask GT + ZIP submission, box GT + JSON submission."""
    root = tmp_path_factory.mktemp("stores")
    s = Stores(*(str(root / n) for n in ("gt", "pred", "gt_boxes", "pred_boxes")))
    ingest_gt(str(dataset.psg_json), s.gt, str(dataset.masks_dir), partition_size=16)
    convert_submission(str(dataset.submission_zip), s.pred, s.gt, partition_size=16)
    ingest_gt(str(dataset.psg_json), s.gt_boxes, None, partition_size=16)
    convert_submission(str(dataset.submission_boxes), s.pred_boxes, s.gt_boxes,
                       partition_size=16)
    return s


def rewrite_zip(src: Path, dst: Path, edit_doc=None, replace: dict[str, bytes] | None = None,
                drop: tuple[str, ...] = ()) -> Path:
    """A copy of a submission ZIP with triplets.json edited and/or members replaced/dropped."""
    replace = dict(replace or {})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            if name in drop:
                continue
            data = replace.pop(name, None) or zin.read(name)
            if name == "triplets.json" and edit_doc is not None:
                doc = json.loads(data)
                edit_doc(doc)
                data = json.dumps(doc).encode()
            zout.writestr(name, data)
        for name, data in replace.items():
            zout.writestr(name, data)
    return dst


def tiff_bytes(array) -> bytes:
    import tifffile

    buf = io.BytesIO()
    tifffile.imwrite(buf, array, compression="deflate")
    return buf.getvalue()


@dataclass(frozen=True)
class Tiny:
    """A 10-image dataset, its GT store and submission variants (benchmarking service)."""

    paths: SynthPaths
    gt: str
    root: Path

    def variant(self, i: int) -> Path:
        """A valid submission with different bytes (and numbers) for each ``i``: every
        triplet list shortened by ``i`` (keeping at least one), so results are never shared
        through the result cache."""
        path = self.root / f"variant-{i}.zip"
        if not path.exists():
            def shorten(doc):
                for img in doc["images"]:
                    keep = max(1, len(img["triplets"]) - i)
                    img["triplets"], img["scores"] = img["triplets"][:keep], img["scores"][:keep]
            rewrite_zip(self.paths.submission_zip, path, shorten)
        return path

    def broken(self) -> Path:
        """A ZIP whose triplets.json names a TIFF the archive lacks."""
        path = self.root / "broken.zip"
        if not path.exists():
            with zipfile.ZipFile(self.paths.submission_zip) as z:
                tiff = sorted(n for n in z.namelist() if n.endswith(".tiff"))[0]
            rewrite_zip(self.paths.submission_zip, path, drop=(tiff,))
        return path


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Tiny:
    root = tmp_path_factory.mktemp("tiny")
    paths = write_dataset(root / "raw", n_images=10, seed=3, height=64, width=80,
                          missing_fraction=0.0, no_relation_fraction=0.0)
    gt = str(root / "gt")
    ingest_gt(str(paths.psg_json), gt, str(paths.masks_dir))
    return Tiny(paths, gt, root)
