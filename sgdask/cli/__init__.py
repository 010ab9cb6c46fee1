"""The ``sgdask`` command. Every user-facing error is one line and a non-zero exit code;
``--debug`` (anywhere on the command line) shows the traceback instead.

This module is the command tree; the commands live by group (``data``, ``evaluation``,
``hosting``), what they print in ``console``, their shared options in ``options`` and the
process around them in ``process``. Each command parses its options, builds the settings
record once, calls the API and prints."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sgdask import __version__
from sgdask.cli import data, evaluation, hosting
from sgdask.cli.process import end_process, run_command
from sgdask.errors import SgdaskError
from sgdask.versions import dependency_versions

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Distributed evaluation of scene graph generation models.")


@app.callback(invoke_without_command=True)
def _main_options(version: Annotated[bool, typer.Option(
                      "--version", help="print sgdask's version and exit")] = False,
                  verbose: Annotated[bool, typer.Option(
                      "--verbose", help="with --version: also the versions of the libraries "
                      "that decide the numbers (what a report's provenance records)")]
                  = False) -> None:
    """The options that come before any command (the group's callback)."""
    if version:
        print(f"sgdask {__version__}")
        if verbose:
            for name, number in dependency_versions().items():
                print(f"{name} {number}")
        raise typer.Exit()
    if verbose:
        raise SgdaskError("--verbose applies to --version")


app.command("synth")(data.synth)
app.command("ingest-gt")(data.ingest_gt)
app.command("convert")(data.convert)
app.command("validate")(data.validate)
app.command("verify")(data.verify)
app.command("stats")(data.stats)
app.command("evaluate")(evaluation.evaluate)
app.command("compare")(evaluation.compare)
app.command("evaluate-many")(evaluation.evaluate_many)
app.command("submit")(hosting.submit)
app.command("rerank")(hosting.rerank)
app.command("serve")(hosting.serve)
app.command("worker")(hosting.worker)

tokens_app = typer.Typer(no_args_is_help=True, help="Create and revoke upload tokens.")
tokens_app.command("add")(hosting.tokens_add)
tokens_app.command("revoke")(hosting.tokens_revoke)
app.add_typer(tokens_app, name="tokens")


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
