"""The mistakes a new user makes with inputs and outputs (issue 27): each is refused before
any work, in one line naming the file, what it is, what was expected and the flag that
fixes it; outputs that would damage a store are refused; missing images are named."""

from __future__ import annotations

import pickle
import shutil
import zipfile
from pathlib import Path

import pytest

from sgdask.cli import main
from sgdask.cli.process import EXIT_ERROR
from sgdask.formats.sniff import (
    GT_STORE,
    MASK_ZIP,
    MISSING,
    NPZ,
    OI_ANNO,
    OI_CATEGORIES,
    PICKLE,
    PNG_DIR,
    PSG_JSON,
    SGBENCH_JSON,
    SGBENCH_ZIP,
    SUBMISSION_STORE,
    VG_H5,
    ZIP,
    unscorable,
    what_is,
)
from sgdask.store.verify import verify_store
from sgdask.testing.oi import oi_synth_paths, write_oi_dataset
from tests.helpers import refused, run_main

PNG = b"\x89PNG\r\n\x1a\n" + bytes(32)


@pytest.fixture(scope="module")
def odd(tmp_path_factory, dataset) -> dict[str, Path]:
    """Files of the wrong kinds: a pickle, a PNG, a ZIP of PNG masks, an .npz, an h5."""
    import numpy as np

    root = tmp_path_factory.mktemp("odd")
    paths = {name: root / name for name in ("results.pkl", "image.png", "masks.zip",
                                            "arrays.npz", "vg.h5")}
    paths["results.pkl"].write_bytes(pickle.dumps([{"not": "results"}], protocol=4))
    paths["image.png"].write_bytes(PNG)
    with zipfile.ZipFile(paths["masks.zip"], "w") as z:
        for png in sorted(dataset.masks_dir.iterdir())[:2]:
            z.write(png, png.name)
    np.savez(paths["arrays.npz"], a=np.arange(3))
    paths["vg.h5"].write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    return paths


def test_what_is_tells_every_kind_by_content(dataset, stores, odd, tmp_path):
    renamed = tmp_path / "submission.json"  # a ZIP by any name is a ZIP
    shutil.copy(dataset.submission_zip, renamed)
    truncated = tmp_path / "truncated.zip"  # left to the reader to describe
    truncated.write_bytes(dataset.submission_zip.read_bytes()[:-30])
    kinds = {str(dataset.psg_json): PSG_JSON, str(dataset.submission_zip): SGBENCH_ZIP,
             str(renamed): SGBENCH_ZIP, str(dataset.submission_boxes): SGBENCH_JSON,
             stores.gt: GT_STORE, stores.pred: SUBMISSION_STORE,
             str(dataset.masks_dir): PNG_DIR, str(odd["results.pkl"]): PICKLE,
             str(odd["masks.zip"]): MASK_ZIP, str(odd["arrays.npz"]): NPZ,
             str(odd["vg.h5"]): VG_H5, str(tmp_path / "nothing.zip"): MISSING,
             str(truncated): ZIP}
    oi = oi_synth_paths(tmp_path / "oi")
    write_oi_dataset(tmp_path / "oi", n_test=2, n_train=2)
    kinds |= {str(oi.anno): OI_ANNO, str(oi.train): OI_ANNO, str(oi.categories): OI_CATEGORIES,
              str(oi.submission): SGBENCH_JSON}
    assert {path: what_is(path).kind for path in kinds} == kinds


def test_open_images_annotations_are_ground_truth(tmp_path, capsys):
    oi = oi_synth_paths(tmp_path)
    write_oi_dataset(tmp_path, n_test=2, n_train=2)
    with pytest.raises(SystemExit) as done:
        main(["convert", str(oi.anno), "--out", str(tmp_path / "s.store")])
    err = capsys.readouterr().err.strip()
    assert done.value.code == EXIT_ERROR and len(err.splitlines()) == 1, err
    assert "Open Images V6 annotations" in err and "ingest it with sgdask ingest-gt" in err


def test_evaluate_says_what_it_was_given(capsys, dataset, stores, odd, tmp_path):
    cache = tmp_path / "cache"
    psg, sub = str(dataset.psg_json), str(dataset.submission_zip)
    missing = str(tmp_path / "sub.zip")
    cases = [  # (--gt, --pred, what the line says)
        (missing, stores.pred, f"{missing}: not found"),
        (stores.gt, missing, f"{missing}: not found"),
        (stores.gt, psg, f"{psg}: a ground-truth file (psg.json), where a submission store, "
         "an SGBench ZIP or JSON is expected (pass it as --gt)"),
        (sub, stores.pred, f"{sub}: an SGBench submission (ZIP), where a ground-truth store "
         "or psg.json is expected (pass it as --pred)"),
        (stores.gt, str(odd["results.pkl"]), "a pickle (a model's result file), where a "
         "submission store, an SGBench ZIP or JSON is expected (add --method METHOD)"),
        (stores.gt, stores.gt, f"{stores.gt}: a ground-truth store, where a submission "
         "store"),
        (stores.pred, stores.pred, f"{stores.pred}: a submission store, where a "
         "ground-truth store"),
        (stores.gt, str(odd["image.png"]), "image.png: a PNG image, where a submission"),
        (psg, sub, f"{sub}: a mask submission, against a psg.json given without its masks "
         "(pass --gt-masks DIR with --gt psg.json)"),
    ]
    for gt, pred, says in cases:
        line = refused(capsys, "evaluate", "--gt", gt, "--pred", pred, "--cache-dir",
                       str(cache))
        assert says in line, line
    assert not cache.exists()  # nothing was ingested


def test_other_commands_say_what_they_were_given(capsys, dataset, stores, odd, tmp_path):
    out = tmp_path / "out"
    psg, boxes = str(dataset.psg_json), str(dataset.submission_boxes)
    cases = [
        (("convert", psg, "--out", str(out)), "(ground truth: ingest it with sgdask "
         "ingest-gt)"),
        (("convert", str(odd["results.pkl"]), "--out", str(out)), "(add --method METHOD)"),
        (("validate", psg), "(ground truth: ingest it with sgdask ingest-gt)"),
        (("ingest-gt", str(dataset.submission_zip), "--out", str(out)),
         "(a submission: convert it with sgdask convert)"),
        (("ingest-gt", psg, "--masks", str(odd["masks.zip"]), "--out", str(out)),
         "masks.zip: a ZIP of PNG masks, where a directory of panoptic PNGs is expected "
         "(masks need --gt-masks: unzip it and pass the directory)"),
        (("stats", boxes, "--out", str(out)), f"{boxes}: an SGBench submission (JSON), "
         "where psg.json or Open Images V6's vrd-train-anno.json is expected"),
        (("compare", "--gt", stores.pred, stores.pred), "(pass it as --pred)"),
        (("evaluate", "--gt", str(odd["vg.h5"]), "--pred", stores.pred),
         "(ingest it with sgdask ingest-gt --dicts --image-data, then pass the store as "
         "--gt)"),
    ]
    for args, says in cases:
        line = refused(capsys, *args)
        assert says in line, line
    assert not out.exists()
    code, text, _ = run_main(capsys, "verify", str(tmp_path / "gone"), str(dataset.submission_zip))
    assert code == 2
    assert f"{tmp_path / 'gone'}: not found" in text
    assert "is a submission file (ZIP) where a store is expected" in text


def test_outputs_inside_a_store_are_refused(capsys, dataset, stores, tmp_path):
    """Reports into a store, and stores over or inside another store, before any work."""
    for out in (stores.gt, f"{stores.gt}/reports", f"{stores.pred}/images/x"):
        line = refused(capsys, "evaluate", "--gt", stores.gt, "--pred", stores.pred,
                       "--out", out)
        assert "store (writing reports there would damage it; choose another --out)" in line
    line = refused(capsys, "evaluate", "--gt", stores.gt, "--pred",
                   str(dataset.submission_zip), "--keep-store", stores.gt)
    assert "is a gt store; this writes a submission store" in line
    line = refused(capsys, "compare", "--gt", stores.gt, stores.pred, stores.pred,
                   "--out", f"{stores.pred}/cmp")
    assert "writing the comparison there would damage it" in line
    line = refused(capsys, "convert", str(dataset.submission_zip), "--out", stores.gt,
                   "--overwrite", "--in-process")
    assert line.endswith(f"{stores.gt}: is a gt store; this writes a submission store "
                         "(replacing it would lose the other; choose another --out)")
    line = refused(capsys, "ingest-gt", str(dataset.psg_json), "--out", stores.pred,
                   "--overwrite", "--in-process")
    assert "is a submission store; this writes a gt store" in line
    line = refused(capsys, "convert", str(dataset.submission_zip), "--out",
                   f"{stores.gt}/inner", "--in-process")
    assert f"is inside the gt store {stores.gt}" in line
    assert verify_store(stores.gt).intact and verify_store(stores.pred).intact


def test_evaluate_many_and_rerank_refuse_outputs_in_a_store(stores, tmp_path):
    from sgdask.batch.many import ManyJob, run_many
    from sgdask.batch.rerank import rerank
    from sgdask.errors import StoreError

    job = ManyJob(stores.gt, [("m", stores.pred, "singlempo")], out=f"{stores.pred}/r")
    with pytest.raises(StoreError, match="writing reports there would damage it"):
        run_many(job)
    job = ManyJob(stores.gt, [("m", stores.pred, "singlempo")], cache=stores.gt)
    with pytest.raises(StoreError, match="writing the result cache there"):
        run_many(job)
    with pytest.raises(StoreError, match="writing the leaderboard there"):
        rerank(str(tmp_path / "registry"), stores.gt, f"{stores.gt}/board")


def test_missing_images_are_named_and_a_cached_gt_shows_no_ingest_bar(capsys, dataset,
                                                                      stores, client,
                                                                      tmp_path):
    cache = str(tmp_path / "cache")
    args = ("evaluate", "--gt", str(dataset.psg_json), "--gt-masks", str(dataset.masks_dir),
            "--pred", stores.pred, "--cache-dir", cache, "--scheduler",
            client.scheduler.address)
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    assert "ingesting GT images" in err
    code, out, err = run_main(capsys, *args)
    assert code == 0, err
    assert "ingesting GT images" not in err and "GT store from the cache" in err
    text = " ".join(out.split())
    without = set(ids_of(stores.gt)) - set(ids_of(stores.pred))
    assert "evaluated image(s) have no prediction (scored 0): " in text, text
    named = text.split("(scored 0): ")[1].split(" … and ")[0].split("\n")[0].split(", ")
    assert named and set(named) <= without, (named, without)


def ids_of(store: str) -> list[str]:
    from sgdask.store.store import StoreReader

    return [str(i) for i in StoreReader(store).images().column("image_id").to_pylist()]


def test_the_service_refuses_what_it_can_never_score(dataset):
    assert unscorable(PNG, "model.png") == ("model.png: a PNG image, not a submission "
                                            "(expected an SGBench ZIP or JSON)")
    assert "a ground-truth file (psg.json)" in unscorable(
        dataset.psg_json.read_bytes()[:1024], "psg.json")
    for ok in (dataset.submission_zip, dataset.submission_boxes):
        assert unscorable(ok.read_bytes()[:1024], ok.name) is None
    assert unscorable(b"{not json", "garbage.json") is None  # its reader says what is wrong
