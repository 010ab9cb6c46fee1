"""The queue worker: received -> validating -> converting -> evaluating -> ranked.

One cycle: take what the inbox holds; claim queued entries one at a time, oldest first,
validating (``sgdask validate``'s checks) and converting each in a job process of its own
under the memory cap (``memory_cap``: a submission that needs more is rejected, not the
machine taken; without a cap, as one task on the cluster); score
every converted entry in one ``evaluate-many`` graph through the registry's result cache;
then run the cached rerank, which publishes the board, and mark the published entries
ranked. Every stage's output survives a crash (the store's manifest is written last, the
cache entry last), so a retried entry resumes where the dead worker stopped.

A job's outcome crosses the process boundary as text, rendered where the error was raised
(``Verdict``): an exception of a third-party library that cannot be unpickled never turns a
bad file into "internal error".
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from distributed import Client

from sgdask.batch.many import run_many
from sgdask.batch.pages import report_pages
from sgdask.batch.registry import Registry
from sgdask.batch.rerank import (
    BOARD_PROTOCOLS,
    BoardRule,
    board_job,
    inputs_digest,
    read_json,
    rerank,
)
from sgdask.batch.video import column_value, is_video_board, video_columns
from sgdask.core.settings import Settings
from sgdask.errors import InputError, SgdaskError
from sgdask.formats import PSG_CHALLENGE, submission_format
from sgdask.formats.validate import Problem
from sgdask.formats.video_upload import video_upload
from sgdask.io.archive import ArchiveLimits, SafeZip
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.metrics import RANK_BY
from sgdask.service import DEFAULT_MEMORY_CAP_MIB
from sgdask.service.inbox import pick_inbox
from sgdask.service.limits import Limits
from sgdask.service.queue import (
    IN_PROGRESS,
    Submission,
    beat,
    is_alive,
    new_worker_id,
    retire,
    submissions,
    upload_url,
)
from sgdask.service.tokens import TokenBook
from sgdask.service.video import checked_video_upload, unpacked_video_upload, video_ready
from sgdask.store.lock import DEFAULT_LEASE, LockHeld
from sgdask.store.store import StoreReader

if TYPE_CHECKING:
    from sgdask.service.app import ServiceConfig
    from sgdask.service.benchmark import Phase

Log = Callable[[str], None]
DEFAULT_MAX_ERRORS = 20
MiB = 1 << 20
#: what the job processes import once, in the fork server they are forked from
JOB_PRELOAD = ["sgdask.service.preload"]


@dataclass
class WorkerConfig:
    registry: str
    gt: str
    out: str
    storage_options: StorageOptions | None = None
    poll: float = 1.0
    lease: float = DEFAULT_LEASE
    max_attempts: int = 3
    batch: int = 8
    max_errors: int = DEFAULT_MAX_ERRORS
    tokens: str | None = None
    limits: Limits = field(default_factory=Limits)
    open_uploads: bool = False
    archive_limits: ArchiveLimits | None = None
    #: how the board's submissions are evaluated (rerank's, so rerank finds them cached)
    settings: Settings = field(default_factory=Settings)
    #: which of a team's submissions the board shows (``sgdask.batch.rerank.BoardRule``)
    selection: str = "all"
    rank_by: str = RANK_BY  # the board's ranking metric (a phase's ``headline``)
    #: the protocols evaluated, the first one ranking (a phase's ``protocols``)
    protocols: tuple[str, ...] = BOARD_PROTOCOLS
    #: (metric, ``higher``/``lower``) against the registry's (a phase's board ``direction``)
    direction: tuple[tuple[str, str], ...] = ()
    #: the benchmark file's phase this worker serves: inbox drops outside its dates are
    #: rejected (None: a service from flags, always open)
    phase: Phase | None = None
    #: MiB each submission's check and conversion may allocate (None: no cap)
    memory_cap: int | None = DEFAULT_MEMORY_CAP_MIB

    @classmethod
    def beside(cls, service: ServiceConfig, phase: Phase, poll: float, max_attempts: int,
               archive_limits: ArchiveLimits | None,
               memory_cap: int | None = DEFAULT_MEMORY_CAP_MIB) -> WorkerConfig:
        """A worker of ``sgdask serve``: one phase's registry, GT, board and limits, the
        service's storage options, tokens and lease."""
        assert phase.gt is not None
        return cls(phase.registry, phase.gt, phase.out, service.storage_options, poll,
                   service.lease, max_attempts, tokens=service.tokens, limits=phase.limits,
                   open_uploads=service.open_uploads, archive_limits=archive_limits,
                   selection=phase.selection, rank_by=phase.headline,
                   protocols=phase.protocols, direction=phase.direction,
                   phase=phase if service.benchmark is not None else None,
                   memory_cap=memory_cap)

    @property
    def hide_gt(self) -> bool:
        """Whether participants may not see what the GT holds (a private phase: no report,
        so no image id): its validation warnings say counts, never the GT's image ids."""
        return self.phase is not None and self.phase.visibility == "private"

    def rule(self, registry: Registry) -> BoardRule:
        """The board rule of this worker's phase with the registry's choices."""
        return BoardRule.of(registry, self.selection, self.rank_by, self.protocols,
                            self.direction)


class LostClaim(Exception):
    """Another worker moved the entry on (it presumed this one dead)."""


class Claim:
    """An entry this worker owns; ``step`` appends its next status record."""

    def __init__(self, registry: Registry, sub: Submission, worker: str, seq: int) -> None:
        self.registry, self.sub, self.worker, self.seq = registry, sub, worker, seq

    @property
    def id(self) -> str:
        return self.sub.id

    def step(self, status: str, **fields: Any) -> None:
        if not self.registry.advance(self.id, self.seq + 1, status, worker=self.worker,
                                     **fields):
            raise LostClaim(self.id)
        self.seq += 1


#: a phase whose uploads are PSG-challenge files (``sgdask.io.psg_challenge``)
PSG_CHALLENGE_UPLOAD = "psg-challenge"


def challenge_upload(upload: str, options: StorageOptions | None, shown_as: str) -> None:
    """Refuse an upload to a ``psg-challenge`` phase that is not a PSG-challenge ZIP."""
    if submission_format(upload, options).name != PSG_CHALLENGE:
        raise InputError(shown_as, "not a PSG-challenge submission",
                         expected="a ZIP of relation.json and its panseg/ PNGs, as OpenPSG's "
                         "save_results writes them")


def validation_problems(upload: str, gt: str, options: StorageOptions | None,
                        limits: ArchiveLimits | None, max_errors: int, shown_as: str
                        ) -> list[Problem]:
    """What ``sgdask validate`` finds in the upload."""
    fmt = submission_format(upload, options)
    if fmt.validate is None:
        raise InputError(shown_as, f"{fmt.name} files are not accepted here",
                         expected="an SGBench submission (a ZIP or a JSON)")
    return fmt.validate(upload, gt, options, limits, max_errors)


SUBMISSION_SUFFIXES, SCORE_SUFFIXES = (".json", ".zip"), (".npz", ".parquet")


def _upload_parts(upload: str, parts: str, options: StorageOptions | None,
                  limits: ArchiveLimits | None, shown_as: str) -> tuple[str, str]:
    """The submission and the score file of a ``submission+scores`` upload (in its job):
    copied out of its ZIP, the archive checked first, to ``parts/submission.EXT`` and
    ``parts/scores.EXT``, where the conversion reads them."""
    fs, path = filesystem(upload, options)
    with fs.open(path, "rb") as f:
        archive = SafeZip(f, shown_as, limits or ArchiveLimits())
        archive.check()
        files = [n for n, info in archive.entries.items()
                 if not info.is_dir() and not n.startswith("__MACOSX/")]
        found = [[n for n in files if n.lower().endswith(suffixes)]
                 for suffixes in (SUBMISSION_SUFFIXES, SCORE_SUFFIXES)]
        if [len(names) for names in found] != [1, 1]:
            raise InputError(shown_as, f"holds {len(found[0])} submission file(s) (.json, "
                             f".zip) and {len(found[1])} score file(s) (.npz, .parquet)",
                             expected="a ZIP of one SGBench JSON or ZIP and its score file")
        copied = []
        for kind, (name,) in zip(("submission", "scores"), found, strict=True):
            target = join(parts, kind + name[name.rindex("."):].lower())
            out_fs, out_path = filesystem(target, options)
            out_fs.makedirs(out_fs._parent(out_path), exist_ok=True)
            out_fs.pipe_file(out_path, archive.read(name))
            copied.append(target)
    return copied[0], copied[1]


@dataclass(frozen=True)
class Job:
    """A submission's check or conversion, as plain data (it runs in a job process)."""

    upload: str
    gt: str
    out: str  # the store the conversion writes
    options: StorageOptions | None
    limits: ArchiveLimits | None
    shown_as: str  # the name the upload was uploaded under
    names: dict[str, str]  # storage locations by what the service shows (``public_names``)
    max_errors: int
    memory_cap: int | None
    hide_gt: bool = False  # a private phase: warnings say counts, not the GT's ids
    parts: str | None = None  # a ``submission+scores`` upload: where its parts go
    scores: str | None = None  # the score file the conversion reads
    scores_options: tuple[tuple[str, Any], ...] = ()  # ``rank_by``, ``ng_limit``
    upload_kind: str = "submission"  # the phase's ``upload``
    method: str | None = None  # the phase's ``method`` (a video output's)


@dataclass(frozen=True)
class Verdict:
    """What a job found, rendered for the service where it was raised: ``errors`` (the
    submission is rejected), ``warnings``, or a ``failure`` (an unexpected error, ``Type:
    message``, its ``trace`` for the log: the entry is retried). ``parts``: the submission
    and score file a check found."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    failure: str | None = None
    trace: str = ""
    parts: tuple[str, str | None] | None = None


def checked(job: Job) -> Verdict:
    """The upload's parts (a ``submission+scores`` upload) and ``sgdask validate``'s
    problems."""
    upload, scores = job.upload, None
    video = video_upload(job.upload_kind)
    if video is not None:  # a model output, scored as it is (sgdask.service.video)
        checked_video_upload(video, upload, job.options, job.limits, job.shown_as)
        return Verdict(parts=(upload, None))
    if job.upload_kind == PSG_CHALLENGE_UPLOAD:
        challenge_upload(upload, job.options, job.shown_as)
    if job.parts is not None:
        upload, scores = _upload_parts(job.upload, job.parts, job.options, job.limits,
                                       job.shown_as)
    problems = validation_problems(upload, job.gt, job.options, job.limits, job.max_errors,
                                   job.shown_as)
    return Verdict(tuple(p.render("http", job.names) for p in problems if p.is_error),
                   tuple(p.told(job.hide_gt).render("http", job.names)
                         for p in problems if not p.is_error), parts=(upload, scores))


def converted(job: Job) -> Verdict:
    """The upload converted to its store (in this process: the job's memory is capped);
    a video output written where the entry reads it and paired with the GT."""
    video = video_upload(job.upload_kind)
    if video is not None:
        unpacked_video_upload(video, job.upload, job.out, job.gt, job.method, job.options,
                              job.limits, job.shown_as)
        return Verdict()
    scores = {"from_scores": job.scores, **dict(job.scores_options)} if job.scores else {}
    submission_format(job.upload, job.options).convert(
        job.upload, job.out, job.gt, job.options, overwrite=True, cluster=None,
        limits=job.limits, **scores)
    return Verdict()


def over_cap(shown_as: str, cap: int) -> str:
    """The reason a submission that needs more than the memory cap is rejected."""
    return (f"error: {shown_as}: needs more than the {cap} MiB memory cap of the service's "
            "worker to be checked and converted (the server's limit memory_cap; ask the "
            "maintainers to raise it)")


def judged(run: Callable[[Job], Verdict], job: Job) -> Verdict:
    """``run(job)``, every exception rendered as text: a bad file (an ``InputError``, or
    more memory than the cap) as the rejection's one line, anything else as a failure."""
    try:
        return run(job)
    except MemoryError:
        if job.memory_cap is None:
            return Verdict(failure="MemoryError: out of memory", trace=traceback.format_exc())
        return Verdict(errors=(over_cap(job.shown_as, job.memory_cap),))
    except InputError as err:
        return Verdict(errors=(f"error: {err.render('http', job.names)}",))
    except Exception as err:
        return Verdict(failure=f"{type(err).__name__}: {err}", trace=traceback.format_exc())


def _data_size() -> int:
    """Bytes of this process's data segment (heap and private writable mappings: what
    ``RLIMIT_DATA`` limits), from ``/proc/self/status``."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


def _capped(cap: int) -> None:
    """In a job process: allocations past ``cap`` MiB more than it holds now fail
    (``MemoryError``)."""
    limit = _data_size() + cap * MiB
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _job_context() -> Any:
    """Job processes are forked from a fork server that imported what they run once
    (``JOB_PRELOAD``): no thread of the service is forked, and a job starts in
    milliseconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(JOB_PRELOAD)
    return context


def run_capped(run: Callable[[Job], Verdict], job: Job) -> Verdict:
    """``judged(run, job)`` in a process of its own whose memory is capped at
    ``job.memory_cap`` MiB; a process that dies (a crash, the kernel's OOM killer) is a
    failure."""
    assert job.memory_cap is not None
    with ProcessPoolExecutor(1, _job_context(), initializer=_capped,
                             initargs=(job.memory_cap,), max_tasks_per_child=1) as pool:
        try:
            return pool.submit(judged, run, job).result()
        except BrokenProcessPool as err:
            return Verdict(failure=f"the job process died: {err}")


def report_metrics(reports: dict[str, Any], protocols: tuple[str, ...] = BOARD_PROTOCOLS
                   ) -> dict[str, Any]:
    """The metrics of the board's protocol shown on the status page, plus the ranking
    metric of the protocol its delta column compares with (``multimpo mR@50``); a board of
    video protocols: its columns (``sgdask.batch.video.video_columns``)."""
    if is_video_board(protocols):
        found = {c: column_value(reports, protocols[0], c) for c in video_columns(protocols)}
        return {c: v for c, v in found.items() if isinstance(v, (int, float)) and v == v}
    single = reports.get(protocols[0])
    out = {k: v for k, v in (single.metrics if single else {}).items()
           if isinstance(v, (int, float)) and v == v}
    multi = reports.get(protocols[1]) if len(protocols) > 1 else None
    if multi and RANK_BY in multi.metrics:
        out[f"{protocols[1]} {RANK_BY}"] = multi.metrics[RANK_BY]
    return out


def report_lint(reports: dict[str, Any]) -> list[dict[str, str]]:
    """The protocol lint's warnings of a submission (the same under every protocol),
    shown with its scores on its status page and in its JSON."""
    return next((list(r.lint.get("warnings", [])) for r in reports.values() if r.lint), [])


def _parts_url(upload: str) -> str:
    """Where a ``submission+scores`` upload's two parts are copied to."""
    return upload + ".parts"


class Worker:
    def __init__(self, config: WorkerConfig, client: Client, log: Log = print,
                 worker_id: str | None = None) -> None:
        self.config, self.client, self.log = config, client, log
        self.id = worker_id or new_worker_id()
        self.registry = Registry(config.registry, config.storage_options)
        self.tokens = TokenBook(config.tokens)

    # --- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set; a heartbeat thread keeps the claims alive."""
        beat(self.registry, self.id)
        beating = threading.Thread(target=self.beat_until, args=(stop,), daemon=True,
                                   name=f"sgdask-heartbeat-{self.id}")
        beating.start()
        self.log(f"worker {self.id}: polling {self.config.registry} every "
                 f"{self.config.poll:g} s")
        try:
            while not stop.is_set():
                try:
                    busy = self.cycle()
                except Exception as err:  # keep serving; the entries are retried
                    self.log(f"worker {self.id}: cycle failed: {type(err).__name__}: {err}")
                    busy = False
                if not busy:
                    stop.wait(self.config.poll)
        finally:
            stop.set()
            beating.join(timeout=5)
            retire(self.registry, self.id)

    def beat_until(self, stop: threading.Event) -> None:
        interval = max(0.2, self.config.lease / 4)
        while not stop.wait(interval):
            try:
                beat(self.registry, self.id)
            except Exception as err:  # an unreachable store: the next beat may succeed
                self.log(f"worker {self.id}: heartbeat failed: {err}")

    def cycle(self) -> bool:
        """One pass over the inbox and the queue; True if it did anything."""
        picked = pick_inbox(self.registry, self.id, self.tokens, self.config.limits,
                            self.config.open_uploads, self.config.lease, self.log,
                            self.config.phase)
        ready = self.prepare_batch()
        if ready:
            self.evaluate(ready)
        published = self.publish_if_needed()
        return bool(picked or ready or published)

    def prepare_batch(self) -> list[Claim]:
        """Claim, validate and convert entries one at a time, up to ``batch`` of them. A
        failure to read the queue ends the batch; what was prepared is still scored."""
        ready: list[Claim] = []
        tried: set[str] = set()  # an entry queued again after an error waits a cycle
        while len(ready) < self.config.batch:
            try:
                claim = self.claim_next(tried)
            except Exception as err:  # an unreachable store: next cycle
                self.log(f"worker {self.id}: reading the queue failed: "
                         f"{type(err).__name__}: {err}")
                break
            if claim is None:
                break
            tried.add(claim.id)
            try:
                if self.prepare(claim):
                    ready.append(claim)
            except LostClaim:
                self.log(f"worker {self.id}: {claim.id} was taken over by another worker")
        return ready

    # --- claiming ------------------------------------------------------------------------

    def claim_next(self, skip: set[str]) -> Claim | None:
        """Claim the oldest entry (not in ``skip``) that is queued or whose worker died."""
        for sub in submissions(self.registry):
            if sub.id in skip:
                continue
            if sub.state == "received" or (sub.state in IN_PROGRESS and not is_alive(
                    self.registry, sub.owner, self.config.lease)):
                claim = self.claim(sub)
                if claim is not None:
                    return claim
        return None

    def claim(self, sub: Submission) -> Claim | None:
        if sub.state in IN_PROGRESS and sub.attempts >= self.config.max_attempts:
            reason = (f"gave up after {sub.attempts} attempts: worker {sub.owner} stopped "
                      f"while {sub.state}")
            if self.registry.advance(sub.id, sub.next_seq, "failed", worker=self.id,
                                     errors=[reason]):
                self.log(f"worker {self.id}: {sub.id}: failed ({reason})")
            return None
        if not self.registry.advance(sub.id, sub.next_seq, "validating", worker=self.id,
                                     attempt=sub.attempts + 1):
            return None  # another worker was first
        self.log(f"worker {self.id}: {sub.id}: claimed (attempt {sub.attempts + 1})")
        return Claim(self.registry, sub, self.id, sub.next_seq)

    def retry_or_fail(self, claim: Claim, reason: str, trace: str = "") -> None:
        """An unexpected error (``reason``: ``Type: message``; ``trace`` for the log): queue
        the entry again, or fail it after max attempts."""
        self.log(f"worker {self.id}: {claim.id}: {reason}\n{trace}")
        attempts = claim.sub.attempts + 1
        try:
            if attempts >= self.config.max_attempts:
                claim.step("failed", errors=[f"gave up after {attempts} attempts: {reason}"])
            else:
                claim.step("received", retry_reason=reason)
        except LostClaim:
            pass

    # --- validate and convert ------------------------------------------------------------

    def prepare(self, claim: Claim) -> bool:
        """Validate and convert, each a job under the memory cap; True when the entry is
        ready to be scored."""
        try:
            if self.output_complete(claim.sub.entry.url):
                return True
            job = self.job(claim)
            verdict = self.run_job(checked, job)
            if not verdict.errors and verdict.failure is None:
                claim.step("converting", warnings=list(verdict.warnings))
                assert verdict.parts is not None
                upload, scores = verdict.parts
                verdict = self.run_job(converted, replace(job, upload=upload, scores=scores))
            if verdict.errors:
                self.reject(claim, verdict.errors, verdict.warnings)
                return False
            if verdict.failure is not None:
                self.retry_or_fail(claim, verdict.failure, verdict.trace)
                return False
            return True
        except LostClaim:
            raise
        except Exception as err:
            self.retry_or_fail(claim, f"{type(err).__name__}: {err}", traceback.format_exc())
            return False

    def job(self, claim: Claim) -> Job:
        """The entry's check and conversion as a ``Job``."""
        upload, phase = upload_url(self.registry, claim.id), self.config.phase
        scores = phase is not None and phase.upload == "submission+scores"
        return Job(upload, self.config.gt, claim.sub.entry.url, self.config.storage_options,
                   self.config.archive_limits, claim.sub.entry.filename or "upload",
                   self.public_names(claim), self.config.max_errors, self.config.memory_cap,
                   self.config.hide_gt, _parts_url(upload) if scores else None,
                   scores_options=(("rank_by", phase.scores_rank_by),
                                   ("ng_limit", phase.ng_limit)) if scores and phase else (),
                   upload_kind=phase.upload if phase is not None else "submission",
                   method=phase.method if phase is not None else None)

    def run_job(self, run: Callable[[Job], Verdict], job: Job) -> Verdict:
        """``run(job)`` in a job process under the memory cap, or without a cap as one
        task on the cluster; either way its outcome arrives as text."""
        if job.memory_cap is None:
            return self.client.submit(judged, run, job, pure=False).result()
        return run_capped(run, job)

    def public_names(self, claim: Claim) -> dict[str, str]:
        """What the service shows for the storage locations of an entry (its errors name no
        host path): the upload by the name it was uploaded under (its parts as members of
        it), the converted store by the submission id, the GT and the registry by name."""
        names = {}
        upload, shown = upload_url(self.registry, claim.id), claim.sub.entry.filename \
            or "upload"
        parts = _parts_url(upload)
        for url, name in ((self.registry.url, "REGISTRY"), *(
                              (join(parts, kind + ext), f"{shown}:{kind}{ext}")
                              for kind, suffixes in (("submission", SUBMISSION_SUFFIXES),
                                                     ("scores", SCORE_SUFFIXES))
                              for ext in suffixes),
                          (upload, shown),
                          (claim.sub.entry.url, shown if self.video else
                           f"the store of {claim.id}"),
                          (self.config.gt.rstrip("/"), "the GT store")):
            path = filesystem(url, self.config.storage_options)[1]
            names.update({url: name, path: name})
        return names

    def shown(self, err: InputError, claim: Claim) -> str:
        """The error line the service shows for ``err``."""
        return f"error: {err.render('http', self.public_names(claim))}"

    def reject(self, claim: Claim, errors: tuple[str, ...] | list[str],
               warnings: tuple[str, ...] | list[str] | None = None) -> None:
        """Reject the entry; a rejection always says why (its team sees no log)."""
        reasons = list(errors) or [f"error: {claim.sub.entry.filename or 'upload'}: "
                                   "rejected without a reason (a bug in sgdask; the "
                                   "maintainers can see the log)"]
        fields = {} if warnings is None else {"warnings": list(warnings)}
        with contextlib.suppress(LostClaim):
            claim.step("rejected", errors=reasons, **fields)
        self.log(f"worker {self.id}: {claim.id}: rejected ({reasons[0]})")

    @property
    def video(self) -> bool:
        """Whether this worker's phase takes video model outputs."""
        return self.config.phase is not None and \
            video_upload(self.config.phase.upload) is not None

    def output_complete(self, url: str) -> bool:
        """A store (a video output) left complete by an earlier attempt (its manifest, the
        output's ``complete.json``, is written last)."""
        if self.video:
            return video_ready(url, self.config.storage_options)
        try:
            StoreReader(url, self.config.storage_options, "submission")
        except SgdaskError:
            return False
        return True

    # --- evaluate ------------------------------------------------------------------------

    def evaluate(self, claims: list[Claim]) -> None:
        """Score every claimed entry in one graph (filling the result cache)."""
        live = []
        for claim in claims:
            try:
                claim.step("evaluating")
                live.append(claim)
            except LostClaim:
                pass
        try:
            self.score(live)
        except InputError:
            for claim in live:  # find the culprit: one graph per entry
                try:
                    self.score([claim])
                except InputError as err:
                    self.reject(claim, [self.shown(err, claim)])
                except Exception as err:
                    self.retry_or_fail(claim, f"{type(err).__name__}: {err}",
                                       traceback.format_exc())
        except Exception as err:
            for claim in live:
                self.retry_or_fail(claim, f"{type(err).__name__}: {err}",
                                   traceback.format_exc())

    def score(self, claims: list[Claim]) -> None:
        if not claims:
            return
        job = board_job(self.config.registry, self.config.gt, [c.sub.entry for c in claims],
                        self.config.settings, self.config.storage_options,
                        self.config.protocols)
        start = time.perf_counter()
        log = lambda line: self.log(f"worker {self.id}: {line}")  # noqa: E731
        outcome = run_many(job, client=self.client, log=log, slim=True)
        scored = time.perf_counter()
        report_pages(outcome, job.cache, self.config.storage_options, self.client, log)
        self.log(f"worker {self.id}: scored {len(claims)} submission(s) in "
                 f"{scored - start:.1f} s, rendered their reports in "
                 f"{time.perf_counter() - scored:.1f} s")
        for claim in claims:
            evaluated = [list(k) for k in outcome.evaluated if k[0] == claim.id]
            try:
                claim.step("evaluated", metrics=report_metrics(outcome.reports[claim.id],
                                                               self.config.protocols),
                           evaluated=evaluated, lint=report_lint(outcome.reports[claim.id]))
                self.log(f"worker {self.id}: {claim.id}: evaluated")
            except LostClaim:
                pass

    # --- publish -------------------------------------------------------------------------

    def publish_if_needed(self) -> bool:
        """Rerank when the board lacks an entry or shows a hidden one; mark the entries
        the published board holds ranked. Another worker's rerank holding the lock: the
        next cycle tries again."""
        subs = submissions(self.registry)
        waiting = [s for s in subs if s.state == "evaluated"]
        rankable = self.registry.rankable()
        fs, root = filesystem(self.config.out, self.config.storage_options)
        fs.invalidate_cache(root)
        current = read_json(fs, join(root, "current.json"))
        digest = inputs_digest(rankable, self.config.settings,
                               rule=self.config.rule(self.registry))
        up_to_date = current.get("inputs") == digest if current else not rankable
        if not waiting and up_to_date:
            return False
        try:
            rerank(self.config.registry, self.config.gt, self.config.out, self.config.settings,
                   self.config.storage_options, client=self.client, log=self.log,
                   lease=self.config.lease, selection=self.config.selection,
                   rank_by=self.config.rank_by, board_protocols=self.config.protocols,
                   direction=self.config.direction)
        except LockHeld:
            return False
        for sub in waiting:
            if self.registry.advance(sub.id, sub.next_seq, "ranked", worker=self.id,
                                     metrics=sub.latest("metrics") or {}):
                self.log(f"worker {self.id}: {sub.id}: ranked")
        return bool(waiting)
