"""The records of an evaluation: its settings, its submissions and what decides the numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sgdask.core.accum import AGGREGATIONS
from sgdask.errors import Choose, Option, SettingError, cli_flag
from sgdask.kernels.selection import DEFAULT_KS, KSpec, parse_ks
from sgdask.protocols import DEFAULT_PROTOCOL, Protocol, get_protocols
from sgdask.types import ZeroShot

if TYPE_CHECKING:
    from sgdask.core.plan import CISettings
    from sgdask.metrics.base import Family

DEFAULT_PARTITION_SIZE: int | None = None  # whole GT store parts per task (task_count)
#: what the calls that take one protocol (``Evaluator``, ``evaluate``) call ``protocols``
#: (their errors name it so: ``SgdaskError.renamed``)
ONE_PROTOCOL = {"protocols": "protocol"}


def _flag(name: str) -> dict[str, str]:
    """A field's metadata: its command line option (``sgdask.errors.cli_flag``, the one
    place flags are spelled)."""
    return {"flag": cli_flag(name)}


@dataclass(frozen=True)
class Submission:
    """A submission to score and the protocols to score it under (``url`` names it in
    input errors); ``data``: what it and the GT hold beyond lists (``masks`` on both
    sides, the GT's ``crowd`` flags, the ``things`` split: ``sgdask.metrics.terms``)."""

    name: str
    url: str
    protocols: tuple[Protocol, ...]
    with_ng: bool = True
    data: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ScoringSettings:
    """What decides every image's numbers besides its protocol: the settings record, the
    training statistics and the metric families (small and picklable: sent to every task)."""

    settings: Settings
    zero_shot: ZeroShot | None = None
    families: tuple[Family, ...] = ()

    @cached_property
    def ks(self) -> tuple[KSpec, ...]:
        return self.settings.k_specs

    @property
    def legacy(self) -> bool:
        return self.settings.legacy

    @property
    def match_labels(self) -> bool:
        return self.settings.match_labels


@dataclass(frozen=True)
class Settings:
    """How to evaluate: every knob with its default, like pycocotools' ``Params`` (the same
    for every submission of a job).

    The one record of an evaluation's settings: the CLI builds it once from its options, an
    ``evaluate-many`` manifest from its top-level keys (``from_mapping``), Python callers
    with keywords; ``checked()`` validates every field. Each field's CLI option is the
    ``flag`` of its metadata; ``docs/reference/api.md`` lists them (``tests/core/test_settings``
    keeps the three in step).
    """

    #: protocols to score under, comma separated (``singlempo,multimpo``); in a manifest,
    #: the default of submissions naming none
    protocols: str = field(default=DEFAULT_PROTOCOL, metadata=_flag("protocols"))
    #: the ks: integers and relative ``xF`` (F times the image's GT relations)
    ks: str = field(default=DEFAULT_KS, metadata=_flag("ks"))
    #: how per-predicate means aggregate: ``per_predicate``, ``pooled`` or ``image``
    aggregation: str = field(default="per_predicate", metadata=_flag("aggregation"))
    #: images per Dask task (None: whole GT store parts, grouped to about 256 images)
    partition_size: int | None = field(default=DEFAULT_PARTITION_SIZE,
                                       metadata=_flag("partition_size"))
    #: training statistics from ``sgdask stats`` (None: the GT store's)
    stats: str | None = field(default=None, metadata=_flag("stats"))
    #: predicate groups of mR@k[G] (JSON: group name -> predicate names; None: VG150's
    #: head/body/tail, else the training frequency in thirds)
    predicate_groups: str | None = field(default=None, metadata=_flag("predicate_groups"))
    #: also compute the legacy pair accuracy A@k
    legacy: bool = field(default=False, metadata=_flag("legacy"))
    #: wIMR's weight exponent
    tau: float = field(default=0.5, metadata=_flag("tau"))
    #: match predictions only to GT instances of the same category (SPEC section 4)
    match_labels: bool = field(default=True, metadata=_flag("match_labels"))
    #: bootstrap intervals at this level (e.g. 0.95); None: no intervals
    ci: float | None = field(default=None, metadata=_flag("ci"))
    #: with ``ci``: bootstrap resamples
    resamples: int = field(default=1000, metadata=_flag("resamples"))
    #: with ``ci``: seed of the resamples (the same for every protocol)
    seed: int = field(default=0, metadata=_flag("seed"))
    #: with ``ci``: only these metrics, comma separated (``mR@50`` or families like ``mR``)
    ci_metrics: str | None = field(default=None, metadata=_flag("ci_metrics"))

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any]) -> Settings:
        """The settings a manifest's top-level keys give (the other keys are ignored),
        checked; a ``protocols`` list is joined."""
        given = {f.name: doc[f.name] for f in fields(cls) if f.name in doc}
        if isinstance(given.get("protocols"), list):
            given["protocols"] = ",".join(str(p) for p in given["protocols"])
        return cls(**given).checked()

    def with_fields(self, **overrides: Any) -> Settings:
        """These settings with some fields replaced, checked (``TypeError`` naming an unknown
        field, with the nearest one)."""
        names = [f.name for f in fields(self)]
        for name in overrides:
            if name not in names:
                raise TypeError(f"unknown setting {name!r} "
                                f"{Choose(name, tuple(names)).render('api')}")
        ks = overrides.get("ks")
        if isinstance(ks, list | tuple):  # ks=[20, 50, "x1"], as the command line's "20,50,x1"
            overrides["ks"] = ",".join(map(str, ks))
        return replace(self, **overrides).checked()

    @property
    def protocol_list(self) -> tuple[Protocol, ...]:
        return get_protocols(self.protocols)

    @property
    def k_specs(self) -> tuple[KSpec, ...]:
        return parse_ks(self.ks)

    @property
    def intervals(self) -> CISettings | None:
        """Bootstrap settings (``--ci``), None without intervals."""
        if self.ci is None:
            return None
        # imported here: the bootstrap loads scipy, which only intervals need
        from sgdask.core.plan import CISettings

        return CISettings(self.ci, self.resamples, self.seed, self.ci_metrics)

    def checked(self) -> Settings:
        """These settings, or a one-line ``SettingError`` naming the first bad field (its
        CLI option on the command line)."""
        _check_types(self)
        protocols = get_protocols(self.protocols)  # raises on an unknown name or an empty list
        parse_ks(self.ks)  # raises on a malformed k
        for protocol in protocols:
            if protocol.ks is not None and self.ks != DEFAULT_KS:
                raise SettingError("ks", f"the {protocol.name} protocol has its own ks "
                                   f"({protocol.ks}); leave ", Option("ks"), " out")
        if self.aggregation not in AGGREGATIONS:
            raise SettingError("aggregation", f"unknown mode {self.aggregation!r}",
                               fix=Choose(self.aggregation, tuple(AGGREGATIONS)))
        if self.partition_size is not None and self.partition_size < 1:
            raise SettingError("partition_size", "must be at least 1")
        if self.predicate_groups is not None and not self.predicate_groups.strip():
            raise SettingError("predicate_groups", "an empty path (give a JSON file: group "
                               "name -> predicate names)")
        if not self.tau >= 0:
            raise SettingError("tau", f"{self.tau} must be a number >= 0")
        if self.intervals is not None:
            self.intervals.check()  # the level, resamples and seed
            from sgdask.metrics import check_metric_names  # the registry, only to check

            check_metric_names(self.ci_metrics, "ci_metrics", self.k_specs)
        elif self.ci_metrics is not None:
            raise SettingError("ci_metrics", "only with ", Option("ci", "LEVEL"))
        return self


def _check_types(settings: Settings) -> None:
    """A one-line error for a field of the wrong type (manifests and keywords give any)."""
    for f in fields(settings):
        value = getattr(settings, f.name)
        kinds = _kinds(str(f.type))
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
            expected = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
            raise SettingError(f.name, f"{value!r} is not {expected}")


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,),
                                        "float": (float, int), "None": (type(None),)}


def _kinds(annotation: str) -> tuple[type, ...]:
    """The types a field's annotation (``int | None``) admits (an int is a float too)."""
    return tuple(t for name in annotation.split(" | ") for t in _TYPES[name])


#: every setting at its default: what the command line's options default to (each default
#: spelled once, in the record)
DEFAULTS = Settings()
