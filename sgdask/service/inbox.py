"""The S3 inbox: ``REGISTRY/inbox/NAME.zip`` (or ``.json``) plus ``NAME.meta.json``.

The sidecar (``{"name": ..., "paper": ..., "board": ..., "token": ...}``) is uploaded last:
it is the signal that the submission is complete. A worker takes a pair by creating
``REGISTRY/inbox-claims/<key>.json`` exclusively, where the key hashes both objects' names,
sizes, ETags and modification times, so with any number of workers polling exactly one
wins, and the same name uploaded again later is a new submission. The claim names the
submission id; finishing (copy to ``uploads/``, register, delete the pair) is idempotent,
so a pair whose claimer died is finished by another worker once the claim is older than
the lease.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sgdask.batch.registry import Entry, Registry, parse_stamp, utc_now
from sgdask.errors import Choose, SgdaskError
from sgdask.io.archive import printable
from sgdask.io.fs import join
from sgdask.service.access import Refusal, authorize, checked_name, checked_paper
from sgdask.service.benchmark import Phase, check_phase
from sgdask.service.limits import LimitReached, Limits, check_limits
from sgdask.service.queue import new_id, submissions, upload_url
from sgdask.service.tokens import TokenBook
from sgdask.service.video import entry_url
from sgdask.store.lock import create_exclusive

SIDECAR = ".meta.json"
DATA_SUFFIXES = (".zip", ".json")
MAX_SIDECAR = 64 << 10
SIDECAR_FIELDS = ("name", "paper", "board", "token")
Log = Callable[[str], None]


def pick_inbox(registry: Registry, worker: str, tokens: TokenBook, limits: Limits,
               open_uploads: bool, lease: float, log: Log, phase: Phase | None = None
               ) -> list[str]:
    """Register every complete pair in the inbox (of ``phase``: its dates apply); returns
    the new submission ids."""
    fs, folder = registry.fs, join(registry.path, "inbox")
    fs.invalidate_cache(folder)
    if not fs.exists(folder):
        return []
    infos = {i["name"]: i for i in fs.ls(folder, detail=True) if i["type"] == "file"}
    picked = []
    for sidecar in sorted(n for n in infos if n.endswith(SIDECAR)):
        stem = sidecar[:-len(SIDECAR)]
        data = next((stem + s for s in DATA_SUFFIXES if stem + s in infos), None)
        if data is None:
            continue  # the data object is not there (yet)
        claim = join(registry.path, "inbox-claims", claim_key(infos[sidecar], infos[data])
                     + ".json")
        submission_id = new_id(utc_now())
        record = {"submission_id": submission_id, "worker": worker, "at": utc_now(),
                  "sidecar": sidecar, "sidecar_size": infos[sidecar]["size"], "data": data}
        if not create_exclusive(fs, claim, json.dumps(record).encode()):
            record = json.loads(registry.read_text(claim))
            if registry.entry(record["submission_id"]) is None and \
                    age_seconds(record["at"]) < lease:
                continue  # another worker is finishing it
        finish(registry, record, tokens, limits, open_uploads, phase)
        log(f"worker {worker}: inbox {data.rsplit('/', 1)[-1]} -> {record['submission_id']}")
        picked.append(record["submission_id"])
    return picked


def claim_key(sidecar: dict[str, Any], data: dict[str, Any]) -> str:
    def fields(info: dict[str, Any]) -> list[str]:
        return [str(info.get(k)) for k in ("name", "size", "ETag", "LastModified", "mtime")]
    return hashlib.sha256(json.dumps([fields(sidecar), fields(data)]).encode()).hexdigest()[:32]


def age_seconds(stamp: str) -> float:
    return (datetime.now(UTC) - parse_stamp(stamp)).total_seconds()


def finish(registry: Registry, claim: dict[str, Any], tokens: TokenBook, limits: Limits,
           open_uploads: bool, phase: Phase | None = None) -> None:
    """Copy the data into ``uploads/``, register the entry (refused ones as rejected: also
    one dropped outside ``phase``'s dates or after it was closed), delete the pair. Safe to
    run twice."""
    fs, submission_id = registry.fs, claim["submission_id"]
    filename = printable(claim["data"].rsplit("/", 1)[-1])[:200]
    if registry.entry(submission_id) is None:
        meta, problem = sidecar_fields(registry, claim["sidecar"], claim["sidecar_size"])
        account = tokens.account(meta.get("token"))
        name = meta.get("name") or filename
        try:
            if problem:
                raise Refusal(400, problem)
            authorize(account, bool(meta.get("token")), meta.get("board", "public"),
                      open_uploads)
            name = checked_name(meta.get("name"))
            paper = checked_paper(meta.get("paper"))
            if phase is not None:
                check_phase(phase, meta.get("board", "public"), parse_stamp(claim["at"]),
                            any(a["action"] == "close" for a in registry.host_actions()))
            check_limits(account, submissions(registry), limits)
        except (Refusal, LimitReached) as err:
            problem, paper = f"error: {filename}: sidecar: {err}", None
        target = fs._strip_protocol(upload_url(registry, submission_id))
        fs.makedirs(fs._parent(target), exist_ok=True)
        fs.copy(claim["data"], target)
        if problem:  # before the entry, so it is never seen as queued
            registry.advance(submission_id, 1, "rejected", worker=claim["worker"],
                             errors=[problem])
        entry = Entry(submission_id, str(name)[:200],
                      entry_url(registry, submission_id,
                                phase.upload if phase is not None else "submission"),
                      upload_url(registry, submission_id), claim["at"],
                      meta.get("board") == "approved" and not problem, paper, "received", "",
                      account.team if account else None, filename,
                      output_method=phase.method if phase is not None else None)
        with contextlib.suppress(SgdaskError):  # another worker finished it
            registry.add(entry)
    for path in (claim["sidecar"], claim["data"]):
        with contextlib.suppress(FileNotFoundError):
            fs.rm(path)


def sidecar_fields(registry: Registry, path: str, size: int) -> tuple[dict[str, Any], str | None]:
    """(the sidecar's fields, what is wrong with it or None)."""
    if size > MAX_SIDECAR:
        return {}, f"larger than {MAX_SIDECAR} bytes"
    data = registry.fs.cat_file(path)
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return {}, f"not valid JSON ({err})"
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        return {}, f"expected an object of strings: {', '.join(SIDECAR_FIELDS)}"
    unknown = [key for key in doc if key not in SIDECAR_FIELDS]
    if unknown:
        key = printable(unknown[0])[:40]
        return {}, f"unknown field {key!r} {Choose(key, SIDECAR_FIELDS).render('http')}"
    return doc, None
