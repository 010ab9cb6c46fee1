"""Per-team submission limits: so many per rolling 24 hours and 30 days, so many in total,
so many uploads streaming at once.

Every submission of the team counts except ``failed`` ones (the service's fault, not the
team's) and copies a maintainer's ``move`` made (``Entry.moved_from``); rejected ones count,
as on hosted leaderboards, so a limit cannot be probed around with broken files. Uploads
still streaming count too, as if submitted now (they become submissions when complete), so
a team cannot hold more partial uploads on disk than it has submissions left. Maintainers
are not limited.

An upload must also complete within ``upload_seconds`` (its ``submitted_at`` is when it
completed, and the phase's dates are checked again then).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sgdask.batch.registry import parse_stamp
from sgdask.service.queue import Submission
from sgdask.service.tokens import Account

WINDOW = timedelta(hours=24)
MONTH = timedelta(days=30)
ANONYMOUS = "anonymous"
DEFAULT_UPLOAD_SECONDS = 300.0


@dataclass(frozen=True)
class Limits:
    daily: int | None = 5
    total: int | None = None
    concurrent: int | None = 5  # uploads of one team streaming at the same time
    monthly: int | None = None  # per rolling 30 days
    #: seconds an upload may take from its first byte to its last (None: no bound)
    upload_seconds: float | None = DEFAULT_UPLOAD_SECONDS

    def since(self, now: datetime) -> datetime | None:
        """The oldest submission time the count limits look at (None: all time)."""
        if self.total is not None:
            return None
        return now - (MONTH if self.monthly is not None else WINDOW)


@dataclass(frozen=True)
class LimitReached(Exception):
    """Over a limit; ``next_allowed`` is when the next upload is allowed (None: never)."""

    message: str
    next_allowed: datetime | None

    def __str__(self) -> str:
        return self.message


def team_of(account: Account | None) -> str:
    return account.team if account else ANONYMOUS


def check_limits(account: Account | None, subs: list[Submission], limits: Limits,
                 now: datetime | None = None, in_flight: int = 0, starting: bool = True
                 ) -> None:
    """Raise LimitReached when the team may not submit now; ``in_flight``: the team's other
    uploads still streaming (not yet submissions), counted as submitted now. The limit of
    uploads at a time applies to an upload ``starting``, not to one that completed."""
    if account is not None and account.is_maintainer:
        return
    team = team_of(account)
    now = now or datetime.now(UTC)
    counted = sorted([*(parse_stamp(s.entry.submitted_at) for s in subs
                        if (s.entry.team or ANONYMOUS) == team and s.state != "failed"
                        and s.entry.moved_from is None),
                      *[now] * in_flight])
    pending = f" (counting {in_flight} upload(s) in progress)" if in_flight else ""
    if limits.total is not None and len(counted) >= limits.total:
        raise LimitReached(f"team {team}: the limit of {limits.total} submissions in total "
                           f"is reached{pending}", None)
    recent = [t for t in counted if now - t < WINDOW]
    if limits.daily is not None and len(recent) >= limits.daily:
        # the upload that frees a slot is the oldest of the last `daily` ones
        frees = recent[len(recent) - limits.daily] + WINDOW
        raise LimitReached(f"team {team}: the limit of {limits.daily} submissions per 24 hours "
                           f"is reached{pending}; next upload allowed at {stamp(frees)}", frees)
    this_month = [t for t in counted if now - t < MONTH]
    if limits.monthly is not None and len(this_month) >= limits.monthly:
        frees = this_month[len(this_month) - limits.monthly] + MONTH
        raise LimitReached(f"team {team}: the limit of {limits.monthly} submissions per 30 "
                           f"days is reached{pending}; next upload allowed at {stamp(frees)}",
                           frees)
    if starting and limits.concurrent is not None and in_flight >= limits.concurrent:
        raise LimitReached(f"team {team}: {in_flight} uploads are in progress, the limit of "
                           f"{limits.concurrent} at a time is reached; retry when one has "
                           "finished", None)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
