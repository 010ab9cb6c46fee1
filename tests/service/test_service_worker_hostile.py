"""The service worker under attack (issue 36): a submission's check and conversion run in
a job process under a memory cap, and one that needs more is rejected with the reason
(counting against the team's limits) instead of taking the machine; every error raised
away from the service reaches the status record as the command line's one line; every
``SgdaskError`` crosses processes whole. Real job processes, a real two-process Dask
cluster (the session's ``client``), real files."""

from __future__ import annotations

import inspect
import json
import pickle
import zipfile
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import sgdask.batch.cache
import sgdask.evaluator
import sgdask.store.lock
import sgdask.store.store
from sgdask import errors
from sgdask.batch.registry import Entry, Registry, utc_now
from sgdask.cli import main
from sgdask.errors import Choose, Hint, InputError, Option, RaiseLimit, SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.service import DEFAULT_MEMORY_CAP_MIB
from sgdask.service.limits import LimitReached, Limits, check_limits
from sgdask.service.queue import new_id, submission, submissions, upload_url
from sgdask.service.tokens import Account
from sgdask.service.worker import Worker, WorkerConfig
from tests.helpers import rewrite_zip, tiff_bytes

# --- every SgdaskError crosses processes -----------------------------------------------------

SAMPLES: dict[type, SgdaskError] = {
    SgdaskError: SgdaskError("--k: ", Option("ks", "K"), " is bad",
                             fix=Hint(("pass ", Option("gt"), " instead"))),
    errors.SettingError: errors.SettingError("ks", "'5O' is no k", fix=Choose("5O", ("50",))),
    InputError: InputError("s3://bucket/up.zip:triplets.json", "out of range", image="7",
                           field="triplets[0]", expected=RaiseLimit("max_entries", 10)),
    errors.StoreError: errors.StoreError("/srv/store: incomplete"),
    sgdask.evaluator.EvaluatorInputError: sgdask.evaluator.EvaluatorInputError(
        "update", "not a list", image="3", field="scores", expected="a list of floats"),
    sgdask.store.lock.LockHeld: sgdask.store.lock.LockHeld("held by another rerank"),
    sgdask.store.store.Corrupt: sgdask.store.store.Corrupt("/srv/store", "parts/0.parquet",
                                                      "corrupt (missing)"),
    sgdask.batch.cache.DamagedEntry: sgdask.batch.cache.DamagedEntry("k1", "a.json", "size"),
    sgdask.batch.cache.UncheckedEntry: sgdask.batch.cache.UncheckedEntry("k2"),
}


def every_error_class(cls: type = SgdaskError) -> list[type]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in every_error_class(direct))]


def sample(cls: type) -> SgdaskError:
    """The class's sample above, or one built from text for each required argument (a
    class added later is checked too)."""
    if cls in SAMPLES:
        return SAMPLES[cls]
    required = [p for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return cls(*(f"{p.name} value" for p in required))


class DecodeError(Exception):
    """A third-party exception as some codecs define them: its arguments are not what
    its ``__init__`` takes, so it pickles but cannot be unpickled."""

    def __init__(self, func: str, code: int) -> None:
        super().__init__(f"{func} returned {code}")


def raised(err: SgdaskError) -> None:
    """Raise ``err`` on a worker, from a ``DecodeError`` (as a reader wraps one)."""
    try:
        raise DecodeError("libdeflate_zlib_decompress", -2)
    except DecodeError as cause:
        raise err from cause


def same(a: SgdaskError, b: SgdaskError) -> None:
    assert type(a) is type(b)
    assert vars(a) == vars(b) and a.args == b.args
    for audience in ("cli", "api", "http"):
        assert a.render(audience) == b.render(audience)  # type: ignore[arg-type]


def test_every_sgdask_error_crosses_processes_whole(client):
    """Each subclass, raised in a task on a worker process (from a third-party exception
    that cannot be unpickled), arrives as itself: same class, fields and renderings."""
    with pytest.raises(TypeError):  # the hazard: such an exception cannot travel itself
        pickle.loads(pickle.dumps(DecodeError("inflate", -2)))
    classes = every_error_class()
    assert set(SAMPLES) <= set(classes)
    for cls in classes:
        err = sample(cls)
        same(pickle.loads(pickle.dumps(err)), err)
        future = client.submit(raised, err, pure=False)
        with pytest.raises(SgdaskError) as arrived:
            future.result()
        same(arrived.value, err)


# --- the hostile corpus: the service says what the command line says -------------------------


def first_image(tiny) -> dict:
    with zipfile.ZipFile(tiny.paths.submission_zip) as z:
        return json.loads(z.read("triplets.json"))["images"][0]


def corrupt_tiff(tiny, path: Path) -> Path:
    """The finding: a TIFF whose deflate stream libdeflate refuses."""
    image = first_image(tiny)
    with zipfile.ZipFile(tiny.paths.submission_zip) as z:
        data = bytearray(z.read(image["seg_filename"]))
    middle = len(data) // 2
    data[middle:middle + 40] = bytes(b ^ 0x5A for b in data[middle:middle + 40])
    return rewrite_zip(tiny.paths.submission_zip, path,
                       replace={image["seg_filename"]: bytes(data)})


def layer_count(tiny, path: Path) -> Path:
    image = first_image(tiny)
    layers = np.zeros((len(image["annotation"]) + 2, 64, 80), dtype=np.uint8)
    return rewrite_zip(tiny.paths.submission_zip, path,
                       replace={image["seg_filename"]: tiff_bytes(layers)})


def edited(edit):
    def build(tiny, path: Path) -> Path:
        return rewrite_zip(tiny.paths.submission_zip, path, edit)
    return build


def index_out_of_range(doc: dict) -> None:
    doc["images"][0]["triplets"][0] = [0, 99, 1]


def unknown_image(doc: dict) -> None:
    doc["images"][0]["id"] = "no-such-image"


def version_3(doc: dict) -> None:
    doc["version"] = 3


def tiff_missing(tiny, path: Path) -> Path:
    path.write_bytes(tiny.broken().read_bytes())
    return path


def not_json(tiny, path: Path) -> Path:
    return rewrite_zip(tiny.paths.submission_zip, path,
                       replace={"triplets.json": b'{"version": 1, "images": [}'})


def not_a_zip(tiny, path: Path) -> Path:
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    return path


CORPUS = {"corrupt-tiff": corrupt_tiff, "layer-count": layer_count,
          "index-out-of-range": edited(index_out_of_range),
          "unknown-image": edited(unknown_image), "version-3": edited(version_3),
          "tiff-missing": tiff_missing, "not-json": not_json, "not-a-zip": not_a_zip}


def cli_line(bad: Path, gt: str, capsys) -> str:
    """``sgdask convert``'s one error line for ``bad``, its path as the service names it
    (the name it was uploaded under)."""
    with pytest.raises(SystemExit) as done:
        main(["convert", str(bad), "--gt", gt, "--out", str(bad.with_suffix(".store")),
              "--in-process"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("sgdask: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return "error: " + lines[0].removeprefix("sgdask: error: ").replace(str(bad), bad.name)


def queued(registry: Registry, data: bytes, filename: str, team: str = "team-a") -> str:
    """An upload as the server leaves it: its bytes in ``uploads/``, its entry received."""
    sid = new_id(utc_now())
    target = Path(upload_url(registry, sid))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    registry.add(Entry(sid, filename, registry.store_url(sid), str(target), utc_now(), False,
                       None, "received", "", team, filename))
    return sid


def worked(worker: Worker, registry: Registry, ids: list[str], cycles: int = 6) -> None:
    """Cycle until every entry is final."""
    for _ in range(cycles):
        worker.cycle()
        if all(submission(registry, s).status in ("ranked", "rejected", "failed")
               for s in ids):
            return
    raise AssertionError("entries still in progress after the worker's cycles")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cap", [DEFAULT_MEMORY_CAP_MIB, None], ids=["job-process", "dask-task"])
def test_each_hostile_file_is_rejected_with_the_clis_line(tiny, client, tmp_path, capsys, cap):
    """Every file of the corpus (the finding's corrupt TIFF among them), checked and
    converted in a job process under the cap or, without a cap, as a task on a worker
    process of the cluster, is rejected at the first attempt with the line ``sgdask
    convert`` prints, its path the upload's name."""
    registry = Registry(str(tmp_path / "registry"))
    expected = {}
    for case, build in CORPUS.items():
        bad = build(tiny, tmp_path / f"{case}.zip")
        expected[queued(registry, bad.read_bytes(), bad.name)] = cli_line(bad, tiny.gt, capsys)
    config = WorkerConfig(registry.url, tiny.gt, str(tmp_path / "board"), lease=30,
                          memory_cap=cap)
    worked(Worker(config, client, log=lambda _: None), registry, list(expected))
    for sid, line in expected.items():
        sub = submission(registry, sid)
        assert (sub.status, sub.attempts) == ("rejected", 1), sub.history
        assert sub.shown_errors and sub.shown_errors[0] == line
        assert str(tmp_path) not in json.dumps(sub.history)


# --- the memory cap ---------------------------------------------------------------------------

CAP_MIB = 320


def greedy_submission(tiny, path: Path, triplets_per_image: int) -> Path:
    """A boxes submission for the tiny GT whose triplet lists parse into more than
    ``CAP_MIB`` of Python objects (about 100 bytes per 8-byte triplet): built as text, the
    test's own memory stays near the file's size."""
    doc = json.loads(Path(tiny.paths.submission_boxes).read_text())
    for img in doc["images"]:
        img["triplets"], img["scores"] = "@T@", "@S@"
        img.pop("ng_triplets", None)
        img["annotation"] = img["annotation"][:3]
    triplets = "[" + "[0,1,2]," * (triplets_per_image - 1) + "[0,1,2]]"
    scores = "[" + "0.5," * (triplets_per_image - 1) + "0.5]"
    text = json.dumps(doc).replace('"@T@"', triplets).replace('"@S@"', scores)
    path.write_text(text)
    return path


def raised_reader_limits() -> ArchiveLimits:
    """Every reader limit out of the way: the cap is what is under test."""
    return ArchiveLimits(**{f.name: 1 << 50 for f in fields(ArchiveLimits)
                            if f.name.startswith("max_") and f.type in ("int", int)})


@pytest.mark.timeout(300)
def test_a_submission_over_the_memory_cap_is_rejected_and_counts(tiny, client, tmp_path):
    """A 2.7 KB score file once took 5 GB three times and counted for nothing. Here a
    submission that needs more than the cap (320 MiB) is rejected at its first attempt,
    with the cap in its reason, while a normal one beside it is ranked under the same cap;
    the rejection counts against the team's daily limit."""
    registry = Registry(str(tmp_path / "registry"))
    greedy = greedy_submission(tiny, tmp_path / "greedy.json", 300_000)
    assert greedy.stat().st_size < 40 << 20
    over = queued(registry, greedy.read_bytes(), "greedy.json", team="team-a")
    normal = queued(registry, tiny.variant(0).read_bytes(), "model.zip", team="team-b")
    lines: list[str] = []
    config = WorkerConfig(registry.url, tiny.gt, str(tmp_path / "board"), lease=30,
                          memory_cap=CAP_MIB, archive_limits=raised_reader_limits())
    worked(Worker(config, client, log=lines.append), registry, [over, normal])

    rejected = submission(registry, over)
    assert (rejected.status, rejected.attempts) == ("rejected", 1), rejected.history
    assert rejected.shown_errors == [
        f"error: greedy.json: needs more than the {CAP_MIB} MiB memory cap of the service's "
        "worker to be checked and converted (the server's limit memory_cap; ask the "
        "maintainers to raise it)"]
    assert submission(registry, normal).status == "ranked"
    with pytest.raises(LimitReached, match="1 submissions per 24 hours"):
        check_limits(Account("team-a", "participant"), submissions(registry),
                     Limits(daily=1, concurrent=None))
    check_limits(Account("team-c", "participant"), submissions(registry),
                 Limits(daily=1, concurrent=None))
    assert any("rejected (error: greedy.json: needs more than" in line for line in lines)


def test_a_rejection_always_says_why(tiny, client, tmp_path):
    """A rejection handed no reason still tells its team something (never ``errors: []``)."""
    from sgdask.service.worker import Claim

    registry = Registry(str(tmp_path / "registry"))
    sid = queued(registry, tiny.variant(0).read_bytes(), "model.zip")
    assert registry.advance(sid, 1, "validating", worker="w", attempt=1)
    worker = Worker(WorkerConfig(registry.url, tiny.gt, str(tmp_path / "board")), client,
                    log=lambda _: None, worker_id="w")
    worker.reject(Claim(registry, submission(registry, sid), "w", 1), [])
    assert submission(registry, sid).shown_errors == [
        "error: model.zip: rejected without a reason (a bug in sgdask; the maintainers can "
        "see the log)"]
