"""A folded result's report."""

from __future__ import annotations

from typing import Any

from sgdask.core.lint import lint_report
from sgdask.core.result import Key, PartitionResult
from sgdask.report import EvalSettings, Report, build_report
from sgdask.stats.table import TermTable


def report_of(result: PartitionResult, key: Key, settings: EvalSettings,
              composition: dict[int, int] | None, gt_manifest: dict[str, Any],
              pred_manifest: dict[str, Any], counts: dict[str, int]) -> Report:
    """The report of one (submission, protocol) of a folded result: its accumulator
    finalized under the settings, its per-image rows and terms, and the submission's
    protocol lint (worded here: the report only writes it)."""
    lint = lint_report(result.lint.get(key[0]), counts.get("gt_images"),
                       gt_manifest.get("predicate_classes", []))
    return build_report(result.accumulators[key], result.images[key], settings, composition,
                        gt_manifest, pred_manifest, counts, TermTable.concat(result.terms[key]),
                        lint)
