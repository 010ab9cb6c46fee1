"""Every problem of a submission, without converting it (``sgdask validate``), and the same
checks stopping at the first error before ``convert`` writes anything.

Order: the archive's entries (``SafeZip``), the document (size, depth, JSON, schema), each
image (schema, then semantics, GT ids and classes, its ZIP member, and for ``validate`` its
TIFF), duplicate ids; last, as a warning, the GT images the submission has no prediction for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from sgdask.errors import Audience, InputError
from sgdask.io.archive import ArchiveLimits
from sgdask.io.fs import StorageOptions
from sgdask.io.sgbench import (
    ClassCounts,
    SubmissionImage,
    SubmissionSource,
    checked_images,
    document_problems,
    duplicate_problems,
    has_ng,
    image_label,
)
from sgdask.io.store import StoreReader

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


class SubmissionCheck:
    """The checks of one submission. ``problems`` yields them lazily; as it goes, it
    collects the images that parsed (``images``) and whether any has an NG list."""

    def __init__(self, source: SubmissionSource, gt: GTInfo | None) -> None:
        self.source, self.gt = source, gt
        self.images: list[SubmissionImage] = []
        self.has_ng = False

    def problems(self, decode: bool) -> Iterator[Problem]:
        """All problems; with ``decode``, every TIFF is decoded too (else only the ZIP
        members' presence is checked: conversion tasks check the TIFFs as they read them)."""
        doc, early = self.read_document()
        if early:
            yield from map(Problem, early)
            return
        label = self.source.label
        self.has_ng = has_ng(doc)
        for image, found in checked_images(doc, label, self.source.is_zip,
                                           self.gt.classes if self.gt else None,
                                           self.source.limits):
            yield from map(Problem, found)
            if image is not None:
                yield from map(Problem, self.image_problems(image, decode))
                self.images.append(image)
        yield from map(Problem, duplicate_problems(self.images, label))
        yield from self.missing_images(doc)

    def read_document(self) -> tuple[Any, list[InputError]]:
        """(the parsed document, its top-level problems), or (None, what prevents reading
        it: an unreadable file, unsafe archive entries)."""
        try:
            if self.source.is_zip and self.source.archive().problems:
                return None, self.source.archive().problems
            doc = self.source.document()
        except InputError as err:
            return None, [err]
        return doc, document_problems(doc, self.source.label)

    def image_problems(self, image: SubmissionImage, decode: bool) -> Iterator[InputError]:
        """The GT knows the image; its TIFF is in the ZIP (and, with ``decode``, readable
        and of the right layer count and size)."""
        if self.gt is not None and image.image_id not in self.gt.sizes:
            yield InputError(self.source.label, "image id not in the ground truth's test split",
                             image=image.image_id, field="id",
                             expected="an id of the GT's test images")
            return
        name = image.seg_filename
        if name is None:
            return
        if name not in self.source.archive():
            yield InputError(f"{self.source.url}:{name}", "missing from the archive",
                             image=image.image_id, field="seg_filename")
        elif decode:
            try:
                self.source.masks(image, self.gt.sizes.get(image.image_id) if self.gt else None)
            except InputError as err:
                yield err

    def missing_images(self, doc: dict) -> Iterator[Problem]:
        """A warning naming the evaluated GT images without prediction (they score 0)."""
        if self.gt is None:
            return
        submitted = {image_label(img, i)[0] for i, img in enumerate(doc["images"])}
        missing = sorted(self.gt.evaluated - submitted)
        if not missing:
            return
        shown = ", ".join(missing[:SHOWN_MISSING]) + (", ..." if len(missing) > SHOWN_MISSING
                                                      else "")
        what = (f"{len(missing)} of {len(self.gt.evaluated)} evaluated GT images have no "
                "prediction and will score 0")
        named, counted = (InputError(self.source.label, text, field="images",
                                     expected="a prediction for every GT test image")
                          for text in (f"{what}: {shown}", what))
        yield Problem(named, "warning", counted)


def validate_submission(url: str, gt: str | None = None,
                        storage_options: StorageOptions | None = None,
                        limits: ArchiveLimits | None = None,
                        max_problems: int = DEFAULT_MAX_PROBLEMS) -> list[Problem]:
    """Every problem of a submission (up to ``max_problems``), decoding every TIFF; checked
    against a GT store when ``gt`` is given. An empty list: the submission is valid."""
    gt_info = GTInfo.of(StoreReader(gt, storage_options, "gt")) if gt else None
    try:
        source = SubmissionSource(url, storage_options, limits)
    except InputError as err:
        return [Problem(err)]
    return list(islice(SubmissionCheck(source, gt_info).problems(decode=True), max_problems))


def checked_submission(source: SubmissionSource, gt: GTInfo | None) -> SubmissionCheck:
    """The checks ``validate`` runs (TIFF contents aside), raising the first error."""
    check = SubmissionCheck(source, gt)
    first = next((p for p in check.problems(decode=False) if p.is_error), None)
    if first is not None:
        raise first.error
    return check
