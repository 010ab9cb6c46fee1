"""Errors: one model rendered for the command line, Python and the service (flags, argument
names, no host paths), picklable whole across Dask; at the command line a ValueError raised
inside a kernel is a bug (an internal error), not bad input."""

from __future__ import annotations

import json
import pickle
from dataclasses import fields
from pathlib import Path

import pytest

from sgdask.core.settings import ONE_PROTOCOL
from sgdask.errors import Choose, InputError, Option, RaiseLimit, SettingError, SgdaskError
from sgdask.evaluator import Evaluator
from sgdask.formats.ingest import read_bytes
from sgdask.io.archive import ArchiveLimits
from sgdask.protocols import PROTOCOLS
from tests.helpers import run_cli as sgdask

BUG = '''
import sgdask.kernels.image as image

def broken(*args, **kwargs):
    raise ValueError("simulated kernel bug")

image.instance_iou = broken
'''


@pytest.mark.slow
def test_kernel_bug_is_an_internal_error(stores, tmp_path):
    """Item 3: a ValueError inside a kernel is a bug: exit 1, 'internal error', and the
    traceback (with the kernel's frame) under --debug. The bug is injected into the real
    worker processes (``--processes``: a LocalCluster's) with Dask's own preload mechanism."""
    plugin = tmp_path / "inject_bug.py"
    plugin.write_text(BUG)
    env = {**__import__("os").environ,
           "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(plugin)])}
    proc = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--processes", env=env)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("sgdask: internal error: ValueError: simulated kernel bug"), \
        proc.stderr
    assert "--debug" in line
    debug = sgdask("evaluate", "--gt", stores.gt, "--pred", stores.pred, "--processes",
                   "--debug", env=env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "in broken" in debug.stderr and "simulated kernel bug" in debug.stderr


# --------------------------------------------------------------------------- the error model


def oversized(tmp_path: Path) -> tuple[str, InputError]:
    """A real reader's limit error: a 100-byte psg.json against a 10-byte limit."""
    url = str(tmp_path / "inputs" / "psg.json")
    (tmp_path / "inputs").mkdir()
    Path(url).write_bytes(b" " * 100)
    with pytest.raises(InputError) as err:
        read_bytes(url, None, "psg.json", (ArchiveLimits(max_json_size=10), "max_json_size"))
    return url, err.value


def test_one_error_three_renderings(tmp_path):
    """The same error, as the command line, Python and the service show it: the fix is
    data (the limit's name and value), each audience spells how to raise it."""
    url, err = oversized(tmp_path)
    assert err.fix == RaiseLimit("max_json_size", 10)
    what = "psg.json: is 100 bytes (expected at most 10"
    assert err.render("cli") == f"{url}: {what}; raise with --limit max_json_size=N)"
    assert str(err) == err.render("api") == (
        f"{url}: {what}; raise with limits=ArchiveLimits(max_json_size=N))")
    assert err.render("http") == (f"psg.json: {what}, the server's limit max_json_size; "
                                  "ask the maintainers to raise it)")
    assert err.render("http", {url: "upload.json"}).startswith(f"upload.json: {what},")


def test_the_service_shows_no_flag_and_no_host_path(tmp_path):
    """Without a name for it the service shows a file by its basename; an archive's entry
    keeps its name inside the archive, under the archive's shown name."""
    url, err = oversized(tmp_path)
    for shown in (err.render("http"), err.render("http", {str(tmp_path): "REGISTRY"})):
        assert "--" not in shown and str(tmp_path) not in shown, shown
    entry = InputError(f"{url}:masks/0.tiff", "too large", expected=RaiseLimit("max_ratio", 200.0))
    assert entry.render("http") == ("psg.json:masks/0.tiff: too large (expected at most 200, "
                                    "the server's limit max_ratio; ask the maintainers to "
                                    "raise it)")
    assert entry.render("http", {url: "upload.zip"}).startswith("upload.zip:masks/0.tiff: ")


def test_options_are_flags_on_the_command_line_and_arguments_in_python():
    """A message's options: the settings record's own flag (``ks``: ``--k``), ``--limit``
    for ``limits``, else the name with dashes; a value after the flag or after ``=``."""
    err = SgdaskError(Option("ci_metrics"), ": only with ", Option("ci", "LEVEL"), ", ",
                      Option("ks"), ", ", Option("limits"), " or ", Option("overwrite", True))
    assert err.render("cli") == "--ci-metrics: only with --ci LEVEL, --k, --limit or --overwrite"
    assert str(err) == "ci_metrics: only with ci=LEVEL, ks, limits or overwrite=True"
    assert err.render("http") == str(err)


def test_a_bad_evaluator_argument_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError) as bad_k:
        Evaluator("singlempo", "20,fifty", predicates=3, classes=4)
    assert str(bad_k.value).startswith("ks: 'fifty' is not a k (expected a positive integer")
    assert bad_k.value.render("cli").startswith("--k: 'fifty' is not a k")
    with pytest.raises(ValueError) as bad_protocol:
        Evaluator("singlmpo", predicates=3, classes=4)
    assert str(bad_protocol.value) == (
        "protocol: unknown protocol 'singlmpo' (did you mean 'singlempo'?) (expected one of: "
        f"{', '.join(sorted(PROTOCOLS))})")
    assert bad_protocol.value.render("cli").startswith("--protocol: unknown protocol")
    with pytest.raises(ValueError, match=r"^tau: -1 must be a number >= 0$"):
        Evaluator("singlempo", predicates=3, classes=4, tau=-1)


def test_errors_arrive_whole_from_dask_workers(client, tmp_path):
    """Pickled by a worker process and rebuilt here: the fields, the fix and the kind."""
    url = str(tmp_path / "psg.json")
    Path(url).write_bytes(b" " * 100)
    limits = ArchiveLimits(max_json_size=10)
    with pytest.raises(InputError) as err:
        client.submit(read_bytes, url, None, "psg.json", (limits, "max_json_size"),
                      pure=False).result()
    assert (err.value.file, err.value.field, err.value.what) == (url, "psg.json",
                                                                  "is 100 bytes")
    assert err.value.fix == RaiseLimit("max_json_size", 10)
    assert err.value.render("cli").endswith("; raise with --limit max_json_size=N)")
    with pytest.raises(SettingError) as unknown:
        client.submit(ArchiveLimits.from_pairs, ["max_entrees=5"], pure=False).result()
    assert isinstance(unknown.value, ValueError) and unknown.value.setting == "limits"
    assert unknown.value.fix == Choose("max_entrees", tuple(f.name for f in
                                                            fields(ArchiveLimits)))
    assert unknown.value.render("cli").startswith(
        "--limit: unknown limit 'max_entrees' (did you mean 'max_entries'?) (expected one of: ")


def test_pickling_keeps_the_fix_and_the_renamed_options():
    err = SettingError("protocols", "unknown protocol 'x'",
                       fix=Choose("x", ("sgbench", "singlempo"))).renamed(ONE_PROTOCOL)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is SettingError and again.setting == "protocol"
    assert again.fix == err.fix and str(again) == str(err) == (
        "protocol: unknown protocol 'x' (expected one of: sgbench, singlempo)")
    wrapped = pickle.loads(pickle.dumps(SgdaskError(err, "; and more")))
    assert wrapped.render("cli") == ("--protocol: unknown protocol 'x' (expected one of: "
                                     "sgbench, singlempo); and more")
