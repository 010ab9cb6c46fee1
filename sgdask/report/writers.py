"""Writing one or several protocols' reports to a directory URL."""

from __future__ import annotations

import json
from typing import Any

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


def write_reports(reports: dict[str, Report], out: str,
                  storage_options: StorageOptions | None = None) -> list[str]:
    """One protocol: its files in ``out`` (``Report.write``). Several: ``out/<protocol>/``
    each, plus ``out/protocol_delta.json`` and ``out/report.html`` with every protocol."""
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
