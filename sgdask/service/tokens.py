"""The tokens file: who may submit, as which team, in which role.

A JSON file (``schemas/tokens.md``) holding, per token, the team, the role and the SHA-256 of
the token; the token itself is printed once by ``sgdask tokens add`` and never stored. Tokens
are 256 random bits, so a plain hash is as hard to invert as the token is to guess (no slow
password hash needed). The server re-reads the file when it changes, so ``add`` and
``revoke`` take effect without a restart.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgdask.batch.registry import utc_now
from sgdask.errors import Choose, InputError, Option, SgdaskError

ROLES = ("participant", "maintainer")
PREFIX = "sgd_"
TEAM_MAX = 64


@dataclass(frozen=True)
class Account:
    """Whoever a valid token belongs to."""

    team: str
    role: str

    @property
    def is_maintainer(self) -> bool:
        return self.role == "maintainer"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def checked_team(team: str) -> str:
    """A team name: printable, no surrounding spaces, at most 64 characters."""
    if not team or team != team.strip() or len(team) > TEAM_MAX or not team.isprintable():
        raise SgdaskError(Option("team"), f" {team!r}: expected 1-{TEAM_MAX} printable "
                          "characters without leading or trailing spaces")
    return team


def read_tokens(path: Path) -> list[dict[str, Any]]:
    """The token records of the file (an absent file has none)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except json.JSONDecodeError as err:
        raise InputError(str(path), f"not valid JSON ({err})") from None
    records = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and {"team", "role", "sha256"} <= set(r) for r in records):
        raise InputError(str(path), "not a tokens file", field="tokens",
                         expected="a list of {team, role, sha256}")
    return records


def write_tokens(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace the file in one step, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"version": 1, "tokens": records}, f, indent=1)
    os.replace(tmp, path)


def add_token(path: Path, team: str, role: str) -> str:
    """Create a token for ``team`` in ``role``; returns the token (shown once)."""
    if role not in ROLES:
        raise SgdaskError(Option("role"), f" {role!r}: unknown role", fix=Choose(role, ROLES))
    token = new_token()
    records = read_tokens(path)
    records.append({"team": checked_team(team), "role": role, "sha256": token_hash(token),
                    "created_at": utc_now()})
    write_tokens(path, records)
    return token


def revoke_team(path: Path, team: str) -> int:
    """Remove every token of ``team``; returns how many were removed."""
    records = read_tokens(path)
    kept = [r for r in records if r["team"] != team]
    write_tokens(path, kept)
    return len(records) - len(kept)


class TokenBook:
    """Looks tokens up by hash, re-reading the file when its modification time changes."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int] | None = None
        self._by_hash: dict[str, Account] = {}
        self._lock = threading.Lock()

    def account(self, token: str | None) -> Account | None:
        """The account of a token, or None for an unknown (or revoked) one."""
        if not token or self.path is None:
            return None
        with self._lock:
            self._refresh()
            return self._by_hash.get(token_hash(token))

    def _refresh(self) -> None:
        assert self.path is not None
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._by_hash = {r["sha256"]: Account(r["team"], r["role"])
                             for r in read_tokens(self.path)}
            self._stamp = stamp
