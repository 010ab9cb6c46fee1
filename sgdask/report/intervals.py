"""Bootstrap intervals on a Report: how its terms score (``scoring_of``), which metrics get
an interval (``--ci-metrics``), and putting the intervals into the report.

The resampling itself is ``sgdask.stats.bootstrap`` (pure numpy, runs on the client: the
per-image terms are small). Everything needed is in the report (its terms, protocol,
aggregation, ks, options, predicate groups) except the training compositions wIMR is
weighted by, which come from the GT. Every derived metric of the report is derived again
on each resample, with or without training statistics (a family that needs them, as
wIMR, derives nothing without).
"""

from __future__ import annotations

import numpy as np

from sgdask.core.plan import CISettings, vocabulary_sets
from sgdask.errors import Choose, SettingError, SgdaskError
from sgdask.kernels.selection import parse_ks
from sgdask.metrics import FAMILIES, metric_of, row_label
from sgdask.metrics.base import DERIVED, Context, Family, FinalColumns, Finals
from sgdask.metrics.groups import PredicateGroups
from sgdask.metrics.recall import VOCABULARY_MEANS
from sgdask.protocols import recorded
from sgdask.report import Report
from sgdask.stats.bootstrap import (
    ColumnDerive,
    Derive,
    Intervals,
    Mapper,
    Scoring,
    bootstrap,
    count_chunks,
    percentile_intervals,
)
from sgdask.stats.units import unit_index, unit_of

INTERVAL_SUFFIXES = ("_lo", "_hi")


def tokens(spec: str | None) -> list[str]:
    """The names of a comma-separated metric list."""
    return [t.strip() for t in (spec or "").split(",") if t.strip()]


def scoring_of(report: Report, composition: dict[int, int] | None,
               aggregation: str | None = None) -> Scoring:
    """How the report's terms turn into its metrics: its aggregation (or ``aggregation``),
    the mean metrics its protocol takes over all cells, the derived metrics it has
    (``composition``: the GT's training compositions, None without), and the mean metrics
    its protocol prints over the predicate vocabulary."""
    names = report.terms.names if report.terms is not None else list(report.metrics)
    protocol = recorded(report.protocol)
    over_cells = set()
    for name in names:
        metric = metric_of(name)
        if metric and protocol.mean_over_cells(metric.prefix):
            over_cells.add(name)
    mode = protocol.aggregation_for(aggregation or report.aggregation)
    vocabulary = frozenset()
    n_vocabulary = 0
    if protocol.means_over_vocabulary() and mode != "image":
        vocabulary = frozenset(n for n in names if n.partition("@")[0] in VOCABULARY_MEANS
                               and not n.endswith("@inf"))
        n_vocabulary = len(report.per_predicate) + report.diagnostics.get(
            "predicates_absent", 0)
    return Scoring(mode, frozenset(over_cells), derivation(report, composition),
                   vocabulary, n_vocabulary, column_derivation(report, composition))


def deriving_families(report: Report) -> list[Family]:
    """The families whose derived metrics the report has."""
    return [f for f in FAMILIES if f.derive and any(
        m.kind == DERIVED and any(metric_of(n) is m for n in report.metrics)
        for m in f.metrics)]


def derive_context(report: Report, composition: dict[int, int] | None) -> Context:
    """The derive functions' view of a report: its ks, aggregation, tau, predicate groups,
    under a vocabulary-wide mean its occurring predicates, and the thing categories from its
    per-category table."""
    groups = PredicateGroups.from_dict(report.predicate_groups)
    names = report.terms.names if report.terms is not None else list(report.metrics)
    split = [row for row in report.per_category if row.get("isthing") is not None]
    things = frozenset(row["category"] for row in split if row["isthing"]) if split else None

    def valued(name: str) -> set[int]:
        return {int(row["predicate"]) for row in report.per_predicate
                if row.get(name) is not None}

    return Context(parse_ks(report.ks), report.aggregation,
                   float(report.options.get("tau", 0.5)), composition,
                   None if groups is None else groups.members,
                   vocabulary_sets(recorded(report.protocol).means_over_vocabulary()
                                   and groups is not None, report.aggregation, valued, names),
                   things=things)


def column_derivation(report: Report, composition: dict[int, int] | None
                      ) -> ColumnDerive | None:
    """``derivation`` for every resample at once, when every family involved has
    ``derive_columns`` (None: the bootstrap derives resample by resample)."""
    families = deriving_families(report)
    if not families or any(f.derive_columns is None for f in families):
        return None
    ctx = derive_context(report, composition)

    def derive(columns: FinalColumns) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for family in families:
            assert family.derive_columns is not None
            out.update(family.derive_columns(columns, ctx))
        return out

    return derive


def derivation(report: Report, composition: dict[int, int] | None) -> Derive | None:
    """The derive functions of the families whose derived metrics the report has."""
    families = deriving_families(report)
    if not families:
        return None
    ctx = derive_context(report, composition)

    def derive(finals: Finals) -> dict[str, float]:
        out: dict[str, float] = {}
        for family in families:
            assert family.derive is not None
            out.update({n: float(v) for n, v in family.derive(finals, ctx).items()})
        return out

    return derive


def selected(report: Report, spec: str | None) -> list[str] | None:
    """Metric names of ``--ci-metrics`` (names like ``mR@50``, rows like ``mR`` or
    ``mR[head]``, comma separated) among the report's metrics; None: every metric."""
    if spec is None:
        return None
    names: list[str] = []
    for token in tokens(spec):
        found = [n for n in report.metrics if n == token or row_label(n) == token]
        if not found:  # a group's name, known once the GT is read (Settings checked the rest)
            names = dict.fromkeys([*(row_label(n) for n in report.metrics), *report.metrics])
            raise SettingError("ci_metrics", f"{token!r} is not a metric of this evaluation",
                               fix=Choose(token, tuple(names)))
        names += [n for n in found if n not in names]
    return names


def add_intervals(report: Report, settings: CISettings,
                  composition: dict[int, int] | None, mapper: Mapper | None = None) -> None:
    """Compute the report's bootstrap intervals and put them into it: ``intervals``,
    ``ci`` (the settings) and ``<metric>_lo`` / ``_hi`` columns of the per-predicate
    table (``mapper``: where blocks of resamples may run, e.g. the cluster)."""
    if report.terms is None:
        raise SgdaskError("intervals need the per-image terms (per_image_terms.parquet); "
                          "evaluate again")
    names = selected(report, settings.metrics)
    found = _state_intervals(report, settings, names)
    if report.terms.names:
        terms = bootstrap(report.terms, scoring_of(report, composition), settings.level,
                          settings.resamples, settings.seed, names, mapper)
        found.metrics.update(terms.metrics)
        found.predicates.update(terms.predicates)
    report.intervals = {n: list(found.metrics[n]) for n in report.metrics
                        if n in found.metrics}
    report.ci = found.settings()
    for row in report.per_predicate:
        for name, by_predicate in found.predicates.items():
            interval = by_predicate.get(row["predicate"])
            row[f"{name}_lo"], row[f"{name}_hi"] = interval if interval else (None, None)


def _state_intervals(report: Report, settings: CISettings, names: list[str] | None
                    ) -> Intervals:
    """Intervals of the metrics families derive from their merged state (an AP),
    from the family's own values under the bootstrap's image weights
    (``Family.state_samples``: the same resamples as the terms' bootstrap)."""
    found = Intervals(settings.level, settings.resamples, settings.seed, {}, {},
                      unit_of(report.terms) if report.terms is not None else "image")
    families = [f for f in FAMILIES if f.state_samples is not None and report.states
                and all(s.name in report.states for s in f.states)
                and any(metric_of(n) in f.metrics for n in report.metrics)]
    if not families or report.terms is None:
        return found
    ids = [str(i) for i in report.terms.image_ids]
    ctx = derive_context(report, None)
    ctx.n_predicates = len(report.per_predicate)
    metrics: dict[str, list[np.ndarray]] = {}
    predicates: dict[str, list[np.ndarray]] = {}
    under = [f.state_samples(report.states, ids, ctx) for f in families
             if f.state_samples is not None]
    for weights in count_chunks(len(ids), settings.resamples, settings.seed,
                                index=unit_index(report.terms)):
        for values_under in under:
            values, per_predicate = values_under(weights)
            for name, value in values.items():
                metrics.setdefault(name, []).append(value)
            for name, value in per_predicate.items():
                predicates.setdefault(name, []).append(value)
    shown = [n for n in metrics if n in report.metrics and (names is None or n in names)]
    bounds = percentile_intervals(np.array([np.concatenate(metrics[n]) for n in shown])
                                  .reshape(len(shown), -1), settings.level)
    found.metrics = {n: b for n, b in zip(shown, bounds, strict=True) if b is not None}
    for name, parts in predicates.items():
        rows = percentile_intervals(np.concatenate(parts, axis=1), settings.level)
        found.predicates[name] = {p: b for p, b in enumerate(rows) if b is not None}
    return found


def is_interval_column(column: str, columns: list[str]) -> bool:
    """Whether a per-predicate column is the bound of another column's interval."""
    return any(column.endswith(s) and column[:-len(s)] in columns for s in INTERVAL_SUFFIXES)
