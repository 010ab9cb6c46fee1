"""What an evaluation is asked, resolved: the bootstrap's settings (``CISettings``) and one
report's view of the run (``EvalSettings``: the settings record under one protocol, and
what decides what is reported or left out)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sgdask.errors import SettingError
from sgdask.kernels.selection import KSpec, parse_ks
from sgdask.metrics import split_name
from sgdask.metrics.base import Context
from sgdask.metrics.groups import PredicateGroups
from sgdask.metrics.recall import VOCABULARY_MEANS
from sgdask.metrics.terms import inputs_of
from sgdask.protocols import Protocol

if TYPE_CHECKING:
    from sgdask.core.settings import Settings


@dataclass(frozen=True)
class CISettings:
    """``evaluate --ci LEVEL --resamples N --seed S --ci-metrics NAMES``."""

    level: float = 0.95
    resamples: int = 1000
    seed: int = 0
    metrics: str | None = None

    def check(self) -> None:
        if not 0 < self.level < 1:
            raise SettingError("ci", f"{self.level} is not a level between 0 and 1 (e.g. 0.95)")
        if self.resamples < 1:
            raise SettingError("resamples", "must be at least 1")
        if self.seed < 0:
            raise SettingError("seed", "must be >= 0")


@dataclass(frozen=True)
class EvalSettings:
    """What one report was asked to compute: the run's settings record under one of its
    protocols (decides what is reported or left out; the report's provenance). ``data``:
    what the data hold beyond lists (``sgdask.metrics.terms.inputs_of``); ``categories``:
    the category names; ``things``: the thing categories (None: the split is unknown)."""

    protocol: Protocol
    settings: Settings
    with_ng: bool
    has_stats: bool
    groups: PredicateGroups | None = None
    data: frozenset[str] = frozenset()
    categories: tuple[str, ...] = ()
    things: frozenset[int] | None = None

    def options(self) -> dict[str, Any]:
        """The evaluation options a report records next to its protocol."""
        return {"match_labels": self.match_labels, "legacy_metrics": self.legacy,
                "tau": self.settings.tau}

    @property
    def aggregation(self) -> str:
        return self.protocol.aggregation_for(self.settings.aggregation)

    @property
    def ks(self) -> tuple[KSpec, ...]:
        """The settings' ks, or the protocol's own (a protocol of one k: 50)."""
        if self.protocol.ks is not None:
            return parse_ks(self.protocol.ks)
        return self.settings.k_specs

    @property
    def legacy(self) -> bool:
        return self.settings.legacy

    @property
    def match_labels(self) -> bool:
        return self.settings.match_labels

    @property
    def inputs(self) -> set[str]:
        """What the report's metrics may need (``sgdask.metrics.base.NEEDS``): the terms'
        inputs (with what the data hold), predicate groups, per-predicate values that make a
        mean (not under the ``image`` aggregation)."""
        inputs = inputs_of(self.protocol, self.with_ng, self.has_stats, self.legacy, self.data)
        if self.groups is not None:
            inputs.add("groups")
        if self.aggregation != "image":
            inputs.add("predicate_means")
        return inputs

    def context(self, composition: dict[int, int] | None = None,
                valued: Callable[[str], Iterable[int]] | None = None,
                names: Iterable[str] = (), n_predicates: int | None = None) -> Context:
        """The derive functions' view (``valued(name)``: the predicates with a value of the
        mean metric ``name`` of ``names``, read under a protocol whose means run over the
        vocabulary; ``n_predicates``: the GT's predicate vocabulary, when known)."""
        return Context(self.ks, self.aggregation, self.settings.tau, composition,
                       None if self.groups is None else self.groups.members,
                       vocabulary_sets(self.protocol.means_over_vocabulary() and
                                       self.groups is not None, self.aggregation, valued,
                                       names), things=self.things, n_predicates=n_predicates)




def vocabulary_sets(over_vocabulary: bool, aggregation: str,
                    valued: Callable[[str], Iterable[int]] | None, names: Iterable[str]
                    ) -> dict[str, frozenset[int]] | None:
    """``Context.occurring``: when the protocol's mean metrics run over the vocabulary (not
    under the ``image`` aggregation), per such metric of ``names`` the predicates with a
    value on the data (``valued``); else None."""
    if not over_vocabulary or aggregation == "image" or valued is None:
        return None
    return {name: frozenset(valued(name)) for name in names
            if split_name(name)[0] in VOCABULARY_MEANS and split_name(name)[1] != "inf"}
