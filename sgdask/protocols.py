"""Named, versioned protocols (SPEC section 5): every result records name and version.

Bump a protocol's version whenever anything it computes changes, so that cached results
computed under the old definition are never mixed with new ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sgdask.errors import SgdaskError

# Version of the metric definitions shared by all protocols (kernels, accumulators,
# aggregation). Cached results carry it: bump it when any number could change.
METRICS_VERSION = "1"


@dataclass(frozen=True)
class Protocol:
    """A bundle of evaluation choices.

    ``normalization``: ``singlempo`` | ``dedup`` | ``none``; ``matching``: ``one_to_one`` |
    ``many_to_one`` (instance mappings) | ``triplet`` (legacy triplet-level matching).
    ``missing_counts_in_means``: an image without prediction scores 0 in the mean metrics
    (else it is left out of them, as SGBench 1.0.0 does). ``prank_over_cells``: PRank is the
    mean over all defined (image, predicate) cells (SGBench) instead of following the
    aggregation mode. ``zero_area_boxes_match``: two zero-area boxes of one category match
    (SGBench 1.0.0 divides 0 by 0 and its argmax takes the NaN).
    """

    name: str
    version: str
    normalization: str
    matching: str
    missing_counts_in_means: bool
    prank_over_cells: bool
    description: str
    zero_area_boxes_match: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


SINGLEMPO = Protocol(
    name="singlempo",
    version="1.0",
    normalization="singlempo",
    matching="one_to_one",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="fair protocol: mask merge, relation dedup, graph constraint, 1:1 matching",
)

SGBENCH = Protocol(
    name="sgbench",
    version="1.0.0.1",  # .1: zero-area boxes match as in sgbench 1.0.0 (NaN IoU)
    normalization="dedup",
    matching="many_to_one",
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces sgbench==1.0.0: exact-duplicate removal, many-to-one matching",
    zero_area_boxes_match=True,
)

MULTIMPO = Protocol(
    name="multimpo",
    version="1.0",
    normalization="none",
    matching="triplet",
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="legacy OpenPSG / Neural-MOTIFS: triplet-level matching, duplicates allowed",
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (SINGLEMPO, SGBENCH, MULTIMPO)}
DEFAULT_PROTOCOL = SINGLEMPO.name


def get_protocols(names: str) -> tuple[Protocol, ...]:
    """Protocols of a comma-separated list (``singlempo,multimpo``), order kept."""
    found = tuple(dict.fromkeys(get_protocol(n) for n in names.split(",") if n.strip()))
    if not found:
        raise SgdaskError("--protocol: no protocol given")
    return found


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``, or a clear error listing the known ones."""
    try:
        return PROTOCOLS[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(PROTOCOLS))
        raise SgdaskError(f"--protocol: unknown protocol {name!r} (expected one of: {known})") \
            from None
