"""The queue is the registry: a submission's state is its entry plus its status records.

Moving an entry on is appending the record at the next sequence number with an exclusive
create (``Registry.advance``), so whoever appends first owns the step: a worker claims an
entry by appending ``validating``; a worker whose entry was reclaimed (it was presumed dead)
finds its next append refused and drops the entry. Workers prove they are alive with a
heartbeat object (``REGISTRY/workers/<id>.json``, rewritten every few seconds); an entry
in progress whose worker's heartbeat is older than the lease is claimed again, up to
``max_attempts`` claims, after which it is ``failed``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sgdask.batch.registry import Entry, Registry, parse_stamp, utc_now
from sgdask.batch.rerank import read_json, write_atomic
from sgdask.io.fs import join

IN_PROGRESS = frozenset({"validating", "converting", "evaluating"})
FINAL = frozenset({"ranked", "rejected", "failed"})
# What users see: "evaluated" is an internal step of "evaluating"; entries registered by
# `sgdask submit --registry` start "ready" (converted, waiting for the next rerank).
SHOWN = {"evaluated": "evaluating", "ready": "evaluating"}
INTERNAL_ERROR = "internal error while evaluating; the maintainers can see the log"
ID_PATTERN = re.compile(r"^[0-9]{8}T[0-9]{6,12}-[0-9a-f]{8,16}$")
UPLOAD_SUFFIX = ".upload"


def new_id(submitted_at: str) -> str:
    """Sortable by time, unguessable: ``YYYYMMDDTHHMMSSffffff-<12 hex>``."""
    stamp = parse_stamp(submitted_at).strftime("%Y%m%dT%H%M%S%f")
    return f"{stamp}-{secrets.token_hex(6)}"


def is_submission_id(text: str) -> bool:
    """Ids are checked before they name any object, so no client text becomes a path."""
    return bool(ID_PATTERN.fullmatch(text))


def upload_url(registry: Registry, submission_id: str) -> str:
    return join(registry.url, "uploads", submission_id + UPLOAD_SUFFIX)


@dataclass(frozen=True)
class Submission:
    """An entry with its status records and visibility."""

    entry: Entry
    history: list[dict[str, Any]]
    hidden: bool = False

    @property
    def id(self) -> str:
        return self.entry.submission_id

    @property
    def state(self) -> str:
        """The internal status (the latest record's)."""
        return self.history[-1]["status"] if self.history else self.entry.status

    @property
    def status(self) -> str:
        """The status users see."""
        return SHOWN.get(self.state, self.state)

    @property
    def steps(self) -> list[str]:
        """The statuses users see that the submission went through, in order (a retry
        repeats them): what a poller reports even when several passed between two polls.
        The first is the entry's own (``received`` for an upload): status record 1 follows
        it."""
        statuses = [self.entry.status, *(r["status"] for r in self.history)]
        shown = [SHOWN.get(s, s) for s in statuses]
        return [s for i, s in enumerate(shown) if i == 0 or s != shown[i - 1]]

    @property
    def next_seq(self) -> int:
        return len(self.history) + 1

    @property
    def attempts(self) -> int:
        return sum(r["status"] == "validating" for r in self.history)

    @property
    def last(self) -> dict[str, Any]:
        return self.history[-1] if self.history else {}

    @property
    def updated_at(self) -> str:
        return self.last.get("at", self.entry.submitted_at)

    @property
    def owner(self) -> str | None:
        """The worker that wrote the latest record."""
        return self.last.get("worker")

    def latest(self, key: str) -> Any:
        """The newest value of ``key`` in the records (errors, warnings, metrics)."""
        for record in reversed(self.history):
            if key in record:
                return record[key]
        return None

    @property
    def shown_errors(self) -> list[str]:
        """The errors its team sees: a rejection's (about the uploaded file, by its name);
        for a failure only that it failed: the detail (an exception that may name host
        paths) stays in the worker's log and the status records."""
        if self.status == "rejected":
            return self.latest("errors") or []
        if self.status == "failed":
            return [f"error: gave up after {self.attempts} attempt(s): {INTERNAL_ERROR}"]
        return []

    @property
    def board(self) -> str:
        return "approved" if self.entry.approved else "public"


def submissions(registry: Registry) -> list[Submission]:
    """Every submission, oldest first."""
    histories, hidden = registry.histories(), registry.hidden()
    entries = sorted(registry.written_entries(),
                     key=lambda e: (e.submitted_at, e.submission_id))
    return [Submission(e, histories.get(e.submission_id, []),
                       hidden.get(e.submission_id, False)) for e in entries]


def team_submissions(registry: Registry, team: str | None, since: datetime | None = None,
                     visibility: bool = True) -> list[Submission]:
    """The submissions of ``team`` (None: those without a team) submitted since ``since``
    (None: all), oldest first, read through the registry's team index: the status records
    of no other entry are read (nor their visibility, without ``visibility``)."""
    out = []
    for entry in registry.team_entries(team):
        if since is not None and parse_stamp(entry.submitted_at) < since:
            continue
        shown = registry.visibility(entry.submission_id) if visibility else None
        out.append(Submission(entry, registry.history(entry.submission_id),
                              bool(shown and shown["hidden"])))
    return out


def submission(registry: Registry, submission_id: str) -> Submission | None:
    entry = registry.entry(submission_id)
    if entry is None:
        return None
    visibility = registry.visibility(submission_id)
    return Submission(entry, registry.history(submission_id),
                      bool(visibility and visibility["hidden"]))


# --- workers' heartbeats -------------------------------------------------------------------

def new_worker_id() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def heartbeat_path(registry: Registry, worker: str) -> str:
    return join(registry.path, "workers", f"{worker}.json")


def beat(registry: Registry, worker: str) -> None:
    """Record that ``worker`` is alive now."""
    registry.fs.makedirs(join(registry.path, "workers"), exist_ok=True)
    write_atomic(registry.fs, heartbeat_path(registry, worker),
                 json.dumps({"worker": worker, "at": utc_now()}).encode())


def retire(registry: Registry, worker: str) -> None:
    """A worker stopping cleanly: its unfinished entries can be claimed at once."""
    path = heartbeat_path(registry, worker)
    if registry.fs.exists(path):
        registry.fs.rm(path)


def is_alive(registry: Registry, worker: str | None, lease: float) -> bool:
    if not worker:
        return False
    registry.fs.invalidate_cache(join(registry.path, "workers"))
    record = read_json(registry.fs, heartbeat_path(registry, worker))
    if not record:
        return False
    return datetime.now(UTC) - parse_stamp(record["at"]) < timedelta(seconds=lease)
