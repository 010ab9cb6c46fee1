"""Issue 24: the result cache is checked before use.

A real evaluation fills a registry's result cache; then one digit of a cached
``metrics.json`` is changed (the board would publish it), an entry is rewritten as an older
sgdask wrote it (no hashes), each file of an entry is damaged in the ways storage damages
files. Every case: the entry counts as absent, is reported and evaluated again, and the
board shows the evaluated number; ``sgdask verify --registry`` names the damaged file.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sgdask.batch.cache import ENTRY, REPORT_FILES, ResultCache
from sgdask.batch.many import run_many
from sgdask.batch.registry import Registry, submit
from sgdask.batch.rerank import board_job, rerank
from sgdask.errors import SgdaskWarning
from sgdask.pipeline import Settings
from sgdask.store.store import SELF_HASH
from tests.helpers import run_main

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def published(dataset, stores, client, tmp_path_factory) -> dict:
    """A registry with one submission, ranked once (its cache filled, a board published)."""
    root = tmp_path_factory.mktemp("cache-integrity")
    registry = str(root / "registry")
    entry = submit(str(dataset.submission_zip), registry, stores.gt, "model", cluster=client)
    first = rerank(registry, stores.gt, str(root / "board"), client=client, log=lambda _: None)
    assert first.published and len(first.evaluated) == 2
    board = json.loads((root / "board" / "leaderboard.json").read_text())
    return {"root": root, "registry": registry, "id": entry.submission_id, "board": board}


def cache_dir(published: dict) -> Path:
    return Path(published["registry"]) / "cache"


def entry_of(published: dict, protocol: str) -> Path:
    """The cache folder holding the submission's ``protocol`` result."""
    for folder in sorted(cache_dir(published).iterdir()):
        entry = folder / ENTRY
        if entry.exists() and json.loads(entry.read_text())["protocol"] == protocol:
            return folder
    raise AssertionError(f"no cached {protocol} result")


def flip_digit(text: str, metric: str) -> tuple[str, float]:
    """``text`` with the first decimal digit of ``metric``'s value changed (27.36 ->
    37.36 as a percentage), and the value it then reads as."""
    match = re.search(rf'"{re.escape(metric)}": (\d+)\.(\d)', text)
    assert match is not None, f"{metric} not in metrics.json"
    digit = str((int(match.group(2)) + 1) % 10)
    flipped = text[:match.start(2)] + digit + text[match.end(2):]
    return flipped, json.loads(flipped)["metrics"][metric]


def test_flipped_digit_is_evaluated_again_never_published(published, stores, client):
    folder = entry_of(published, "singlempo")
    metrics = folder / "metrics.json"
    shown = published["board"][0]["metrics"]["mR@50"]
    original = metrics.read_text()
    flipped, forged = flip_digit(original, "mR@50")
    assert abs(forged - shown) >= 0.09  # what the board would show unchecked
    metrics.write_text(flipped)

    lines: list[str] = []
    out = published["root"] / "board-after-damage"
    outcome = rerank(published["registry"], stores.gt, str(out), client=client,
                     log=lines.append)
    assert outcome.published
    assert outcome.evaluated == [(published["id"], "singlempo")]
    board = json.loads((out / "leaderboard.json").read_text())
    assert board[0]["metrics"]["mR@50"] == shown != forged
    assert f"cache entry {folder.name}: metrics.json damaged (SHA-256 differs from " \
        "entry.json's); evaluating again" in lines
    assert metrics.read_text() == original  # evaluated again and cached again
    assert ResultCache(str(cache_dir(published))).checked(folder.name) is not None


def test_entry_without_hashes_is_evaluated_again(published, stores, client):
    folder = entry_of(published, "multimpo")
    entry = json.loads((folder / ENTRY).read_text())
    old = {k: v for k, v in entry.items() if k not in ("files", SELF_HASH)}
    (folder / ENTRY).write_text(json.dumps(old, indent=1))  # as sgdask before issue 24

    entries = Registry(published["registry"]).rankable()
    job = board_job(published["registry"], stores.gt, entries, Settings(), None)
    lines: list[str] = []
    outcome = run_many(job, client=client, log=lines.append)
    assert outcome.evaluated == [(published["id"], "multimpo")]
    assert f"cache entry {folder.name}: entry.json carries no hashes (written by an older " \
        "sgdask); evaluating again" in lines
    rewritten = json.loads((folder / ENTRY).read_text())
    assert rewritten["files"].keys() == entry["files"].keys() and SELF_HASH in rewritten
    again = run_many(job, client=client, log=lambda _: None)
    assert not again.evaluated and len(again.cached) == 2


@pytest.fixture
def entry_copy(published, tmp_path) -> tuple[ResultCache, str, dict]:
    """A copy of the cached singlempo entry in a cache of its own, and its report's
    numbers."""
    folder = entry_of(published, "singlempo")
    shutil.copytree(folder, tmp_path / "cache" / folder.name)
    cache = ResultCache(str(tmp_path / "cache"))
    report = cache.checked(folder.name)
    assert report is not None
    return cache, folder.name, report.metrics


def damage(folder: Path, how: str) -> str:
    """Damage one file of an entry; returns the file the damage report must name."""
    entry = json.loads((folder / ENTRY).read_text())
    if how == "truncated parquet":
        path = folder / "per_image_terms.parquet"
        path.write_bytes(path.read_bytes()[:-100])
        return "per_image_terms.parquet"
    if how == "missing file":
        (folder / "per_predicate.parquet").unlink()
        return "per_predicate.parquet"
    if how == "entry not JSON":
        (folder / ENTRY).write_text((folder / ENTRY).read_text()[:-20])
        return ENTRY
    if how == "entry edited":  # a listed size changed without its self hash
        entry["files"]["metrics.json"]["size"] += 1
    elif how == "entry lists a way out":
        from sgdask.store.store import manifest_digest

        entry["files"]["../../outside"] = {"size": 1, "sha256": "0" * 64}
        entry[SELF_HASH] = manifest_digest(entry)
    (folder / ENTRY).write_text(json.dumps(entry))
    return ENTRY


@pytest.mark.parametrize("how", ["truncated parquet", "missing file", "entry not JSON",
                                 "entry edited", "entry lists a way out"])
def test_damaged_entry_counts_as_absent_with_a_warning(entry_copy, how):
    cache, key, _ = entry_copy
    name = damage(Path(cache.path) / key, how)
    with pytest.warns(SgdaskWarning) as caught:
        assert cache.get(key) is None
    message = str(caught[0].message)
    assert message.startswith(f"cache entry {key}: {name} damaged (")
    assert message.endswith("; evaluating again")


def test_no_byte_flip_changes_a_number(entry_copy):
    """Any byte of any file flipped: the entry is refused, or reads as it was written."""
    cache, key, metrics = entry_copy
    folder = Path(cache.path) / key
    for name in (*REPORT_FILES, ENTRY):
        path = folder / name
        data = path.read_bytes()
        for position in range(0, len(data), max(1, len(data) // 7)):
            path.write_bytes(data[:position] + bytes([data[position] ^ 0x04])
                             + data[position + 1:])
            with pytest.warns(SgdaskWarning):
                found = cache.get(key)
            assert found is None or found.metrics == metrics, (name, position)
        path.write_bytes(data)
    assert cache.get(key) is not None


def test_verify_registry_names_the_flipped_byte(published, capsys):
    registry = published["registry"]
    code, out, err = run_main(capsys, "verify", "--registry", registry)
    assert code == 0, out + err
    assert out.splitlines()[-1] == (f"{registry}: intact (1 entries, 1 stores, 2 cache "
                                    "entries, 1 report pages checked)")

    folder = entry_of(published, "singlempo")
    metrics = folder / "metrics.json"
    original = metrics.read_text()
    metrics.write_text(flip_digit(original, "mR@50")[0])
    try:
        code, out, err = run_main(capsys, "verify", "--registry", registry)
    finally:
        metrics.write_text(original)
    assert code == 2, out + err
    lines = out.splitlines()
    assert lines[0] == (f"{registry}/cache: cache entry {folder.name}: metrics.json damaged "
                        "(SHA-256 differs from entry.json's)")
    assert lines[-1].startswith(f"{registry}: 1 problem(s) (")


def test_verify_registry_notes_entries_it_will_not_use(published, tmp_path, capsys):
    """An entry without hashes and an unfinished one are not damage: listed, exit 0."""
    registry = tmp_path / "registry"
    shutil.copytree(published["registry"], registry)
    old = next(p for p in (registry / "cache").iterdir() if (p / ENTRY).exists())
    entry = json.loads((old / ENTRY).read_text())
    (old / ENTRY).write_text(json.dumps({k: v for k, v in entry.items()
                                         if k not in ("files", SELF_HASH)}))
    unfinished = registry / "cache" / ("f" * 32)
    unfinished.mkdir()
    (unfinished / "metrics.json").write_text("{}")
    code, out, _ = run_main(capsys, "verify", "--registry", str(registry))
    assert code == 0, out
    assert out.splitlines() == [
        f"{registry}/cache: cache entry {old.name}: entry.json carries no hashes (written by "
        "an older sgdask): not used, evaluated again when needed",
        f"{registry}/cache: cache entry {'f' * 32}: incomplete (no entry.json: an evaluation "
        "that did not finish; evaluated again when needed)",
        f"{registry}: intact (1 entries, 1 stores, 3 cache entries, 1 report pages checked)"]


def test_verify_registry_reports_damaged_entries_and_stores(published, capsys):
    registry = Path(published["registry"])
    sid = published["id"]
    broken = registry / "entries" / "broken.json"
    images = sorted((registry / "stores" / sid / "images").iterdir())[0]
    data = images.read_bytes()
    broken.write_text("{not json")
    images.write_bytes(data[:-1])
    try:
        code, out, _ = run_main(capsys, "verify", "--registry", str(registry))
    finally:
        broken.unlink()
        images.write_bytes(data)
    assert code == 2
    lines = out.splitlines()
    assert any(line.startswith(f"{broken}: not a registry entry (not JSON") for line in lines)
    assert any(line.startswith(f"{registry}/stores/{sid}/images/{images.name}: corrupt")
               for line in lines)
    assert lines[-1].startswith(f"{registry}: 2 problem(s) (2 entries, 1 stores")


def test_damaged_report_page_is_rendered_again_never_published(published, stores, client,
                                                               capsys):
    """A kept report page is published only when it matches the hash written after it."""
    registry = published["registry"]
    (page,) = (cache_dir(published) / "pages").glob("*.html")
    original = page.read_bytes()
    at = re.search(rb"\d\.\d", original).start()
    page.write_bytes(original[:at] + bytes([b"0123456789"[(original[at] - 47) % 10]])
                     + original[at + 1:])
    code, out, _ = run_main(capsys, "verify", "--registry", registry)
    assert code == 2
    assert f"cache/pages/{page.name}: damaged (SHA-256 differs from the one kept beside " \
        "it)" in out.splitlines()[0]

    lines: list[str] = []
    out_dir = published["root"] / "board-after-page-damage"
    assert rerank(registry, stores.gt, str(out_dir), client=client, log=lines.append).published
    assert f"report page of {published['id']}: damaged (SHA-256 differs from the one kept " \
        "beside it); rendering it again" in lines
    assert page.read_bytes() == original  # rendered again, the same bytes, hashed again
    (shown,) = (out_dir / "history").glob(f"*/reports/{published['id']}.html")
    assert shown.read_bytes() == original


def test_verify_needs_a_store_or_a_registry(capsys):
    code, _, err = run_main(capsys, "verify")
    assert code == 2 and "give store URLs, or --registry URL" in err


def test_slim_read_checks_every_file_and_parses_no_per_image_data(published, tmp_path):
    """What rerank's driver reads: the same numbers without per-image rows and terms, and a
    damaged per-image file is still damage."""
    folder = entry_of(published, "singlempo")
    shutil.copytree(folder, tmp_path / "cache" / folder.name)
    cache = ResultCache(str(tmp_path / "cache"))
    full, slim = cache.checked(folder.name), cache.checked(folder.name, slim=True)
    assert slim.metrics == full.metrics and slim.per_predicate == full.per_predicate
    assert full.per_image and full.terms is not None
    assert slim.per_image == [] and slim.terms is None
    per_image = tmp_path / "cache" / folder.name / "per_image.parquet"
    per_image.write_bytes(per_image.read_bytes()[:-1])
    with pytest.warns(SgdaskWarning, match="per_image.parquet damaged"):
        assert cache.get(folder.name, slim=True) is None
