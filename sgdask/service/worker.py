"""The queue worker: received -> validating -> converting -> evaluating -> ranked.

One cycle: take what the inbox holds; claim queued entries one at a time, oldest first,
validating (``sgdask validate``'s checks, as a task on the cluster) and converting each; score
every converted entry in one ``evaluate-many`` graph through the registry's result cache;
then run the cached rerank, which publishes the board, and mark the published entries
ranked. Every stage's output survives a crash (the store's manifest is written last, the
cache entry last), so a retried entry resumes where the dead worker stopped.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
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
from sgdask.core.settings import Settings
from sgdask.errors import InputError, SgdaskError
from sgdask.io.archive import ArchiveLimits, SafeZip
from sgdask.io.formats import submission_format
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.lock import DEFAULT_LEASE, LockHeld
from sgdask.io.store import StoreReader
from sgdask.io.validate import Problem
from sgdask.metrics import RANK_BY
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

if TYPE_CHECKING:
    from sgdask.service.app import ServiceConfig
    from sgdask.service.benchmark import Phase

Log = Callable[[str], None]
DEFAULT_MAX_ERRORS = 20


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

    @classmethod
    def beside(cls, service: ServiceConfig, phase: Phase, poll: float, max_attempts: int,
               archive_limits: ArchiveLimits | None) -> WorkerConfig:
        """A worker of ``sgdask serve``: one phase's registry, GT, board and limits, the
        service's storage options, tokens and lease."""
        assert phase.gt is not None
        return cls(phase.registry, phase.gt, phase.out, service.storage_options, poll,
                   service.lease, max_attempts, tokens=service.tokens, limits=phase.limits,
                   open_uploads=service.open_uploads, archive_limits=archive_limits,
                   selection=phase.selection, rank_by=phase.headline,
                   protocols=phase.protocols, direction=phase.direction,
                   phase=phase if service.benchmark is not None else None)

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


def validation_problems(upload: str, gt: str, options: StorageOptions | None,
                        limits: ArchiveLimits | None, max_errors: int, shown_as: str
                        ) -> list[Problem]:
    """What ``sgdask validate`` finds in the upload (a Dask task; the problems arrive
    whole, the worker renders them for the service)."""
    fmt = submission_format(upload, options)
    if fmt.validate is None:
        raise SgdaskError(f"{shown_as}: {fmt.name} files are not accepted here")
    return fmt.validate(upload, gt, options, limits, max_errors)


SUBMISSION_SUFFIXES, SCORE_SUFFIXES = (".json", ".zip"), (".npz", ".parquet")


def _upload_parts(upload: str, parts: str, options: StorageOptions | None,
                  limits: ArchiveLimits | None, shown_as: str) -> tuple[str, str]:
    """The submission and the score file of a ``submission+scores`` upload (a Dask task):
    copied out of its ZIP, the archive checked first, to ``parts/submission.EXT`` and
    ``parts/scores.EXT``, where the conversion's tasks read them."""
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


def report_metrics(reports: dict[str, Any], protocols: tuple[str, ...] = BOARD_PROTOCOLS
                   ) -> dict[str, Any]:
    """The metrics of the board's protocol shown on the status page, plus the ranking
    metric of the protocol its delta column compares with (``multimpo mR@50``)."""
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

    def retry_or_fail(self, claim: Claim, err: BaseException) -> None:
        """An unexpected error: queue the entry again, or fail it after max attempts."""
        reason = f"{type(err).__name__}: {err}"
        self.log(f"worker {self.id}: {claim.id}: {reason}\n{traceback.format_exc()}")
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
        """Validate and convert; True when the entry is ready to be scored."""
        entry = claim.sub.entry
        try:
            if not self.store_complete(entry.url):
                upload, scores = self.upload_parts(claim)
                problems = self.client.submit(
                    validation_problems, upload, self.config.gt,
                    self.config.storage_options, self.config.archive_limits,
                    self.config.max_errors, entry.filename or "upload", pure=False).result()
                names = self.public_names(claim)
                errors = [p.render("http", names) for p in problems if p.is_error]
                warnings = [p.render("http", names) for p in problems if not p.is_error]
                if errors:
                    claim.step("rejected", errors=errors, warnings=warnings)
                    self.log(f"worker {self.id}: {claim.id}: rejected ({errors[0]})")
                    return False
                claim.step("converting", warnings=warnings)
                submission_format(upload, self.config.storage_options).convert(
                    upload, entry.url, self.config.gt, self.config.storage_options,
                    overwrite=True, cluster=self.client, limits=self.config.archive_limits,
                    **self.scores_options(scores))
            return True
        except LostClaim:
            raise
        except InputError as err:
            claim.step("rejected", errors=[self.shown(err, claim)])
            return False
        except Exception as err:
            self.retry_or_fail(claim, err)
            return False

    def upload_parts(self, claim: Claim) -> tuple[str, str | None]:
        """The upload to validate and convert, and its score file (a ``submission+scores``
        phase's uploads: their two parts, see ``_upload_parts``)."""
        upload = upload_url(self.registry, claim.id)
        phase = self.config.phase
        if phase is None or phase.upload != "submission+scores":
            return upload, None
        return self.client.submit(_upload_parts, upload, _parts_url(upload),
                                  self.config.storage_options, self.config.archive_limits,
                                  claim.sub.entry.filename or "upload", pure=False).result()

    def scores_options(self, scores: str | None) -> dict[str, Any]:
        """The conversion's ``--from-scores``, ``--rank-by`` and ``--ng-limit``, if any."""
        if scores is None or self.config.phase is None:
            return {}
        return {"from_scores": scores, "rank_by": self.config.phase.scores_rank_by,
                "ng_limit": self.config.phase.ng_limit}

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
                          (claim.sub.entry.url, f"the store of {claim.id}"),
                          (self.config.gt.rstrip("/"), "the GT store")):
            path = filesystem(url, self.config.storage_options)[1]
            names.update({url: name, path: name})
        return names

    def shown(self, err: InputError, claim: Claim) -> str:
        """The error line the service shows for ``err``."""
        return f"error: {err.render('http', self.public_names(claim))}"

    def store_complete(self, url: str) -> bool:
        """A store left complete by an earlier attempt (its manifest is written last)."""
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
                    self.reject(claim, err)
                except Exception as err:
                    self.retry_or_fail(claim, err)
        except Exception as err:
            for claim in live:
                self.retry_or_fail(claim, err)

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

    def reject(self, claim: Claim, err: InputError) -> None:
        with contextlib.suppress(LostClaim):
            claim.step("rejected", errors=[self.shown(err, claim)])

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
