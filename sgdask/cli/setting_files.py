"""The files an evaluation's settings name (``stats``, ``predicate_groups``), read and
checked before any work: a wrong path or a malformed file is reported before a GT is
ingested or a cluster starts (a groups file's predicate names are checked against the GT
once it is read)."""

from __future__ import annotations

from sgdask.core.settings import Settings
from sgdask.io.fs import StorageOptions
from sgdask.io.predicate_groups import groups_document
from sgdask.store.training_stats import read_stats


def check_setting_files(settings: Settings, storage_options: StorageOptions | None = None
                        ) -> None:
    """Raise the one-line error of the first settings file that is missing or malformed."""
    if settings.stats is not None:
        read_stats(settings.stats, storage_options)
    if settings.predicate_groups is not None:
        groups_document(settings.predicate_groups, storage_options)
