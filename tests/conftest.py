"""Fixtures shared across tests/<layer>/: one real LocalCluster per session, the synthetic
datasets and their stores, a moto S3 server per module and a headless Chromium page."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster

from sgdask.formats.psg import ingest_gt
from sgdask.formats.sgbench import convert_submission
from sgdask.testing.psg import SynthPaths, write_dataset
from tests.helpers import AWS_ENV, BUCKET, S3, rewrite_zip

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="session")
def client():
    """A real two-process distributed cluster on 127.0.0.1."""
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=":0", host="127.0.0.1")
    try:
        with Client(cluster) as c:
            yield c
    finally:
        # distributed's own deadline for a worker process to close (a few seconds) can pass
        # on a machine that runs other test files at once; its processes end with the
        # session either way, and a test's outcome is already decided
        with contextlib.suppress(TimeoutError):
            cluster.close()


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


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """A moto S3 server thread on 127.0.0.1 (free port) with one empty bucket, and only the
    test credentials in the environment."""
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        mp.delenv("AWS_PROFILE", raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            assert host == "127.0.0.1"
            endpoint = f"http://127.0.0.1:{port}"
            options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
            fs = s3fs.S3FileSystem(**options)
            if not fs.exists(BUCKET):  # moto state is per process: another module may have it
                fs.mkdir(BUCKET)
            yield S3(endpoint, options, fs)
        finally:
            server.stop()


@pytest.fixture
def chromium_page() -> Iterator[Any]:
    """A page in headless Chromium (Debian's /usr/bin/chromium), driven by Playwright."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the playwright module is missing (pip install playwright)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1600, "height": 700})
        finally:
            browser.close()
