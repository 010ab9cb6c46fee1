"""Result cache: a report per (GT, submission, protocol, evaluation options, metric version).

Keys are content hashes, so a re-run skips exactly what is already computed, and a new
protocol version, GT or metric definition misses the cache. An entry is complete only
when its ``entry.json`` exists (written last). Entries hold the per-image terms
(``per_image_terms.parquet``), so intervals, ``compare`` and ``rerank``'s rank ranges
never re-evaluate; an entry written before terms were kept counts as a miss (evaluated
once more, then complete).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sgdask import __version__
from sgdask.core.settings import Options
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.protocols import METRICS_VERSION, Protocol
from sgdask.report import TERMS_FILE, Report

ENTRY = "entry.json"


def cache_key(gt_manifest: dict[str, Any], sub_manifest: dict[str, Any], protocol: Protocol,
              options: Options, stats_hash: str | None = None) -> str:
    """Hex digest naming one cached evaluation: every input by content (``stats_hash``: the
    content hash of ``options.stats``), every option that can change a number."""
    fields = {"gt": gt_manifest["content_hash"], "submission": sub_manifest["content_hash"],
              "protocol": protocol.name, "protocol_version": protocol.version,
              "metrics_version": METRICS_VERSION, "aggregation": options.aggregation,
              "ks": options.ks, "stats": stats_hash, "legacy": options.legacy,
              "tau": options.tau, "match_labels": options.match_labels}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


class ResultCache:
    """Reports stored under ``URL/<key>/``."""

    def __init__(self, url: str, storage_options: StorageOptions | None = None) -> None:
        self.url, self.options = str(url).rstrip("/"), storage_options
        self.fs, self.path = filesystem(self.url, storage_options)

    def location(self, key: str) -> str:
        return join(self.url, key)

    def get(self, key: str) -> Report | None:
        """The cached report, or None when absent or incomplete (no per-image terms)."""
        if not (self.fs.exists(join(self.path, key, ENTRY))
                and self.fs.exists(join(self.path, key, TERMS_FILE))):
            return None
        return Report.read(self.location(key), self.options)

    def put(self, key: str, report: Report, meta: dict[str, Any]) -> str:
        """Store a report (entry.json last); returns its location."""
        report.write(self.location(key), self.options)
        with self.fs.open(join(self.path, key, ENTRY), "w") as f:
            json.dump({**meta, "key": key, "sgdask_version": __version__}, f, indent=1)
        return self.location(key)
