"""Top-k selection: absolute k or relative k (``xF``: k = ceil(F * |G|) per image)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from sgdask.errors import SettingError

DEFAULT_KS = "20,50,100,x1,x10"
#: the first position of a list that never hits (beyond every k); defined here, not beside
#: the compiled ``hits``, so that the metric declarations that name it need no numba
NEVER = 2**63 - 1


@dataclass(frozen=True)
class KSpec:
    """One k of the report: ``label`` is what metric names carry (``R@20``, ``R@x10``)."""

    label: str
    absolute: int | None = None
    factor: Fraction | None = None

    def resolve(self, n_gt_triplets: int) -> int:
        """The number of triplets to select for an image with this many GT triplets."""
        if self.absolute is not None:
            return self.absolute
        assert self.factor is not None
        return math.ceil(self.factor * n_gt_triplets)


def parse_k(text: str) -> KSpec:
    """``"50"`` -> absolute k, ``"x10"`` / ``"x0.5"`` -> relative k (exact decimal factor)."""
    token = text.strip()
    try:
        if token.startswith("x"):
            factor = Fraction(token[1:])
            if factor <= 0:
                raise ValueError
            return KSpec(label=token, factor=factor)
        value = int(token)
        if value <= 0:
            raise ValueError
        return KSpec(label=str(value), absolute=value)
    except ValueError:
        raise SettingError("ks", f"{token!r} is not a k {_look_alike(token)}(expected a "
                           "positive integer like 50 or a relative k like x1, x10, x0.5)"
                           ) from None


#: letters typed for the digits they look like (``5O`` for 50, ``l0`` for 10)
_DIGITS = str.maketrans({"O": "0", "o": "0", "l": "1", "I": "1", "X": "x"})


def _look_alike(token: str) -> str:
    """``(did you mean '50'?) `` when ``token`` is a k but for letters typed for digits."""
    fixed = token.translate(_DIGITS)
    if fixed == token:
        return ""
    try:
        parse_k(fixed)
    except SettingError:
        return ""
    return f"(did you mean {fixed!r}?) "


def parse_ks(text: str | list[str] | tuple[str, ...]) -> tuple[KSpec, ...]:
    """The ks of a comma-separated list, duplicates removed, order kept."""
    tokens = text.split(",") if isinstance(text, str) else list(text)
    specs = [parse_k(t) for t in tokens if t.strip()]
    if not specs:
        raise SettingError("ks", "no k given (expected e.g. 20,50,100,x1,x10)")
    return tuple(dict.fromkeys(specs))
