"""``make bench`` starts: every benchmark module imports and parses its options (a stale
import once stopped ``python -m benchmarks.run`` before it measured anything)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what ``make bench`` runs, and the modules they start as measured subprocesses
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_every_benchmark_module_imports(name):
    importlib.import_module(f"benchmarks.{name}")


@pytest.mark.parametrize("name", ["run", "vg", "oiv6", "pq", "scale"])
def test_make_bench_commands_parse_their_options(name):
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
