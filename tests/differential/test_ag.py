"""Action Genome: the literal twin (``tests/literal/ag.py``) against the numbers STTran's and
TEMPURA's own code printed (``fixtures/ag_golden.json``), hand cases from the definition,
the generator, and the readers' one-line errors."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from sgdask.errors import InputError, SettingError
from sgdask.io.actiongenome import gt_videos, read_gt, read_predictions, softmax
from sgdask.io.archive import ArchiveLimits
from sgdask.testing.ag import annotations, predictions, write_ag
from sgdask.types_ag import PREDICATES, AGFrame, AGVideo, AGVideoPred
from tests.literal.ag import evaluate

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "ag_golden.json"
FILES = ("annotations/object_bbox_and_relationship.pkl", "annotations/person_bbox.pkl",
         "predictions_predcls.pkl", "predictions_sgcls.pkl", "predictions_sgdet.pkl")


@pytest.fixture(scope="module")
def golden_data(tmp_path_factory) -> tuple[dict, Path, list[AGVideo]]:
    golden = json.loads(GOLDEN.read_text())
    root = write_ag(tmp_path_factory.mktemp("ag"), **golden["generator_args"])
    a = root / "annotations"
    gt = read_gt(str(a / "object_bbox_and_relationship.pkl"), str(a / "person_bbox.pkl"),
                 str(a / "frame_list.txt"))
    return golden, root, gt


def test_generated_files_are_the_golden_ones(golden_data):
    """Same generator arguments, same bytes: the files the reference read."""
    golden, root, gt = golden_data
    assert {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in FILES} \
        == golden["sha256"]
    assert (len(gt), sum(len(v.frames) for v in gt)) == (golden["videos"], golden["frames"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("setting", ["predcls", "sgcls", "sgdet"])
def test_literal_twin_equals_the_reference(golden_data, setting):
    """R@10/20/50/100 (STTran's evaluate_from_dict) and mR@k (TEMPURA's calc_mrecall) under
    the three constraints, to 1e-9, on 30 videos and 269 frames."""
    golden, root, gt = golden_data
    preds = read_predictions(str(root / f"predictions_{setting}.pkl"), gt, setting)
    for constraint in ("with", "semi", "no"):
        expected = golden["metrics"][f"{setting}/{constraint}"]
        got = evaluate(gt, preds, constraint)
        assert got.keys() == expected.keys()
        assert max(abs(got[m] - expected[m]) for m in got) < 1e-9, (setting, constraint)


# --------------------------------------------------------------------------- hand cases


def _hand(person_box=(0.0, 0.0, 9.0, 9.0), spatial_first=(0.1, 0.2)) -> tuple:
    """One frame: a person and a book (class 5) with looking_at, in_front_of and holding;
    one predicted pair on the GT boxes (PredCls): looking_at 0.7; in_front_of 0.95, in
    0.92; carrying 0.93, holding 0.85."""
    frame = AGFrame("v.mp4/000001.png", np.array([[0, 0, 9, 9], [20, 20, 29, 29]], float),
                    np.array([1, 5]), np.array([[0, 1, 0], [1, 0, 5], [0, 1, 14]]))
    spatial = np.array([[*spatial_first, 0.95, 0.3, 0.1, 0.92]])
    contacting = np.full((1, 17), 0.01)
    contacting[0, 0], contacting[0, 5] = 0.93, 0.85  # carrying, holding
    pred = AGVideoPred(np.array([person_box, [20, 20, 29, 29]], float), np.array([1, 5]),
                       np.array([1.0, 1.0], np.float32), np.array([[0, 1]]), np.array([0]),
                       np.array([[0.7, 0.2, 0.1]]), spatial, contacting)
    return [AGVideo("v.mp4", (frame,))], {"v.mp4": pred}


def test_hand_with_constraint():
    """Each row's best predicate: in_front_of (0.95, hit), carrying (0.93, miss), looking_at
    (0.7, hit); holding is never predicted."""
    got = evaluate(*_hand(), "with", ks=(1, 2, 3, 100))
    assert [got[f"R@{k}"] for k in (1, 2, 3, 100)] == [1 / 3, 1 / 3, 2 / 3, 2 / 3]
    assert got["mR@100"] == 2 / len(PREDICATES)


def test_hand_semi_constraint():
    """Attention: its best; spatial and contacting: every score above 0.9, so in (0.92) too,
    and holding (0.85) still not."""
    got = evaluate(*_hand(), "semi", ks=(1, 3, 4, 100))
    assert [got[f"R@{k}"] for k in (1, 3, 4, 100)] == [1 / 3, 1 / 3, 2 / 3, 2 / 3]


def test_hand_no_constraint():
    """Every (row, predicate) ranked: holding (0.85) comes fourth and hits."""
    got = evaluate(*_hand(), "no", ks=(1, 3, 4, 5))
    assert [got[f"R@{k}"] for k in (1, 3, 4, 5)] == [1 / 3, 1 / 3, 2 / 3, 1.0]
    assert (got["mR@4"], got["mR@5"]) == (2 / 26, 3 / 26)


def test_hand_semi_drops_rows_whose_first_two_scores_are_zero():
    """A spatial row with above = beneath = 0 is neither attention, spatial nor contacting to
    the reference's test: semi-constraint drops it (in_front_of 0.95 lost); with keeps it."""
    videos, preds = _hand(spatial_first=(0.0, 0.0))
    assert evaluate(videos, preds, "semi", ks=(100,))["R@100"] == 1 / 3
    assert evaluate(videos, preds, "with", ks=(100,))["R@100"] == 2 / 3


def test_hand_iou_counts_pixels_inclusively():
    """Person box (0, 0, 9, 4) against (0, 0, 9, 9): 50 / 100 pixels with +1, IoU exactly
    0.5, a hit (36 / 81 without +1 would miss)."""
    assert evaluate(*_hand(person_box=(0.0, 0.0, 9.0, 4.0)), "with", ks=(3,))["R@3"] == 2 / 3
    assert evaluate(*_hand(person_box=(0.0, 0.0, 9.0, 3.0)), "with", ks=(3,))["R@3"] == 0.0


def test_hand_mean_recall_pools_frames_per_predicate():
    """A second frame with two looking_at relations, one hit (the other object's box is
    off): looking_at's recall is 2/3 pooled over the frames (3/4 averaged per frame)."""
    videos, preds = _hand()
    two = AGFrame("v.mp4/000002.png", np.array([[0, 0, 9, 9], [20, 20, 29, 29],
                                                [40, 40, 49, 49]], float),
                  np.array([1, 5, 5]), np.array([[0, 1, 0], [0, 2, 0]]))
    p = preds["v.mp4"]
    boxes = np.vstack([p.boxes, [[0, 0, 9, 9], [20, 20, 29, 29], [60, 60, 69, 69]]])
    both = AGVideoPred(boxes, np.array([1, 5, 1, 5, 5]), np.ones(5, np.float32),
                       np.array([[0, 1], [2, 3], [2, 4]]), np.array([0, 1, 1]),
                       np.repeat(p.attention, 3, 0), np.repeat(p.spatial, 3, 0),
                       np.repeat(p.contacting, 3, 0))
    got = evaluate([AGVideo("v.mp4", (videos[0].frames[0], two))], {"v.mp4": both}, "with",
                   ks=(100,))
    assert got["R@100"] == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-15)
    assert got["mR@100"] == pytest.approx((2 / 3 + 1 + 0) / 26, abs=1e-15)


def test_hand_ties_keep_candidate_order():
    """Equal scores rank in candidate order (attention rows, then spatial, then
    contacting): with looking_at and in_front_of both at 0.9, R@1 is looking_at's hit."""
    videos, preds = _hand()
    p = preds["v.mp4"]
    tied = AGVideoPred(p.boxes, p.labels, p.scores, p.pairs, p.frames,
                       np.array([[0.9, 0.05, 0.05]]), np.array([[0.1, 0.2, 0.9, 0, 0, 0]]),
                       np.full((1, 17), 0.01))
    got = evaluate(videos, {"v.mp4": tied}, "with", ks=(1,))
    assert got["R@1"] == 1 / 3 and got["mR@1"] == 1 / 26


# --------------------------------------------------------------------------- generator


def test_generator_is_deterministic_and_shaped_like_action_genome():
    a = annotations(12, 5, seed=3)
    b = annotations(12, 5, seed=3)
    assert pickle.dumps(a) == pickle.dumps(b)
    objects, persons, frame_list = a
    assert list(objects) == list(persons) == frame_list
    gt = gt_videos(objects, persons)
    assert 0 < len(gt) < 12 and all(len(v.frames) >= 3 for v in gt)
    preds = predictions(gt, "sgdet", seed=3)
    assert pickle.dumps(preds) == pickle.dumps(predictions(gt, "sgdet", seed=3))
    arrays = preds[gt[0].name]
    assert arrays["boxes"].shape[1] == 5 and arrays["attention_distribution"].shape[1] == 3
    assert np.allclose(arrays["attention_distribution"].sum(1), 1, atol=1e-6)


def test_logits_are_softmaxed_as_sttran_does(golden_data):
    _, root, gt = golden_data
    arrays = pickle.loads((root / "predictions_predcls.pkl").read_bytes())
    for video in arrays.values():
        video["attention_distribution"] = np.log(video["attention_distribution"])
    path = root / "logits.pkl"
    path.write_bytes(pickle.dumps(arrays))
    probs = read_predictions(str(root / "predictions_predcls.pkl"), gt, "predcls")
    logits = read_predictions(str(path), gt, "predcls", attention="logits")
    for name, p in probs.items():
        assert np.allclose(p.attention, logits[name].attention, rtol=1e-6)
    assert softmax(np.zeros((1, 3), np.float32)).dtype == np.float32


# --------------------------------------------------------------------------- readers


def test_npz_directory_reads_as_the_pickle(golden_data, tmp_path):
    _, root, gt = golden_data
    arrays = pickle.loads((root / "predictions_sgdet.pkl").read_bytes())
    for name, fields in arrays.items():
        np.savez(tmp_path / f"{name}.npz", **fields)
    a = read_predictions(str(tmp_path), gt, "sgdet")
    b = read_predictions(str(root / "predictions_sgdet.pkl"), gt, "sgdet")
    assert a.keys() == b.keys()
    for name in a:
        for field in ("boxes", "labels", "scores", "pairs", "frames", "attention"):
            assert np.array_equal(getattr(a[name], field), getattr(b[name], field))


def _written(tmp_path: Path, name: str, value: object) -> str:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(value))
    return str(path)


def _one_line(err: pytest.ExceptionInfo, *parts: str) -> None:
    text = str(err.value)
    assert "\n" not in text and all(p in text for p in parts), text


def test_gt_errors_name_file_frame_and_field(tmp_path):
    objects, persons, _ = annotations(4, 4, seed=0)
    key = next(k for k, v in objects.items() if v[0]["visible"]
               and v[0]["metadata"]["set"] == "test")
    bad = {k: [dict(o) for o in v] for k, v in objects.items()}
    bad[key][0]["attention_relationship"] = ["staring"]
    persons_url = _written(tmp_path, "person_bbox.pkl", persons)
    with pytest.raises(InputError) as err:
        read_gt(_written(tmp_path, "objects.pkl", bad), persons_url)
    _one_line(err, "objects.pkl", key, "[0].attention_relationship", "'staring'",
              "looking_at")
    bad[key][0]["attention_relationship"] = ["looking_at", "unsure"]
    with pytest.raises(InputError) as err:
        gt_videos(bad, persons)
    _one_line(err, key, "2 relations", "exactly one")
    bad[key][0]["attention_relationship"] = ["looking_at"]
    bad[key][0]["bbox"] = None
    with pytest.raises(InputError) as err:
        gt_videos(bad, persons)
    _one_line(err, key, "[0].bbox", "x, y, w, h")
    two = dict(persons)
    two[key] = {"bbox": np.zeros((2, 4), np.float32)}
    with pytest.raises(InputError) as err:
        gt_videos(objects, two)
    _one_line(err, "person_bbox.pkl", key, "bbox", "(2, 4)")
    with pytest.raises(InputError) as err:
        gt_videos(objects, {**persons, "no-slash": persons[key]})
    _one_line(err, "person_bbox.pkl", "no-slash", "VIDEO/FRAME")


def test_frame_list_must_hold_every_frame(tmp_path):
    objects, persons, frame_list = annotations(4, 4, seed=0)
    listed = tmp_path / "frame_list.txt"
    listed.write_text("\n".join(frame_list[1:]))
    with pytest.raises(InputError) as err:
        read_gt(_written(tmp_path, "o.pkl", objects), _written(tmp_path, "p.pkl", persons),
                str(listed))
    _one_line(err, "p.pkl", frame_list[0], "not in the frame list")


def test_prediction_errors_name_file_video_and_field(golden_data, tmp_path):
    _, root, gt = golden_data
    arrays = pickle.loads((root / "predictions_sgcls.pkl").read_bytes())
    video = gt[0].name

    def fails(*parts: str, setting: str = "sgcls", **edit: object) -> None:
        changed = {**arrays, video: {**arrays[video], **edit}}
        with pytest.raises(InputError) as err:
            read_predictions(_written(tmp_path, "p.pkl", changed), gt, setting)
        _one_line(err, "p.pkl", f"video {video}", *parts)

    pairs = arrays[video]["pair_idx"].copy()
    pairs[1, 1] = 10_000
    fails("pair_idx[1]", "out of range", pair_idx=pairs)
    frames = arrays[video]["im_idx"].copy()
    frames[0] = len(gt[0].frames)
    fails("im_idx[0]", "not a frame of the video", im_idx=frames)
    fails("spatial_distribution", "shape", spatial_distribution=np.zeros((2, 5), np.float32))
    fails("pred_scores", "rows", pred_scores=np.ones(1, np.float32))
    nan = arrays[video]["attention_distribution"].copy()
    nan[2, 0] = np.nan
    fails("attention_distribution[2]", "not finite", attention_distribution=nan)
    fails("boxes", "dtype", boxes=arrays[video]["boxes"].astype(bool))
    missing = {k: v for k, v in arrays.items() if k != video}
    with pytest.raises(InputError) as err:
        read_predictions(_written(tmp_path, "m.pkl", missing), gt, "sgcls")
    _one_line(err, "m.pkl", f"video {video}", "no prediction")
    with pytest.raises(SettingError):
        read_predictions(str(root / "predictions_sgcls.pkl"), gt, "sgdett")


def test_pickles_run_nothing_and_respect_limits(golden_data, tmp_path):
    _, root, gt = golden_data

    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    with pytest.raises(InputError) as err:
        read_predictions(_written(tmp_path, "evil.pkl", {gt[0].name: Evil()}), gt, "predcls")
    _one_line(err, "evil.pkl", "builtins.print", "not allowed")
    with pytest.raises(InputError) as err:
        read_predictions(str(root / "predictions_predcls.pkl"), gt, "predcls",
                         limits=ArchiveLimits(max_pickle_objects=100))
    _one_line(err, "predictions_predcls.pkl", "more than 100 objects", "max_pickle_objects")
    (tmp_path / "t.pkl").write_bytes(b"PK\x03\x04rest")
    with pytest.raises(InputError) as err:
        read_predictions(str(tmp_path / "t.pkl"), gt, "predcls")
    _one_line(err, "torch.save", ".cpu().numpy()")


def test_limits_and_bad_npz_members(golden_data, tmp_path):
    _, root, gt = golden_data
    with pytest.raises(InputError) as err:
        read_predictions(str(root / "predictions_sgdet.pkl"), gt, "sgdet",
                         limits=ArchiveLimits(max_pairs_per_image=1))
    _one_line(err, "predictions_sgdet.pkl", "frame", "im_idx", "max_pairs_per_image")
    arrays = pickle.loads((root / "predictions_predcls.pkl").read_bytes())
    for name, fields in arrays.items():
        np.savez(tmp_path / f"{name}.npz", **fields)
    video = gt[1].name
    np.savez(tmp_path / f"{video}.npz", **{**arrays[video],
                                           "scores": np.array(["a"] * 3, dtype=object)})
    with pytest.raises(InputError) as err:
        read_predictions(str(tmp_path), gt, "predcls")
    _one_line(err, f"{video}.npz", "scores", "dtype object")
    (tmp_path / f"{video}.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError) as err:
        read_predictions(str(tmp_path), gt, "predcls")
    _one_line(err, f"{video}.npz", "not a readable ZIP")
