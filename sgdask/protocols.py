"""Named, versioned protocols (SPEC section 5): every result records name and version.

Bump a protocol's version whenever anything it computes changes, so that cached results
computed under the old definition are never mixed with new ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sgdask.errors import SgdaskError


@dataclass(frozen=True)
class Protocol:
    """A bundle of evaluation choices.

    ``missing_counts_in_means``: an image without prediction scores 0 in the mean metrics
    (else it is left out of them, as SGBench 1.0.0 does). ``prank_over_cells``: PRank is the
    mean over all defined (image, predicate) cells (SGBench) instead of following the
    aggregation mode.
    """

    name: str
    version: str
    normalization: str
    one_to_one: bool
    missing_counts_in_means: bool
    prank_over_cells: bool
    description: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


SINGLEMPO = Protocol(
    name="singlempo",
    version="1.0",
    normalization="singlempo",
    one_to_one=True,
    missing_counts_in_means=True,
    prank_over_cells=False,
    description="fair protocol: mask merge, relation dedup, graph constraint, 1:1 matching",
)

SGBENCH = Protocol(
    name="sgbench",
    version="1.0.0",
    normalization="dedup",
    one_to_one=False,
    missing_counts_in_means=False,
    prank_over_cells=True,
    description="reproduces sgbench==1.0.0: exact-duplicate removal, many-to-one matching",
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (SINGLEMPO, SGBENCH)}
DEFAULT_PROTOCOL = SINGLEMPO.name


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``, or a clear error listing the known ones."""
    try:
        return PROTOCOLS[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(PROTOCOLS))
        raise SgdaskError(f"--protocol: unknown protocol {name!r} (expected one of: {known})") \
            from None
