"""What every format's validation shares: a ``Problem`` (an error or a warning, as
``sgdask validate`` lists them) and what a submission is checked against (``GTInfo``: image
sizes, evaluated ids, ``ClassCounts``). Each format's own checks live in its module
(SGBench's: ``sgdask.formats.sgbench.SubmissionCheck``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from sgdask.errors import Audience, InputError

if TYPE_CHECKING:
    from sgdask.store.store import StoreReader

DEFAULT_MAX_PROBLEMS = 50
SHOWN_MISSING = 5


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a submission: an ``error`` (conversion refuses the submission)
    or a ``warning``. ``str()`` is ``severity: file: image ID: field: what (expected ...)``,
    ``render`` the same for another audience (``sgdask.errors``)."""

    error: InputError
    severity: str = "error"
    #: the same problem told without what the GT holds beyond counts (its image ids), for
    #: participants of a phase whose GT is hidden; None: the error tells nothing of it
    counted: InputError | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def told(self, hide_gt: bool) -> Problem:
        """This problem as told to someone who may (or, ``hide_gt``, may not) see the GT's
        image ids."""
        if hide_gt and self.counted is not None:
            return Problem(self.counted, self.severity)
        return self

    def render(self, audience: Audience = "api", names: Mapping[str, str] | None = None
               ) -> str:
        return f"{self.severity}: {self.error.render(audience, names)}"

    def __str__(self) -> str:
        return self.render()


@dataclass(frozen=True)
class GTInfo:
    """What a submission is checked against: image sizes, evaluated ids, class counts."""

    sizes: dict[str, tuple[int, int]]
    evaluated: frozenset[str]
    classes: ClassCounts

    @classmethod
    def of(cls, reader: StoreReader) -> GTInfo:
        images = reader.images()
        ids = images["image_id"].to_pylist()
        shapes = zip(images["height"].to_pylist(), images["width"].to_pylist(), strict=True)
        with_relations = zip(ids, images["n_graph"].to_pylist(), strict=True)
        manifest = reader.manifest
        return cls(dict(zip(ids, shapes, strict=True)),
                   frozenset(i for i, n in with_relations if n),
                   ClassCounts(len(manifest["thing_classes"]) + len(manifest["stuff_classes"]),
                               len(manifest["predicate_classes"])))


class ClassCounts(NamedTuple):
    """Sizes of the GT's class lists (thing + stuff categories, predicates)."""

    categories: int
    predicates: int
