"""What many test files share: the repository's paths, the ``sgdask`` command run as users
run it (a fresh ``python -m sgdask`` process) or in-process through ``main``, submission
ZIPs edited in place, and the moto S3 server's settings.

Scene builders are in ``tests.helpers.scenes`` and ``tests.helpers.builders``, the bridge
from literal inputs to sgdask in ``tests.helpers.adapters``, real service processes in
``tests.helpers.servicekit``; fixtures several folders use (clusters, the synthetic
datasets, S3, a browser) are in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (docs/, jobs/, schemas/, the README)."""
FIXTURES = ROOT / "tests" / "fixtures"
"""Stores and golden values kept in git (each folder's README says how it was made)."""

BUCKET = "sgdask-test"  # S3 bucket names have at least 3 characters
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # never read a developer's real AWS configuration
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    # never send the test traffic through a proxy
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


@dataclass(frozen=True)
class S3:
    """A moto S3 server on 127.0.0.1 with the bucket ``BUCKET`` (the ``s3`` fixture)."""

    endpoint: str
    options: dict
    fs: Any  # s3fs.S3FileSystem

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([BUCKET, *parts])

    def cli_options(self) -> list[str]:
        return ["--storage-option", f"endpoint_url={self.endpoint}",
                "--storage-option", "key=testing", "--storage-option", "secret=testing"]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``extra`` on top and this tree first on the path, so
    a command run from any working directory (and its Dask workers) runs this tree's code."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``sgdask ARGS...`` in a fresh process to completion, its output captured as text;
    ``env``: variables set on top of this process's environment."""
    return subprocess.run([sys.executable, "-m", "sgdask", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=cli_env(env))


def stop_group(proc: subprocess.Popen, term_wait: float = 15, kill_wait: float = 15) -> None:
    """Terminate a process started in its own process group and everything it started:
    SIGTERM, then SIGKILL if it is still there after ``term_wait`` seconds."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, kill_wait)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue


def run_main(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """``sgdask ARGS...`` in this process (``sgdask.cli.main``): exit code, stdout, stderr."""
    from sgdask.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code or 0, out, err


def refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    """The one error line of a command refused before any work (exit code 2, no traceback,
    no progress bar, nothing evaluated)."""
    code, out, err = run_main(capsys, *args)
    lines = [line for line in err.splitlines() if line.startswith("sgdask:")]
    assert code == 2, out + err
    assert len(lines) == 1 and lines[0].startswith("sgdask: error: "), err
    assert "Traceback" not in err and "━" not in err and "evaluated in" not in err, err
    return lines[0]


def rewrite_zip(src: Path, dst: Path, edit_doc=None, replace: dict[str, bytes] | None = None,
                drop: tuple[str, ...] = ()) -> Path:
    """A copy of a submission ZIP with triplets.json edited and/or members replaced/dropped."""
    replace = dict(replace or {})
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for name in zin.namelist():
            if name in drop:
                continue
            data = replace.pop(name, None) or zin.read(name)
            if name == "triplets.json" and edit_doc is not None:
                doc = json.loads(data)
                edit_doc(doc)
                data = json.dumps(doc).encode()
            zout.writestr(name, data)
        for name, data in replace.items():
            zout.writestr(name, data)
    return dst


def tiff_bytes(array) -> bytes:
    """A deflate-compressed TIFF of ``array`` as it is stored in a submission ZIP."""
    import tifffile

    buf = io.BytesIO()
    tifffile.imwrite(buf, array, compression="deflate")
    return buf.getvalue()
