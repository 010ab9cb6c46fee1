"""The metric registry: one module per metric family, and everything that asks about metrics.

A family module (``recall``, ``fmeasure``, ``groups``, ``pair``, ``zeroshot``, ``imr``,
``instances``, ``prank``, ``legacy``, ``panoptic``; a protocol may bring families of its own,
``sgdask.protocols``) declares its metrics (names, kind,
inputs, display rule, board columns, the reason it is left out) and computes their
per-image terms, or derives them from other metrics' values. The report, the console
table, the leaderboard and the left-out lines read this registry; no metric name is spelled
outside its family module (and the tests).

A metric name is ``PREFIX``, ``PREFIX@K`` or, for a grouped metric, ``PREFIX@K[GROUP]``
(``InstR``, ``mR@50``, ``mR@50[head]``); ``split_name`` reads one.

To add a metric, write a module with a ``FAMILY`` and add it to ``FAMILIES`` (or call
``register`` at run time); docs/development.md "Add a metric" walks through it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from fractions import Fraction

from sgdask.errors import Audience, Choose, SettingError, Text
from sgdask.kernels.selection import KSpec, parse_k
from sgdask.metrics import (
    fmeasure,
    groups,
    imr,
    instances,
    legacy,
    pair,
    panoptic,
    prank,
    recall,
    zeroshot,
)
from sgdask.metrics.base import (
    EXCLUSIVE,
    LISTED_WITH,
    NEEDS,
    NOT_LISTED,
    RANK,
    Family,
    Metric,
    need_reason,
    reason_for,
)

FAMILIES: list[Family] = [recall.FAMILY, fmeasure.FAMILY, groups.FAMILY, pair.FAMILY,
                          zeroshot.FAMILY, imr.FAMILY, legacy.FAMILY, instances.FAMILY,
                          prank.FAMILY, panoptic.FAMILY]
_NAME = re.compile(r"(?P<prefix>[^@\[\]]+)(?:@(?P<k>[^@\[\]]+))?(?:\[(?P<group>[^\[\]]+)\])?")


def register(family: Family) -> None:
    """Add a family (replacing one of the same name); its declared states' names must be
    new (the accumulator keeps states by name)."""
    taken = {s.name: f.name for f in FAMILIES if f.name != family.name for s in f.states}
    for state in family.states:
        if state.name in taken:
            raise ValueError(f"family {family.name}: state {state.name!r} is already "
                             f"declared by family {taken[state.name]}")
    unregister(family.name)
    FAMILIES.append(family)


def unregister(name: str) -> None:
    FAMILIES[:] = [f for f in FAMILIES if f.name != name]


def declare_inputs(needs: dict[str, Text], not_listed: Iterable[str] = (),
                   exclusive: dict[str, str] | None = None) -> None:
    """Inputs a protocol provides (``sgdask.protocols.base.Protocol``): what a metric
    needing one is left out with under a protocol without it (``NEEDS``, replacing the
    reason of an input already known), the ones whose absence keeps the metric off the
    left-out list (``NOT_LISTED``) and the ones that make an evaluation report only the
    metrics that need them (``EXCLUSIVE``)."""
    NEEDS.update(needs)
    NOT_LISTED.update(not_listed)
    EXCLUSIVE.update(exclusive or {})


_SWAP = threading.Lock()


@contextmanager
def families_of(families: tuple[Family, ...]) -> Iterator[None]:
    """The registry as an evaluation's driver had it (``families``: its ``FAMILIES``), for
    work done in a worker process, whose registry lacks what the driver registered at run
    time; nothing changes where the two agree (threads of the driver's process)."""
    if [f.name for f in FAMILIES] == [f.name for f in families]:
        yield
        return
    with _SWAP:
        saved = FAMILIES[:]
        FAMILIES[:] = families
        try:
            yield
        finally:
            FAMILIES[:] = saved


def metrics() -> list[Metric]:
    return [m for f in FAMILIES for m in f.metrics]


def split_name(name: str) -> tuple[str, str, str | None]:
    """(prefix, k, group) of a metric name: ``mR@50[head]`` -> (``mR``, ``50``, ``head``),
    ``mR@50`` -> (``mR``, ``50``, None), ``InstR`` -> (``InstR``, ``""``, None)."""
    found = _NAME.fullmatch(name)
    if found is None:
        return name, "", None
    return found["prefix"], found["k"] or "", found["group"]


def row_label(name: str) -> str:
    """The row a metric is printed in, one column per k: its prefix, with its group
    (``mR@50[head]`` -> ``mR[head]``)."""
    prefix, _, group = split_name(name)
    return prefix if group is None else f"{prefix}[{group}]"


def name_at(label: str, k: str) -> str:
    """The metric of a row (``row_label``) at k: (``mR[head]``, ``50``) -> ``mR@50[head]``."""
    prefix, _, group = split_name(label)
    return f"{prefix}@{k}" if group is None else f"{prefix}@{k}[{group}]"


def metric_of(name: str) -> Metric | None:
    """The registered metric a name (or a row label) belongs to (``mR@x10`` -> mR,
    ``R@inf`` -> R@inf, ``mR@50[head]`` and ``mR[head]`` -> the grouped mR)."""
    exact = {m.prefix: m for m in metrics() if not m.per_k}
    if name in exact:
        return exact[name]
    prefix, _, group = split_name(name)
    return next((m for m in metrics()
                 if m.per_k and m.prefix == prefix and m.grouped == (group is not None)), None)


def check_metric_names(spec: str | None, setting: str,
                       ks: tuple[KSpec, ...] | None = None) -> None:
    """Raise a ``SettingError`` naming ``setting`` for the first name of the comma-separated
    ``spec`` (``mR@50``, a row ``mR`` or ``mR[head]``) that is no metric, or whose k is no
    k or (given the evaluation's ``ks``) not one of them, with the nearest name. A group's
    name is checked once the groups are known (they depend on the GT)."""
    for token in filter(None, (t.strip() for t in (spec or "").split(","))):
        metric = metric_of(token)
        if metric is None:
            prefixes = tuple(dict.fromkeys(m.prefix for m in metrics()))
            raise SettingError(setting, f"{token!r} is not a metric name",
                               fix=Choose(split_name(token)[0], prefixes))
        k = split_name(token)[1]
        if metric.per_k and k:
            _check_k(token, k, metric.prefix, setting, ks)


def _check_k(token: str, k: str, prefix: str, setting: str,
             ks: tuple[KSpec, ...] | None) -> None:
    """The k of the metric name ``token`` is a k, one of ``ks`` when they are given."""
    nearest = Choose(token, tuple(f"{prefix}@{s.label}" for s in ks)) if ks else None
    try:
        given = parse_k(k)
    except SettingError:
        raise SettingError(setting, f"{token!r}: {k!r} is not a k", fix=nearest) from None
    if ks and all((s.absolute, s.factor) != (given.absolute, given.factor) for s in ks):
        raise SettingError(setting, f"{token!r}: {k!r} is not a k of the ks evaluated "
                           f"({', '.join(s.label for s in ks)})", fix=nearest)


def order() -> list[str]:
    """Metric keys (``Metric.key``) in report order (``R@inf`` sorts with ``R``)."""
    return list(dict.fromkeys(m.key.partition("@")[0] for m in metrics()))


def sort_key(name: str) -> tuple:
    """Report order: registry order of the metric, then absolute k ascending, then
    relative k ascending, ``@inf`` last (a grouped metric's groups in name order)."""
    prefixes = order()
    family, k, group = split_name(name)
    key = family if group is None else f"{family}[G]"
    rank = prefixes.index(key) if key in prefixes else len(prefixes)
    if not k:
        return (rank, 0, Fraction(0), name)
    if k == "inf":
        return (rank, 3, Fraction(0), name)
    if k.startswith("x"):
        return (rank, 2, Fraction(k[1:]), name)
    try:
        return (rank, 1, Fraction(k), name)
    except ValueError:
        return (rank, 4, Fraction(0), name)


def is_rank(name: str) -> bool:
    metric = metric_of(name)
    return metric is not None and metric.display == RANK


def format_value(name: str, value: float | None) -> str:
    """A metric as printed everywhere: percent with 2 decimals, a rank with 2 decimals."""
    if value is None:
        return "-"
    return f"{value:.2f}" if is_rank(name) else f"{100 * value:.2f}"


def units_note(names: Iterable[str] | None = None) -> str:
    """How the numbers read; ``names``: the metrics shown (default: every registered one),
    so that a table without a rank metric does not explain ranks."""
    shown = None if names is None else {metric_of(n) for n in names}
    ranks = [m.prefix for m in metrics() if m.display == RANK and (shown is None or m in shown)]
    return "recalls in %" + (f", {', '.join(ranks)} = mean 0-based rank (lower is better)"
                             if ranks else "")


RANK_BY, TIE_BREAK = recall.RANK_BY, recall.TIE_BREAK


def board_columns() -> list[str]:
    """Leaderboard columns: the ranking metric, then every registered metric's board ks in
    registry order."""
    names = [f"{m.prefix}@{k}" if k else m.prefix for m in metrics() for k in m.board]
    return [RANK_BY, *[n for n in names if n != RANK_BY]]


def available(metric: Metric, inputs: set[str]) -> str | None:
    """None when every input the metric needs is there, else why it is left out (under a
    protocol of its own metrics, ``EXCLUSIVE``, every other metric is left out)."""
    for need, why in EXCLUSIVE.items():
        if need in inputs and need not in metric.needs:
            return why
    for need in NEEDS:
        if need in metric.needs and need not in inputs:
            return need_reason(need)
    return None


def computed_names(inputs: set[str], ks: tuple[KSpec, ...]) -> list[str]:
    """Names of the metrics an evaluation with these inputs computes."""
    return [n for m in metrics() if available(m, inputs) is None for n in m.names(ks)]


def left_out(inputs: set[str], values: dict[str, object], protocol: str) -> dict[str, str]:
    """Metric -> reason, for every registered metric without a value (a reason that names
    the protocol names ``protocol``, the report's; the metrics a protocol of its own
    metrics, ``EXCLUSIVE``, leaves out: under one key)."""
    reasons: dict[str, str] = {}
    excluded: dict[str, list[str]] = {}
    valued = {metric_of(name) for name in values}
    for m in metrics():
        if any(need in m.needs and need not in inputs and LISTED_WITH.get(need) not in inputs
               for need in NOT_LISTED):
            continue
        why = available(m, inputs)
        if why in EXCLUSIVE.values():
            if m not in valued:
                excluded.setdefault(why, []).append(m.left_out_key)
            continue  # (a metric of this name is reported: a protocol's own R@50)
        if why is None and m.empty_reason and m not in valued:
            why = m.empty_reason
        if why is not None:
            reasons[m.left_out_key] = why.replace("{protocol}", protocol)
    for why, keys in excluded.items():
        reasons[", ".join(keys)] = why.replace("{protocol}", protocol)
    return reasons


def left_out_lines(reasons: dict[str, str], audience: Audience = "api") -> list[str]:
    """``metrics: reason``, one line per reason (the metrics left out for the same reason
    together), the options named for ``audience``."""
    grouped: dict[str, list[str]] = {}
    for metric, why in reasons.items():
        grouped.setdefault(why, []).append(metric)
    return [f"{', '.join(names)}: {reason_for(why, audience)}" for why, names in grouped.items()]


__all__ = [
    "FAMILIES",
    "RANK_BY",
    "TIE_BREAK",
    "Family",
    "Metric",
    "available",
    "board_columns",
    "check_metric_names",
    "computed_names",
    "families_of",
    "format_value",
    "is_rank",
    "left_out",
    "left_out_lines",
    "metric_of",
    "metrics",
    "name_at",
    "order",
    "reason_for",
    "register",
    "row_label",
    "sort_key",
    "split_name",
    "units_note",
    "unregister",
]


# The protocols register their own families and inputs with this registry: imported last,
# so that every caller of the registry sees them (``sgdask.protocols`` imports it back).
import sgdask.protocols  # noqa: E402, F401
