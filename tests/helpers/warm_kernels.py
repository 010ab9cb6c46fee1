"""Compile sgdask's numba kernels into numba's cache once, before the test processes start.

``python -m tests.helpers.warm_kernels`` (``make test`` and ``make test-slow`` run it beside
ruff and the docs build). In a fresh clone numba's cache is empty, and every process of the
suite (two xdist workers, their clusters' worker processes, each command a test runs in a
fresh process) compiled the kernels it met itself, the same kernels many times at once:
40 CPU-s for one evaluation's kernels alone. Here each code path runs once on a few
generated images (every image protocol on masks and on boxes, a submission's check, Open
Images, Action Genome, PVSG, COCO panoptic PNGs), in one process and one thread; what it
compiles is written to the cache the tests then load. It checks nothing: the tests do.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sgdask.formats.actiongenome import ingest_ag
from sgdask.formats.oiv6 import ingest_oi
from sgdask.formats.psg import ingest_gt
from sgdask.formats.pvsg import ingest_pvsg
from sgdask.formats.results import ResultsMethod
from sgdask.formats.sgbench import convert_submission, validate_submission
from sgdask.pipeline import evaluate_protocols
from sgdask.pq import evaluate_pq
from sgdask.testing.ag import write_ag
from sgdask.testing.coco import write_coco_panoptic
from sgdask.testing.oi import write_oi_dataset
from sgdask.testing.psg import write_dataset
from sgdask.testing.pvsg import write_pvsg
from sgdask.thread_client import ThreadClient

IMAGE_PROTOCOLS = "singlempo,multimpo,sgbench,sgbench2,sgbpytorch"


def _psg(root: Path, client: ThreadClient) -> None:
    """Scene graph images: PNG ingest, TIFF conversion, a submission's check, every image
    protocol on masks and on boxes."""
    paths = write_dataset(root / "raw", n_images=6, seed=1, height=48, width=64,
                          missing_fraction=0.2, no_relation_fraction=0.2)
    gt, gt_boxes = str(root / "gt"), str(root / "gt_boxes")
    ingest_gt(str(paths.psg_json), gt, str(paths.masks_dir))
    ingest_gt(str(paths.psg_json), gt_boxes, None)
    validate_submission(str(paths.submission_zip), gt)
    for submission, store, truth in ((paths.submission_zip, "pred", gt),
                                     (paths.submission_boxes, "pred_boxes", gt_boxes)):
        convert_submission(str(submission), str(root / store), truth)
        evaluate_protocols(truth, str(root / store), IMAGE_PROTOCOLS, client=client)


def _open_images(root: Path, client: ThreadClient) -> None:
    paths = write_oi_dataset(root / "raw", n_test=8, n_train=4, seed=1)
    gt, pred = str(root / "gt"), str(root / "pred")
    ingest_oi(str(paths.anno), gt)
    convert_submission(str(paths.submission), pred, gt, from_scores=str(paths.scores))
    evaluate_protocols(gt, pred, "oiv6", client=client)


def _action_genome(root: Path, client: ThreadClient) -> None:
    data = write_ag(root, videos=2, frames=3, seed=1)
    a, gt = data / "annotations", str(root / "gt.store")
    ingest_ag(str(a / "object_bbox_and_relationship.pkl"), gt, str(a / "person_bbox.pkl"),
              str(a / "frame_list.txt"))
    for setting in ("predcls", "sgcls", "sgdet"):
        evaluate_protocols(gt, str(data / f"predictions_{setting}.pkl"), "ag", client=client,
                           method=ResultsMethod("tempura"))


def _pvsg(root: Path, client: ThreadClient) -> None:
    raw = write_pvsg(root, n_videos=2, n_frames=4, seed=1)
    gt = str(root / "gt.store")
    ingest_pvsg(str(raw.annotation), gt, str(raw.data_dir))
    evaluate_protocols(gt, str(raw.results), "pvsg,pvsg-oneweak", client=client)


def _coco_panoptic(root: Path, client: ThreadClient) -> None:
    files = write_coco_panoptic(root, n_images=3, seed=1, height=40, width=48, cell=4)
    evaluate_pq(str(files.gt_json), str(files.gt_masks), str(files.pred_json),
                str(files.pred_masks), client)


#: two groups of about equal compile time, warmed by two processes at once
GROUPS = {"images": (_psg,), "others": (_open_images, _action_genome, _pvsg, _coco_panoptic)}


def _warm(group: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sgdask-warm-") as tmp, ThreadClient(1) as client:
        for path in GROUPS[group]:
            folder = Path(tmp) / path.__name__.strip("_")
            folder.mkdir()
            path(folder, client)


def main(argv: list[str]) -> int:
    """``GROUP``: warm that group here; no argument: every group, each in a process."""
    if argv:
        _warm(argv[0])
        return 0
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.warm_kernels", group])
             for group in GROUPS]
    failed = [p.args[-1] for p in procs if p.wait() != 0]
    print(f"numba's cache warmed in {time.perf_counter() - start:.1f} s"
          + (f" ({', '.join(failed)} failed: the tests will compile what it did not)"
             if failed else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
