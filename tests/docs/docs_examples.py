"""Runs one documentation page's runnable examples, in order, in the current directory.

``python tests/docs/docs_examples.py < blocks.json`` with ``[{"page", "line", "lang", "code"},
...]``. One interpreter per page, so sgdask is imported once per page rather than once per
command:

- a ``bash`` block is a sequence of ``sgdask ...`` commands (``\\`` continues a line,
  ``$VARS`` expand, ``#`` starts a comment); each runs through the ``sgdask`` entry point,
  ``sgdask.cli.main(argv)``, with the argv the shell would give it, and must exit 0;
- a ``python`` block runs in a fresh namespace and must not raise.

Every command and Python call runs where it runs for a reader with no Dask scheduler
configured: the one-off commands on threads of this process, the batch commands on the
LocalCluster of worker processes they start (a page's LocalCluster shared through Dask's
``scheduler-address`` setting cost 4x the CPU of the threads on tasks/compare.md).
Exit code 1 and the failing block on stderr when a block fails.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import traceback
from typing import Any


def commands(code: str) -> list[list[str]]:
    """The argv of every ``sgdask`` command of a bash block (anything else is refused, so a
    block that needs a real shell is noticed)."""
    joined = code.replace("\\\n", " ")
    argvs = []
    for line in joined.splitlines():
        words = shlex.split(os.path.expandvars(line), comments=True)
        if not words:
            continue
        if words[0] != "sgdask":
            raise ValueError(f"not an sgdask command: {line!r}")
        argvs.append(words[1:])
    return argvs


def run_bash(code: str) -> None:
    from sgdask.cli import main

    for argv in commands(code):
        print(f"$ sgdask {shlex.join(argv)}", file=sys.stderr, flush=True)
        try:
            main(argv)
        except SystemExit as done:
            if done.code not in (0, None):
                raise AssertionError(f"sgdask {shlex.join(argv)}: exit code {done.code}") from None


def run_python(code: str, label: str) -> None:
    exec(compile(code, label, "exec"), {"__name__": "__main__"})


def run_page(blocks: list[dict[str, Any]]) -> int:
    for block in blocks:
        label = f"docs/{block['page']}:{block['line']}"
        try:
            if block["lang"] == "bash":
                run_bash(block["code"])
            else:
                run_python(block["code"], label)
        except BaseException:
            print(f"FAILED: {label} ({block['lang']} block)\n{block['code']}",
                  file=sys.stderr)
            traceback.print_exc()
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_page(json.load(sys.stdin)))
