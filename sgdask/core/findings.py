"""What an evaluation found, as plain data: the record finalisation builds
(``sgdask.core.finalize``) and ``sgdask.report.Report`` shows and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sgdask.stats.table import TermTable


@dataclass
class Findings:
    """What an evaluation found, as data (``sgdask.report.Report`` is this record with its
    views, writers and reader): overall numbers, per-predicate and per-image tables,
    diagnostics and provenance.

    Metric values are fractions in [0, 1], or a mean 0-based rank for rank metrics
    (``sgdask.metrics``: display RANK, lower is better). ``terms``: the per-image terms
    (``per_image_terms.parquet``; None in reports written before they were kept).
    ``intervals``: metric -> [low, high] bootstrap interval, with ``ci`` its settings
    (``evaluate --ci``; None without). ``mean_over_occurring``: under a protocol that prints
    mR@k / mNgR@k over every predicate of the vocabulary, their means over the predicates
    that occur in the evaluated GT (a diagnostic; empty otherwise). ``predicate_groups``:
    the predicate groups of the grouped metrics (``mR@50[head]``), their ``source`` and
    ``members`` (group -> predicate ids); empty without groups. ``per_category``: one
    row per category of the vocabulary when a metric family reports per category
    (panoptic quality), else empty. ``states``: the final form of the families' declared
    states (``StateSpec.final``; oiv6's ranked detections), kept in memory for intervals
    and comparisons (None in reports read back). ``lint``: the protocol lint's counts and
    warnings (``sgdask.core.lint``; empty for an in-memory ``Evaluator`` and in reports
    written before it).
    """

    protocol: dict[str, Any]
    aggregation: str
    ks: list[str]
    metrics: dict[str, float]
    per_predicate: list[dict[str, Any]]
    per_image: list[dict[str, Any]]
    diagnostics: dict[str, int]
    left_out: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, list[float]] | None = None
    ci: dict[str, Any] | None = None
    mean_over_occurring: dict[str, float] = field(default_factory=dict)
    predicate_groups: dict[str, Any] = field(default_factory=dict)
    per_category: list[dict[str, Any]] = field(default_factory=list)
    lint: dict[str, Any] = field(default_factory=dict)
    terms: TermTable | None = field(default=None, compare=False, repr=False)
    states: dict[str, dict[int, Any]] | None = field(default=None, compare=False,
                                                     repr=False)
