"""SGBench: ``sgbench`` (sgbench==1.0.0) and ``sgbench2`` (SGBench 2.0.0): exact-duplicate
removal, many-to-one matching, PRank over all cells, images without prediction left out of
the mean metrics; both print NaN for a mean over predicates that never occur."""

from __future__ import annotations

from dataclasses import dataclass

from sgdask.protocols import register
from sgdask.protocols.base import Protocol


@dataclass(frozen=True)
class SGBenchProtocol(Protocol):
    """An SGBench release: its note on predicates absent from the evaluated GT (the tool
    prints NaN for mR@k then)."""

    def notes(self, absent: int) -> list[str]:
        if absent <= 0:
            return []
        return [f"{absent} predicate class(es) never occur in the evaluated GT: "
                f"{_NAN_NOTES[self.name]} then; sgdask averages over the predicates that occur"]


_NAN_NOTES = {"sgbench": "sgbench 1.0.0 prints NaN for mR@k",
              "sgbench2": "SGBench 2.0.0 prints NaN for mR@k and mR@inf"}

SGBENCH = register(SGBenchProtocol(
    name="sgbench",
    version="1.0.0.1",  # .1: zero-area boxes match as in sgbench 1.0.0 (NaN IoU)
    normalization="dedup",
    matching="many_to_one",
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces sgbench==1.0.0: exact-duplicate removal, many-to-one matching",
    zero_area_boxes_match=True,
))

SGBENCH2 = register(SGBenchProtocol(
    name="sgbench2",
    version="2.0.0",
    normalization="dedup",
    matching="many_to_one",
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces SGBench 2.0.0 (lorjul/sgbench v2, 26bf50e): sgbench's rules, "
                "and inside the top k only the first triplet of each remapped pair counts",
    zero_area_boxes_match=True,
    first_triplet_per_remapped_pair=True,
))
