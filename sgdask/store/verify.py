"""``sgdask verify``: a store, or a registry, checked completely, every problem reported.

The manifest (structure, version), every file it lists (present, size, SHA-256), files it
does not list, every Parquet file (readable with its page checksums, the expected columns,
rows matching the images table and the part's id range), every mask array (every chunk
decodes with its CRC-32C, every mask inside the decoded words) and the tables' consistency
(instance indices, crop boxes inside their images; a GT store: categories and predicates
within its own classes).
(``sgdask verify --registry`` is ``sgdask.batch.audit``: a registry's entries, stores and
caches.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sgdask.errors import SgdaskError
from sgdask.formats.sniff import existing
from sgdask.io.fs import StorageOptions, filesystem
from sgdask.io.units import unit_column
from sgdask.store.consistency import check_contents
from sgdask.store.partition import PartMasks, part_rows
from sgdask.store.store import (
    MANIFEST,
    TABLES,
    Corrupt,
    StoreError,
    StoreReader,
    table_columns,
)


class Attempts:
    """A verdict's ``problems`` collected from checks that raise."""

    problems: list[str]

    @property
    def intact(self) -> bool:
        return not self.problems

    def attempt(self, check: Callable[[], Any]) -> Any:
        """``check()``, or None with its error added to the problems."""
        try:
            return check()
        except SgdaskError as err:
            self.problems.append(str(err))
            return None


@dataclass
class Verdict(Attempts):
    """What ``verify_store`` found: one line per problem; files checked."""

    url: str
    problems: list[str] = field(default_factory=list)
    files: int = 0
    version: int | None = None


def verify_store(url: str, options: StorageOptions | None = None) -> Verdict:
    """Every problem of the store at ``url`` (an empty list: intact), each once (a damaged
    file fails both the file check and the table check)."""
    verdict = _store_verdict(url, options)
    verdict.problems = list(dict.fromkeys(verdict.problems))
    return verdict


def _store_verdict(url: str, options: StorageOptions | None) -> Verdict:
    verdict = Verdict(str(url).rstrip("/"))
    reader = verdict.attempt(lambda: _reader(url, options))
    if reader is None:
        return verdict
    verdict.version = reader.version
    if reader.checksummed:
        check_listed_files(reader, verdict)
    tables_ok = all(verdict.attempt(lambda p=part: check_part_tables(reader, p)) is not None
                    for part in reader.parts)
    for rel in (reader.manifest.get("train_stats"),):
        if rel:
            verdict.attempt(lambda r=rel: reader.read_table(r))
    if not tables_ok:
        return verdict
    for part in reader.parts:
        verdict.attempt(lambda p=part["name"]: PartMasks(reader, part_rows(reader, p, all_ids)))
    if reader.manifest["kind"] == "gt":
        m = reader.manifest
        n_classes = len(m["thing_classes"]) + len(m["stuff_classes"])
        verdict.attempt(lambda: check_contents(reader, n_classes,
                                               len(m["predicate_classes"])))
    else:
        verdict.attempt(lambda: check_contents(reader, None, None))
    return verdict


def _reader(url: str, options: StorageOptions | None) -> StoreReader:
    """The store at ``url``, once it is one (a missing path: "not found")."""
    existing(url, options)
    return StoreReader(url, options)


class _All:
    """The set of every image id (``part_rows`` takes a set of wanted ids)."""

    def __contains__(self, item: object) -> bool:
        return True


all_ids: Any = _All()


def check_listed_files(reader: StoreReader, verdict: Verdict) -> None:
    """Every file the manifest lists (present, size, hash) and none it does not list."""
    listed = reader.manifest["files"]
    for rel in listed:
        verdict.files += 1
        verdict.attempt(lambda r=rel: reader.read_file(r))
    found = verdict.attempt(lambda: reader.fs.find(reader.path))
    if found is None:
        return
    root = reader.path.rstrip("/") + "/"
    for path in found:
        rel = path[len(root):] if path.startswith(root) else path
        if rel != MANIFEST and rel not in listed:
            verdict.problems.append(f"{reader.url}/{rel}: not listed in the manifest (a file "
                                    "added to the store after it was written)")


def check_part_tables(reader: StoreReader, part: dict[str, Any]) -> bool:
    """A part's three tables: readable, the expected columns, rows as the images table
    counts, ids sorted and inside the part's range."""
    name = part["name"]
    images = reader.read_table(f"images/{name}.parquet",
                               table_columns("images", reader.version, reader.units))
    ids = images["image_id"].to_pylist()
    rel = f"images/{name}.parquet"
    for unit in reader.units:
        if images[unit_column(unit)].null_count:
            raise Corrupt(reader.url, rel, f"corrupt (an image without its {unit}: the "
                          f"manifest says the store records each image's {unit})")
    if len(ids) != part["n_images"]:
        raise Corrupt(reader.url, rel, f"corrupt ({len(ids)} images, the manifest says "
                      f"{part['n_images']})")
    if ids != sorted(ids) or (ids and (ids[0] != part["first_id"]
                                       or ids[-1] != part["last_id"])):
        raise Corrupt(reader.url, rel, "corrupt (image ids not sorted or not the manifest's "
                      f"range {part['first_id']}..{part['last_id']})")
    counts = {"instances": int(np.sum(images["n_instances"].to_numpy())),
              "triplets": int(np.sum(images["n_graph"].to_numpy())
                              + np.sum(images["n_ng"].to_numpy())
                              + (np.sum(images["n_pairs"].to_numpy())
                                 if "n_pairs" in images.column_names else 0))}
    for table in TABLES[1:]:
        rel = f"{table}/{name}.parquet"
        rows = reader.read_table(rel, table_columns(table, reader.version))
        if len(rows) != counts[table]:
            raise Corrupt(reader.url, rel, f"corrupt ({len(rows)} rows, the images table "
                          f"counts {counts[table]})")
    return True


def check_intact(url: str, options: StorageOptions | None = None) -> None:
    """Raise the first problem ``verify_store`` finds in the store at ``url`` (a submission
    file, not a store, is left to its own checks)."""
    fs, path = filesystem(url, options)
    if fs.isfile(path):
        return
    verdict = verify_store(url, options)
    if verdict.problems:
        more = len(verdict.problems) - 1
        raise StoreError(verdict.problems[0] + (f" (and {more} more problem(s): run sgdask "
                                                f"verify {url})" if more else ""))


#: statuses of an entry whose store is complete (converted); other entries' stores are
