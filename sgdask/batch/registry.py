"""The submission registry: one JSON object per submission under ``URL/entries/``.

Each entry is written once with an exclusive create, so concurrent submitters never lose
each other's entries (object stores have no append); the registry is the listing.
Submitted files are converted into ``URL/stores/<submission id>``.

An entry's status can move on (the benchmarking service's queue) without rewriting it:
``URL/status/<id>/<seq>.json`` are append-only records, each created exclusively at the next
sequence number, so the latest record is the status and two processes racing to move the
same entry cannot both win (the exclusive create is the compare-and-swap). Entries without
records keep the status they were written with (``sgdask submit --registry``: ``ready``).
Visibility (a team hiding its result) is a second append-only log, ``URL/visibility/<id>/``;
the service keeps three more: a team's choice for the board (``URL/chosen/<team>/``),
baselines maintainers marked (``URL/baselines/<id>/``) and what maintainers did to a phase
(``URL/actions/host/``: revealing its scores).
``URL/teams/<team key>/<id>.json`` indexes the entries by team (written by ``add`` before the
entry), so a team's limits are checked by reading its own entries, never the whole registry.
Every file is immutable once written, so a long-lived reader caches what it has read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from sgdask.cluster import ClusterSpec
from sgdask.errors import InputError, SgdaskError
from sgdask.formats.sgbench import convert_submission
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.store.lock import create_exclusive


@dataclass(frozen=True)
class Entry:
    """One registered submission."""

    submission_id: str
    name: str
    url: str
    source: str
    submitted_at: str
    approved: bool
    paper: str | None
    status: str
    content_hash: str
    team: str | None = None
    filename: str | None = None
    #: what the team says of its method (the service's upload fields; the board's columns)
    method: str | None = None
    description: str | None = None
    code: str | None = None
    external_data: bool | None = None
    #: ``PHASE/ID`` of the submission a maintainer's ``move`` copied this one from (a copy
    #: does not count against the team's limits)
    moved_from: str | None = None
    #: the method of a model output registered as it is, not converted (``sttran``,
    #: ``tempura``: ``sgdask.batch.video.submit_output``); None: a store or a file whose
    #: format says how to read it (a PVSG results directory)
    output_method: str | None = None


# Statuses an entry moves through in the service's queue; ``evaluated`` (scored and cached,
# waiting for the board to be published) is shown to users as ``evaluating``.
QUEUE_STATUSES = ("received", "validating", "converting", "evaluating", "evaluated", "ranked",
                  "rejected", "failed")
# What rerank puts on the board: converted by ``submit`` (ready) or scored by the service.
RANKABLE = frozenset({"ready", "evaluated", "ranked"})
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


#: the index folder of entries without a team (``sgdask submit --registry``, open uploads)
NO_TEAM = "-"


def utc_now() -> str:
    return datetime.now(UTC).strftime(STAMP_FORMAT)


def parse_stamp(stamp: str) -> datetime:
    return datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=UTC)


def team_key(team: str | None) -> str:
    """The team's index folder name: a hash (team names are free text, never a path)."""
    if team is None:
        return NO_TEAM
    return hashlib.sha256(team.encode()).hexdigest()[:24]


class Registry:
    def __init__(self, url: str, storage_options: StorageOptions | None = None) -> None:
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)
        self._read: dict[str, Any] = {}  # path -> parsed immutable file

    def store_url(self, submission_id: str) -> str:
        return join(self.url, "stores", submission_id)

    def entries(self) -> list[Entry]:
        """All entries, oldest first, each with its current status."""
        histories = self.histories()
        out = [replace(e, status=histories[e.submission_id][-1]["status"])
               if histories.get(e.submission_id) else e for e in self.written_entries()]
        return sorted(out, key=lambda e: (e.submitted_at, e.submission_id))

    def written_entries(self) -> list[Entry]:
        """The entries as written (their first status)."""
        out = []
        for path in self.listing("entries"):
            if path not in self._read:
                self._read[path] = parse_entry(self.read_bytes(path), path)
            out.append(self._read[path])
        return out

    def entry(self, submission_id: str) -> Entry | None:
        """One entry as written, or None."""
        path = join(self.path, "entries", f"{submission_id}.json")
        if path not in self._read:
            try:
                self._read[path] = parse_entry(self.read_bytes(path), path)
            except FileNotFoundError:
                return None
        return self._read[path]

    def add(self, entry: Entry) -> None:
        """Write an entry; never overwrites one (exclusive create). Its team's index record
        is written first: a record whose entry is missing is skipped by ``team_entries``."""
        self._index(entry)
        path = join(self.path, "entries", f"{entry.submission_id}.json")
        doc = asdict(entry)
        for optional in ("moved_from", "output_method"):
            if doc[optional] is None:  # written only when set: older readers read the rest
                del doc[optional]
        if not create_exclusive(self.fs, path, json.dumps(doc, indent=1).encode()):
            raise SgdaskError(f"{path}: submission id already registered")

    def team_entries(self, team: str | None) -> list[Entry]:
        """The entries of ``team`` (None: those without a team) as written, oldest first:
        read through the team's index, so the cost grows with the team's entries only."""
        out = []
        for path in self.listing(join("teams", team_key(team))):
            entry = self.entry(path.rsplit("/", 1)[-1].removesuffix(".json"))
            if entry is not None and entry.team == team:
                out.append(entry)
        return sorted(out, key=lambda e: (e.submitted_at, e.submission_id))

    def index_teams(self) -> int:
        """Index the entries that have no team index record yet (a registry written before
        the index existed); returns how many were indexed. Run once when a server starts."""
        indexed = {p.rsplit("/", 1)[-1] for p in self.listing("teams")}
        missing = [p for p in self.listing("entries") if p.rsplit("/", 1)[-1] not in indexed]
        for path in missing:
            if path not in self._read:
                self._read[path] = parse_entry(self.read_bytes(path), path)
            self._index(self._read[path])
        return len(missing)

    def _index(self, entry: Entry) -> None:
        path = join(self.path, "teams", team_key(entry.team), f"{entry.submission_id}.json")
        create_exclusive(self.fs, path, json.dumps({"submission_id": entry.submission_id,
                                                    "team": entry.team}).encode())

    def rankable(self) -> list[Entry]:
        """The entries rerank puts on the board: converted or scored, and not hidden."""
        hidden = self.hidden()
        return [e for e in self.entries()
                if e.status in RANKABLE and not hidden.get(e.submission_id, False)]

    # --- append-only logs: status and visibility ----------------------------------------

    def histories(self) -> dict[str, list[dict[str, Any]]]:
        """Status records of every entry that has any, by submission id, in order."""
        return self.logs("status")

    def history(self, submission_id: str) -> list[dict[str, Any]]:
        return self.logs("status", submission_id).get(submission_id, [])

    def advance(self, submission_id: str, seq: int, status: str, **fields: Any) -> bool:
        """Append status record ``seq`` (1 follows the entry itself); False if another
        process wrote that record first."""
        return self.append("status", submission_id, seq, {"status": status, **fields})

    def hidden(self) -> dict[str, bool]:
        """Submission id -> hidden, for every entry whose visibility was ever set."""
        return {sid: log[-1]["hidden"] for sid, log in self.logs("visibility").items()}

    def visibility(self, submission_id: str) -> dict[str, Any] | None:
        """The latest visibility record (``hidden``, ``by``), or None (public)."""
        log = self.logs("visibility", submission_id).get(submission_id)
        return log[-1] if log else None

    def set_hidden(self, submission_id: str, hidden: bool, by: str) -> None:
        """Append a visibility record at the next free sequence number."""
        self.append_next("visibility", submission_id, {"hidden": hidden, "by": by})

    def chosen(self) -> dict[str, str]:
        """Team -> the submission it chose for the board (a phase's ``chosen`` rule)."""
        return {team: log[-1]["submission_id"] for team, log in self.logs("chosen").items()}

    def choose(self, team: str, submission_id: str, by: str) -> None:
        self.append_next("chosen", team, {"submission_id": submission_id, "by": by})

    def baselines(self) -> frozenset[str]:
        """The submissions maintainers marked as baselines (shown outside the ranking)."""
        return frozenset(sid for sid, log in self.logs("baselines").items()
                         if log[-1]["baseline"])

    def set_baseline(self, submission_id: str, baseline: bool, by: str) -> None:
        self.append_next("baselines", submission_id, {"baseline": baseline, "by": by})

    def host_actions(self) -> list[dict[str, Any]]:
        """What maintainers did to the registry's phase (``action``, ``by``, ``at``), in
        order (``URL/actions/host/``)."""
        return self.logs("actions", "host").get("host", [])

    def log_action(self, action: str, by: str) -> None:
        self.append_next("actions", "host", {"action": action, "by": by})

    def append_next(self, log: str, key: str, record: dict[str, Any]) -> None:
        """Append ``record`` to ``log`` of ``key`` at the next free sequence number."""
        for _ in range(100):
            seq = len(self.logs(log, key).get(key, [])) + 1
            if self.append(log, key, seq, record):
                return
        raise SgdaskError(f"{key}: {log.rstrip('s')} keeps changing; try again")

    def append(self, log: str, submission_id: str, seq: int, record: dict[str, Any]) -> bool:
        path = join(self.path, log, submission_id, f"{seq:06d}.json")
        data = {**record, "seq": seq, "at": utc_now()}
        return create_exclusive(self.fs, path, json.dumps(data).encode())

    def logs(self, log: str, submission_id: str | None = None
             ) -> dict[str, list[dict[str, Any]]]:
        """Records of one log (of one entry, or all), by submission id, in order."""
        folder = join(log, submission_id) if submission_id else log
        out: dict[str, list[dict[str, Any]]] = {}
        for path in self.listing(folder):
            if path not in self._read:
                self._read[path] = parse_record(self.read_bytes(path), path)
            out.setdefault(path.rsplit("/", 2)[-2], []).append(self._read[path])
        return out

    # --- reading -------------------------------------------------------------------------

    def listing(self, folder: str) -> list[str]:
        """Sorted paths of the complete ``.json`` files under ``folder`` (fresh, not from
        the filesystem's listing cache: other processes add files)."""
        path = join(self.path, folder)
        self.fs.invalidate_cache(path)
        if not self.fs.exists(path):
            return []
        return sorted(p for p in self.fs.find(path) if p.endswith(".json"))

    def read_text(self, path: str) -> str:
        """The file's text. Object store filesystems answer from their listing cache, which
        may predate files other processes added: that cache is dropped first."""
        return self.read_bytes(path).decode()

    def read_bytes(self, path: str) -> bytes:
        self.fs.invalidate_cache(self.fs._parent(path))
        return self.fs.cat_file(path)


ENTRY_TYPES = {f.name: f.type for f in fields(Entry)}


def parse_json_object(raw: bytes, path: str, what: str) -> dict[str, Any]:
    """A JSON object from a registry file, or one line naming the file."""
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as err:
        raise InputError(path, f"not {what} (not JSON: {' '.join(str(err).split())})") \
            from None
    if not isinstance(doc, dict):
        raise InputError(path, f"not {what} (a JSON {type(doc).__name__}, expected an "
                         "object)")
    return doc


def parse_entry(raw: bytes, path: str) -> Entry:
    """A registry entry, checked against the entry's fields and their types."""
    doc = parse_json_object(raw, path, "a registry entry")
    unknown = sorted(set(doc) - set(ENTRY_TYPES))
    if unknown:
        raise InputError(path, f"unknown field {unknown[0]!r}",
                         expected=f"the fields of a registry entry: {', '.join(ENTRY_TYPES)}")
    for f in fields(Entry):
        if f.name not in doc:
            if f.default is MISSING:
                raise InputError(path, "missing", field=f.name,
                                 expected="every field of a registry entry")
            continue
        value = doc[f.name]
        kind = "bool" if str(f.type).startswith("bool") else "str"
        ok = isinstance(value, bool) if kind == "bool" else isinstance(value, str)
        if not ok and not (value is None and "None" in str(f.type)):
            raise InputError(path, f"{type(value).__name__} {value!r:.40}", field=f.name,
                             expected=f"{f.type}")
    return Entry(**doc)


def parse_record(raw: bytes, path: str) -> dict[str, Any]:
    """A record of a registry log (a JSON object)."""
    return parse_json_object(raw, path, "a registry log record")


def new_submission_id(name: str, submitted_at: str) -> str:
    digest = hashlib.sha256(f"{name}\0{submitted_at}".encode()).hexdigest()[:8]
    stamp = submitted_at.replace("-", "").replace(":", "").replace(".", "")[:15]
    return f"{stamp}-{digest}"


def submit(submission: str, registry_url: str, gt: str, name: str, approved: bool = False,
           paper: str | None = None, storage_options: StorageOptions | None = None,
           cluster: ClusterSpec = None, **convert_options: Any) -> Entry:
    """Validate and convert a submission into the registry, then register it."""
    registry = Registry(registry_url, storage_options)
    submitted_at = utc_now()
    submission_id = new_submission_id(name, submitted_at)
    manifest = convert_submission(submission, registry.store_url(submission_id), gt,
                                  storage_options, cluster=cluster, **convert_options)
    entry = Entry(submission_id, name, registry.store_url(submission_id), str(submission),
                  submitted_at, approved, paper, "ready", manifest["content_hash"])
    registry.add(entry)
    return entry
