"""`sgdask evaluate --gt psg.json --gt-masks DIR --pred submission.zip`: the raw files to
the score in one command, with the GT store cached between runs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from sgdask.cli.gtcache import gt_store
from sgdask.errors import SgdaskError
from sgdask.pipeline import evaluate
from tests.helpers import run_cli


def one_command(dataset, masks: Path, cache: Path, out: Path, scheduler: str
                ) -> subprocess.CompletedProcess:
    """The one command from raw files, its evaluation on the session's cluster."""
    proc = run_cli("evaluate", "--gt", str(dataset.psg_json), "--gt-masks", str(masks),
                   "--pred", str(dataset.submission_zip), "--cache-dir", str(cache),
                   "--protocol", "sgbench", "--out", str(out), "--scheduler", scheduler)
    assert proc.returncode == 0, proc.stderr
    return proc


def metrics(out: Path) -> dict[str, float]:
    return json.loads((out / "metrics.json").read_text())["metrics"]


def test_raw_files_to_the_score_with_the_gt_store_cached(dataset, stores, client, tmp_path):
    masks, cache = tmp_path / "panoptic", tmp_path / "cache"
    shutil.copytree(dataset.masks_dir, masks)
    cold = one_command(dataset, masks, cache, tmp_path / "cold", client.scheduler.address)
    assert "GT store cached" in cold.stderr
    warm = one_command(dataset, masks, cache, tmp_path / "warm", client.scheduler.address)
    assert "GT store from the cache" in warm.stderr
    from_stores = evaluate(stores.gt, stores.pred, protocol="sgbench", client=client).metrics
    assert metrics(tmp_path / "cold") == metrics(tmp_path / "warm") == from_stores
    assert len(list(cache.glob("png-names-*.json"))) == 1

    # a PNG with other bytes (the same pixels, compressed harder): a new entry, never the
    # old one, although psg.json and its PNG names come from the remembered list
    png = sorted(masks.glob("*.png"))[0]
    before = png.read_bytes()
    with Image.open(png) as image:
        image.load()
        image.save(png, optimize=True)
    assert png.read_bytes() != before
    edited = one_command(dataset, masks, cache, tmp_path / "edited", client.scheduler.address)
    assert "GT store cached" in edited.stderr
    assert len(list(cache.glob("gt-*"))) == 2
    assert metrics(tmp_path / "edited") == from_stores


def test_the_api_takes_a_psg_json_or_a_store_as_the_command_does(dataset, stores, client,
                                                                 tmp_path):
    cache = tmp_path / "cache"
    psg, masks = str(dataset.psg_json), str(dataset.masks_dir)
    cached = gt_store(psg, masks, cache, cluster=client)
    assert Path(cached).parent == cache and (Path(cached) / "manifest.json").is_file()
    assert gt_store(psg, masks, cache) == cached  # from the cache: nothing ingested again
    assert len(list(cache.glob("gt-*"))) == 1
    assert gt_store(stores.gt, cache_dir=cache) == stores.gt
    assert (evaluate(cached, stores.pred, protocol="sgbench", client=client).metrics
            == evaluate(stores.gt, stores.pred, protocol="sgbench", client=client).metrics)
    # the Python API names the argument (the command line prints it as --gt-masks)
    with pytest.raises(SgdaskError, match=r"gt_masks: .* is a GT store already"):
        gt_store(stores.gt, masks)
    with pytest.raises(SgdaskError, match="not a complete sgdask store"):
        gt_store(str(tmp_path / "cache"))
