"""Finalisation: a folded accumulator's dataset numbers (``final_metrics``,
``derived_metrics``), the report's record (``build_report``: the tables, notes, what was left
out and why, provenance) and a folded result's report (``report_of``). No I/O: the record is
``Findings``; ``sgdask.report`` shows and writes it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from itertools import chain
from operator import itemgetter
from typing import Any

from sgdask import __version__
from sgdask.core.accum import Accumulator
from sgdask.core.findings import Findings
from sgdask.core.lint import FIRST_WAVE_PREFIX, lint_report, with_first_wave
from sgdask.core.plan import EvalSettings
from sgdask.core.result import Key, PartitionResult
from sgdask.metrics import (
    FAMILIES,
    available,
    left_out,
    metric_of,
    sort_key,
    split_name,
)
from sgdask.metrics import (
    metrics as registered,
)
from sgdask.metrics.base import DERIVED, Finals, Metric
from sgdask.metrics.groups import PredicateGroups
from sgdask.metrics.recall import VOCABULARY_MEANS
from sgdask.protocols import METRICS_VERSION
from sgdask.stats.table import TermTable
from sgdask.versions import dependency_versions


def report_of(result: PartitionResult, key: Key, settings: EvalSettings,
              composition: dict[int, int] | None, gt_manifest: dict[str, Any],
              pred_manifest: dict[str, Any], counts: dict[str, int]) -> Findings:
    """The report of one (submission, protocol) of a folded result: its accumulator
    finalized under the settings, its per-image rows and terms, and the submission's
    protocol lint (worded here: the report only writes it; the ``lint_*`` keys of
    ``counts``, what the first-wave check found, go to it, not to the diagnostics)."""
    own = result.lint.get(key[0])
    lint = lint_report(None if own is None else with_first_wave(own, counts),
                       counts.get("gt_images"), gt_manifest.get("predicate_classes", []))
    counts = {k: v for k, v in counts.items() if not k.startswith(FIRST_WAVE_PREFIX)}
    return build_report(result.accumulators[key], result.images[key], settings, composition,
                        gt_manifest, pred_manifest, counts, TermTable.concat(result.terms[key]),
                        lint)


def final_metrics(acc: Accumulator, settings: EvalSettings) -> dict[str, float]:
    """Every non-derived metric's dataset value under the settings' aggregation, in report
    order."""
    protocol, aggregation = settings.protocol, settings.aggregation
    values: dict[str, Fraction | float | None] = {}
    for name in acc.image_metric_names():
        values[name] = acc.image_value(name)
    for name in acc.mean_metric_names():
        metric = metric_of(name)
        over_cells = metric is not None and protocol.mean_over_cells(metric.prefix)
        values[name] = acc.mean_metric(name, aggregation, over_cells)
    for name in acc.ratio_metric_names():
        values[name] = acc.ratio_value(name)
    return in_order(values)


def in_order(values: Mapping[str, Fraction | float | None]) -> dict[str, float]:
    """The defined values as floats, in report order."""
    return {n: float(v) for n, v in sorted(values.items(), key=lambda kv: sort_key(kv[0]))
            if v is not None}


def derived_metrics(acc: Accumulator, settings: EvalSettings,
                    composition: dict[int, int] | None,
                    values: Mapping[str, float] | None = None,
                    n_predicates: int | None = None,
                    state: Callable[[str], dict[int, Any] | None] | None = None
                    ) -> dict[str, Fraction | float]:
    """Values of the DERIVED metrics whose inputs the evaluation has (e.g. wIMR@k), from
    the per-predicate values, the declared states and ``values``: the non-derived metrics
    as reported (``build_report`` passes them after a protocol's vocabulary means, as the
    bootstrap derives; default: ``final_metrics``)."""
    known = final_metrics(acc, settings) if values is None else values
    finals = _finals_of(acc, settings, known, state)
    inputs = settings.inputs
    ctx = settings.context(composition, lambda name: acc.predicate_values(
        name, settings.aggregation), acc.mean_metric_names(), n_predicates)
    out: dict[str, Fraction | float] = {}
    for family in FAMILIES:
        derivable = [m for m in family.metrics if m.kind == DERIVED
                     and available(m, inputs) is None]
        if family.derive and derivable:
            out.update({name: value for name, value in family.derive(finals, ctx).items()
                        if _named(name, derivable)})
    return out


def _named(name: str, candidates: list[Metric]) -> bool:
    """Whether ``name`` is the name of one of ``candidates`` (a family's own metric: a
    protocol's own R@50 is not recall's R@k, which ``metric_of`` would name)."""
    prefix, _, group = split_name(name)
    return any(m.prefix == prefix and m.grouped == (group is not None) if m.per_k
               else m.prefix == name for m in candidates)


def _finals_of(acc: Accumulator, settings: EvalSettings, values: Mapping[str, float],
               state: Callable[[str], dict[int, Any] | None] | None = None) -> Finals:
    """The finals derived metrics and per-category rows read (``state``: the states'
    final forms, default ``acc.state_final``)."""
    return Finals(lambda name: acc.predicate_values(name, settings.aggregation), values.get,
                  state or acc.state_final)


def _category_table(acc: Accumulator, settings: EvalSettings,
                   composition: dict[int, int] | None, values: Mapping[str, float]
                   ) -> list[dict[str, Any]]:
    """The per-category table: when a family reports per category (panoptic quality), one
    row per category of the vocabulary and every other one it reports, with its name,
    whether it is a thing (None: unknown) and the families' columns (None where a
    category has no value); else empty."""
    finals, ctx = _finals_of(acc, settings, values), settings.context(composition)
    found: dict[int, dict[str, Any]] = {}
    for family in FAMILIES:
        if family.category_rows and any(available(m, settings.inputs) is None
                                        for m in family.metrics):
            for row in family.category_rows(finals, ctx):
                found.setdefault(row["category"], {}).update(row)
    if not found:
        return []
    names, things = settings.categories, settings.things
    columns = list(dict.fromkeys(k for row in found.values() for k in row if k != "category"))
    return [{"category": c, "name": names[c] if c < len(names) else str(c),
             "isthing": None if things is None else c in things,
             **{k: found.get(c, {}).get(k) for k in columns}}
            for c in sorted(set(found) | set(range(len(names))))]


def _cached_states(acc: Accumulator) -> Callable[[str], dict[int, Any] | None]:
    """``acc.state_final``, each state put in its final order once (a sort of every row:
    a ranking protocol's detections are a million rows on Open Images V6)."""
    found: dict[str, dict[int, Any] | None] = {}

    def state(name: str) -> dict[int, Any] | None:
        if name not in found:
            found[name] = acc.state_final(name)
        return found[name]

    return state


def _derived_predicate_values(settings: EvalSettings, state: Callable[[str], Any],
                              n_predicates: int | None) -> dict[str, dict[int, float]]:
    """Per-predicate values the active families derive from their state (an AP)."""
    out: dict[str, dict[int, float]] = {}
    for family in FAMILIES:
        if family.derive_predicates and any(available(m, settings.inputs) is None
                                            for m in family.metrics):
            out.update(family.derive_predicates(Finals(lambda _: {}, state=state),
                                                settings.context(None, n_predicates=n_predicates)))
    return out


def _state_diagnostics(settings: EvalSettings, state: Callable[[str], Any]) -> dict[str, int]:
    """Counts the active families read from their state (tied detections)."""
    out: dict[str, int] = {}
    for family in FAMILIES:
        if family.state_diagnostics and any(available(m, settings.inputs) is None
                                            for m in family.metrics):
            out.update(family.state_diagnostics(Finals(lambda _: {}, state=state)))
    return out


def predicate_table(acc: Accumulator, names: list[str], aggregation: str,
                    groups: PredicateGroups | None = None,
                    derived: Mapping[str, Mapping[int, float]] | None = None
                    ) -> list[dict[str, Any]]:
    """One row per predicate occurring in the evaluated GT, or given a ``derived`` value
    (an AP of every predicate of the vocabulary): GT count, its group (with predicate
    groups; None in none), every mean metric and the derived per-predicate values."""
    values: dict[str, Mapping[int, Any]] = {
        m: acc.predicate_values(m, aggregation) for m in acc.mean_metric_names()}
    values.update(derived or {})
    counts = acc.gt_per_predicate
    group_of = None if groups is None else groups.group_of()
    rows = []
    for p in sorted({*counts, *(q for v in (derived or {}).values() for q in v)}):
        row: dict[str, Any] = {"predicate": p, "name": names[p] if p < len(names) else str(p),
                               "gt_count": counts.get(p, 0)}
        if group_of is not None:
            row["group"] = group_of.get(p)
        row.update({m: as_float(v.get(p)) for m, v in values.items()})
        rows.append(row)
    return rows


def uniform_rows(rows: list[dict[str, Any]], metric_names: list[str]) -> list[dict[str, Any]]:
    """Per-image rows sorted by image id, every row with every column (None where an image
    has no value: a missing image has no diagnostics, zR only exists with zero-shot triplets).

    Columns: image_id, missing, gt_triplets, the image-level metrics in report order, then
    the diagnostics in order of first appearance. A Parquet table built from the rows then
    has every column whatever the first row holds.
    """
    head = ["image_id", "missing", "gt_triplets", *metric_names]
    present = dict.fromkeys(chain.from_iterable(rows))
    columns = [c for c in head if c in present] + [k for k in present if k not in head]
    return [dict(zip(columns, map(r.get, columns), strict=True))
            for r in sorted(rows, key=itemgetter("image_id"))]


def submission_provenance(manifest: dict[str, Any]) -> dict[str, Any]:
    """Source and content hash; for a store whose lists were derived from scores
    (``convert --from-scores``), the score file, the ranking and the NG cut; for a store
    converted from model results (``convert --method``), the method and whether instance
    scores were kept."""
    out = {"source": manifest.get("source"), "content_hash": manifest.get("content_hash")}
    if manifest.get("triplets_from"):
        out.update(triplets_from=manifest["triplets_from"],
                   rank_by=manifest.get("rank_by", "predicate"),
                   ng_limit=manifest.get("ng_limit"))
    if manifest.get("method"):
        out.update(method=manifest["method"],
                   instance_scores=bool(manifest.get("instance_scores")))
    return out


def build_report(acc: Accumulator, images: list[dict[str, Any]], settings: EvalSettings,
                 composition: dict[int, int] | None, gt_manifest: dict[str, Any],
                 pred_manifest: dict[str, Any], counts: dict[str, int],
                 terms: TermTable | None = None, lint: dict[str, Any] | None = None
                 ) -> Findings:
    """Finalize the accumulator under an aggregation mode into the report's record (``terms``: the
    per-image terms it was summed from, kept for intervals and comparisons; ``lint``: the
    protocol lint, as ``sgdask.core.lint.lint_report`` words it)."""
    protocol = settings.protocol
    metrics = final_metrics(acc, settings)
    names = gt_manifest.get("predicate_classes", [])
    notes = []
    absent = len(names) - len(acc.gt_per_predicate)
    occurring, vocabulary_notes = vocabulary_means(acc, metrics, settings, len(names), absent)
    notes += vocabulary_notes
    state = _cached_states(acc)
    metrics = in_order({**metrics, **derived_metrics(acc, settings, composition, metrics,
                                                     len(names) or None, state)})
    reasons = left_out(settings.inputs, metrics, protocol.name)
    metrics, withheld = protocol.withheld(metrics, acc.diagnostics)
    reasons.update(withheld)
    notes += protocol.notes(absent)
    if not settings.match_labels:
        notes.append("no-match-labels: predictions matched GT instances of any category "
                     "(docs: Metrics and protocols, matching); not comparable with "
                     "category-matched results")
    notes += [m.note for m in registered() if m.note and any(
        metric_of(name) is m for name in metrics)]
    groups = settings.groups if any(
        (m := metric_of(name)) is not None and m.grouped for name in metrics) else None
    if groups is not None:
        notes.append(groups.note())
    notes += [line for family in FAMILIES if family.notes and any(
        metric_of(name) in family.metrics for name in metrics)
        for line in family.notes(acc.diagnostics)]
    diagnostics = {**counts, **{k: v for k, v in acc.diagnostics.items() if k != "images"},
                   **_state_diagnostics(settings, state)}
    if protocol.means_over_vocabulary() and names:
        diagnostics["predicates_absent"] = max(absent, 0)
    provenance = {"sgdask_version": __version__, "metrics_version": METRICS_VERSION,
                  "gt": {"source": gt_manifest.get("source"),
                         "content_hash": gt_manifest.get("content_hash")},
                  "submission": submission_provenance(pred_manifest),
                  "packages": dependency_versions()}
    return Findings(protocol=protocol.as_dict(), aggregation=settings.aggregation,
                  ks=[k.label for k in settings.ks], metrics=metrics,
                  per_predicate=predicate_table(
                      acc, names, settings.aggregation, groups,
                      _derived_predicate_values(settings, state, len(names) or None)),
                  per_image=uniform_rows(images, acc.image_metric_names()),
                  diagnostics=diagnostics, left_out=reasons,
                  notes=notes, provenance=provenance, options=settings.options(),
                  mean_over_occurring=occurring,
                  predicate_groups={} if groups is None else groups.as_dict(),
                  per_category=_category_table(acc, settings, composition, metrics),
                  lint=lint or {}, terms=terms,
                  states={name: state(name) for name in acc.states})


def vocabulary_means(acc: Accumulator, metrics: dict[str, float], settings: EvalSettings,
                     n_vocabulary: int, absent: int) -> tuple[dict[str, float], list[str]]:
    """Under a protocol whose means run over the vocabulary: mR@k and mNgR@k in ``metrics``
    replaced (in place) by the mean over every predicate of the vocabulary (an absent one
    counts 0); returns the replaced means over the occurring predicates and the notes."""
    if not settings.protocol.means_over_vocabulary() or not n_vocabulary:
        return {}, []
    if settings.aggregation == "image":
        return {}, ["aggregation image averages each image's predicates: mR@k and mNgR@k "
                    "are not the vocabulary-wide means this protocol prints otherwise"]
    occurring = {}
    for name in list(metrics):
        if name.partition("@")[0] not in VOCABULARY_MEANS or name.endswith("@inf"):
            continue
        values = acc.predicate_values(name, settings.aggregation)
        occurring[name] = metrics[name]
        metrics[name] = float(sum(values.values(), Fraction(0)) / n_vocabulary)
    if not occurring:
        return {}, []
    others = [n for n in ("mzR@k", "mR@inf") if any(
        name == n or name.startswith(n.replace("@k", "@")) for name in metrics)]
    unlike = (f"; {' and '.join(others)} average the occurring predicates only, so "
              "they can exceed mR@k" if others else "")
    return occurring, [
        f"mR@k and mNgR@k are means over all {n_vocabulary} predicates of the vocabulary, "
        f"{max(absent, 0)} of them absent from the evaluated GT (counted 0), as the legacy "
        "tools print them; the means over the occurring predicates are under "
        f"mean_over_occurring{unlike}"]


def as_float(value: Fraction | float | None) -> float | None:
    return None if value is None else float(value)
