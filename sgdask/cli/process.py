"""The ``sgdask`` process around the commands: one-line errors and their exit codes,
warnings as lines, Dask's logs kept quiet, and ending the process without the tear-down."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from sgdask.errors import SgdaskError, SgdaskWarning

if TYPE_CHECKING:
    import typer

EXIT_ERROR = 2
EXIT_BUG = 1
EXIT_INTERRUPTED = 130
#: what every scoring command imports (the Dask cluster layer, the kernels with numba, the
#: store with pyarrow), loaded before ``freeze_imports`` freezes
_SCORING_MODULES = ("sgdask.kernels.image", "sgdask.store.store")


def _click_exceptions() -> ModuleType:
    """Click's exceptions as typer raises them: typer 0.2x carries its own copy of click,
    earlier versions use click's."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


_CLICK = _click_exceptions()


def _quiet_dask_logs() -> None:
    """Task failures are reported once, as sgdask's one-line error: keep Dask's own logs
    (with their tracebacks) out of the terminal, here and in worker processes we start.
    asyncio's and tornado's loggers too: a comm close that times out on a loaded machine
    while the cluster shuts down after a failure would otherwise print its traceback
    ("TimeoutError: Timeout") after sgdask's own message."""
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def one_line(text: str) -> str:
    return " ".join(text.split())


def _show_warnings_as_lines() -> None:
    """``SgdaskWarning``s print as one ``sgdask: warning: ...`` line on stderr; others as
    Python prints them."""
    default = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if issubclass(category, SgdaskWarning):
            text = message.render("cli") if isinstance(message, SgdaskWarning) else message
            print(f"sgdask: warning: {text}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def freeze_imports() -> None:
    """Take every object alive now out of the cyclic collector's full passes: a scoring
    command calls it once its modules are imported. Numba's, Dask's and Arrow's objects
    (about a million) live as long as the process, and each full pass would walk them again:
    4 passes, 0.2 CPU-s of a 1.8 s ``sgdask evaluate`` on Open Images V6 (``gc.freeze``; the
    frozen objects are never garbage, so nothing is kept that would have been freed).

    The libraries a scoring command runs on are imported here first: the command line
    imports them where they are used (``sgdask --help`` loads none of them), and objects
    created after the freeze would be walked by every pass again (0.3 s of a 200-image
    ``sgdask evaluate``)."""
    for name in _SCORING_MODULES:
        importlib.import_module(name)
    gc.freeze()


def end_process(code: int | str | None) -> NoReturn:
    """Exit now with ``code`` as ``sys.exit`` would (None: 0; a message: printed, 1), after
    flushing the standard streams and the logs, without the interpreter's tear-down."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def run_command(app: typer.Typer, args: list[str]) -> None:
    """The app on ``args``: ends in ``SystemExit`` with the exit code (under ``--debug``, an
    error propagates with its traceback)."""
    import typer

    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    _show_warnings_as_lines()
    if not debug:
        _quiet_dask_logs()
    try:
        code = app(args, prog_name="sgdask", standalone_mode=False)
    except _CLICK.NoArgsIsHelpError as err:
        err.show()
        sys.exit(err.exit_code)
    except _CLICK.UsageError as err:
        _exit_with(_usage_line(err), EXIT_ERROR)
    except SgdaskError as err:
        if debug:
            raise
        _exit_with(f"sgdask: error: {err.render('cli')}", EXIT_ERROR)
    except (KeyboardInterrupt, typer.Abort):  # Abort: a prompt interrupted
        _exit_with("sgdask: interrupted", EXIT_INTERRUPTED)
    except Exception as err:  # a bug in sgdask: never reported as bad input
        if debug:
            raise
        _exit_with(f"sgdask: internal error: {type(err).__name__}: {one_line(str(err))} "
                   "(a bug in sgdask; run again with --debug for the traceback)", EXIT_BUG)
    if code == EXIT_INTERRUPTED:  # typer turns a KeyboardInterrupt into this exit code
        _exit_with("sgdask: interrupted", EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_line(err: Any) -> str:
    """Click's usage error (an unknown option, a value of the wrong type, a missing option)
    as sgdask's one line, with the command's help to turn to; click already suggests the
    near option name ("Possible options: --protocol")."""
    command = err.ctx.command_path if err.ctx is not None else "sgdask"
    return f"sgdask: error: {one_line(err.format_message())} (see '{command} --help')"


def _exit_with(message: str, code: int) -> NoReturn:
    """Print the one-line message and exit; nothing logged while the interpreter shuts down
    (a Dask comm closing late, an asyncio task collected) comes after it."""
    print(message, file=sys.stderr)
    logging.disable(logging.CRITICAL)
    sys.exit(code)
