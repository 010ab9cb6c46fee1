"""Writing one or several protocols' reports to a directory URL."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from sgdask.errors import Option, SgdaskError
from sgdask.io.fs import StorageOptions, filesystem, join
from sgdask.metrics import is_rank
from sgdask.report import Report


def protocol_delta(reports: dict[str, Report]) -> list[dict[str, Any]]:
    """Rows: metric, value per protocol, and ``delta_<name>`` vs the first protocol.

    Rank metrics are left out (not fractions); metrics missing in a protocol give None.
    """
    names = list(reports)
    first = reports[names[0]].metrics
    metrics = [m for m in first if not is_rank(m)]
    rows = []
    for metric in metrics:
        row: dict[str, Any] = {"metric": metric}
        row.update({n: reports[n].metrics.get(metric) for n in names})
        for n in names[1:]:
            other = reports[n].metrics.get(metric)
            row[f"delta_{n}"] = None if other is None else other - first[metric]
        rows.append(row)
    return rows


#: a directory holding one of these files holds a report ``write_reports`` wrote
REPORT_MARKERS = ("metrics.json", "protocol_delta.json")


def check_report_target(out: str, overwrite: bool,
                        storage_options: StorageOptions | None = None) -> None:
    """Refuse, before any work, an ``--out`` that is a file, or a directory that is not
    empty (unless ``overwrite``; even then only a directory holding a report is replaced,
    never another one)."""
    fs, path = filesystem(out, storage_options)
    if not fs.exists(path):
        return
    if not fs.isdir(path):
        raise SgdaskError(f"{out}: is a file; reports are written to a directory (choose "
                          "another ", Option("out"), ")")
    names = {posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)}
    if not names:
        return
    if not overwrite:
        raise SgdaskError(f"{out}: already exists and is not empty (choose another ",
                          Option("out"), ", or pass ", Option("overwrite", True),
                          " to replace it)")
    if not names & set(REPORT_MARKERS):
        raise SgdaskError(f"{out}: holds no sgdask report ({' or '.join(REPORT_MARKERS)}); ",
                          Option("overwrite", True), " replaces only a report (choose another ",
                          Option("out"), ")")


def write_reports(reports: dict[str, Report], out: str,
                  storage_options: StorageOptions | None = None,
                  overwrite: bool = False) -> list[str]:
    """One protocol: its files in ``out`` (``Report.write``). Several: ``out/<protocol>/``
    each, plus ``out/protocol_delta.json`` and ``out/report.html`` with every protocol.
    ``overwrite``: an existing report at ``out`` is removed first, so no file of it stays
    beside the new one (``check_report_target`` checked it)."""
    if overwrite:
        fs, path = filesystem(out, storage_options)
        if fs.exists(path):
            fs.rm(path, recursive=True)
    return _written(reports, out, storage_options)


def _written(reports: dict[str, Report], out: str,
             storage_options: StorageOptions | None) -> list[str]:
    from sgdask.report.html import write_html

    if len(reports) == 1:  # exactly what Report.write writes
        return next(iter(reports.values())).write(out, storage_options)
    written = []
    for name, report in reports.items():
        written += report.write(join(out, name), storage_options, html=False)
    fs, path = filesystem(join(out, "protocol_delta.json"), storage_options)
    with fs.open(path, "w") as f:
        json.dump(protocol_delta(reports), f, indent=1)
    written.append(join(out, "protocol_delta.json"))
    written.append(write_html(reports, join(out, "report.html"), storage_options))
    return written
