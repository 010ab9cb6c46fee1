"""The ``sgdask`` command. Every user-facing error is one line and a non-zero exit code;
``--debug`` (anywhere on the command line) shows the traceback instead.

This module is the command tree; the commands live by group (``data``, ``evaluation``,
``hosting``), what they print in ``console``, their shared options in ``options``, how their
``--help`` reads in ``helptext`` and the process around them in ``process``. Each command
parses its options, builds the settings record once, calls the API and prints."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sgdask import __version__
from sgdask.cli import data, evaluation, hosting
from sgdask.cli.helptext import Command, Group
from sgdask.cli.process import end_process, run_command
from sgdask.errors import SgdaskError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  cls=Group, help="Distributed evaluation of scene graph generation models.")


@app.callback(invoke_without_command=True)
def _main_options(version: Annotated[bool, typer.Option(
                      "--version", help="print sgdask's version and exit")] = False,
                  verbose: Annotated[bool, typer.Option(
                      "--verbose", "-v", help="with --version: also the versions of the "
                      "protocols, metrics, store format and libraries that decide the numbers")]
                  = False) -> None:
    """The options that come before any command (the group's callback)."""
    if version:
        print(f"sgdask {__version__}")
        if verbose:
            print("\n".join(_versions()))
        raise typer.Exit()
    if verbose:
        raise SgdaskError("--verbose applies to --version")


def _versions() -> list[str]:
    """``--version --verbose``'s lines after sgdask's own: what a report's provenance
    records."""
    from sgdask.protocols import METRICS_VERSION, PROTOCOLS
    from sgdask.store.store import store_formats
    from sgdask.versions import dependency_versions  # distributions' metadata: only here

    protocols = ", ".join(f"{p.name} {p.version}" for p in PROTOCOLS.values())
    return [f"protocols {protocols}", f"metrics {METRICS_VERSION}",
            store_formats(),
            *(f"{name} {number}" for name, number in dependency_versions().items())]


_DATA, _SCORING, _HOSTING = "Make and check data", "Score", "Host a benchmark"
for _name, _function, _panel in (
        ("synth", data.synth, _DATA), ("ingest-gt", data.ingest_gt, _DATA),
        ("convert", data.convert, _DATA), ("validate", data.validate, _DATA),
        ("verify", data.verify, _DATA), ("stats", data.stats, _DATA),
        ("export-sgb", data.export_sgb, _DATA),
        ("evaluate", evaluation.evaluate, _SCORING), ("compare", evaluation.compare, _SCORING),
        ("evaluate-many", evaluation.evaluate_many, _SCORING),
        ("submit", hosting.submit, _HOSTING), ("rerank", hosting.rerank, _HOSTING),
        ("serve", hosting.serve, _HOSTING), ("worker", hosting.worker, _HOSTING)):
    app.command(_name, cls=Command, rich_help_panel=_panel)(_function)

tokens_app = typer.Typer(no_args_is_help=True, cls=Group,
                         help="Create and revoke upload tokens.")
tokens_app.command("add", cls=Command)(hosting.tokens_add)
tokens_app.command("revoke", cls=Command)(hosting.tokens_revoke)
app.add_typer(tokens_app, name="tokens", rich_help_panel=_HOSTING)


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the app, turning sgdask errors into one line and exit code 2.

    As the ``sgdask`` command (``argv`` None) the process ends with ``os._exit`` once its
    output is flushed: every file is written and closed by then, and tearing down numba's,
    LLVM's and Dask's objects would take about a second more and write nothing. Called with
    ``argv`` (tests, scripts), it raises ``SystemExit`` as usual.
    """
    try:
        run_command(app, list(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:
        if argv is not None:
            raise
        end_process(done.code)
    if argv is None:
        end_process(0)
