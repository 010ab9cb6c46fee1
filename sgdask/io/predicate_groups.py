"""The predicate groups of an evaluation (``mR@k[G]``): a groups file, or the default split.

A groups file (``--predicate-groups FILE``) is a JSON object, group name -> list of
predicate names of the GT (``{"head": ["on", "has"], "tail": ["says"]}``): group names are
``[A-Za-z0-9_-]+``, groups are disjoint and not empty, and every name is one of the GT's
predicates; anything else is one line naming the file and the field. Without a file, the
default split of ``sgdask.metrics.groups``: VG150's (by its predicate names), else the
training split's predicate frequency in thirds (from the training statistics), else none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sgdask.errors import InputError
from sgdask.io.documents import shown, strict_json
from sgdask.io.fs import StorageOptions, file_digest, filesystem, unreadable
from sgdask.metrics.groups import GROUP_NAME, PredicateGroups, frequency_thirds, vg150_groups
from sgdask.store.training_stats import gt_stats_table, predicate_counts

if TYPE_CHECKING:
    from sgdask.core.settings import Settings
    from sgdask.store.store import StoreReader

EXPECTED = 'a JSON object: group name -> list of predicate names, e.g. {"head": ["on"]}'


def read_groups(url: str, names: list[str], storage_options: StorageOptions | None = None
                ) -> PredicateGroups:
    """The groups of a groups file, checked against the GT's predicate ``names``."""
    doc = groups_document(url, storage_options)
    return PredicateGroups(_checked_groups(doc, names, url), f"groups file {url}")


def groups_document(url: str, storage_options: StorageOptions | None = None) -> Any:
    """A groups file's JSON document (its names are checked against a GT by
    ``read_groups``); an ``InputError`` when it is missing or no JSON."""
    fs, path = filesystem(url, storage_options)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        raise InputError(url, "no such file", expected=EXPECTED) from None
    except OSError as err:
        raise InputError(url, unreadable(err), expected=EXPECTED) from None
    return strict_json(data, url, EXPECTED)


def groups_digest(url: str, storage_options: StorageOptions | None = None) -> str:
    """Content hash of a groups file (cached results depend on what it holds, not on its
    URL)."""
    try:
        return file_digest(url, storage_options)
    except FileNotFoundError:
        raise InputError(url, "no such file", expected=EXPECTED) from None


def _checked_groups(doc: Any, names: list[str], file: str) -> dict[str, tuple[int, ...]]:
    """Group name -> predicate ids (sorted) of a parsed groups file, or an ``InputError``
    naming the file and the field."""
    if not isinstance(doc, dict) or not doc:
        raise InputError(file, "not a non-empty JSON object", expected=EXPECTED)
    index = {name: i for i, name in enumerate(names)}
    owner: dict[str, str] = {}
    out: dict[str, tuple[int, ...]] = {}
    for group, members in doc.items():
        if not GROUP_NAME.fullmatch(group):
            raise InputError(file, f"group name {shown(group)} is not [A-Za-z0-9_-]+",
                             field=group)
        if not isinstance(members, list) or not members:
            raise InputError(file, "not a non-empty list of predicate names", field=group,
                             expected=EXPECTED)
        for i, name in enumerate(members):
            where = f"{group}[{i}]"
            if not isinstance(name, str):
                raise InputError(file, f"{shown(name)} is not a predicate name", field=where)
            if name not in index:
                raise InputError(file, f"unknown predicate {shown(name)}", field=where,
                                 expected=f"one of the GT's {len(names)} predicates")
            if name in owner:
                raise InputError(file, f"predicate {shown(name)} is in groups "
                                 f"{owner[name]!r} and {group!r}", field=where,
                                 expected="disjoint groups")
            owner[name] = group
        out[group] = tuple(sorted(index[name] for name in members))
    return out


def evaluation_groups(gt: StoreReader, settings: Settings,
                      storage_options: StorageOptions | None = None
                      ) -> PredicateGroups | None:
    """The groups of an evaluation against the GT store ``gt``: the settings' groups file,
    else VG150's split, else the training frequency thirds (``settings.stats`` or the GT
    store's statistics), else None."""
    names = [str(n) for n in gt.manifest.get("predicate_classes", [])]
    if settings.predicate_groups is not None:
        return read_groups(settings.predicate_groups, names, storage_options)
    found = vg150_groups(names)
    if found is None:
        table = gt_stats_table(gt, settings.stats, storage_options)
        if table is not None:
            found = frequency_thirds(predicate_counts(table), len(names))
    return found
