"""The Starlette application: HTML pages for browsers, a JSON API for scripts and CI.

Authentication: the API takes ``Authorization: Bearer TOKEN`` only (never a cookie, so a
foreign page cannot make a browser call it); the pages take the token once in a form field and
keep it in an HttpOnly, SameSite=Strict cookie. Every form POST carries a CSRF token that
must equal the value of a second HttpOnly SameSite=Strict cookie (double submit), and a
cross-site ``Sec-Fetch-Site`` or foreign ``Origin`` is refused as well.

No text from the client names a file: submission ids are checked against a fixed pattern
before they are used, uploads are stored under server-chosen names, and the uploaded file
name is only ever displayed (escaped). No answer names a host path either: pages and JSON
show ids and the uploaded file's name; a failure's detail stays in the log.

Uploads streaming in count against their team's limits (``uploads.mark_in_flight``), and
what dead uploads left is swept every lease (``uploads.sweep_orphans``). A team's limits are
checked under that team's lock, reading that team's submissions only (the registry's team
index): one team's uploads never wait on another's. An upload is admitted when its file
part starts (its slot taken, or 429 and the slot given back at once) and registered when
it completes: the phase's dates are checked again then, and its ``submitted_at`` is that
moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from sgdask.batch import leaderboard_html
from sgdask.batch.registry import STAMP_FORMAT, Entry, Registry
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.service import pages
from sgdask.service.access import (
    DESCRIPTION_MAX,
    NAME_MAX,
    Refusal,
    authorize,
    checked_fields,
    checked_flag,
    checked_link,
    checked_name,
    checked_paper,
    checked_text,
)
from sgdask.service.benchmark import DATE_FORMAT, Benchmark, Phase, check_phase, one_phase
from sgdask.service.limits import LimitReached, Limits, check_limits, team_of
from sgdask.service.queue import (
    Submission,
    is_submission_id,
    new_id,
    submission,
    submissions,
    team_submissions,
    upload_url,
)
from sgdask.service.tokens import Account, TokenBook
from sgdask.service.uploads import (
    BODY_TIMEOUT,
    Body,
    MarkerWatch,
    SlowClients,
    TooSlow,
    UploadSink,
    mark_in_flight,
    receive,
    sweep_orphans,
    unmark_in_flight,
    uploads_in_flight,
)
from sgdask.service.video import entry_url, upload_refusal

TOKEN_COOKIE, CSRF_COOKIE = "sgdask_token", "sgdask_csrf"
DEFAULT_MAX_UPLOAD_MB = 2048
PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000  # GET /api/submissions?limit=N&after=ID
#: a team refused for its registered submissions alone is refused again from memory this
#: long (no storage read: a team flooding refused uploads costs the server little)
REFUSAL_SECONDS = 5.0
PAGE_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            f"script-src '{pages.SCRIPT_HASH}'; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'")
REPORT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
              "frame-ancestors 'none'; base-uri 'none'")


@dataclass
class ServiceConfig:
    registry: str
    out: str
    storage_options: StorageOptions | None = None
    tokens: str | None = None
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB
    limits: Limits = field(default_factory=Limits)
    open_uploads: bool = False
    title: str = "sgdask leaderboard"
    lease: float = 60.0  # in-flight markers beat every quarter lease; orphans age in leases
    #: the phases (``sgdask serve --benchmark``); None: one phase at ``registry`` and ``out``
    benchmark: Benchmark | None = None
    #: what time it is: the phases' dates and the limits read it (tests set it)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    #: seconds a request body may send nothing before the upload is dropped
    body_timeout: float = BODY_TIMEOUT

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 2**20)

    @property
    def challenge(self) -> Benchmark:
        return self.benchmark or one_phase(self.registry, self.out, None, self.limits,
                                           self.title)


class Service:
    """What every handler shares."""

    def __init__(self, config: ServiceConfig, slow: SlowClients) -> None:
        self.config = config
        self.benchmark = config.challenge
        self.registries = {p.name: Registry(p.registry, config.storage_options)
                           for p in self.benchmark.phases}
        self.tokens = TokenBook(config.tokens)
        self.team_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.watch = MarkerWatch()  # when this server saw each in-flight marker beat
        self.slow = slow
        #: (phase, team) -> (until, refusal): teams at a count limit (``REFUSAL_SECONDS``)
        self.refused: dict[tuple[str, str], tuple[float, LimitReached]] = {}

    def refusal(self, phase: Phase, account: Account | None) -> LimitReached | None:
        """The team's recent refusal that still stands, if any (within its seconds, and
        before the time it names by the service's clock)."""
        until, err = self.refused.get((phase.name, team_of(account)), (0.0, None))
        if err is None or time.monotonic() >= until or (
                err.next_allowed is not None and self.config.clock() >= err.next_allowed):
            return None
        return err

    def team_lock(self, phase: Phase, account: Account | None) -> asyncio.Lock:
        """The lock a team's limits are checked and its entries added under, in a phase:
        one per team, so one team's uploads never wait on another's."""
        return self.team_locks.setdefault((phase.name, team_of(account)), asyncio.Lock())

    def phase(self, name: str | None) -> Phase:
        """The phase named (None: the current one), or a 404."""
        if not name:
            return self.current()
        found = self.benchmark.phase(name)
        if found is None:
            raise Refusal(404, f"phase: no phase {name!r} (phases: "
                          f"{', '.join(p.name for p in self.benchmark.phases)})")
        return found

    def current(self) -> Phase:
        """The phase an upload naming none goes to: the last one open now, else the first."""
        now = self.config.clock()
        open_now = [p for p in self.benchmark.phases if self.is_open(p, now)]
        return open_now[-1] if open_now else self.benchmark.phases[0]

    def done(self, phase: Phase, action: str) -> bool:
        """Whether a maintainer did ``action`` to the phase."""
        return any(a["action"] == action for a in self.registries[phase.name].host_actions())

    def is_open(self, phase: Phase, now: datetime) -> bool:
        """Within its dates and not closed early by a maintainer."""
        return phase.is_open(now) and not self.done(phase, "close")

    def ended(self, phase: Phase) -> bool:
        return phase.ended(self.config.clock()) or self.done(phase, "close")

    def revealed(self, phase: Phase) -> bool:
        """A private phase's scores are revealed when it ends (at its end date or closed
        early) or a maintainer reveals them."""
        return self.ended(phase) or self.done(phase, "reveal")

    def scores_shown(self, phase: Phase, account: Account | None) -> bool:
        """Whether ``account`` sees the phase's scores (metrics, ranks, reports)."""
        if (account is not None and account.is_maintainer) or phase.visibility != "private":
            return True
        return self.revealed(phase)

    def board_shown(self, phase: Phase, account: Account | None) -> bool:
        """Whether ``account`` sees the phase's board: never for participants of an
        unlisted phase."""
        if account is not None and account.is_maintainer:
            return True
        return phase.visibility != "unlisted" and self.scores_shown(phase, account)

    def find(self, submission_id: str) -> tuple[Phase, Submission] | None:
        """A submission and its phase, looked up in every phase's registry."""
        for phase in self.benchmark.phases:
            sub = submission(self.registries[phase.name], submission_id)
            if sub is not None:
                return phase, sub
        return None

    async def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """Blocking storage calls run in worker threads, never on the event loop."""
        return await anyio.to_thread.run_sync(partial(func, *args))

    # --- the board ----------------------------------------------------------------------

    def board_file(self, phase: Phase, name: str) -> bytes | None:
        """A file of a phase's published board (one GET, never from a stale listing
        cache)."""
        fs, root = filesystem(phase.out, self.config.storage_options)
        path = join(root, name)
        fs.invalidate_cache(fs._parent(path))  # the listing cache may predate the file
        try:
            return fs.cat_file(path)
        except FileNotFoundError:
            return None

    def board(self, phase: Phase) -> tuple[list[dict[str, Any]] | None, str | None]:
        """(the phase's published rows, when they were published) or (None, None)."""
        data = self.board_file(phase, "leaderboard.json")
        if data is None:
            return None, None
        current = json.loads(self.board_file(phase, "current.json") or b"{}")
        return json.loads(data), current.get("published_at")

    def boards(self) -> list[tuple[Phase, list[dict[str, Any]] | None, str | None]]:
        """Every phase with its published rows and when they were published."""
        return [(phase, *self.board(phase)) for phase in self.benchmark.phases]

    def ranks(self, phase: Phase) -> dict[str, int]:
        rows, _ = self.board(phase)
        return {r["submission_id"]: r["rank"] for r in rows or []}

    def report(self, phase: Phase, submission_id: str) -> bytes | None:
        current = json.loads(self.board_file(phase, "current.json") or b"null")
        if not current:
            return None
        return self.board_file(phase, f"{current['board']}/reports/{submission_id}.html")


# --- who is asking -------------------------------------------------------------------------

def bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def cookie_account(svc: Service, request: Request) -> Account | None:
    return svc.tokens.account(request.cookies.get(TOKEN_COOKIE))


def can_view(sub: Submission, account: Account | None) -> bool:
    return not sub.hidden or is_owner(sub, account) or bool(account and account.is_maintainer)


def is_owner(sub: Submission, account: Account | None) -> bool:
    return account is not None and sub.entry.team == account.team


def may_see_errors(sub: Submission, account: Account | None) -> bool:
    return (sub.entry.team is None or is_owner(sub, account)
            or bool(account and account.is_maintainer))


def may_set_hidden(sub: Submission, account: Account | None, hidden: bool,
                   visibility: dict[str, Any] | None) -> bool:
    """Teams hide and show their own; maintainers hide any, and only they undo their hide."""
    if account is None:
        return False
    if account.is_maintainer:
        return True
    hidden_by_maintainer = bool(visibility and visibility["hidden"]
                                and visibility["by"].startswith("maintainer"))
    return is_owner(sub, account) and (hidden or not hidden_by_maintainer)


# --- CSRF ----------------------------------------------------------------------------------

def csrf_value(request: Request) -> tuple[str, bool]:
    """(the browser's CSRF token, whether it is new and must be set as a cookie)."""
    value = request.cookies.get(CSRF_COOKIE)
    if value and 16 <= len(value) <= 128 and value.isascii() and value.isprintable():
        return value, False
    return secrets.token_urlsafe(32), True


def check_csrf(request: Request, submitted: str | None) -> None:
    """Refuse a form POST unless it carries the cookie's CSRF token and comes from here."""
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted or not secrets.compare_digest(cookie.encode(),
                                                                 submitted.encode()):
        raise Refusal(403, "csrf: the form is stale or was not sent from this site; reload "
                      "the page and try again")
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise Refusal(403, "csrf: cross-site form submissions are refused")
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        raise Refusal(403, "csrf: the form was sent from another origin")


def with_cookies(response: Response, request: Request, csrf: str, new_csrf: bool,
                 token: str | None = None) -> Response:
    secure = request.url.scheme == "https"
    if new_csrf:
        response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict",
                            secure=secure, path="/")
    if token is not None:
        response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict",
                            secure=secure, path="/")
    return response


# --- uploads -------------------------------------------------------------------------------

async def accept_upload(svc: Service, request: Request, token: str | None, form: bool
                        ) -> tuple[Submission, str | None]:
    """Stream an upload into the registry and register it; returns the submission and
    the token that was used (for the form's cookie). Raises Refusal / LimitReached."""
    config = svc.config
    submission_id = new_id(config.clock().strftime(STAMP_FORMAT))
    slot = _InFlight(svc, submission_id)
    body = Body(request, config.body_timeout)
    chosen: list[Phase] = []  # the phase the fields before the file name

    def who(fields: dict[str, str]) -> tuple[Account | None, str | None]:
        used = fields.get("token") or token
        account = svc.tokens.account(used)
        authorize(account, bool(used), fields.get("board") or "public", config.open_uploads)
        return account, used

    async def start_file(fields: dict[str, str]) -> UploadSink:
        if form:
            check_csrf(request, fields.get("csrf"))
        account, _ = who(fields)
        checked_fields(fields)
        phase = await svc.run(svc.phase, fields.get("phase"))
        check_phase(phase, fields.get("board") or "public", config.clock(),
                    await svc.run(svc.done, phase, "close"))
        chosen[:] = [phase]
        body.limit_to(phase.limits.upload_seconds)
        await slot.take(account, chosen[0])
        return UploadSink(svc.registries[chosen[0].name], submission_id,
                          upload_refusal(phase.upload))

    try:
        try:
            upload = await receive(request, body, config.max_upload_bytes, start_file,
                                   slot.release)
        except TooSlow as err:
            client = request.client.host if request.client else "a client"
            svc.slow.drop(f"{client}: {err}")
            raise
        assert upload.sink is not None
        try:
            account, used = who(upload.fields)
            name = checked_name(upload.fields.get("name"))
            paper = checked_paper(upload.fields.get("paper"))
            fields = upload.fields
            meta = {"method": checked_text(fields.get("method"), "method", NAME_MAX),
                    "description": checked_text(fields.get("description"), "description",
                                                DESCRIPTION_MAX),
                    "code": checked_link(fields.get("code"), "code"),
                    "external_data": checked_flag(fields.get("external_data"),
                                                  "external_data")}
            phase = chosen[0]
            registry = svc.registries[phase.name]
            completed = config.clock()  # the phase's dates hold when the last byte came
            check_phase(phase, fields.get("board") or "public", completed,
                        await svc.run(svc.done, phase, "close"))
            submitted_at = completed.strftime(STAMP_FORMAT)
            async with svc.team_lock(phase, account):
                await svc.run(_team_limits, svc, account, submission_id, phase, completed,
                              False)
                await svc.run(upload.sink.commit)
                entry = Entry(submission_id, name,
                              entry_url(registry, submission_id, phase.upload),
                              upload_url(registry, submission_id), submitted_at,
                              upload.fields.get("board") == "approved", paper, "received", "",
                              account.team if account else None, upload.filename, **meta,
                              output_method=phase.method)
                await svc.run(registry.add, entry)
        except BaseException:
            await svc.run(upload.sink.abort)
            raise
    finally:
        await slot.release()
    return Submission(entry, []), used


def _team_limits(svc: Service, account: Account | None, submission_id: str, phase: Phase,
                 now: datetime, starting: bool) -> None:
    """Raise LimitReached when the team may not add ``submission_id`` to ``phase``: its
    submissions to the phase and its other uploads streaming into the phase on any server
    sharing the registry count (read through the team index: nothing of other teams)."""
    if account is not None and account.is_maintainer:
        return
    registry = svc.registries[phase.name]
    subs = team_submissions(registry, account.team if account else None,
                            phase.limits.since(now), visibility=False)
    registered = {s.id for s in subs}
    others = [sid for sid in uploads_in_flight(registry, svc.config.lease, svc.watch,
                                               team_of(account))
              if sid != submission_id and sid not in registered]
    try:
        check_limits(account, subs, phase.limits, now, in_flight=len(others),
                     starting=starting)
    except LimitReached as err:
        if not others:  # its submissions alone: it stands until one fails or ages out
            svc.refused[(phase.name, team_of(account))] = (time.monotonic() + REFUSAL_SECONDS,
                                                            err)
        raise


class _InFlight:
    """One upload's in-flight marker: written (and the limits checked with it counted)
    before the first byte of the file is stored, rewritten every quarter lease while the
    file streams in, removed when the upload is registered or refused (at once: before a
    refused body is drained)."""

    def __init__(self, svc: Service, submission_id: str) -> None:
        self.svc, self.id = svc, submission_id
        self.beating: asyncio.Task | None = None
        self.registry: Registry | None = None  # the phase's, once marked
        self.team = ""

    async def take(self, account: Account | None, phase: Phase) -> None:
        """Mark the upload, then check the limits counting it (written first, so two
        servers racing for a team's last slot cannot both get it); refused: unmarked
        before the team's lock is let go."""
        self.team = team_of(account)
        standing = self.svc.refusal(phase, account)
        if standing is not None:
            raise LimitReached(standing.message, standing.next_allowed)
        async with self.svc.team_lock(phase, account):
            self.registry = self.svc.registries[phase.name]
            await self.svc.run(mark_in_flight, self.registry, self.id, self.team)
            try:
                await self.svc.run(_team_limits, self.svc, account, self.id, phase,
                                   self.svc.config.clock(), True)
            except BaseException:
                await self.release()
                raise
        self.beating = asyncio.create_task(self.beat(self.registry, self.team))

    async def beat(self, registry: Registry, team: str) -> None:
        while True:
            await asyncio.sleep(self.svc.config.lease / 4)
            with contextlib.suppress(Exception):  # an unreachable store: the next beat
                await self.svc.run(mark_in_flight, registry, self.id, team)

    async def release(self) -> None:
        """Give the slot back (the marker removed); safe to call again."""
        if self.beating is not None:
            self.beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.beating
            self.beating = None
        if self.registry is not None:
            registry, self.registry = self.registry, None
            await self.svc.run(unmark_in_flight, registry, self.id, self.team)


# --- JSON ----------------------------------------------------------------------------------

def status_url(request: Request, submission_id: str) -> str:
    return str(request.url_for("status_page", submission_id=submission_id))


def submission_json(request: Request, sub: Submission, rank: int | None,
                    account: Account | None, phase: Phase, scores: bool = True
                    ) -> dict[str, Any]:
    """A submission as the API shows it; without ``scores`` (a private phase before its
    reveal) no rank, metric or report."""
    e, errors_visible = sub.entry, may_see_errors(sub, account)
    rank = rank if scores else None
    out = {"id": sub.id, "name": e.name, "team": e.team, "phase": phase.name,
           "board": sub.board, "method": e.method, "description": e.description,
           "code": e.code, "external_data": e.external_data,
           "paper": e.paper, "file": e.filename, "status": sub.status, "steps": sub.steps,
           "errors": sub.shown_errors if errors_visible else [],
           "warnings": (sub.latest("warnings") or []) if errors_visible else [],
           "submitted_at": e.submitted_at, "updated_at": sub.updated_at,
           "attempts": sub.attempts, "hidden": sub.hidden, "rank": rank,
           "url": status_url(request, sub.id)}
    if sub.status == "ranked" and scores:
        out["metrics"] = sub.latest("metrics") or {}
        out["lint"] = sub.latest("lint") or []
        out["report"] = str(request.url_for("report_page", submission_id=sub.id)) \
            if rank is not None else None
    return out


def refusal_json(err: Refusal | LimitReached) -> JSONResponse:
    if isinstance(err, LimitReached):
        headers, body = {}, {"detail": str(err), "next_allowed_at": None}
        if err.next_allowed is not None:
            wait = (err.next_allowed - datetime.now(UTC)).total_seconds()
            headers["Retry-After"] = str(max(1, math.ceil(wait)))
            body["next_allowed_at"] = err.next_allowed.strftime("%Y-%m-%dT%H:%M:%SZ")
        return JSONResponse(body, 429, headers=headers)
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else {}
    return JSONResponse({"detail": str(err)}, err.status, headers=headers)


def not_found() -> Refusal:
    return Refusal(404, "no such submission")


# --- handlers ------------------------------------------------------------------------------

Handler = Callable[[Service, Request], Awaitable[Response]]


def api(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Refusals become JSON errors."""
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request.app.state.service, request)
        except (Refusal, LimitReached) as err:
            return refusal_json(err)
    return endpoint


def html(handler: Callable[[Service, Request, str], Awaitable[Response]]
         ) -> Callable[[Request], Awaitable[Response]]:
    """Refusals become error pages; sets the CSRF cookie when the browser has none."""
    async def endpoint(request: Request) -> Response:
        svc = request.app.state.service
        csrf, new = csrf_value(request)
        try:
            response = await handler(svc, request, csrf)
        except (Refusal, LimitReached) as err:
            status = err.status if isinstance(err, Refusal) else 429
            account = cookie_account(svc, request)
            response = HTMLResponse(pages.error_page(status, str(err), account, csrf), status)
        return with_cookies(response, request, csrf, new)
    return endpoint


async def api_submit(svc: Service, request: Request) -> Response:
    try:
        sub, _ = await accept_upload(svc, request, bearer(request), form=False)
    except ClientDisconnect:
        return Response(status_code=400)
    return JSONResponse({"id": sub.id, "status": sub.status,
                         "url": status_url(request, sub.id)}, 202)


async def api_submission(svc: Service, request: Request) -> Response:
    phase, sub, account = await visible_submission(svc, request,
                                                   svc.tokens.account(bearer(request)))
    rank = (await svc.run(svc.ranks, phase)).get(sub.id)
    scores = await svc.run(svc.scores_shown, phase, account)
    return JSONResponse(submission_json(request, sub, rank, account, phase, scores))


async def api_submissions(svc: Service, request: Request) -> Response:
    """The caller's submissions (every one for maintainers), by phase and then oldest
    first, a page at a time: ``?limit=N`` (default 100, at most 1000) and ``?after=ID``
    (the last id of the previous page); a ``Link: <...>; rel="next"`` header while more
    follow."""
    account = svc.tokens.account(bearer(request))
    if account is None:
        raise Refusal(401, "token: missing or unknown")
    size = _page_size(request.query_params.get("limit"))
    after = request.query_params.get("after")
    if after is not None and not is_submission_id(after):
        raise Refusal(400, "after: not a submission id")
    found, more = await svc.run(submissions_page, svc, account, after, size)
    ranks = {p.name: await svc.run(svc.ranks, p) for p in {p for p, _ in found}}
    scores = {p.name: await svc.run(svc.scores_shown, p, account) for p in {p for p, _ in found}}
    headers = {}
    if more and found:
        following = request.url.include_query_params(limit=size, after=found[-1][1].id)
        headers["Link"] = f'<{following}>; rel="next"'
    return JSONResponse([submission_json(request, s, ranks[p.name].get(s.id), account, p,
                                         scores[p.name]) for p, s in found], headers=headers)


def _page_size(text: str | None) -> int:
    if text is None:
        return PAGE_SIZE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise Refusal(400, f"limit: expected a number of submissions from 1 to {MAX_PAGE_SIZE}")
    return int(text)


async def _json_flag(request: Request, field: str) -> bool:
    """The one boolean field of a JSON body ``{FIELD: true|false}``."""
    try:
        doc = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refusal(400, f"expected JSON {{\"{field}\": true|false}}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get(field), bool):
        raise Refusal(400, f"{field}: expected true or false")
    return doc[field]


async def api_visibility(svc: Service, request: Request) -> Response:
    account = svc.tokens.account(bearer(request))
    hidden = await _json_flag(request, "hidden")
    phase, sub = await change_visibility(svc, request, account, hidden)
    rank = (await svc.run(svc.ranks, phase)).get(sub.id)
    scores = await svc.run(svc.scores_shown, phase, account)
    return JSONResponse(submission_json(request, sub, rank, account, phase, scores))


async def api_whoami(svc: Service, request: Request) -> Response:
    """Who the token belongs to and what the server takes, so a client can stop before
    sending a file that would be refused."""
    token = bearer(request)
    account = svc.tokens.account(token)
    if token and account is None:
        raise Refusal(401, "token: unknown or revoked token")
    if account is None and not svc.config.open_uploads:
        raise Refusal(401, "token: missing (send Authorization: Bearer TOKEN)")
    current, phases = await svc.run(_phases_json, svc)
    return JSONResponse({"team": account.team if account else None,
                         "role": account.role if account else None,
                         "open_uploads": svc.config.open_uploads,
                         "max_upload_bytes": svc.config.max_upload_bytes,
                         "limits": _limits_json(current), **phases})


def _phases_json(svc: Service) -> tuple[Phase, dict[str, Any]]:
    """The current phase, and what whoami says of the phases (nothing for a service from
    flags, whose one phase has no dates)."""
    now, current = svc.config.clock(), svc.current()
    if svc.config.benchmark is None:
        return current, {}
    return current, {"phase": current.name, "phases": [
        _phase_json(p, now, svc.is_open(p, now)) for p in svc.benchmark.phases]}


def _limits_json(phase: Phase) -> dict[str, int | None]:
    """The phase's limits (``monthly`` only when set: a service from flags has none)."""
    limits = phase.limits
    monthly = {} if limits.monthly is None else {"monthly": limits.monthly}
    return {"daily": limits.daily, **monthly, "total": limits.total,
            "concurrent": limits.concurrent}


async def api_choose(svc: Service, request: Request) -> Response:
    """The team chooses this submission for its board row (a phase selecting ``chosen``)."""
    account = svc.tokens.account(bearer(request))
    phase, sub = await _choose(svc, request, account)
    return JSONResponse({"id": sub.id, "phase": phase.name, "chosen": True})


async def _choose(svc: Service, request: Request, account: Account | None
                 ) -> tuple[Phase, Submission]:
    if account is None:
        raise Refusal(401, "token: missing or unknown")
    phase, sub, _ = await visible_submission(svc, request, account)
    if phase.selection != "chosen":
        raise Refusal(409, f"phase {phase.name}: the board shows each team's "
                      f"{phase.selection} submission; there is nothing to choose")
    if not (is_owner(sub, account) or account.is_maintainer) or sub.entry.team is None:
        raise Refusal(403, f"team {account.team} may not choose this submission")
    await svc.run(svc.registries[phase.name].choose, sub.entry.team, sub.id,
                  f"{'maintainer' if account.is_maintainer else 'team'}:{account.team}")
    return phase, sub


async def api_baseline(svc: Service, request: Request) -> Response:
    """A maintainer marks a submission as a baseline (or not): shown outside the ranking."""
    account = svc.tokens.account(bearer(request))
    baseline = await _json_flag(request, "baseline")
    phase, sub = await _mark_baseline(svc, request, account, baseline)
    return JSONResponse({"id": sub.id, "phase": phase.name, "baseline": baseline})


async def _mark_baseline(svc: Service, request: Request, account: Account | None,
                        baseline: bool) -> tuple[Phase, Submission]:
    if account is None or not account.is_maintainer:
        raise Refusal(403, "only maintainers mark baselines")
    phase, sub, _ = await visible_submission(svc, request, account)
    await svc.run(svc.registries[phase.name].set_baseline, sub.id, baseline,
                  f"maintainer:{account.team}")
    return phase, sub


def _private_note(phase: Phase) -> str:
    end = f"the phase ends ({phase.end.strftime(DATE_FORMAT)})" if phase.end else \
        "the maintainers reveal them"
    return f"phase {phase.name}: scores are private until {end}"


#: what maintainers may do to a phase (``POST /api/phases/NAME/ACTION``, the host page)
HOST_ACTIONS = {
    "reveal": "reveal a private phase's scores now",
    "close": "close the phase now: no more uploads; a private phase's scores are revealed",
    "rerun": "re-rank every submission of the phase: the worker publishes the board again, "
             "evaluating whatever the result cache lacks (everything after a protocol or "
             "metric version bump, nothing otherwise: the numbers are exact)",
    "move": "register every accepted submission of the phase again in the next phase, "
            "where it is validated and scored against that phase's GT",
}


async def api_host_action(svc: Service, request: Request) -> Response:
    """A maintainer's action on a phase, logged with who did it."""
    account = svc.tokens.account(bearer(request))
    phase, note = await _host_action(svc, request.path_params["phase"],
                                    request.path_params["action"], account)
    return JSONResponse({"phase": phase.name, "action": request.path_params["action"],
                         "note": note,
                         "actions": await svc.run(svc.registries[phase.name].host_actions)})


async def _host_action(svc: Service, name: str, action: str, account: Account | None
                      ) -> tuple[Phase, str]:
    """Do and log ``action`` on phase ``name``; returns the phase and what was done."""
    if action not in HOST_ACTIONS:
        raise Refusal(404, f"action: {action!r} is not one of {', '.join(HOST_ACTIONS)}")
    if account is None or not account.is_maintainer:
        raise Refusal(403, f"only maintainers may {action} a phase")
    phase = svc.phase(name)
    by = f"maintainer:{account.team}"
    note = HOST_ACTIONS[action]
    if action == "move":
        note = await svc.run(_move_entries, svc, phase, by)
    await svc.run(svc.registries[phase.name].log_action, action, by)
    return phase, note


def _move_entries(svc: Service, phase: Phase, by: str) -> str:
    """Register the phase's accepted submissions in the next phase (once), each a new
    submission there from the same upload; returns what was moved."""
    phases = list(svc.benchmark.phases)
    at = phases.index(phase)
    if at + 1 == len(phases):
        raise Refusal(409, f"phase {phase.name} is the last phase: there is no next one")
    if svc.done(phase, "move"):
        raise Refusal(409, f"phase {phase.name}: its submissions were moved already")
    target = phases[at + 1]
    source, registry = svc.registries[phase.name], svc.registries[target.name]
    moved = 0
    baselines = source.baselines()
    for sub in submissions(source):
        if sub.state in ("rejected", "failed"):
            continue
        new = new_id(sub.entry.submitted_at)
        registry.fs.makedirs(join(registry.path, "uploads"), exist_ok=True)
        registry.fs.copy(upload_url(source, sub.id), upload_url(registry, new))
        _copy_marks(source, registry, sub.id, new, sub.id in baselines)
        registry.add(replace(sub.entry, submission_id=new,
                             url=entry_url(registry, new, target.upload),
                             source=upload_url(registry, new), status="received",
                             content_hash="", moved_from=f"{phase.name}/{sub.id}",
                             output_method=target.method))
        moved += 1
    return f"moved {moved} submission(s) from phase {phase.name} to phase {target.name} ({by})"


def _copy_marks(source: Registry, target: Registry, old: str, new: str, baseline: bool
                ) -> None:
    """A moved copy keeps the marks of its original, written before the copy's entry so it
    is never shown without them: hidden (by its team or by a maintainer, whose hide only
    maintainers undo) and baseline (outside the ranking)."""
    visibility = source.visibility(old)
    if visibility is not None and visibility["hidden"]:
        target.set_hidden(new, True, visibility["by"])
    if baseline:
        target.set_baseline(new, True, "maintainer:move")


def _phase_json(phase: Phase, now: datetime, open_now: bool) -> dict[str, Any]:
    def when(moment: datetime | None) -> str | None:
        return moment.strftime(DATE_FORMAT) if moment else None
    return {"name": phase.name, "start": when(phase.start), "end": when(phase.end),
            "open": open_now, "visibility": phase.visibility,
            "selection": phase.selection, "protocols": list(phase.protocols),
            "headline": phase.headline, "upload": phase.upload,
            "boards": list(phase.boards),
            "limits": _limits_json(phase)}


async def api_leaderboard(svc: Service, request: Request) -> Response:
    """A phase's board (``?phase=NAME``; default: the current phase), if the caller may
    see it."""
    phase = await svc.run(svc.phase, request.query_params.get("phase"))
    account = svc.tokens.account(bearer(request))
    if not await svc.run(svc.board_shown, phase, account):
        if phase.visibility == "unlisted":
            raise Refusal(404, f"phase {phase.name}: its board is not public")
        raise Refusal(403, _private_note(phase))
    data = await svc.run(svc.board_file, phase, "leaderboard.json")
    if data is None:
        raise Refusal(404, "no leaderboard has been published yet")
    return Response(data, media_type="application/json")


async def visible_submission(svc: Service, request: Request, account: Account | None
                             ) -> tuple[Phase, Submission, Account | None]:
    """The submission named in the path and its phase, if the caller may see it (else
    404)."""
    submission_id = request.path_params["submission_id"]
    if not is_submission_id(submission_id):
        raise not_found()
    found = await svc.run(svc.find, submission_id)
    if found is None or not can_view(found[1], account):
        raise not_found()
    return found[0], found[1], account


async def change_visibility(svc: Service, request: Request, account: Account | None,
                            hidden: bool) -> tuple[Phase, Submission]:
    if account is None:
        raise Refusal(401, "token: missing or unknown")
    phase, sub, _ = await visible_submission(svc, request, account)
    registry = svc.registries[phase.name]
    visibility = await svc.run(registry.visibility, sub.id)
    if not may_set_hidden(sub, account, hidden, visibility):
        raise Refusal(403, f"team {account.team} may not change this submission's visibility")
    by = f"{'maintainer' if account.is_maintainer else 'team'}:{account.team}"
    await svc.run(registry.set_hidden, sub.id, hidden, by)
    return phase, await svc.run(submission, registry, sub.id)


def own_submissions(svc: Service, account: Account) -> list[tuple[Phase, Submission]]:
    """The team's submissions with their phases (every submission for maintainers)."""
    return [(phase, s) for phase in svc.benchmark.phases
            for s in (submissions(svc.registries[phase.name]) if account.is_maintainer
                      else team_submissions(svc.registries[phase.name], account.team))]


def submissions_page(svc: Service, account: Account, after: str | None, size: int
                     ) -> tuple[list[tuple[Phase, Submission]], bool]:
    """Up to ``size`` of the caller's submissions (every one for maintainers) after the
    one named ``after``, by phase and then oldest first (ids sort by time), and whether
    more follow. Only the page's submissions are read (a team's ids come from its index,
    a maintainer's from the entries' names)."""
    keys: list[tuple[Phase, str]] = []
    for phase in svc.benchmark.phases:
        registry = svc.registries[phase.name]
        ids = [p.rsplit("/", 1)[-1].removesuffix(".json")
               for p in registry.listing("entries")] if account.is_maintainer else \
            [e.submission_id for e in registry.team_entries(account.team)]
        keys += [(phase, sid) for sid in sorted(ids)]
    start = next((i + 1 for i, (_, sid) in enumerate(keys) if sid == after), None) \
        if after else 0
    if start is None:
        raise Refusal(400, "after: not a submission of this listing")
    page = []
    for phase, sid in keys[start:start + size]:
        sub = submission(svc.registries[phase.name], sid)
        if sub is not None:
            page.append((phase, sub))
    return page, start + size < len(keys)


# --- pages ---------------------------------------------------------------------------------

async def leaderboard_page(svc: Service, request: Request, csrf: str) -> Response:
    account = cookie_account(svc, request)
    if svc.config.benchmark is None:
        rows, published = await svc.run(svc.board, svc.benchmark.phases[0])
        return HTMLResponse(pages.leaderboard(rows, published, svc.config.title, account,
                                              csrf))
    boards = await svc.run(_shown_boards, svc, account)
    return HTMLResponse(pages.challenge_page(boards, svc.benchmark.title, account, csrf))


async def board_export(svc: Service, request: Request, csrf: str) -> Response:
    """One board of a phase as CSV or JSON: the columns and values the page shows (numbers
    unrounded), if the reader may see the board."""
    phase = await svc.run(svc.phase, request.path_params["phase"])
    account = cookie_account(svc, request) or svc.tokens.account(bearer(request))
    if not await svc.run(svc.board_shown, phase, account):
        raise Refusal(403 if phase.visibility == "private" else 404,
                      _private_note(phase) if phase.visibility == "private"
                      else f"phase {phase.name}: its board is not public")
    rows, _ = await svc.run(svc.board, phase)
    boards, _, columns, extra = pages.board_view(rows or [], phase)
    name, fmt = request.path_params["board"], request.path_params["fmt"]
    if name not in boards or fmt not in ("csv", "json"):
        raise Refusal(404, f"phase {phase.name}: no board {name}.{fmt}")
    labels, values = leaderboard_html.board_export(boards[name], columns, extra,
                                                   pages.phase_look(phase))
    if fmt == "json":
        return JSONResponse([dict(zip(labels, row, strict=True)) for row in values])
    return Response(leaderboard_html.board_csv(labels, values),
                    media_type="text/csv; charset=utf-8")


def _shown_boards(svc: Service, account: Account | None) -> list[pages.PhaseBoard]:
    """Every phase with what ``account`` may see of its board."""
    out = []
    for phase in svc.benchmark.phases:
        shown = svc.board_shown(phase, account)
        rows, published = svc.board(phase) if shown else (None, None)
        note = None if shown else ("its board is not public" if phase.visibility == "unlisted"
                                   else _private_note(phase).partition(": ")[2])
        private = phase.visibility == "private" and not svc.revealed(phase)
        out.append(pages.PhaseBoard(phase, rows, published, note,
                                    private and bool(account and account.is_maintainer)))
    return out


async def host_post(svc: Service, request: Request, csrf: str) -> Response:
    """A host action from the leaderboard's reveal button or the host page."""
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    await _host_action(svc, request.path_params["phase"], request.path_params["action"],
                      cookie_account(svc, request))
    return RedirectResponse("/host" if fields.get("back") == "host" else "/", 303)


async def host_page(svc: Service, request: Request, csrf: str) -> Response:
    """The maintainers' page: every phase, its state, its actions and who did what."""
    account = cookie_account(svc, request)
    if account is None or not account.is_maintainer:
        raise Refusal(403, "the host page is for maintainers (sign in with a maintainer token)")
    now = svc.config.clock()
    phases = [(p, svc.is_open(p, now), await svc.run(svc.registries[p.name].host_actions))
              for p in svc.benchmark.phases]
    return HTMLResponse(pages.host_page(phases, HOST_ACTIONS, account, csrf))


async def submit_form(svc: Service, request: Request, csrf: str) -> Response:
    return HTMLResponse(pages.upload_form(cookie_account(svc, request), csrf,
                                          svc.config.max_upload_mb, svc.config.open_uploads,
                                          await svc.run(_open_phases, svc)))


def _open_phases(svc: Service) -> list[Phase] | None:
    """The phases taking uploads now, for the form's phase choice (None: one phase from
    the flags, no choice to show)."""
    if svc.config.benchmark is None:
        return None
    now = svc.config.clock()
    return [p for p in svc.benchmark.phases if svc.is_open(p, now)]


async def submit_post(svc: Service, request: Request, csrf: str) -> Response:
    try:
        sub, used = await accept_upload(svc, request, request.cookies.get(TOKEN_COOKIE),
                                        form=True)
    except ClientDisconnect:
        return Response(status_code=400)
    except (Refusal, LimitReached) as err:
        status = err.status if isinstance(err, Refusal) else 429
        return HTMLResponse(pages.upload_form(cookie_account(svc, request), csrf,
                                              svc.config.max_upload_mb,
                                              svc.config.open_uploads,
                                              await svc.run(_open_phases, svc), str(err)),
                            status)
    response = RedirectResponse(f"/submissions/{sub.id}", 303)
    keep = used if used and used != request.cookies.get(TOKEN_COOKIE) else None
    return with_cookies(response, request, csrf, False, keep)


async def status_page(svc: Service, request: Request, csrf: str) -> Response:
    account = cookie_account(svc, request)
    phase, sub, _ = await visible_submission(svc, request, account)
    owner = is_owner(sub, account) or bool(account and account.is_maintainer)
    marks = await svc.run(_marks, svc, phase, sub, account)
    if not await svc.run(svc.scores_shown, phase, account):
        return HTMLResponse(pages.status_page(sub, None, False, may_see_errors(sub, account),
                                              owner, account, csrf, phase.name,
                                              _private_note(phase), marks))
    rank = (await svc.run(svc.ranks, phase)).get(sub.id)
    return HTMLResponse(pages.status_page(sub, rank, rank is not None,
                                          may_see_errors(sub, account), owner, account, csrf,
                                          phase.name, marks=marks,
                                          protocol=phase.protocols[0]))


def _marks(svc: Service, phase: Phase, sub: Submission, account: Account | None
           ) -> tuple[str, ...]:
    """The board marks ``account`` may set on ``sub`` (its status page's buttons)."""
    if account is None:
        return ()
    choose = phase.selection == "chosen" and sub.entry.team is not None and (
        is_owner(sub, account) or account.is_maintainer)
    baseline = () if not account.is_maintainer else (
        ("unbaseline",) if sub.id in svc.registries[phase.name].baselines() else ("baseline",))
    return (*(("choose",) if choose else ()), *baseline)


async def choose_post(svc: Service, request: Request, csrf: str) -> Response:
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    _, sub = await _choose(svc, request, cookie_account(svc, request))
    return RedirectResponse(f"/submissions/{sub.id}", 303)


async def baseline_post(svc: Service, request: Request, csrf: str) -> Response:
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    _, sub = await _mark_baseline(svc, request, cookie_account(svc, request),
                                  fields.get("value") == "yes")
    return RedirectResponse(f"/submissions/{sub.id}", 303)


async def visibility_post(svc: Service, request: Request, csrf: str) -> Response:
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    _, sub = await change_visibility(svc, request, cookie_account(svc, request),
                                     fields.get("visibility") == "hidden")
    return RedirectResponse(f"/submissions/{sub.id}", 303)


async def mine_page(svc: Service, request: Request, csrf: str) -> Response:
    """The team's newest submissions (``PAGE_SIZE``; the API pages through all)."""
    account = cookie_account(svc, request)
    found = await svc.run(own_submissions, svc, account) if account else []
    return HTMLResponse(pages.mine_page([s for _, s in found][-PAGE_SIZE:], account, csrf))


async def login_form(svc: Service, request: Request, csrf: str) -> Response:
    return HTMLResponse(pages.login_form(cookie_account(svc, request), csrf))


async def login_post(svc: Service, request: Request, csrf: str) -> Response:
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    token = fields.get("token", "").strip()
    if svc.tokens.account(token) is None:
        return HTMLResponse(pages.login_form(None, csrf, "token: unknown or revoked token"),
                            401)
    return with_cookies(RedirectResponse("/mine", 303), request, csrf, False, token)


async def logout_post(svc: Service, request: Request, csrf: str) -> Response:
    fields = await small_form(request)
    check_csrf(request, fields.get("csrf"))
    response = RedirectResponse("/", 303)
    response.delete_cookie(TOKEN_COOKIE, path="/")
    return response


async def report_page(svc: Service, request: Request, csrf: str) -> Response:
    account = cookie_account(svc, request)
    phase, sub, _ = await visible_submission(svc, request, account)
    if not await svc.run(svc.scores_shown, phase, account):
        raise Refusal(404, "no published report for this submission")
    data = await svc.run(svc.report, phase, sub.id)
    if data is None:
        raise Refusal(404, "no published report for this submission")
    response = HTMLResponse(data)
    response.headers["Content-Security-Policy"] = REPORT_CSP
    return response


async def small_form(request: Request) -> dict[str, str]:
    """An urlencoded form of a few short fields."""
    if not request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        raise Refusal(415, "expected an urlencoded form")
    form = await request.form(max_files=0, max_fields=8, max_part_size=4096)
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def health(request: Request) -> Response:
    return Response("ok\n", media_type="text/plain")


# --- the application -----------------------------------------------------------------------

class SecurityHeaders:
    """CSP, no sniffing, no framing, no caching of personal pages; ``Connection: close``
    after a refused upload whose body was too long to drain."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                extra = {b"content-security-policy": PAGE_CSP.encode(),
                         b"x-content-type-options": b"nosniff",
                         b"x-frame-options": b"DENY", b"referrer-policy": b"same-origin",
                         b"cache-control": b"no-store"}
                if scope.get("state", {}).get("close"):
                    extra[b"connection"] = b"close"
                headers += [(k, v) for k, v in extra.items() if k not in names]
                message = {**message, "headers": headers}
            await send(message)
        await self.app(scope, receive, send_with_headers)


def _log_stderr(line: str) -> None:
    print(f"sgdask: {line}", file=sys.stderr, flush=True)


async def _index_teams(svc: Service, log: Callable[[str], None]) -> None:
    """Index the entries a registry holds without a team index record (a registry written
    before the index existed), before the first upload is taken."""
    for phase, registry in svc.registries.items():
        try:
            indexed = await svc.run(registry.index_teams)
        except Exception as err:  # an unreachable store: limits read what is indexed
            log(f"indexing phase {phase}'s entries by team failed: {type(err).__name__}: "
                f"{err}")
        else:
            if indexed:
                log(f"indexed {indexed} entries of phase {phase} by team")


async def _sweep_every(svc: Service, log: Callable[[str], None]) -> None:
    """Sweep every phase's orphaned uploads now and every lease."""
    while True:
        for registry in svc.registries.values():
            try:
                swept = await svc.run(sweep_orphans, registry, svc.config.lease, svc.watch)
            except Exception as err:  # an unreachable store: the next sweep
                log(f"sweeping orphaned uploads failed: {type(err).__name__}: {err}")
            else:
                if swept:
                    log(f"swept {len(swept)} orphaned file(s): {', '.join(swept)}")
        await asyncio.sleep(svc.config.lease)


def _with_sweeper(svc: Service, lifespan: Any, log: Callable[[str], None]) -> Any:
    """The application's lifespan: the team index completed first, then ``lifespan`` (if any)
    with the orphan sweeper beside."""
    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[None]:
        await _index_teams(svc, log)
        sweeper = asyncio.create_task(_sweep_every(svc, log))
        try:
            if lifespan is None:
                yield
            else:
                async with lifespan(app):
                    yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
    return run


def create_app(config: ServiceConfig, lifespan: Any = None,
               log: Callable[[str], None] = _log_stderr, slow: SlowClients | None = None
               ) -> Any:
    routes = [
        Route("/", html(leaderboard_page), methods=["GET"]),
        Route("/submit", html(submit_form), methods=["GET"]),
        Route("/submit", html(submit_post), methods=["POST"]),
        Route("/login", html(login_form), methods=["GET"]),
        Route("/login", html(login_post), methods=["POST"]),
        Route("/logout", html(logout_post), methods=["POST"]),
        Route("/mine", html(mine_page), methods=["GET"]),
        Route("/submissions/{submission_id}", html(status_page), methods=["GET"],
              name="status_page"),
        Route("/submissions/{submission_id}/visibility", html(visibility_post),
              methods=["POST"]),
        Route("/submissions/{submission_id}/choose", html(choose_post), methods=["POST"]),
        Route("/submissions/{submission_id}/baseline", html(baseline_post), methods=["POST"]),
        Route("/reports/{submission_id}", html(report_page), methods=["GET"],
              name="report_page"),
        Route("/boards/{phase}/{board}.{fmt}", html(board_export), methods=["GET"]),
        Route("/api/submissions", api(api_submit), methods=["POST"]),
        Route("/api/submissions", api(api_submissions), methods=["GET"]),
        Route("/api/submissions/{submission_id}", api(api_submission), methods=["GET"]),
        Route("/api/submissions/{submission_id}/visibility", api(api_visibility),
              methods=["POST"]),
        Route("/api/leaderboard", api(api_leaderboard), methods=["GET"]),
        Route("/api/submissions/{submission_id}/choose", api(api_choose), methods=["POST"]),
        Route("/api/submissions/{submission_id}/baseline", api(api_baseline),
              methods=["POST"]),
        Route("/api/phases/{phase}/{action}", api(api_host_action), methods=["POST"]),
        Route("/phases/{phase}/{action}", html(host_post), methods=["POST"]),
        Route("/host", html(host_page), methods=["GET"]),
        Route("/api/whoami", api(api_whoami), methods=["GET"]),
        Route("/healthz", health, methods=["GET"]),
    ]
    svc = Service(config, slow or SlowClients(log))
    app = Starlette(routes=routes, lifespan=_with_sweeper(svc, lifespan, log))
    app.state.service = svc
    return SecurityHeaders(app)
