"""Mean recall over groups of predicates: ``mR@k[G]`` and ``mNgR@k[G]`` (SPEC section 6).

``mR@k[G]`` is ``mR@k`` with its mean over predicates restricted to the predicates of
group G: the mean of their per-predicate values under the aggregation mode
(``per_predicate`` or ``pooled``; ``image`` averages each image's predicates, which no
per-predicate value gives, so groups are left out there). Predicates absent from the
evaluated GT follow the protocol's mR rule: left out of the mean, or, under a protocol
whose mR@k runs over the whole vocabulary (``multimpo``, ``sgbpytorch``), counted 0, so
the value is the sum over G divided by |G| (PySGG's ``longtail_part_eval`` averages its
per-predicate list, where an absent predicate is 0). On a bootstrap resample a group
follows mR's resample rule too, so a group of every predicate is mR on every resample.

Default groups (``default_groups``):

- VG150, recognised by its 50 predicate names: PySGG's head/body/tail split,
  ``LONGTAIL_PART_DICT`` of ``configs/e2e_relBGNN_vg.yaml`` (SHTUPLUS/PySGG at
  a63942a076932b3756a477cf8919c3b74cd36207; its ``pysgg/config/defaults.py`` carries a
  different table, the fallback of configs that set none);
- any other vocabulary: the training split's predicate frequency in thirds (sorted by
  training triplet count descending, ties by predicate index; sizes ceil(n/3), then
  ceil(rest/2), then the rest), which needs training statistics.

A groups file (``--predicate-groups``, read by ``sgdask.io.predicate_groups``) gives any
other split. A DERIVED family: no terms, derived from mR@k's and mNgR@k's per-predicate
values (again on every resample).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from math import ceil
from typing import Any

import numpy as np

from sgdask.metrics.base import DERIVED, Context, Family, FinalColumns, Finals, Metric

MEANS = ("mR", "mNgR")  # the mean metrics groups split
GROUP_NAME = re.compile(r"[A-Za-z0-9_-]+")
METRICS = (
    Metric("mR", DERIVED, "mean recall over the predicates of group G", grouped=True,
           needs=("groups", "predicate_means")),
    Metric("mNgR", DERIVED, "no-graph-constraint mean recall over the predicates of group G",
           grouped=True, needs=("ng", "groups", "predicate_means")),
)

# PySGG's VG150 split (configs/e2e_relBGNN_vg.yaml, LONGTAIL_PART_DICT), by predicate name.
VG150_SPLIT: dict[str, tuple[str, ...]] = {
    "head": ("behind", "has", "in", "near", "of", "on", "wearing"),
    "body": ("above", "and", "at", "attached to", "belonging to", "carrying", "for",
             "hanging from", "holding", "in front of", "looking at", "over", "parked on",
             "riding", "sitting on", "standing on", "under", "walking on", "watching",
             "wears", "with"),
    "tail": ("across", "against", "along", "between", "covered in", "covering", "eating",
             "flying in", "from", "growing on", "laying on", "lying on", "made of",
             "mounted on", "on back of", "painted on", "part of", "playing", "says", "to",
             "using", "walking in"),
}
VG150_SOURCE = ("PySGG's VG150 long-tail split (configs/e2e_relBGNN_vg.yaml at "
                "SHTUPLUS/PySGG a63942a0)")
THIRDS_SOURCE = "the training split's predicate frequency in thirds"


@dataclass(frozen=True)
class PredicateGroups:
    """Predicate groups: name -> predicate ids (sorted), in report order; ``source``:
    where they come from, as the report says it."""

    members: dict[str, tuple[int, ...]]
    source: str

    def group_of(self) -> dict[int, str]:
        """Predicate id -> its group (predicates in no group left out)."""
        return {p: name for name, ids in self.members.items() for p in ids}

    def as_dict(self) -> dict[str, Any]:
        """What a report records (``Report.predicate_groups``)."""
        return {"source": self.source,
                "members": {name: list(ids) for name, ids in self.members.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PredicateGroups | None:
        """The groups a report recorded (None for a report without)."""
        if not data:
            return None
        return cls({name: tuple(int(p) for p in ids) for name, ids in data["members"].items()},
                   str(data["source"]))

    def note(self) -> str:
        """The report's line naming the groups and their sizes."""
        sizes = ", ".join(f"{name} {len(ids)}" for name, ids in self.members.items())
        return (f"predicate groups ({self.source}): {sizes} predicates; mR@k[G] and "
                "mNgR@k[G] average the predicates of group G only")


def vg150_groups(names: list[str]) -> PredicateGroups | None:
    """PySGG's split when ``names`` are VG150's 50 predicates (in any order), else None."""
    index = {name: i for i, name in enumerate(names)}
    split = [name for members in VG150_SPLIT.values() for name in members]
    if len(names) != len(split) or set(index) != set(split):
        return None
    return PredicateGroups({group: tuple(sorted(index[n] for n in members))
                            for group, members in VG150_SPLIT.items()}, VG150_SOURCE)


def frequency_thirds(counts: dict[int, int], n_predicates: int) -> PredicateGroups:
    """head / body / tail by training triplet count (``counts``: predicate -> count; a
    predicate without one counts 0), descending, ties by index; sizes ceil(n/3), then
    ceil(rest/2), then the rest (empty groups left out)."""
    ranked = sorted(range(n_predicates), key=lambda p: (-counts.get(p, 0), p))
    head = ceil(n_predicates / 3)
    body = ceil((n_predicates - head) / 2)
    parts = {"head": ranked[:head], "body": ranked[head:head + body],
             "tail": ranked[head + body:]}
    return PredicateGroups({name: tuple(sorted(ids)) for name, ids in parts.items() if ids},
                           THIRDS_SOURCE)


def default_groups(names: list[str], counts: dict[int, int] | None
                   ) -> PredicateGroups | None:
    """VG150's split, else the training frequency thirds (``counts``: training triplets per
    predicate), else None (no training statistics)."""
    found = vg150_groups(names)
    if found is None and counts is not None:
        found = frequency_thirds(counts, len(names))
    return found


def _share(members: tuple[int, ...], name: str, ctx: Context) -> Fraction | None:
    """Under a vocabulary-wide mean: the share of the group's predicates with a value of
    ``name`` on the evaluated data (the group's mean is scaled by it: absent predicates
    count 0, as in mR's resamples); None otherwise."""
    if ctx.occurring is None:
        return None
    occurring = ctx.occurring.get(name, frozenset())
    return Fraction(sum(p in occurring for p in members), len(members))


def derive(finals: Finals, ctx: Context) -> dict[str, Any]:
    """mR@k[G] and mNgR@k[G]: per group, the mean of the group's per-predicate values in
    predicate order (exact Fractions in the report, floats on resamples), scaled by its
    share of occurring predicates under a vocabulary-wide mean."""
    out: dict[str, Any] = {}
    for mean in MEANS:
        for k in ctx.ks:
            values = finals.predicate_values(f"{mean}@{k.label}")
            if not values:
                continue
            for group, members in (ctx.groups or {}).items():
                share = _share(members, f"{mean}@{k.label}", ctx)
                found = [values[p] for p in members if p in values]
                if share == 0:
                    out[f"{mean}@{k.label}[{group}]"] = 0.0
                elif found:
                    value = reduce(operator.add, found) / len(found)  # in order
                    out[f"{mean}@{k.label}[{group}]"] = value if share is None \
                        else value * share
    return out


def derive_columns(columns: FinalColumns, ctx: Context) -> dict[str, np.ndarray]:
    """``derive`` for every weighting at once: the values of a group summed in predicate
    order (a predicate without a value adds 0.0, which changes no sum), so each value is
    the float ``derive`` gives on its column (NaN where no predicate of the group has
    one, or none of the metric)."""
    out: dict[str, np.ndarray] = {}
    for mean in MEANS:
        for k in ctx.ks:
            name = f"{mean}@{k.label}"
            ids, values = columns.predicate_values(name)
            if not len(ids):
                continue
            order = np.argsort(ids, kind="stable")
            ids, values = ids[order], values[order]
            valid = ~np.isnan(values)
            filled = np.where(valid, values, 0.0)
            some = valid.any(axis=0)
            for group, members in (ctx.groups or {}).items():
                share = _share(members, name, ctx)
                rows = np.flatnonzero(np.isin(ids, members))  # in predicate order
                count = valid[rows].sum(axis=0)
                total = np.add.accumulate(filled[rows], axis=0)[-1] if len(rows) \
                    else np.zeros(values.shape[1])
                value = np.where(count > 0, total / np.maximum(count, 1), np.nan)
                if share == 0:
                    value = np.zeros(values.shape[1])
                elif share is not None:
                    value = value * float(share)
                out[f"{name}[{group}]"] = np.where(some, value, np.nan)
    return out


FAMILY = Family("groups", METRICS, derive=derive, derive_columns=derive_columns)
