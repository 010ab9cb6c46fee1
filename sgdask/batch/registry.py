"""The submission registry: one JSON object per submission under ``URL/entries/``.

Each entry is written once with an exclusive create, so concurrent submitters never lose
each other's entries (object stores have no append); the registry is the listing.
Submitted files are converted into ``URL/stores/<submission id>``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sgdask.cluster import ClusterSpec
from sgdask.errors import InputError, SgdaskError
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.io.ingest import convert_submission


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


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Registry:
    def __init__(self, url: str, storage_options: StorageOptions | None = None) -> None:
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)

    def store_url(self, submission_id: str) -> str:
        return join(self.url, "stores", submission_id)

    def entries(self) -> list[Entry]:
        """All entries, oldest first."""
        folder = join(self.path, "entries")
        if not self.fs.exists(folder):
            return []
        out = []
        for path in sorted(self.fs.find(folder)):
            if not path.endswith(".json"):
                continue
            with self.fs.open(path, "r") as f:
                try:
                    out.append(Entry(**json.load(f)))
                except (json.JSONDecodeError, TypeError) as err:
                    raise InputError(path, f"not a registry entry ({err})") from err
        return sorted(out, key=lambda e: (e.submitted_at, e.submission_id))

    def add(self, entry: Entry) -> None:
        """Write an entry; never overwrites one (exclusive create)."""
        path = join(self.path, "entries", f"{entry.submission_id}.json")
        self.fs.makedirs(join(self.path, "entries"), exist_ok=True)
        try:
            with self.fs.open(path, "xb") as f:
                f.write(json.dumps(asdict(entry), indent=1).encode())
        except FileExistsError:
            raise SgdaskError(f"{path}: submission id already registered") from None


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
