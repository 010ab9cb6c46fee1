"""PVSG readers (``sgdask.io.pvsg``): the GT's frame PNGs and a model's ``masks.txt`` into
tube stores chunked by video and frame, read back a chunk at a time equal to the files, and
bad input refused in one line naming file, video, frame and field, leaving nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import imagecodecs
import numpy as np
import pytest
from PIL import Image

from sgdask.errors import StoreError, VideoInputError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.pvsg import TubeStore, ingest_pvsg_gt, ingest_pvsg_results
from sgdask.testing.pvsg import write_pvsg
from tests.literal import pvsg as literal_pvsg

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_pvsg(tmp_path_factory.mktemp("pvsg"), n_videos=2, n_frames=11, seed=4)


def _gt(files, out: Path, per_chunk: int = 4, **kw) -> TubeStore:
    ingest_pvsg_gt(str(files.annotation), str(files.data_dir), str(out),
                   frames_per_chunk=per_chunk, **kw)
    return TubeStore(str(out))


def _frames(store: TubeStore, vid: str) -> dict[int, dict[int, np.ndarray]]:
    out = {}
    for chunk in store.frame_chunks(vid):
        for i, (tubes, masks) in enumerate(zip(chunk.tubes, chunk.masks, strict=True)):
            out[chunk.first + i] = dict(zip(tubes.tolist(), masks.dense(), strict=True))
    return out


@pytest.mark.parametrize("per_chunk", [1, 4, 16])
def test_gt_tubes_equal_the_frame_pngs_whatever_the_chunking(files, tmp_path, per_chunk):
    store = _gt(files, tmp_path / "gt", per_chunk)
    anno = json.loads(files.annotation.read_text())
    for rec in anno["data"]:
        vid = rec["video_id"]
        frames = _frames(store, vid)
        assert sorted(frames) == list(range(11))
        for f, tubes in frames.items():
            pan = np.array(Image.open(files.data_dir / "vidor" / "masks" / vid / f"{f:04d}.png"))
            assert set(tubes) == set(np.unique(pan).tolist()) - {0}
            for tube, mask in tubes.items():
                assert (mask == (pan == tube)).all()
        rels = store.table(vid, "relations").to_pydict()
        spans = [(s, o, p, a, b) for s, o, p, a, b in zip(
            rels["subject"], rels["object"], rels["predicate"], rels["start"], rels["end"],
            strict=True)]
        assert spans == [(s, o, anno["relations"].index(n), a, b)
                         for s, o, n, sp in rec["relations"] for a, b in sp]


def test_result_tubes_equal_masks_txt_as_openpvsg_reads_it(files, tmp_path):
    _gt(files, tmp_path / "gt")
    ingest_pvsg_results(str(files.results), str(tmp_path / "gt"), str(tmp_path / "pred"),
                        frames_per_chunk=3)
    store = TubeStore(str(tmp_path / "pred"))
    for vid in files.videos:
        tubes = literal_pvsg.pred_tubes(files.results / vid / "quantitive" / "masks.txt")
        table = store.table(vid, "tubes").to_pydict()
        assert dict(zip(table["tube"], table["category"], strict=True)) == \
            {t: int(v["cid"]) for t, v in tubes.items()}
        got = _frames(store, vid)
        for tid, tube in tubes.items():
            for entry in tube["mask"]:
                (f, mask), = entry.items()
                assert (got[f][tid] == mask).all()
        ranked = json.loads((files.results / vid / "relations.json").read_text())["relations"]
        rels = store.table(vid, "relations").to_pydict()
        firsts = [rels["subject"][i] for i in range(len(rels["rank"]))
                  if i == 0 or rels["rank"][i] != rels["rank"][i - 1]]
        assert firsts == [r["subject"] for r in ranked]
        pairs = store.table(vid, "pairs").to_pydict()
        assert [list(p) for p in zip(pairs["subject"], pairs["object"], strict=True)] == \
            json.loads((files.results / vid / "relations.json").read_text())["pairs"]


def test_chunks_are_read_one_at_a_time(files, tmp_path):
    """A damaged third chunk is found only when it is reached: the first two are yielded
    before, so a reader never holds the video."""
    store = _gt(files, tmp_path / "gt", per_chunk=4)
    vid = files.videos[0]
    chunk = next((tmp_path / "gt" / "videos" / vid / "chunk-00002").rglob("c/*"))
    chunk.write_bytes(chunk.read_bytes()[:-1] + b"\x00")
    reader = store.frame_chunks(vid)
    assert [next(reader).first, next(reader).first] == [0, 4]
    with pytest.raises(StoreError, match=r"chunk-00002.*corrupt"):
        next(reader)


def _copy(files, tmp_path: Path):
    import shutil

    shutil.copytree(files.annotation.parent.parent, tmp_path / "raw")
    return write_pvsg.__globals__["PvsgFiles"](
        tmp_path / "raw" / "data" / "pvsg.json", tmp_path / "raw" / "data",
        tmp_path / "raw" / "results", files.videos)


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


GT_CASES = {
    "num_frames": (lambda d: d["data"][0]["meta"].update(num_frames=0),
                   r"pvsg\.json: video 1000_\d+: meta: missing or not positive integers"),
    "span": (lambda d: d["data"][0]["relations"][0][3].append([5, 11]),
             r"pvsg\.json: video 1000_\d+: relations\[0\]: a span is not \[start, end\] inside"),
    "predicate": (lambda d: d["data"][1]["relations"][0].__setitem__(2, "flying"),
                  r"video 1001_\d+: relations\[0\]: predicate is not one of"),
    "category": (lambda d: d["data"][0]["objects"][0].update(category="dragon"),
                 r"objects\[0\]\.category: not one of the annotation's object classes"),
}


@pytest.mark.parametrize("case", sorted(GT_CASES))
def test_bad_annotation_is_one_line_and_nothing_is_written(files, tmp_path, case):
    raw = _copy(files, tmp_path)
    change, message = GT_CASES[case]
    _edit_json(raw.annotation, change)
    with pytest.raises(VideoInputError, match=message) as err:
        _gt(raw, tmp_path / "gt")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "gt").exists()


def _png(raw, frame: int, change) -> None:
    path = raw.data_dir / "vidor" / "masks" / raw.videos[1] / f"{frame:04d}.png"
    path.write_bytes(imagecodecs.png_encode(change(np.array(Image.open(path)))))


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: np.full_like(a, 200), r"video 1001_\d+: frame 7: holds object id 200"),
    (lambda a: a[:-1], r"video 1001_\d+: frame 7: 31 x 48 pixels \(expected meta's 32 x 48\)"),
    (lambda a: np.stack([a] * 3, -1),
     r"video 1001_\d+: frame 7: a uint8 image of shape \(32, 48, 3\)"),
])
def test_bad_frame_png_is_named_by_video_and_frame(files, tmp_path, change, message):
    raw = _copy(files, tmp_path)
    _png(raw, 7, change)
    with pytest.raises(VideoInputError, match=r"0007\.png: " + message):
        _gt(raw, tmp_path / "gt")
    assert not (tmp_path / "gt").exists()


def test_missing_frame_png(files, tmp_path):
    raw = _copy(files, tmp_path)
    (raw.data_dir / "vidor" / "masks" / raw.videos[0] / "0010.png").unlink()
    with pytest.raises(VideoInputError, match=r"0010\.png: video 1000_\d+: frame 10: missing"):
        _gt(raw, tmp_path / "gt")


def test_frames_past_the_limit_are_refused_before_any_frame_is_read(files, tmp_path):
    with pytest.raises(VideoInputError, match=r"meta\.num_frames: is 11 \(expected at most 10; "
                                              r"raise with limits=ArchiveLimits\(max_video_fr"):
        _gt(files, tmp_path / "gt", limits=ArchiveLimits(max_video_frames=10))


def _masks_txt(raw, change) -> None:
    path = raw.results / raw.videos[0] / "quantitive" / "masks.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(change(lines)) + "\n")


RESULT_CASES = {
    "fields": (lambda ls: [*ls[:2], "1 2 3", *ls[2:]],
               r"masks\.txt: video 1000_\d+: line 3: not 'frame track class height width RLE'"),
    "frame": (lambda ls: ["12" + ls[0][ls[0].index(" "):], *ls[1:]],
              r"masks\.txt: video 1000_\d+: line 1: frame 12 outside the video "
              r"\(expected 1\.\.11\)"),
    "rle": (lambda ls: [ls[0] + "1", *ls[1:]],
            r"masks\.txt: video 1000_\d+: frame \d+: line 1: RLE (covers|ends)"),
    "twice": (lambda ls: [ls[0], ls[0], *ls[1:]], r"line 2: track \d+ has two masks in one frame"),
}


@pytest.mark.parametrize("case", sorted(RESULT_CASES))
def test_bad_masks_txt_is_one_line_and_nothing_is_written(files, tmp_path, case):
    raw = _copy(files, tmp_path)
    _gt(raw, tmp_path / "gt")
    change, message = RESULT_CASES[case]
    _masks_txt(raw, change)
    with pytest.raises(VideoInputError, match=message):
        ingest_pvsg_results(str(raw.results), str(tmp_path / "gt"), str(tmp_path / "pred"))
    assert not (tmp_path / "pred").exists()


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r[0].update(score=float("nan")), r"relations\[0\]: score is not a finite number"),
    (lambda r: r[1].update(span=[[3, 40]]), r"relations\[1\]: span is not \[\[start, end\]"),
    (lambda r: r[2].update(relation=99), r"relations\[2\]: relation 99 outside the vocabulary"),
])
def test_bad_relations_json(files, tmp_path, change, message):
    raw = _copy(files, tmp_path)
    _gt(raw, tmp_path / "gt")
    _edit_json(raw.results / raw.videos[1] / "relations.json", lambda d: change(d["relations"]))
    with pytest.raises(VideoInputError, match=r"relations\.json: video 1001_\d+: " + message):
        ingest_pvsg_results(str(raw.results), str(tmp_path / "gt"), str(tmp_path / "pred"))
    assert not (tmp_path / "pred").exists()


def test_existing_output_is_never_overwritten(files, tmp_path):
    _gt(files, tmp_path / "gt")
    with pytest.raises(StoreError, match="exists already"):
        _gt(files, tmp_path / "gt")
    assert TubeStore(str(tmp_path / "gt")).manifest["kind"] == "gt"


def test_video_error_survives_a_worker_and_renders_for_the_service():
    import pickle

    err = VideoInputError("/srv/data/x/0007.png", "holds object id 200", video="0001_4",
                          frame=7)
    again = pickle.loads(pickle.dumps(err))
    line = "/srv/data/x/0007.png: video 0001_4: frame 7: holds object id 200"
    assert str(again) == str(err) == line
    assert err.render("http", {"/srv/data/x": "masks"}) == \
        "masks/0007.png: video 0001_4: frame 7: holds object id 200"
