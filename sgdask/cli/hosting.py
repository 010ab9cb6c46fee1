"""Commands that host a benchmark: ``submit``, ``rerank``, ``serve``, ``worker`` and
``tokens add|revoke``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sgdask.cli.console import err_console, out_console
from sgdask.cli.options import (
    ClusterFile,
    Gateway,
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
from sgdask.metrics import RANK_BY, format_value
from sgdask.service import DEFAULT_MEMORY_CAP_MIB
from sgdask.store.lock import DEFAULT_LEASE

if TYPE_CHECKING:
    from sgdask.service.limits import Limits as TeamLimits

_REGISTRY, _SERVER = "With --registry", "With --server"
_HTTP, _ACCOUNTS, _QUEUE = "Web server", "Accounts and limits", "Queue"


def submit(submission: Annotated[str, typer.Argument(
               metavar="SUBMISSION", help="SGBench ZIP or JSON; a video model's output (with "
           "--method) or a PVSG results directory")],
           name: Annotated[str, typer.Option(
               metavar="NAME", help="model name shown on the leaderboard")],
           registry: Annotated[str | None, typer.Option(
               metavar="PATH", rich_help_panel=_REGISTRY,
               help="registry to convert and register into")] = None,
           server: Annotated[str | None, typer.Option(
               metavar="URL", rich_help_panel=_SERVER,
               help="benchmark server to upload to")] = None,
           token: Annotated[str | None, typer.Option(
               envvar="SGDASK_TOKEN", metavar="TOKEN", rich_help_panel=_SERVER,
               help="upload token (or $SGDASK_TOKEN)")] = None,
           gt: Annotated[str | None, typer.Option(
               metavar="PATH", rich_help_panel=_REGISTRY,
               help="GT store to validate against")] = None,
           approved: Annotated[bool, typer.Option(help="show on the approved board")] = False,
           paper: Annotated[str | None, typer.Option(metavar="URL", help="paper link")] = None,
           method: Annotated[str | None, typer.Option(
               metavar="METHOD", rich_help_panel=_REGISTRY,
               help="SUBMISSION is a video model's output: sttran or tempura")] = None,
           wait: Annotated[bool, typer.Option(
               "--wait", rich_help_panel=_SERVER,
               help="wait until ranked, rejected or failed")] = False,
           wait_timeout: Annotated[float, typer.Option(
               metavar="SECONDS", rich_help_panel=_SERVER,
               help="how long --wait waits at most")] = 3600,
           scheduler: Scheduler = None, in_process: InProcess = False,
           workers: Workers = None, processes: Processes = None,
           cluster_file: ClusterFile = None, gateway_url: Gateway = None,
           storage_option: StorageOpt = None) -> None:
    """Register (--registry) or upload (--server) a model.

    With --registry the submission is validated against --gt, converted and registered
    here. With --server --wait the exit code is 0 when ranked, 2 when rejected or failed."""
    if (registry is None) == (server is None):
        raise SgdaskError("submit: give exactly one of --registry URL or --server URL")
    if server is not None:
        if method is not None:
            raise SgdaskError("--method: only with --registry (the server reads the "
                              "benchmark's own format)")
        _upload(submission, server, token, name, paper, approved,
                wait_timeout if wait else None)
        return
    if gt is None:
        raise SgdaskError("submit --registry: --gt is required")
    from sgdask.batch.registry import submit as register

    if method is not None or _is_pvsg_results(submission, storage_options(storage_option)):
        entry = _register_output(submission, registry, gt, name, method, approved, paper,
                                 storage_options(storage_option))
    else:
        entry = register(submission, registry, gt, name, approved, paper,
                         storage_options(storage_option),
                         cluster=cluster_choice(scheduler, in_process, workers, processes,
                                                cluster=cluster_file, gateway=gateway_url))
    out_console.print(f"registered {entry.submission_id}: {entry.name} "
                      f"({'approved' if entry.approved else 'not approved'}) -> {entry.url}")


def _is_pvsg_results(url: str, options: Any) -> bool:
    """Whether ``url`` is a PVSG results directory (registered as it is, not converted)."""
    from sgdask.formats.pvsg import RESULTS_FORMAT
    from sgdask.formats.registry import claimed

    found = claimed(url, options)
    return found is not None and found.name == RESULTS_FORMAT


def _register_output(submission: str, registry: str, gt: str, name: str,
                     method: str | None, approved: bool, paper: str | None,
                     options: Any) -> Any:
    """``submit --registry`` of a video model's output: checked, copied, registered as it
    is (``sgdask.batch.video.submit_output``)."""
    from sgdask.batch.video import submit_output
    from sgdask.errors import checked_choice
    from sgdask.formats.methods import VIDEO_METHODS

    if method is not None:
        checked_choice("method", method, tuple(VIDEO_METHODS), "video model's method")
    return submit_output(submission, registry, gt, name, method, approved, paper, options)


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


def rerank(registry: Registry, gt: GT, out: Board,
           scheduler: Scheduler = None, workers: Workers = None,
           processes: Processes = None,
           cluster_file: ClusterFile = None, gateway_url: Gateway = None,
           dry_run: Annotated[bool, typer.Option(
               "--dry-run", help="list what would be evaluated, then stop")] = False,
           lease: Annotated[float, typer.Option(
               min=0.5, metavar="SECONDS",
               help="heartbeat age after which the board's lock is taken over")]
           = DEFAULT_LEASE,
           stale_lock_after: Annotated[float | None, typer.Option(
               min=0.5, hidden=True, help="deprecated: use --lease")] = None,
           selection: Annotated[str, typer.Option(
               help="which of a team's submissions the board shows: all, best, last or "
               "chosen (a benchmark file's phase: its `selection`)")] = "all",
           storage_option: StorageOpt = None) -> None:
    """Evaluate what is missing and publish the leaderboard.

    Every submission of the registry is scored under the current protocols (from the cache
    where it can be). The holder of OUT/lock.json is presumed dead once its heartbeat is
    --lease seconds old (a holder on this host whose process is gone: at once). Exit codes:
    0 published or up to date, 2 bad input, 3 another rerank holds the lock."""
    from sgdask.batch.rerank import EXIT_LOCKED, SELECTIONS
    from sgdask.batch.rerank import rerank as run_rerank
    from sgdask.store.lock import LockHeld

    if selection not in SELECTIONS:
        raise SgdaskError(f"--selection: {selection!r} is not one of {', '.join(SELECTIONS)}")

    if stale_lock_after is not None:
        print("sgdask: warning: --stale-lock-after is deprecated: use --lease", file=sys.stderr)
        lease = stale_lock_after
    try:
        outcome = run_rerank(registry, gt, out, storage_options=storage_options(storage_option),
                             scheduler=cluster_choice(scheduler, False, workers, processes,
                                                      batch=True,
                                                      cluster=cluster_file, gateway=gateway_url),
                             dry_run=dry_run, progress=True,
                             log=err_console.print, lease=lease, selection=selection)
    except LockHeld as err:
        print(f"sgdask: {err}", file=sys.stderr)
        sys.exit(EXIT_LOCKED)
    for row in outcome.board:  # ranked within its matching mode's board; baselines unranked
        rank = "  -" if row["rank"] is None else f"{row['rank']:3d}"
        out_console.print(f"{row['matching']:>5} {rank}. {row['name']}  {RANK_BY} "
                          f"{format_value(RANK_BY, row['metrics'].get(RANK_BY))}")


# --- the benchmarking service ----------------------------------------------------------------

Registry = Annotated[str, typer.Option(
    metavar="PATH", help="registry: entries, uploads, stores, cache")]
GT = Annotated[str, typer.Option(metavar="PATH", help="GT store")]
Board = Annotated[str, typer.Option(metavar="PATH", help="where the leaderboard is published")]
TokensFile = Annotated[str | None, typer.Option(
    metavar="PATH", rich_help_panel=_ACCOUNTS,
    help="tokens file from `sgdask tokens add` (none: only --open-uploads)")]
DailyLimit = Annotated[int, typer.Option(
    min=0, metavar="N", rich_help_panel=_ACCOUNTS,
    help="submissions per team per rolling 24 hours (0: no limit)")]
TotalLimit = Annotated[int, typer.Option(
    min=0, metavar="N", rich_help_panel=_ACCOUNTS,
    help="submissions per team in total (0: no limit)")]
OpenUploads = Annotated[bool, typer.Option(
    "--open-uploads", rich_help_panel=_ACCOUNTS,
    help="the public board takes uploads without a token (a local lab)")]
Poll = Annotated[float, typer.Option(
    min=0.05, metavar="SECONDS", rich_help_panel=_QUEUE, help="time between queue polls")]
Lease = Annotated[float, typer.Option(
    min=0.5, metavar="SECONDS", rich_help_panel=_QUEUE,
    help="heartbeat age after which a worker, upload or lock is presumed dead")]
MemoryCap = Annotated[int, typer.Option(
    min=0, metavar="MIB", rich_help_panel=_QUEUE,
    help="memory each submission's check and conversion may take, in a process of its own "
    "(more: the submission is rejected, and counts against the team's limits; 0: no cap)")]
MaxAttempts = Annotated[int, typer.Option(
    min=1, metavar="N", rich_help_panel=_QUEUE,
    help="claims of one entry before it is marked failed")]
BenchmarkFile = Annotated[str | None, typer.Option(
    "--benchmark", metavar="FILE", help="benchmark file (YAML: phases with their GT, dates, "
    "limits and boards); replaces --gt, --title and the limits")]


def _team_limits(daily: int, total: int, concurrent: int = 0, upload_seconds: float = 0
                 ) -> TeamLimits:
    """The per-team limits the options give (0: no limit)."""
    from sgdask.service.limits import Limits

    return Limits(daily or None, total or None, concurrent or None,
                  upload_seconds=upload_seconds or None)


def serve(registry: Registry, out: Board,
          gt: Annotated[str | None, typer.Option(
              help="GT store URL (one phase; or --benchmark)")] = None,
          scheduler: Scheduler = None, processes: Processes = None,
          cluster_file: ClusterFile = None, gateway_url: Gateway = None,
          host: Annotated[str, typer.Option(
              metavar="ADDRESS", rich_help_panel=_HTTP,
              help="address to listen on (public: behind a TLS proxy)")]
          = "127.0.0.1",
          port: Annotated[int, typer.Option(
              metavar="PORT", rich_help_panel=_HTTP, help="port (0: any free port)")] = 8000,
          tokens: TokensFile = None,
          no_worker: Annotated[bool, typer.Option(
              "--no-worker", rich_help_panel=_QUEUE,
              help="only take uploads; run `sgdask worker` separately")] = False,
          max_upload_mb: Annotated[float, typer.Option(
              min=0.001, metavar="MIB", rich_help_panel=_HTTP,
              help="largest upload (413 beyond)")] = 2048,
          daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
          concurrent_limit: Annotated[int, typer.Option(
              min=0, metavar="N", rich_help_panel=_ACCOUNTS,
              help="uploads per team streaming in at once, on every server (0: no limit)")]
          = 5,
          upload_seconds: Annotated[float, typer.Option(
              min=0, metavar="SECONDS", rich_help_panel=_HTTP,
              help="time an upload may take to complete (0: no bound; a benchmark file "
              "sets it per phase)")] = 300,
          header_timeout: Annotated[float, typer.Option(
              min=0.1, metavar="SECONDS", rich_help_panel=_HTTP,
              help="time a request's headers may take to arrive")] = 10,
          body_timeout: Annotated[float, typer.Option(
              min=0.1, metavar="SECONDS", rich_help_panel=_HTTP,
              help="time an upload's body may send nothing")] = 60,
          open_uploads: OpenUploads = False,
          title: Annotated[str, typer.Option(
              metavar="TEXT", rich_help_panel=_HTTP, help="the leaderboard's title")]
          = "sgdask leaderboard",
          poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
          memory_cap: MemoryCap = DEFAULT_MEMORY_CAP_MIB,
          benchmark: BenchmarkFile = None,
          limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Serve the benchmark: uploads, status, leaderboard, JSON API.

    The queue workers, one per phase, run in this process unless --no-worker. Uploads
    streaming in count against a team's daily and total limits too."""
    from sgdask.service.app import ServiceConfig
    from sgdask.service.benchmark import check_gts, load_benchmark, one_phase
    from sgdask.service.server import serve as run_server
    from sgdask.service.worker import WorkerConfig

    limits = _team_limits(daily_limit, total_limit, concurrent_limit, upload_seconds)
    if benchmark is None and gt is None:
        raise SgdaskError("serve: give --gt GT (one phase) or --benchmark FILE (phases)")
    phases = load_benchmark(benchmark, registry, out) if benchmark is not None \
        else one_phase(registry, out, gt, limits, title)
    check_gts(phases, storage_options(storage_option))
    service = ServiceConfig(registry, out, storage_options(storage_option), tokens,
                            max_upload_mb, limits, open_uploads, phases.title, lease,
                            benchmark=phases if benchmark is not None else None,
                            body_timeout=body_timeout)
    workers = [] if no_worker else [
        WorkerConfig.beside(service, phase, poll, max_attempts,
                            ArchiveLimits.from_pairs(limit), memory_cap or None)
        for phase in phases.phases]
    run_server(service, workers, cluster_choice(scheduler, False, None, processes, batch=True,
                                                cluster=cluster_file, gateway=gateway_url),
               host, port, header_timeout=header_timeout)


def worker(registry: Registry, out: Board,
           gt: Annotated[str | None, typer.Option(
               help="GT store URL (one phase; or --benchmark)")] = None,
           scheduler: Scheduler = None, processes: Processes = None,
           cluster_file: ClusterFile = None, gateway_url: Gateway = None,
           tokens: TokensFile = None,
           daily_limit: DailyLimit = 5, total_limit: TotalLimit = 0,
           open_uploads: OpenUploads = False,
           poll: Poll = 1.0, lease: Lease = DEFAULT_LEASE, max_attempts: MaxAttempts = 3,
           memory_cap: MemoryCap = DEFAULT_MEMORY_CAP_MIB,
           benchmark: BenchmarkFile = None,
           limit: Limits = None, storage_option: StorageOpt = None) -> None:
    """Work the service's queue and inbox.

    Validate, convert, evaluate and publish every submission (with --benchmark: every
    phase's). Any number of workers may poll one registry; each entry and inbox file is
    taken once. Tokens and limits apply to inbox submissions."""
    from sgdask.service.benchmark import check_gts, load_benchmark, one_phase
    from sgdask.service.server import work
    from sgdask.service.worker import WorkerConfig

    options, archive = storage_options(storage_option), ArchiveLimits.from_pairs(limit)
    cluster = cluster_choice(scheduler, False, None, processes, batch=True,
                             cluster=cluster_file, gateway=gateway_url)
    if benchmark is None:
        if gt is None:
            raise SgdaskError("worker: give --gt GT (one phase) or --benchmark FILE (phases)")
        check_gts(one_phase(registry, out, gt, _team_limits(daily_limit, total_limit), "-"),
                  options)
        work([WorkerConfig(registry, gt, out, options, poll, lease, max_attempts,
                           tokens=tokens, limits=_team_limits(daily_limit, total_limit),
                           open_uploads=open_uploads, archive_limits=archive,
                           memory_cap=memory_cap or None)], cluster)
        return
    phases = load_benchmark(benchmark, registry, out)
    check_gts(phases, options)
    work([WorkerConfig(p.registry, p.gt or "", p.out, options, poll, lease, max_attempts,
                       tokens=tokens, limits=p.limits, open_uploads=open_uploads,
                       archive_limits=archive, selection=p.selection, rank_by=p.headline,
                       protocols=p.protocols, direction=p.direction, phase=p,
                       memory_cap=memory_cap or None)
          for p in phases.phases], cluster)


def tokens_add(file: Annotated[Path, typer.Argument(
                   metavar="FILE", help="tokens file (created if absent)")],
               team: Annotated[str, typer.Option(metavar="TEAM", help="team name")],
               role: Annotated[str, typer.Option(
                   metavar="ROLE", help="participant or maintainer")]
               = "participant") -> None:
    """Create a token for a team; it is the last line of the output.

    The token is shown once: only its hash is stored."""
    from sgdask.service.tokens import add_token

    token = add_token(file, team, role)
    print(f"added a {role} token for team {team} to {file}; it is not shown again:")
    print(token)


def tokens_revoke(file: Annotated[Path, typer.Argument(metavar="FILE", help="tokens file")],
                  team: Annotated[str, typer.Argument(
                      metavar="TEAM", help="team whose tokens to remove")]
                  ) -> None:
    """Remove every token of a team (a running server notices the change)."""
    from sgdask.service.tokens import revoke_team

    removed = revoke_team(file, team)
    if not removed:
        raise SgdaskError(f"{file}: team {team!r} has no token")
    print(f"revoked {removed} token(s) of team {team}")
