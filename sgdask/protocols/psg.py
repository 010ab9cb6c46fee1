"""The PSG protocols: ``singlempo`` (the fair protocol, the default) and ``multimpo`` (the
legacy OpenPSG / Neural-MOTIFS evaluation). Both are plain ``Protocol`` data."""

from __future__ import annotations

from sgdask.protocols import register
from sgdask.protocols.base import Protocol

SINGLEMPO = register(Protocol(
    name="singlempo",
    version="1.0",
    normalization="singlempo",
    matching="one_to_one",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="fair protocol: mask merge, relation dedup, graph constraint, 1:1 matching",
))

MULTIMPO = register(Protocol(
    name="multimpo",
    # 2.0: mR@k and mNgR@k over every predicate of the vocabulary, as OpenPSG prints them
    # (1.0 averaged the occurring predicates; that mean is now a diagnostic)
    version="2.0",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="legacy OpenPSG / Neural-MOTIFS: triplet-level matching, duplicates allowed",
    mean_over_vocabulary=True,
))

#: the protocol of a setting that names none
DEFAULT_PROTOCOL = SINGLEMPO.name
#: the leaderboard's protocols: the ranking one, then the legacy one its delta column shows
BOARD_PROTOCOLS = (SINGLEMPO.name, MULTIMPO.name)
