"""The ``sgdask`` command run as users run it: a fresh ``python -m sgdask`` process."""

from __future__ import annotations

import subprocess
import sys


def run_sgdask(*args: str, env: dict[str, str] | None = None, timeout: float = 300
               ) -> subprocess.CompletedProcess:
    """``sgdask ARGS...`` to completion, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "sgdask", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
