"""The records of an evaluation: its options, its submissions and what decides the numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sgdask.accum import AGGREGATIONS
from sgdask.errors import SgdaskError
from sgdask.kernels.selection import DEFAULT_KS, KSpec
from sgdask.metrics.base import Family
from sgdask.protocols import Protocol
from sgdask.types import ZeroShot

if TYPE_CHECKING:
    from sgdask.report.intervals import CISettings

DEFAULT_PARTITION_SIZE: int | None = None  # whole GT store parts per task (task_count)


@dataclass(frozen=True)
class Submission:
    """A submission to score and the protocols to score it under (``url`` names it in
    input errors)."""

    name: str
    url: str
    protocols: tuple[Protocol, ...]
    with_ng: bool = True


@dataclass(frozen=True)
class ScoringSettings:
    """What decides every image's numbers besides its protocol (small and picklable)."""

    ks: tuple[KSpec, ...]
    zero_shot: ZeroShot | None = None
    legacy: bool = False
    match_labels: bool = True
    families: tuple[Family, ...] = ()


@dataclass(frozen=True)
class Options:
    """How to evaluate (the same for every submission of a job)."""

    ks: str = DEFAULT_KS
    aggregation: str = "per_predicate"
    partition_size: int | None = DEFAULT_PARTITION_SIZE
    stats: str | None = None
    legacy: bool = False
    tau: float = 0.5
    match_labels: bool = True
    ci: float | None = None
    resamples: int = 1000
    seed: int = 0
    ci_metrics: str | None = None

    @property
    def intervals(self) -> CISettings | None:
        """Bootstrap settings (``--ci``), None without intervals."""
        if self.ci is None:
            return None
        # imported here: the bootstrap loads scipy, which only intervals need
        from sgdask.report.intervals import CISettings

        return CISettings(self.ci, self.resamples, self.seed, self.ci_metrics)

    def check(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise SgdaskError(f"--aggregation: unknown mode {self.aggregation!r} "
                              f"(expected one of: {', '.join(AGGREGATIONS)})")
        if self.partition_size is not None and self.partition_size < 1:
            raise SgdaskError("--partition-size: must be at least 1")
        if not self.tau >= 0:
            raise SgdaskError(f"--tau: {self.tau} must be a number >= 0")
        if self.intervals is not None:
            self.intervals.check()
