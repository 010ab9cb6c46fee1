"""PSG-challenge files (relation.json + panseg/ PNGs): read by content, scored as OpenPSG's
tools/grade.py scores them (R@20 and mR@20 of the ``multimpo`` protocol, PQ), rejected in
one line when broken."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from sgdask.errors import InputError, SgdaskError
from sgdask.formats.psg import ingest_gt
from sgdask.formats.psg_challenge import CHALLENGE_KINDS
from sgdask.formats.registry import FORMATS, PSG_CHALLENGE, submission_format
from sgdask.formats.sniff import expect, what_is
from sgdask.io.archive import ArchiveLimits
from sgdask.pipeline import evaluate_protocols
from sgdask.service.tokens import add_token
from sgdask.store.store import SELF_HASH, manifest_digest
from sgdask.testing.psg import write_dataset
from tests.helpers import run_main
from tests.helpers.psg_challenge_files import colour_png, distinct_ids, write_challenge_submission
from tests.helpers.servicekit import Proc, upload, wait_final

#: What OpenPSG's tools/grade.py (commit HEAD of github:Jingkang50/OpenPSG, run with its
#: torch/mmcv/mmdet imports stubbed where its metric path does not use them, mmdet 2.25.3's
#: CocoPanopticDataset and panopticapi for PQ) wrote to scores.txt for
#:   data = write_dataset(root / "data", n_images=10, seed=SEED, height=64, width=96,
#:                        missing_fraction=0.0, no_relation_fraction=0.2)
#:   write_challenge_submission(data, root / "submission", SEED)
#: as `python tools/grade.py ../submission out` in a folder holding data/psg/psg.json,
#: data/coco -> data/panoptic and configs/_base_/datasets/psg_val.py.
#: grade.py writes these three numbers and no blend of them.
GRADE_PY = {
    7: {"Recall R 20": 0.23809523809523808, "MeanRecall R 20": 0.24107142857142858,
        "PQ": 45.82816198570912},
    21: {"Recall R 20": 0.1304563492063492, "MeanRecall R 20": 0.12053571428571429,
         "PQ": 55.391610546781486},
}
#: The same, each image's uncovered pixels left black (in no listed segment, as OpenPSG's
#: save_results leaves them), run the same way on
#:   write_challenge_submission(data, root / "submission", SEED, black_background=True)
#: grade.py makes those pixels panoptic segments of their own (see test_unnamed_colours).
GRADE_PY_BLACK = {
    7: {"Recall R 20": 0.23809523809523808, "MeanRecall R 20": 0.24107142857142858,
        "PQ": 45.47971575462348},
    21: {"Recall R 20": 0.1304563492063492, "MeanRecall R 20": 0.12053571428571429,
         "PQ": 55.25829389787099},
}


def _lab(root: Path, seed: int, black_background: bool = False,
         partition_size: int | None = None) -> tuple[Path, str]:
    data = write_dataset(root / "data", n_images=10, seed=seed, height=64, width=96,
                         missing_fraction=0.0, no_relation_fraction=0.2)
    sub = write_challenge_submission(data, root / "submission", seed, black_background)
    ingest_gt(str(data.psg_json), str(root / "gt"), str(data.masks_dir),
              **({} if partition_size is None else {"partition_size": partition_size}))
    return sub, str(root / "gt")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed, black", [*((s, False) for s in sorted(GRADE_PY)),
                                         *((s, True) for s in sorted(GRADE_PY_BLACK))])
def test_equals_grade_py(seed, black, tmp_path, client):
    sub, gt = _lab(tmp_path, seed, black)
    [report] = evaluate_protocols(gt, str(sub), "multimpo", ks=(20,), client=client).values()
    want = (GRADE_PY_BLACK if black else GRADE_PY)[seed]
    # grade.py takes np.mean of per-image floats; sgdask rounds the exact mean once
    assert report.metrics["R@20"] == pytest.approx(want["Recall R 20"], rel=1e-15, abs=0)
    assert report.metrics["mR@20"] == pytest.approx(want["MeanRecall R 20"], rel=1e-15, abs=0)
    assert report.metrics["PQ"] * 100 == pytest.approx(want["PQ"], rel=1e-15, abs=0)


def _converted(sub: Path, gt: str, out: Path, partition_size: int | None = None) -> dict:
    """``sub`` converted to a store at ``out`` (as ``sgdask convert`` and the service do):
    its manifest."""
    FORMATS[PSG_CHALLENGE].convert(str(sub), str(out), gt, None, overwrite=False,
                                   cluster=None, limits=None, partition_size=partition_size)
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed, black", [*((s, False) for s in sorted(GRADE_PY)),
                                         *((s, True) for s in sorted(GRADE_PY_BLACK))])
def test_converted_store_equals_grade_py(seed, black, tmp_path, client):
    """A store converted from the files scores grade.py's numbers, as the files do: with
    pixels in no listed segment (black), its parts hold grade.py's segments (format 7);
    without, it is the format-5 store it always was (no segments table)."""
    sub, gt = _lab(tmp_path, seed, black, partition_size=3)  # parts cut like the GT's
    manifest = _converted(sub, gt, tmp_path / "store")
    segmented = [p["name"] for p in manifest["parts"] if p.get("segments")]
    assert manifest["format_version"] == (7 if black else 5)
    assert bool(segmented) == black and len(manifest["parts"]) >= 2
    assert sorted(r for r in manifest["files"] if r.startswith("segments/")) == [
        f"segments/{name}.parquet" for name in segmented]
    [report] = evaluate_protocols(gt, str(tmp_path / "store"), "multimpo", ks=(20,),
                                  client=client).values()
    want = (GRADE_PY_BLACK if black else GRADE_PY)[seed]
    assert report.metrics["R@20"] == pytest.approx(want["Recall R 20"], rel=1e-15, abs=0)
    assert report.metrics["mR@20"] == pytest.approx(want["MeanRecall R 20"], rel=1e-15, abs=0)
    assert report.metrics["PQ"] * 100 == pytest.approx(want["PQ"], rel=1e-15, abs=0)


# --------------------------------------------------------------------------- hand cases

H, W = 8, 12
#: the GT image: segment 0 (category 0) the left half, segment 1 (category 1) the right half
GT_LABEL = np.where(np.arange(W)[None, :] < W // 2, 0, 1).repeat(H, 0)


@pytest.fixture(scope="module")
def hand_gt(tmp_path_factory) -> str:
    """One test image whose one relation is (0, 1, predicate 3), and predicates 0..55."""
    root = tmp_path_factory.mktemp("hand")
    ids = np.array([100, 200])
    (root / "png").mkdir()
    (root / "png" / "img.png").write_bytes(colour_png(GT_LABEL, ids))
    psg = {"thing_classes": ["a", "b"], "stuff_classes": ["c"],
           "predicate_classes": [f"p{i}" for i in range(56)], "test_image_ids": ["img"],
           "data": [{"image_id": "img", "file_name": "img.jpg", "height": H, "width": W,
                     "pan_seg_file_name": "img.png", "relations": [[0, 1, 3]],
                     "segments_info": [{"id": int(i), "category_id": c, "iscrowd": 0,
                                        "isthing": 1, "area": int((c == GT_LABEL).sum())}
                                       for c, i in enumerate(ids)],
                     "annotations": [{"bbox": [0, 0, W // 2, H], "category_id": 0},
                                     {"bbox": [W // 2, 0, W, H], "category_id": 1}]}]}
    (root / "psg.json").write_text(json.dumps(psg))
    ingest_gt(str(root / "psg.json"), str(root / "gt"), str(root / "png"))
    return str(root / "gt")


def _hand_submission(root: Path, relations: list[list[int]], **entry) -> Path:
    """The GT's two segments predicted exactly (categories 1-based) with these relations."""
    ids = distinct_ids(np.random.default_rng(0), 2)
    (root / "panseg").mkdir(parents=True, exist_ok=True)
    (root / "panseg" / "0.png").write_bytes(colour_png(GT_LABEL, ids))
    item = {"relations": relations, "pan_seg_file_name": "0.png",
            "segments_info": [{"id": int(ids[0]), "category_id": 1},
                              {"id": int(ids[1]), "category_id": 2}]}
    item.update(entry)
    (root / "relation.json").write_text(json.dumps([item]))
    return root


WRONG = [[1, 0, 1 + p] for p in range(30)]  # object/subject swapped: never a hit
HIT = [0, 1, 4]  # GT (0, 1, predicate 3), the predicate 1-based in the file


@pytest.mark.parametrize("position, recall", [(0, 1.0), (19, 1.0), (20, 0.0), (29, 0.0)])
def test_only_the_first_20_relations_count(position, recall, hand_gt, tmp_path, client):
    """grade.py cuts each image's list at 20 (``rel_array[:20]``): a hit at index 19
    counts, one at index 20 does not, whatever follows."""
    relations = [*WRONG[:position], HIT, *WRONG[position:]]
    sub = _hand_submission(tmp_path, relations)
    [report] = evaluate_protocols(hand_gt, str(sub), "multimpo", ks=(20,),
                                  client=client).values()
    assert report.metrics["R@20"] == recall
    assert report.metrics["mR@20"] == recall / 56  # one predicate of 56 occurs


def test_the_order_is_the_ranking(hand_gt, tmp_path, client):
    """No score in the file: the list's order ranks it, so moving the hit from the 20th
    place to the 21st, with the same 21 relations, loses it."""
    first = [*WRONG[:19], HIT, *WRONG[19:20]]
    second = [*WRONG[:20], HIT]
    assert sorted(map(tuple, first)) == sorted(map(tuple, second))
    got = [evaluate_protocols(hand_gt, str(_hand_submission(tmp_path / str(i), rel)),
                              "multimpo", ks=(20,), client=client)["multimpo"]
           .metrics["R@20"] for i, rel in enumerate((first, second))]
    assert got == [1.0, 0.0]


#: What grade.py (run as GRADE_PY says) wrote to scores.txt for the GT of ``hand_gt`` and
#: ``_unnamed_colours(root, 3)`` (its classwise table: a 96.000, b 91.667, c 0.000)
GRADE_PY_UNNAMED = {"Recall R 20": 0.0, "MeanRecall R 20": 0.0, "PQ": 62.55555555555555}


def _unnamed_colours(root: Path, last: int) -> Path:
    """Two listed segments, A (category a: 1-based 1) on columns 0-1 and B (b) on columns
    6-10; black on columns 2-5; column 11: colour 1 on rows 0-3, 2 on rows 4-5 and ``last``
    on rows 6-7, none of them listed. The relation (A, B, predicate 3) is the GT's."""
    a, b = 5001, 6002
    pixel = np.zeros((H, W), np.int64)
    pixel[:, 0:2], pixel[:, 6:11] = a, b
    pixel[0:4, 11], pixel[4:6, 11], pixel[6:8, 11] = 1, 2, last
    colours, label = np.unique(pixel, return_inverse=True)
    (root / "panseg").mkdir(parents=True, exist_ok=True)
    (root / "panseg" / "0.png").write_bytes(colour_png(label.reshape(H, W), colours))
    (root / "relation.json").write_text(json.dumps([{
        "relations": [HIT], "pan_seg_file_name": "0.png",
        "segments_info": [{"id": a, "category_id": 1}, {"id": b, "category_id": 2}]}]))
    return root


def test_unnamed_colours(hand_gt, tmp_path, client):
    """grade.py's PQ segments: a listed segment is panoptic id ``category index + 1000 k``,
    any other pixel keeps its colour id, and each id is a segment of category ``id % 1000``.
    Black (0) joins A (id 0: a's first); colour 1 joins B (id 1); colour 2 is a segment of
    c (a false positive); colour 3 (= the category count) is VOID, written as 0, so it joins
    A too: a's IoU 48/50, b's 44/48. Recall matches the listed masks: A alone covers a third
    of a, so the GT relation is missed."""
    [report] = evaluate_protocols(hand_gt, str(_unnamed_colours(tmp_path, 3)), "multimpo",
                                  ks=(20,), client=client).values()
    assert report.metrics["R@20"] == GRADE_PY_UNNAMED["Recall R 20"]
    assert report.metrics["mR@20"] == GRADE_PY_UNNAMED["MeanRecall R 20"]
    assert report.metrics["PQ"] * 100 == pytest.approx(GRADE_PY_UNNAMED["PQ"], rel=1e-15,
                                                      abs=0)
    rows = {row["category"]: row for row in report.per_category}
    assert [rows[c]["PQ"] for c in (0, 1, 2)] == [48 / 50, 44 / 48, 0.0]
    assert [rows[c]["FP"] for c in (0, 1, 2)] == [0, 0, 1]


def test_unread_rows_after_20_are_not_range_checked(hand_gt, tmp_path, client):
    """grade.py never reads rows past the 20th: a predicate out of range there is ignored."""
    sub = _hand_submission(tmp_path, [HIT, *WRONG[:19], [0, 1, 999]])
    [report] = evaluate_protocols(hand_gt, str(sub), "multimpo", ks=(20,),
                                  client=client).values()
    assert report.metrics["R@20"] == 1.0


# --------------------------------------------------------------------------- sniffing


def _zipped(folder: Path, out: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(out, "w") as z:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                z.write(f, prefix + f.relative_to(folder).as_posix())
    return out


@pytest.mark.parametrize("prefix", ["", "submission/"])
def test_recognised_by_content(prefix, hand_gt, tmp_path, client):
    sub = _hand_submission(tmp_path / "dir", [HIT])
    packed = _zipped(sub, tmp_path / "upload.bin", prefix)  # no telling name
    for path in (sub, packed, sub / "relation.json"):
        assert what_is(str(path)).kind in CHALLENGE_KINDS
        assert expect(str(path), "pred").kind in CHALLENGE_KINDS
        assert submission_format(str(path), None) is FORMATS[PSG_CHALLENGE]
    reports = [evaluate_protocols(hand_gt, str(p), "multimpo", ks=(20,), client=client)
               for p in (sub, packed, sub / "relation.json")]
    assert {r["multimpo"].metrics["R@20"] for r in reports} == {1.0}
    assert len({r["multimpo"].provenance["submission"]["content_hash"] for r in reports}) == 1


def test_converted_store_scores_the_same(hand_gt, tmp_path, client):
    """The service converts an upload to a store (its ``upload: psg-challenge`` phases)."""
    sub = _hand_submission(tmp_path / "sub", [*WRONG[:5], HIT])
    fmt = FORMATS[PSG_CHALLENGE]
    assert fmt.validate(str(sub), hand_gt, None, None, 10) == []
    fmt.convert(str(sub), str(tmp_path / "store"), hand_gt, None, overwrite=False,
                cluster=None, limits=None)
    direct, stored = (evaluate_protocols(hand_gt, str(p), "multimpo", ks=(20,),
                                         client=client)["multimpo"]
                      for p in (sub, tmp_path / "store"))
    assert stored.metrics == direct.metrics


# --------------------------------------------------------------------------- bad input


def _error(gt: str, sub: Path, limits: ArchiveLimits | None = None) -> str:
    with pytest.raises(SgdaskError) as err:
        from sgdask.formats.psg_challenge import validate_challenge

        problems = validate_challenge(str(sub), gt, None, limits, 10)
        if problems:
            raise problems[0].error
    assert isinstance(err.value, InputError)
    text = str(err.value.render("cli", {}))
    assert "\n" not in text
    return text


@pytest.mark.parametrize("edit, where, says", [
    (dict(relations=[[0, 1, 0]]), "[0].relations[0]", "predicate 0"),
    (dict(relations=[[0, 2, 4]]), "[0].relations[0]", "object 2"),
    (dict(relations=[[0, 1]]), "[0].relations[0]", "[0, 1]"),
    (dict(relations="x"), "[0].relations", "not a list"),
    (dict(pan_seg_file_name="../x.png"), "[0].pan_seg_file_name", "'../x.png'"),
    (dict(pan_seg_file_name="nope.png"), "nope.png", "not found"),
    (dict(segments_info=[{"id": 5, "category_id": 0}]), "[0].segments_info[0].category_id",
     "0"),
    (dict(segments_info=[{"id": 5, "category_id": 1}, {"id": 5, "category_id": 2}]),
     "[0].segments_info[1].id", "repeats segment 0"),
])
def test_bad_entry_one_line(edit, where, says, hand_gt, tmp_path):
    edit = dict(edit)
    text = _error(hand_gt, _hand_submission(tmp_path, edit.pop("relations", [HIT]), **edit))
    assert "image img" in text and where in text and says in text, text


def test_unnamed_colours_warned_for_a_store(hand_gt, tmp_path, client):
    """Validation warns that the PNGs hold pixels in no listed segment (grade.py reads them
    as segments, panopticapi would not); a converted store keeps grade.py's segments (its
    segments table), so it scores grade.py's PQ, as the files do; recall is the same too."""
    sub = _unnamed_colours(tmp_path / "sub", 3)
    fmt = FORMATS[PSG_CHALLENGE]
    [problem] = fmt.validate(str(sub), hand_gt, None, None, 10)
    assert not problem.is_error
    assert "1 of 1 PNGs hold pixels in no listed segment" in str(problem), str(problem)
    fmt.convert(str(sub), str(tmp_path / "store"), hand_gt, None, overwrite=False,
                cluster=None, limits=None)
    direct, stored = (evaluate_protocols(hand_gt, str(p), "multimpo", ks=(20,),
                                         client=client)["multimpo"]
                      for p in (sub, tmp_path / "store"))
    assert direct.metrics["PQ"] * 100 == pytest.approx(GRADE_PY_UNNAMED["PQ"], rel=1e-15)
    assert stored.metrics["PQ"] == direct.metrics["PQ"]
    assert stored.metrics["R@20"] == direct.metrics["R@20"]


SEGMENTS_REL = "segments/part-00000.parquet"


def _rehashed(store: Path, edit) -> None:
    manifest = json.loads((store / "manifest.json").read_text())
    edit(manifest)
    manifest[SELF_HASH] = manifest_digest(manifest)
    (store / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _foreign_image(store: Path) -> None:
    """The segments table rewritten (its hash recorded) for an image its part lacks."""
    import pyarrow.parquet as pq

    from sgdask.store.store import file_entry, parquet_bytes

    table = pq.read_table(store / SEGMENTS_REL)
    table = table.set_column(0, table.schema.field(0), [["zzz"] * len(table)])
    data = parquet_bytes(table)
    (store / SEGMENTS_REL).write_bytes(data)
    _rehashed(store, lambda m: m["files"].__setitem__(SEGMENTS_REL, file_entry(data)))


@pytest.mark.parametrize("damage, says", [
    (lambda s: (s / SEGMENTS_REL).unlink(), f"{SEGMENTS_REL}: corrupt (missing)"),
    (lambda s: (s / SEGMENTS_REL).write_bytes(b"garbage"), f"{SEGMENTS_REL}: corrupt (size"),
    (lambda s: _rehashed(s, lambda m: m["files"].pop(SEGMENTS_REL)),
     f"files: {SEGMENTS_REL} of part-00000 is not listed"),
    (lambda s: _rehashed(s, lambda m: m["parts"][0].pop("segments")),
     "whose entry in parts has no segments"),
    (lambda s: _rehashed(s, lambda m: m.__setitem__("format_version", 6)),
     "part-00000 has segments, which a version 6 store cannot hold"),
    (_foreign_image, f"{SEGMENTS_REL}: corrupt (its images must be the part's"),
], ids=["deleted", "garbage", "unlisted", "unflagged", "version-6", "foreign-image"])
def test_damaged_segments_table_is_one_line(damage, says, hand_gt, tmp_path, capsys, client):
    """A store's segments table (format 7) is trusted no more than its other files: missing,
    damaged, unlisted or inconsistent, evaluation refuses the store in one line naming it;
    intact, ``sgdask verify`` finds nothing."""
    store = tmp_path / "store"
    manifest = _converted(_unnamed_colours(tmp_path / "sub", 3), hand_gt, store)
    assert manifest["format_version"] == 7 and manifest["parts"][0]["segments"] is True
    assert run_main(capsys, "verify", str(store))[0] == 0
    damage(store)
    code, _, err = run_main(capsys, "evaluate", "--gt", hand_gt, "--pred", str(store),
                            "--scheduler", client.scheduler.address, "--out",
                            str(tmp_path / "out"))
    lines = [line for line in err.splitlines() if line.startswith("sgdask: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert str(store) in lines[0] and says in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_unnamed_colour_grade_py_stops_on(hand_gt, tmp_path):
    """grade.py stops (KeyError) on an unlisted colour whose id % 1000 is above the category
    count (7 of 3 here): refused in one line."""
    text = _error(hand_gt, _unnamed_colours(tmp_path, 7))
    assert "panseg/0.png" in text and "image img" in text and "segments_info" in text
    assert "colour 7" in text and "category index 7" in text, text


def test_entry_count_must_match_the_gt(hand_gt, tmp_path):
    sub = _hand_submission(tmp_path, [HIT])
    doc = json.loads((sub / "relation.json").read_text())
    (sub / "relation.json").write_text(json.dumps(doc * 2))
    text = _error(hand_gt, sub)
    assert "relation.json" in text and "holds 2 entries" in text and "by position" in text


def test_png_of_another_size(hand_gt, tmp_path):
    sub = _hand_submission(tmp_path, [HIT])
    (sub / "panseg" / "0.png").write_bytes(colour_png(np.zeros((H, W + 1), int),
                                                      np.array([7])))
    text = _error(hand_gt, sub)
    assert "panseg/0.png" in text and "image img" in text and "13x8" in text


def test_png_not_rgb(hand_gt, tmp_path):
    from PIL import Image

    sub = _hand_submission(tmp_path, [HIT])
    Image.fromarray(np.zeros((H, W), np.uint8)).save(sub / "panseg" / "0.png")
    assert "a L PNG" in _error(hand_gt, sub)


def test_limits(hand_gt, tmp_path):
    sub = _hand_submission(tmp_path, [HIT])
    assert "max_layer_pixels" in _error(hand_gt, sub, ArchiveLimits(max_layer_pixels=50))
    assert "max_member_size" in _error(hand_gt, sub, ArchiveLimits(max_member_size=10))
    assert "max_instances_per_image" in _error(hand_gt, sub,
                                               ArchiveLimits(max_instances_per_image=1))
    packed = _zipped(sub, tmp_path / "s.zip")
    assert "max_entries" in _error(hand_gt, packed, ArchiveLimits(max_entries=1))


def test_zip_without_one_relation_json(hand_gt, tmp_path):
    sub = _hand_submission(tmp_path / "a", [HIT])
    shutil.copytree(sub, tmp_path / "b" / "b")
    shutil.copytree(sub, tmp_path / "b" / "c")
    packed = _zipped(tmp_path / "b", tmp_path / "two.zip")
    text = _error(hand_gt, packed)
    assert "two.zip" in text and "holds 2 relation.json" in text


# --------------------------------------------------------------------------- the service


@pytest.mark.timeout(300)
def test_a_phase_taking_psg_challenge_files(hand_gt, client, tmp_path):
    """`upload: psg-challenge`: a ZIP of relation.json and panseg/ is checked, converted
    and ranked with grade.py's numbers; anything else is rejected in one line naming the
    upload."""
    benchmark = tmp_path / "challenge.yaml"
    benchmark.write_text(f"""title: PSG challenge
phases:
  - {{name: psg, gt: {hand_gt}, protocols: [multimpo], headline: mR@20,
      upload: psg-challenge}}
""")
    tokens = tmp_path / "tokens.json"
    team = add_token(tokens, "team-a", "participant")
    proc = Proc(["serve", "--registry", str(tmp_path / "registry"), "--out",
                 str(tmp_path / "board"), "--benchmark", str(benchmark), "--tokens",
                 str(tokens), "--port", "0", "--scheduler", client.scheduler.address,
                 "--poll", "0.2"], tmp_path / "serve.log")
    try:
        base = proc.url()
        packed = _zipped(_hand_submission(tmp_path / "sub", [*WRONG[:3], HIT]),
                         tmp_path / "model.zip", "submission/")
        sid = upload(base, team, packed, "psg model", phase="psg").json()["id"]
        done = wait_final(base, team, sid, 180)
        assert done["status"] == "ranked", proc.text()[-2000:]
        # grade.py's three numbers on the status page; the board ranks by mR@20
        assert [done["metrics"][m] for m in ("R@20", "mR@20", "PQ")] == [1.0, 1 / 56, 1.0]
        [row] = httpx.get(f"{base}/api/leaderboard?phase=psg", timeout=30).json()
        assert row["metrics"]["mR@20"] == 1 / 56

        # pixels of no listed segment: the ranked store's PQ is grade.py's, and the warning
        # says how grade.py reads them
        packed = _zipped(_unnamed_colours(tmp_path / "unnamed", 3), tmp_path / "u.zip")
        sid = upload(base, team, packed, "unnamed colours", phase="psg").json()["id"]
        done = wait_final(base, team, sid, 180)
        assert done["status"] == "ranked", proc.text()[-2000:]
        assert done["metrics"]["PQ"] * 100 == pytest.approx(GRADE_PY_UNNAMED["PQ"],
                                                            rel=1e-15, abs=0)
        assert any("1 of 1 PNGs hold pixels in no listed segment" in w
                   for w in done["warnings"]), done["warnings"]

        other = tmp_path / "sgbench.json"
        other.write_text(json.dumps({"version": 2, "images": []}))
        sid = upload(base, team, other, "not one", phase="psg").json()["id"]
        final = wait_final(base, team, sid, 180)
        assert final["status"] == "rejected"
        assert final["errors"] == [
            "error: sgbench.json: not a PSG-challenge submission (expected a ZIP of "
            "relation.json and its panseg/ PNGs, as OpenPSG's save_results writes them)"]
    finally:
        proc.stop()
