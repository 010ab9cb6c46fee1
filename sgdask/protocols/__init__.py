"""The protocol registry: named, versioned protocols (SPEC section 5), one module or package
per protocol family, each registering its protocols as it is imported.

Every result records its protocol's name and version; bump a protocol's version whenever
anything it computes changes, so that cached results computed under the old definition are
never mixed with new ones. A protocol (``sgdask.protocols.base.Protocol``) says what it
does: its per-image hit function, its inputs and metric families, its report notes.
Nothing outside this package names a protocol or reads its recorded choices
(``tests/test_protocol_plugin.py`` checks it).

Built in: ``psg`` (``singlempo``, the default, and ``multimpo``), ``sgbench`` (``sgbench``,
``sgbench2``), ``sgbpytorch``, ``oiv6`` (a package: its kernels and metrics with it),
``ag`` (Action Genome's ``ag-with``, ``ag-semi`` and ``ag-no``, a group named ``ag``). Every
module of this package is a family and is imported here: deleting one removes its
protocols. To add a protocol, write one module that calls ``register`` (or call it at run
time); docs/development.md "Add a protocol" walks through it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from sgdask.errors import Choose, SettingError
from sgdask.protocols.base import METRICS_VERSION, Protocol
from sgdask.protocols.base import recorded as _recorded

if TYPE_CHECKING:
    from sgdask.types import ImageGT, ImageHits, ImagePred

PROTOCOLS: dict[str, Protocol] = {}
#: names that stand for several protocols (``ag``: Action Genome's three constraint modes)
GROUPS: dict[str, tuple[str, ...]] = {}
#: per GT format (a store's ``gt_format``), the protocols its leaderboard ranks by default
#: when they are not the image board's
FORMAT_BOARDS: dict[str, tuple[str, ...]] = {}
_NOT_FAMILIES = frozenset({"base"})


def register(protocol: Protocol) -> Protocol:
    """Add a protocol (replacing one of the same name) with what it declares: its metric
    families join the metric registry, its inputs the metrics' needs. Returns it."""
    from sgdask import metrics

    for family in protocol.families:
        metrics.register(family)
    metrics.declare_inputs(protocol.needs, protocol.not_listed, protocol.exclusive)
    PROTOCOLS[protocol.name] = protocol
    return protocol


def unregister(name: str) -> None:
    """Remove a protocol and its metric families (its declared inputs stay: a metric
    needing them is then left out under every protocol)."""
    from sgdask import metrics

    protocol = PROTOCOLS.pop(name)
    for family in protocol.families:
        metrics.unregister(family.name)


def register_group(name: str, members: tuple[str, ...]) -> None:
    """Let ``name`` stand for the registered protocols ``members`` in a protocol list."""
    GROUPS[name] = members


def register_board(gt_format: str, members: tuple[str, ...]) -> None:
    """Let a leaderboard of a GT store of ``gt_format`` rank by ``members`` by default."""
    FORMAT_BOARDS[gt_format] = members


def get_protocols(names: str) -> tuple[Protocol, ...]:
    """Protocols of a comma-separated list (``singlempo,multimpo``; a group's name stands
    for its members), order kept."""
    given = [n.strip().lower() for n in names.split(",") if n.strip()]
    expanded = [m for n in given for m in GROUPS.get(n, (n,))]
    found = tuple(dict.fromkeys(get_protocol(n) for n in expanded))
    if not found:
        raise SettingError("protocols", "no protocol given")
    return found


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``, or a clear error listing the known ones (and the
    nearest, for a misspelt name)."""
    try:
        return PROTOCOLS[name.strip().lower()]
    except KeyError:
        raise SettingError("protocols", f"unknown protocol {name.strip()!r}",
                           fix=Choose(name.strip().lower(), tuple(sorted(PROTOCOLS)))) from None


def recorded(record: dict[str, Any]) -> Protocol:
    """The protocol a report recorded (``Report.protocol``), as ``base.recorded``."""
    return _recorded(record, PROTOCOLS)


def image_hits(gt: ImageGT, pred: ImagePred, protocol: Protocol, with_ng: bool = True,
               match_labels: bool = True, shared: dict | None = None,
               legacy: bool = True) -> ImageHits:
    """Every hit position of one image under ``protocol`` (its ``image_hits``)."""
    return protocol.image_hits(gt, pred, with_ng, match_labels, shared, legacy)


def missing_image_hits(gt: ImageGT, protocol: Protocol, with_ng: bool = True) -> ImageHits:
    """An image of the GT without prediction under ``protocol``."""
    return protocol.missing_image_hits(gt, with_ng)


def _families() -> list[str]:
    """The family modules of this package: ``psg`` (the default's) first, then by name."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in _NOT_FAMILIES)
    return sorted(names, key=lambda n: n != "psg")


for _module in _families():
    importlib.import_module(f"{__name__}.{_module}")

from sgdask.protocols.psg import BOARD_PROTOCOLS, DEFAULT_PROTOCOL  # noqa: E402

__all__ = ["BOARD_PROTOCOLS", "DEFAULT_PROTOCOL", "GROUPS", "METRICS_VERSION", "PROTOCOLS",
           "Protocol", "get_protocol", "get_protocols", "image_hits", "missing_image_hits",
           "recorded", "register", "register_group", "unregister"]


def __getattr__(name: str) -> Protocol:
    """A registered protocol by its upper-case name (``SINGLEMPO``, ``OIV6``): looked up in
    the registry, so that no family module is imported by name."""
    found = PROTOCOLS.get(name.lower())
    if found is None or not name.isupper():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found
