"""The evaluation unit: a toy grouped protocol (frames grouped into videos) resamples videos.

The toy protocol is ``singlempo`` with ``unit="video"``, registered for these tests only.
Its GT store records each frame's video (store format 6); intervals and ``compare`` draw
videos, each carrying all its frames' terms.

Hand case (``hand_records``): two videos ``va`` and ``vb`` of three frames each, one GT
relation per frame. Model A gets every frame wrong (R@20 = 0 on each), model B gets the
frames of ``va`` right and those of ``vb`` wrong, so R@20(B) = 3/6 = 1/2, R@20(A) = 0, and
the difference B - A is 1/2.

- Intervals of R@20(B), 95 %, by video: a resample draws two videos, giving R = 1 (va, va),
  1/2 (va, vb or vb, va) or 0 (vb, vb), with probabilities 1/4, 1/2, 1/4. About 250 of 1000
  resamples are 0 and about 250 are 1, far more than the 25 the 2.5th and 97.5th
  percentiles look at: the interval is exactly [0, 1].
- By frame (the same data under ``singlempo``): R = (frames drawn from va) / 6 with
  Binomial(6, 1/2) frames: P(0) = 1/64 (about 16 of 1000 resamples, under 25), P(<= 1/6) =
  7/64 (about 109, over 25): the 2.5th percentile lies between two resamples of 1/6, so it
  is exactly 1/6, and symmetrically the 97.5th is 5/6: [1/6, 5/6].
- Paired test B vs A, by video: a permutation swaps whole videos; swapping va gives
  d = -1/2, swapping vb changes nothing (both 0 there), so every permutation has |d| = 1/2
  >= 1/2 and p = (1 + P) / (1 + P) = 1.
- By frame: swapping k of va's 3 frames gives d = (3 - 2k) / 6, |d| >= 1/2 only for k = 0
  or 3: probability 1/4, so p is about 1/4 (1000 permutations: 0.25 +- 0.014).
- The interval of the difference is [0, 1] by video (d in {1, 1/2, 0} as above) and
  [1/6, 5/6] by frame.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdask.errors import SgdaskError
from sgdask.formats.ingest import convert_images
from sgdask.formats.psg import GTRecord, write_gt_store
from sgdask.formats.sgbench import SubmissionImage
from sgdask.io.units import grouped_chunks
from sgdask.metrics.base import IMAGE, MEAN, Block
from sgdask.protocols import PROTOCOLS, SINGLEMPO, register, unregister
from sgdask.report import Report, interval_caption
from sgdask.stats.bootstrap import Scoring, bootstrap
from sgdask.stats.paired import Model, compare
from sgdask.stats.table import TermTable
from sgdask.store.training_stats import STATS_SCHEMA
from sgdask.store.verify import verify_store

TOY = replace(SINGLEMPO, name="toyvideo", version="0", unit="video",
              description="singlempo, resampled by video (tests only)")
VIDEOS = {"va": ["va-0", "va-1", "va-2"], "vb": ["vb-0", "vb-1", "vb-2"]}
BOXES = np.array([[0.0, 0.0, 10.0, 10.0], [20.0, 0.0, 30.0, 10.0]])
RESAMPLES, PERMUTATIONS = 1000, 1000


@pytest.fixture(autouse=True)
def toy_protocol():
    """The toy grouped protocol, registered like any protocol for this process (and its
    threaded workers), and gone after each test."""
    register(TOY)
    yield TOY
    unregister(TOY.name)
    assert TOY.name not in PROTOCOLS


def hand_records() -> list[GTRecord]:
    """Six frames of two videos: two boxes, one relation (0, 1, predicate 0) each."""
    return [GTRecord(frame, 40, 40, np.array([0, 1]), BOXES.copy(), None,
                     np.array([[0, 1, 0]]), None, units={"video": video})
            for video, frames in VIDEOS.items() for frame in frames]


def write_gt(path: Path, records: list[GTRecord], partition_size: int = 6) -> str:
    write_gt_store(str(path), None, False, records, STATS_SCHEMA.empty_table(),
                   partition_size, None, None, None, hashlib.sha256(b"toy videos"),
                   source="toy", instances="boxes", thing_classes=["a", "b"],
                   stuff_classes=[], predicate_classes=["p0", "p1"])
    return str(path)


def write_model(path: Path, gt: str, right: set[str]) -> str:
    """A box submission: the GT boxes, the relation's predicate right on ``right``."""
    images = [SubmissionImage(frame, np.array([0, 1]), BOXES.copy(), np.array([1.0, 1.0]),
                              np.array([[0, 1, 0 if frame in right else 1]]), None,
                              np.empty((0, 3), dtype=np.int64), None)
              for frames in VIDEOS.values() for frame in frames]
    source = path.with_suffix(".json")  # the content hash is the source file's
    source.write_text(json.dumps({i.image_id: i.graph.tolist() for i in images}))
    convert_images(images, str(path), gt, None, source=str(source), has_ng=False)
    return str(path)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture
def hand(tmp_path):
    gt = write_gt(tmp_path / "gt", hand_records())
    return (gt, write_model(tmp_path / "a", gt, set()),
            write_model(tmp_path / "b", gt, set(VIDEOS["va"])))


def test_the_store_records_each_frames_video(hand):
    gt, _, _ = hand
    manifest = json.loads(Path(gt, "manifest.json").read_text())
    assert manifest["format_version"] == 6 and manifest["units"] == ["video"]
    images = pq.read_table(Path(gt, "images", "part-00000.parquet"))
    assert dict(zip(images["image_id"].to_pylist(), images["video_id"].to_pylist(),
                    strict=True)) == {f: v for v, fs in VIDEOS.items() for f in fs}
    assert verify_store(gt).problems == []
    # a submission store records no units: written as before (format 5)
    assert json.loads(Path(hand[1], "manifest.json").read_text())["format_version"] == 5


@pytest.mark.timeout(120)
def test_intervals_resample_videos_and_reach_metrics_json(hand, client, tmp_path):
    """The hand case's intervals (module docstring): [0, 1] by video, [1/6, 5/6] by frame,
    the same point value; metrics.json says the unit; per-image rows name the video."""
    from sgdask.pipeline import evaluate_protocols

    gt, _, b = hand
    reports = evaluate_protocols(gt, b, "singlempo,toyvideo", client=client, ci=0.95,
                                 resamples=RESAMPLES, seed=0)
    by_frame, by_video = reports["singlempo"], reports["toyvideo"]
    assert by_frame.metrics["R@20"] == by_video.metrics["R@20"] == 0.5
    assert by_video.intervals["R@20"] == [0.0, 1.0]
    assert by_frame.intervals["R@20"] == pytest.approx([1 / 6, 5 / 6], abs=1e-12)
    assert by_video.ci["unit"] == "video" and by_frame.ci["unit"] == "image"
    assert "bootstrap over videos" in interval_caption(by_video.ci)
    assert "bootstrap over images" in interval_caption(by_frame.ci)
    by_video.write(str(tmp_path / "out"))
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert written["ci"]["unit"] == "video" and written["intervals"]["R@20"] == [0.0, 1.0]
    assert written["protocol"]["unit"] == "video"
    rows = pq.read_table(tmp_path / "out" / "per_image.parquet").to_pylist()
    assert {r["image_id"]: r["video_id"] for r in rows} == {
        f: v for v, fs in VIDEOS.items() for f in fs}
    back = Report.read(str(tmp_path / "out"))
    assert back.terms is not None and back.terms.unit == "video"
    assert back.terms.units.tolist() == ["va"] * 3 + ["vb"] * 3


@pytest.mark.timeout(120)
def test_compare_draws_and_swaps_videos(hand, client):
    """The hand case's paired test (module docstring): p = 1 by video, about 1/4 by frame;
    the difference's interval [0, 1] by video, [1/6, 5/6] by frame."""
    from sgdask.batch.compare import CompareJob, run_compare

    gt, a, b = hand
    found = {}
    for protocol in ("toyvideo", "singlempo"):
        job = CompareJob(gt, [("A", [a]), ("B", [b])], protocol=protocol,
                         resamples=RESAMPLES, permutations=PERMUTATIONS, metrics="R@20")
        comparison = run_compare(job, client)
        [row] = [r for r in comparison.rows if r["metric"] == "R@20"]
        found[protocol] = (row, comparison.settings)
    video, settings_video = found["toyvideo"]
    frame, settings_frame = found["singlempo"]
    assert video["delta"] == frame["delta"] == 0.5
    assert video["p_value"] == 1.0
    assert 0.15 < frame["p_value"] < 0.35
    assert (video["ci_low"], video["ci_high"]) == (0.0, 1.0)
    assert (frame["ci_low"], frame["ci_high"]) == pytest.approx((1 / 6, 5 / 6), abs=1e-12)
    assert settings_video["unit"] == "video" and settings_video["units"] == 2
    assert "over videos" in settings_video["method"]
    assert settings_frame["unit"] == "image" and "units" not in settings_frame


def test_a_videos_frames_stay_in_one_part(tmp_path):
    """Parts are cut where the video changes (4 images a part: one video each, not 4 + 2);
    a video longer than a part takes whole parts (2 a part: 2 + 1 frames of each video)."""
    gt = write_gt(tmp_path / "gt4", hand_records(), partition_size=4)
    parts = json.loads(Path(gt, "manifest.json").read_text())["parts"]
    assert [(p["first_id"], p["last_id"]) for p in parts] == [("va-0", "va-2"),
                                                             ("vb-0", "vb-2")]
    assert grouped_chunks(list("aabbbbbcd"), list("aabbbbbcd"), 3) == [
        ["a", "a"], ["b", "b", "b"], ["b", "b", "c"], ["d"]]
    assert grouped_chunks(list("aabbbbbcd"), None, 3) == [list("aab"), list("bbb"),
                                                          list("bcd")]


def test_a_grouped_protocol_needs_a_store_that_records_its_unit(tmp_path, client):
    from sgdask.pipeline import evaluate

    records = [replace(r, units={}) for r in hand_records()]
    gt = write_gt(tmp_path / "gt", records)
    assert json.loads(Path(gt, "manifest.json").read_text())["format_version"] == 5
    pred = write_model(tmp_path / "b", gt, set())
    with pytest.raises(SgdaskError, match="records no video of its images"):
        evaluate(gt, pred, "toyvideo", client=client)


def test_every_frame_names_the_same_units(tmp_path):
    records = hand_records()
    records[2] = replace(records[2], units={})
    with pytest.raises(SgdaskError, match="image va-2: units"):
        write_gt(tmp_path / "gt", records)


def test_the_grouping_is_part_of_the_gt_content_hash(tmp_path):
    regrouped = [replace(r, units={"video": "v" + r.image_id[-1]}) for r in hand_records()]
    hashes = [json.loads(Path(write_gt(tmp_path / name, records), "manifest.json")
                         .read_text())["content_hash"]
              for name, records in (("a", hand_records()), ("b", regrouped))]
    assert hashes[0] != hashes[1]


@pytest.mark.timeout(120)
def test_partitioning_the_store_changes_nothing(tmp_path, client):
    """GT parts of 1, 2 or 6 frames (a video cut across parts): the same intervals, to the
    bit (units travel with each frame's terms; the resampling runs on the merged table)."""
    from sgdask.pipeline import evaluate

    found = []
    for size in (1, 2, 6):
        gt = write_gt(tmp_path / f"gt{size}", hand_records(), partition_size=size)
        b = write_model(tmp_path / f"b{size}", gt, set(VIDEOS["va"]) | {"vb-1"})
        report = evaluate(gt, b, "toyvideo", client=client, ci=0.9, resamples=200, seed=3)
        found.append((report.metrics, report.intervals, report.ci))
    assert found[0] == found[1] == found[2]


# ------------------------------------------------------------------ property (stats level)

def frame_table(frames: list[tuple[str, str, int, int, int]]) -> TermTable:
    """A partition's terms: per frame (id, video, hits, GT triplets, predicate) an image
    metric R@20 and a mean metric mR@20 of one predicate."""
    n = len(frames)
    image = np.arange(n)
    num = np.array([f[2] for f in frames])
    den = np.array([f[3] for f in frames])
    blocks = [Block("R@20", IMAGE, image, num, den),
              Block("mR@20", MEAN, image, num, den, np.array([f[4] for f in frames]))]
    return TermTable.from_blocks([f[0] for f in frames], blocks, "video",
                                 [f[1] for f in frames])


@st.composite
def grouped_frames(draw):
    n_videos = draw(st.integers(1, 5))
    frames = []
    for v in range(n_videos):
        for f in range(draw(st.integers(1, 4))):
            den = draw(st.integers(1, 3))
            frames.append((f"f{v}-{f}", f"video{v}", draw(st.integers(0, den)), den,
                           draw(st.integers(0, 2))))
    return frames


def intervals_of(tables: list[TermTable]) -> tuple:
    table = TermTable.concat(tables)
    found = bootstrap(table, Scoring(), 0.9, 60, 1)
    return found.metrics, found.predicates, found.settings()


@settings(max_examples=25, deadline=None)
@given(grouped_frames(), st.randoms(use_true_random=False))
def test_reordering_and_repartitioning_frames_changes_nothing(frames, rnd):
    """Frames and videos in any order, cut into any partitions: the same intervals and
    p-values, to the bit."""
    reference = intervals_of([frame_table(frames)])
    shuffled = list(frames)
    rnd.shuffle(shuffled)
    cuts = sorted(rnd.sample(range(1, len(shuffled)), k=min(2, len(shuffled) - 1))) \
        if len(shuffled) > 1 else []
    parts = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
    assert intervals_of([frame_table(p) for p in parts if p]) == reference
    assert reference[2]["unit"] == "video"
    other = [(f[0], f[1], f[3] - f[2], f[3], f[4]) for f in frames]
    runs = [[frame_table(frames)], [frame_table(other)]]
    reordered = [[frame_table(p) for p in parts if p], [frame_table(other[::-1])]]
    p_values = [compare([Model("a", [TermTable.concat(r[0])]),
                         Model("b", [TermTable.concat(r[1])])], [(0, 1)], Scoring(),
                        resamples=40, permutations=40).rows for r in (runs, reordered)]
    assert p_values[0] == p_values[1]


@settings(max_examples=15, deadline=None)
@given(grouped_frames())
def test_one_frame_per_video_is_the_per_image_bootstrap(frames):
    """Each frame its own video (named so that videos sort as frames do): the per-image
    bootstrap's intervals, bit for bit."""
    alone = [(f[0], "v" + f[0], *f[2:]) for f in frames]
    grouped = bootstrap(TermTable.concat([frame_table(alone)]), Scoring(), 0.9, 60, 2)
    plain_table = TermTable.concat([frame_table(alone)])
    plain_table.units, plain_table.unit = None, "image"
    plain = bootstrap(plain_table, Scoring(), 0.9, 60, 2)
    assert (grouped.metrics, grouped.predicates) == (plain.metrics, plain.predicates)
    assert grouped.unit == "video" and plain.unit == "image"
