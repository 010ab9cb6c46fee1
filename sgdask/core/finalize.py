"""A folded result's report."""

from __future__ import annotations

from typing import Any

from sgdask.core.lint import FIRST_WAVE_PREFIX, lint_report, with_first_wave
from sgdask.core.result import Key, PartitionResult
from sgdask.report import EvalSettings, Report, build_report
from sgdask.stats.table import TermTable


def report_of(result: PartitionResult, key: Key, settings: EvalSettings,
              composition: dict[int, int] | None, gt_manifest: dict[str, Any],
              pred_manifest: dict[str, Any], counts: dict[str, int]) -> Report:
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
