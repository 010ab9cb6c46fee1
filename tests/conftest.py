"""Shared fixtures: one real LocalCluster per session and one synthetic dataset + stores."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from sgdask.io.ingest import convert_submission, ingest_gt
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
