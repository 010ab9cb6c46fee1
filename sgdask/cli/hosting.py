"""Commands that host a benchmark: ``submit``, ``rerank``, ``serve``, ``worker`` and
``tokens add|revoke``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sgdask.cli.console import err_console, out_console
from sgdask.cli.options import (
    InProcess,
    Limits,
    Processes,
    Scheduler,
    StorageOpt,
    Workers,
    cluster_choice,
    storage_options,
)
from sgdask.errors import SgdaskError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.lock import DEFAULT_LEASE
from sgdask.metrics import RANK_BY, format_value

if TYPE_CHECKING:
    from sgdask.service.limits import Limits as TeamLimits


def submit(submission: Annotated[str, typer.Argument(help="SGBench ZIP or JSON")],
           name: Annotated[str, typer.Option(help="model name shown on the leaderboard")],
           registry: Annotated[str | None, typer.Option(
               help="registry URL (convert and register here; or --server)")] = None,
           server: Annotated[str | None, typer.Option(
               help="benchmark server URL (upload through its API; or --registry)")] = None,
           token: Annotated[str | None, typer.Option(
               envvar="SGDASK_TOKEN", help="token for --server (or $SGDASK_TOKEN)")] = None,
           gt: Annotated[str | None, typer.Option(
               help="GT store URL (validates against it; with --registry)")] = None,
           approved: Annotated[bool, typer.Option(help="show on the approved board")] = False,
           paper: Annotated[str | None, typer.Option(help="paper link")] = None,
           wait: Annotated[bool, typer.Option(
               "--wait", help="with --server: wait until ranked, rejected or failed")] = False,
           wait_timeout: Annotated[float, typer.Option(
               help="seconds --wait waits at most")] = 3600,
           scheduler: Scheduler = None, in_process: InProcess = False,
           workers: Workers = None, processes: Processes = None,
           storage_option: StorageOpt = None) -> None:
    """Submit a model: convert and register it (--registry), or upload it (--server).

    With --server --wait the exit code is 0 when ranked, 2 when rejected or failed."""
    if (registry is None) == (server is None):
        raise SgdaskError("submit: give exactly one of --registry URL or --server URL")
    if server is not None:
        _upload(submission, server, token, name, paper, approved,
                wait_timeout if wait else None)
        return
    if gt is None:
        raise SgdaskError("submit --registry: --gt is required")
    from sgdask.batch.registry import submit as register

    entry = register(submission, registry, gt, name, approved, paper,
                     storage_options(storage_option),
                     cluster=cluster_choice(scheduler, in_process, workers, processes))
    out_console.print(f"registered {entry.submission_id}: {entry.name} "
                      f"({'approved' if entry.approved else 'not approved'}) -> {entry.url}")


def _upload(submission: str, server: str, token: str | None, name: str, paper: str | None,
            approved: bool, wait_timeout: float | None) -> None:
    """``submit --server``: upload, then (``wait_timeout`` given) wait until ranked."""
    from sgdask.service import client

    answer = client.upload(server, token, submission, name, paper,
                           "approved" if approved else "public")
    print(f"uploaded {answer['id']}: {answer['status']} -> {answer['url']}", flush=True)
    if wait_timeout is None:
        return
    doc = client.ranked(server, token, answer["id"], wait_timeout,
                        lambda line: print(line, file=sys.stderr))
    rank = doc.get("rank")
    print(f"{answer['id']}: ranked{f' #{rank}' if rank else ''}, {RANK_BY} "
          f"{format_value(RANK_BY, (doc.get('metrics') or {}).get(RANK_BY))}")


def rerank(registry: Annotated[str, typer.Option(help="registry URL")],
           gt: Annotated[str, typer.Option(help="GT store URL")],
           out: Annotated[str, typer.Option(help="leaderboard URL (publishes here)")],
           scheduler: Scheduler = None, workers: Workers = None,
           processes: Processes = None,
           dry_run: Annotated[bool, typer.Option(
               "--dry-run", help="list what would be evaluated, then stop")] = False,
           lease: Annotated[float, typer.Option(
               min=0.5, help="seconds without a heartbeat after which the holder of "
               "OUT/lock.json is presumed dead and its lock taken over (a holder on this host "
               "whose process is gone: at once)")] = DEFAULT_LEASE,
           stale_lock_after: Annotated[float | None, typer.Option(
               min=0.5, hidden=True, help="deprecated: use --lease")] = None,
           storage_option: StorageOpt = None) -> None:
    """Evaluate what is missing under the current protocols and publish the leaderboard.

    Exit codes: 0 published or up to date, 2 bad input, 3 another rerank holds the lock.
    """
    from sgdask.batch.rerank import EXIT_LOCKED
    from sgdask.batch.rerank import rerank as run_rerank
    from sgdask.io.lock import LockHeld

    if stale_lock_after is not None:
        print("sgdask: warning: --stale-lock-after is deprecated: use --lease", file=sys.stderr)
        lease = stale_lock_after
    try:
        outcome = run_rerank(registry, gt, out, storage_options=storage_options(storage_option),
                             scheduler=cluster_choice(scheduler, False, workers, processes,
                                                      batch=True),
                             dry_run=dry_run, progress=True,
                             log=err_console.print, lease=lease)
    except LockHeld as err:
        print(f"sgdask: {err}", file=sys.stderr)
        sys.exit(EXIT_LOCKED)
    for row in outcome.board:
        out_console.print(f"{row['rank']:3d}. {row['name']}  {RANK_BY} "
                          f"{format_value(RANK_BY, row['metrics'].get(RANK_BY))}")


# --- the benchmarking service ----------------------------------------------------------------

Registry = Annotated[str, typer.Option(help="registry URL (entries, uploads, stores, cache)")]
GT = Annotated[str, typer.Option(help="GT store URL")]
Board = Annotated[str, typer.Option(help="leaderboard URL (rerank publishes here)")]
TokensFile = Annotated[str | None, typer.Option(
    help="tokens file (from `sgdask tokens add`); without it only --open-uploads work")]
DailyLimit = Annotated[int, typer.Option(
    min=0, help="submissions per team per rolling 24 hours (0: no limit)")]
TotalLimit = Annotated[int, typer.Option(min=0, help="submissions per team in total (0: none)")]
OpenUploads = Annotated[bool, typer.Option(
    "--open-uploads", help="the public board takes uploads without a token (a local lab)")]
Poll = Annotated[float, typer.Option(min=0.05, help="seconds between queue polls")]
Lease = Annotated[float, typer.Option(
    min=0.5, help="seconds without a heartbeat after which a worker, an upload or the holder "
    "of the board's lock is presumed dead and what it held is taken over; orphaned uploads "
    "are swept after 3 leases")]
MaxAttempts = Annotated[int, typer.Option(
    min=1, help="claims of one entry before it is marked failed")]


def _team_limits(daily: int, total: int, concurrent: int = 0) -> TeamLimits:
    """The per-team limits the options give (0: no limit)."""
    from sgdask.service.limits import Limits

    return Limits(daily or None, total or None, concurrent or None)


def serve(registry: Registry, gt: GT,
          out: Board,
          scheduler: Scheduler = None, processes: Processes = None,
          host: Annotated[str, typer.Option(
              help="address to listen on (put a TLS proxy in front for anything public)")]
          = "127.0.0.1",
          port: Annotated[int, typer.Option(help="port (0: any free port)")] = 8000,
          tokens: TokensFile = None,
          no_worker: Annotated[bool, typer.Option(
              "--no-worker", help="only take uploads; run `sgdask worker` separately")] = False,
          max_upload_mb: Annotated[float, typer.Option(
              min=0.001, help="largest upload in MiB (413 beyond)")] = 2048,
          daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
          concurrent_limit: Annotated[int, typer.Option(
              min=0, help="uploads per team streaming in at the same time, across every "
              "server sharing the registry; they count against the daily and total limits "
              "too (0: no limit)")] = 5,
          open_uploads: OpenUploads = False,
          title: Annotated[str, typer.Option(help="the leaderboard's title")]
          = "sgdask leaderboard",
          poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
          limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Serve the benchmark: upload form, status pages, leaderboard, JSON API, and the queue
    worker (in this process unless --no-worker)."""
    from sgdask.service.app import ServiceConfig
    from sgdask.service.server import serve as run_server
    from sgdask.service.worker import WorkerConfig

    service = ServiceConfig(registry, out, storage_options(storage_option), tokens,
                            max_upload_mb,
                            _team_limits(daily_limit, total_limit, concurrent_limit),
                            open_uploads, title, lease)
    worker = None if no_worker else WorkerConfig.beside(
        service, gt, poll, max_attempts, ArchiveLimits.from_pairs(limit))
    run_server(service, worker, cluster_choice(scheduler, False, None, processes, batch=True),
               host, port)


def worker(registry: Registry, gt: GT, out: Board,
           scheduler: Scheduler = None, processes: Processes = None,
           tokens: TokensFile = None,
           daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
           open_uploads: OpenUploads = False,
           poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
           limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Work the service's queue and inbox: validate, convert, evaluate, publish.

    Any number of workers may poll one registry; each entry and inbox file is taken once.
    Tokens and limits apply to inbox submissions."""
    from sgdask.service.server import work
    from sgdask.service.worker import WorkerConfig

    work(WorkerConfig(registry, gt, out, storage_options(storage_option), poll, lease,
                      max_attempts, tokens=tokens,
                      limits=_team_limits(daily_limit, total_limit), open_uploads=open_uploads,
                      archive_limits=ArchiveLimits.from_pairs(limit)),
         cluster_choice(scheduler, False, None, processes, batch=True))


def tokens_add(file: Annotated[Path, typer.Argument(help="tokens file (created if absent)")],
               team: Annotated[str, typer.Option(help="team name")],
               role: Annotated[str, typer.Option(help="participant or maintainer")]
               = "participant") -> None:
    """Create a token for a team; the token is the last line of the output (shown once:
    only its hash is stored)."""
    from sgdask.service.tokens import add_token

    token = add_token(file, team, role)
    print(f"added a {role} token for team {team} to {file}; it is not shown again:")
    print(token)


def tokens_revoke(file: Annotated[Path, typer.Argument(help="tokens file")],
                  team: Annotated[str, typer.Argument(help="team whose tokens to remove")]
                  ) -> None:
    """Remove every token of a team (a running server notices the change)."""
    from sgdask.service.tokens import revoke_team

    removed = revoke_team(file, team)
    if not removed:
        raise SgdaskError(f"{file}: team {team!r} has no token")
    print(f"revoked {removed} token(s) of team {team}")
