"""Inputs of the kernels: plain numpy, no I/O handles, no imports beyond numpy.

The pipeline reads these from the canonical store; tests and the in-memory evaluator build
them by hand. Kernels turn the convenience forms (a dense mask stack, a GT label image) into
``BitMasks`` on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sgdask.metrics.state import StateRows

EMPTY_TRIPLETS = np.empty((0, 3), dtype=np.int64)


def as_triplets(rows: object) -> np.ndarray:
    """An (n, 3) int64 array from a list of [subject, object, predicate] rows."""
    arr = np.asarray(rows, dtype=np.int64)
    return arr.reshape(-1, 3) if arr.size else EMPTY_TRIPLETS.copy()


@dataclass
class BitMasks:
    """Instance masks as rows of 64-bit words aligned to absolute image columns
    (``sgdask.kernels.bits`` explains the layout and computes on it).

    ``boxes[i] = (y0, x0, y1, x1)`` (exclusive ends; an empty mask has a 0-size box);
    from ``words[starts[i]]`` on, the rows of mask i's box, each holding the words
    ``x0 // 64 .. (x1 - 1) // 64``; bit b of word w is column ``64 * w + b``.
    """

    shape: tuple[int, int]
    boxes: np.ndarray
    starts: np.ndarray
    words: np.ndarray

    def __len__(self) -> int:
        return len(self.boxes)

    @classmethod
    def from_dense(cls, masks: np.ndarray) -> BitMasks:
        """Word masks of a dense (n, H, W) stack (nonzero = set)."""
        from sgdask.kernels.bits import pack_dense

        masks = np.ascontiguousarray(masks)
        return cls((int(masks.shape[1]), int(masks.shape[2])), *pack_dense(masks))

    @classmethod
    def from_rows(cls, rows: np.ndarray, width: int) -> BitMasks:
        """Word masks of full-width word rows (n, H, ceil(W / 64)) of an image W wide."""
        from sgdask.kernels.bits import crop_rows

        return cls((int(rows.shape[1]), int(width)), *crop_rows(rows))

    @classmethod
    def from_panoptic(cls, rgb: np.ndarray, segment_ids: np.ndarray, n: int) -> BitMasks:
        """Word masks of the n instances of a panoptic (H, W, 3) uint8 RGB image whose
        instance i is the segment ``segment_ids[i]`` (id ``R + 256 G + 65536 B``)."""
        from sgdask.kernels.bits import panoptic_rows

        ids = np.asarray(segment_ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        return cls.from_rows(panoptic_rows(np.ascontiguousarray(rgb), ids[order], order, n),
                             rgb.shape[1])

    @classmethod
    def empty(cls, shape: tuple[int, int]) -> BitMasks:
        """No masks, on an image of this (H, W)."""
        return cls((int(shape[0]), int(shape[1])), np.zeros((0, 4), dtype=np.int64),
                   np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64))

    @classmethod
    def from_labels(cls, label_image: np.ndarray, n: int) -> BitMasks:
        """Word masks of the n instances of a label image (i + 1 = instance i, 0 = none)."""
        from sgdask.kernels.bits import pack_labels

        labels = np.asarray(label_image)
        return cls((int(labels.shape[0]), int(labels.shape[1])), *pack_labels(labels, n))

    def dense(self) -> np.ndarray:
        """The (n, H, W) boolean stack."""
        from sgdask.kernels.bits import unpack_dense

        return unpack_dense(self.boxes, self.starts, self.words, *self.shape)

    def areas(self) -> np.ndarray:
        from sgdask.kernels.bits import areas

        return areas(self.boxes, self.starts, self.words)


def as_bit_masks(masks: np.ndarray | BitMasks) -> BitMasks:
    """Accept a dense (n, H, W) stack or word masks."""
    return masks if isinstance(masks, BitMasks) else BitMasks.from_dense(masks)


@dataclass
class ImageGT:
    """Ground truth of one image.

    Masks come as ``masks`` (word masks, what the store holds) or, for hand-built inputs, a
    ``label_image`` (instance index + 1 per pixel, 0 = none); ``boxes`` are
    ``[x1, y1, x2, y2]``. ``areas`` (optional) are the masks' pixel counts, stored at ingest
    so that no evaluation counts them again. ``size``: (height, width) of the image, when
    known (protocols that clip GT boxes to the image need it). ``crowd``: per instance,
    whether it is a crowd region (psg.json's ``iscrowd``; panoptic quality ignores it);
    None where not recorded (GT stores before format version 4): no panoptic quality then.
    ``units``: the groups the image is a member of, by unit (``{"video": "v07"}``: a frame
    of video v07), which a protocol whose unit is a group resamples by.
    """

    image_id: str
    labels: np.ndarray
    relations: np.ndarray
    boxes: np.ndarray | None = None
    label_image: np.ndarray | None = None
    areas: np.ndarray | None = None
    masks: BitMasks | None = None
    size: tuple[int, int] | None = None
    crowd: np.ndarray | None = None
    units: dict[str, str] = field(default_factory=dict)

    @property
    def n_instances(self) -> int:
        return len(self.labels)

    def bit_masks(self) -> BitMasks | None:
        """The GT masks as word masks (packed from the label image on first use)."""
        if self.masks is None and self.label_image is not None:
            self.masks = BitMasks.from_labels(self.label_image, self.n_instances)
        return self.masks

    @property
    def has_masks(self) -> bool:
        return self.masks is not None or self.label_image is not None


@dataclass
class TopPredicates:
    """Each scored pair's best predicates, as Open Images V6 evaluations rank them: one row
    per (pair, place), pairs in the order of the score file (self pairs left out), each
    pair's places in a row (best first; equal scores: the lower predicate index first).

    ``subjects``, ``objects``, ``predicates``: (n,) int64; ``scores``: (n,) float32, the
    pair's score of that predicate as given (no background column); ``per_pair``: places
    per pair (2, or 1 for a vocabulary of one predicate).
    """

    subjects: np.ndarray
    objects: np.ndarray
    predicates: np.ndarray
    scores: np.ndarray
    per_pair: int = 2

    def __len__(self) -> int:
        return len(self.subjects)


@dataclass
class ImagePred:
    """A model's output for one image: instances plus the graph and no-graph triplet lists.

    ``masks`` is a boolean (n, H, W) stack (layer i = instance i) or word masks;
    ``scores`` are optional per-instance confidences (used by the singlempo mask merge);
    ``pairs``: each scored pair's best predicates (``convert --from-scores``), which the
    ``oiv6`` protocol ranks itself.
    ``segments``: (disjoint masks, their categories) that panoptic quality scores in place
    of the instances, when a format's reference segments the image otherwise (the PSG
    challenge's ``grade.py``, ``sgdask.formats.psg_challenge``); None: the instances.
    """

    image_id: str
    labels: np.ndarray
    graph: np.ndarray
    ng: np.ndarray = field(default_factory=lambda: EMPTY_TRIPLETS.copy())
    boxes: np.ndarray | None = None
    masks: np.ndarray | BitMasks | None = None
    scores: np.ndarray | None = None
    pairs: TopPredicates | None = None
    segments: tuple[BitMasks, np.ndarray] | None = None

    @property
    def n_instances(self) -> int:
        return len(self.labels)


Term = tuple[int, int]  # (numerator, denominator) of one exact per-image value


@dataclass(frozen=True)
class ZeroShot:
    """Triplet types seen in training: sorted keys (subject cat, object cat, predicate)."""

    seen: np.ndarray
    n_classes: int
    n_predicates: int

    def __post_init__(self) -> None:
        # sorted and unique once here, so that flags() (per image) is a binary search only
        seen = np.asarray(self.seen, dtype=np.int64)
        if len(seen) > 1 and not bool(np.all(seen[1:] > seen[:-1])):
            seen = np.unique(seen)  # (hand-built look-ups need not be sorted)
        object.__setattr__(self, "seen", seen)

    def key(self, subj_cat: np.ndarray, obj_cat: np.ndarray, pred: np.ndarray) -> np.ndarray:
        return (subj_cat * self.n_classes + obj_cat) * self.n_predicates + pred

    def flags(self, relations: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """True for GT triplets whose type never occurs in the training split."""
        keys = self.key(categories[relations[:, 0]], categories[relations[:, 1]],
                        relations[:, 2])
        seen = self.seen
        if len(seen) == 0:
            return np.ones(len(keys), dtype=bool)
        pos = np.minimum(np.searchsorted(seen, keys), len(seen) - 1)
        return seen[pos] != keys  # binary search: no sort of the seen types per image


@dataclass
class PanopticHits:
    """Panoptic quality's counts of one image (SPEC section 6, as COCO panopticapi's
    ``pq_compute_single_core`` counts them): per true positive its category and the
    (intersection, union) of its pair; the category of every false positive and of every
    false negative. ``overlap``: the predicted masks overlapped, so these count their
    singlempo merge (SPEC 5.1)."""

    tp_category: np.ndarray
    tp_intersection: np.ndarray
    tp_union: np.ndarray
    fp_category: np.ndarray
    fn_category: np.ndarray
    overlap: bool = False


@dataclass
class Detections:
    """An image's ranked relation candidates under ``oiv6`` (most confident first) and
    whether each is a true positive of average precision: ``predicates`` (n,) int64,
    ``scores`` (n,) float32, ``tp_rel`` / ``tp_phr`` (n,) bool (relationship: both boxes;
    phrase: the union boxes)."""

    predicates: np.ndarray
    scores: np.ndarray
    tp_rel: np.ndarray
    tp_phr: np.ndarray

    def __len__(self) -> int:
        return len(self.predicates)


@dataclass
class ImageHits:
    """What one image under one protocol gives the metric families.

    Positions are 0-based list positions (``NEVER`` = int64 max when nothing hits);
    arrays over GT triplets follow ``relations`` (the image's GT triplets as a set), over
    GT pairs the distinct pairs in order of first occurrence. A field is None when its
    input is absent: no NG list (``ng_first``, ``imr_first``, ``prank``), no instance
    mapping (``prank`` and ``legacy_first`` under multimpo).

    - ``graph_first`` / ``ng_first``: first hit in the graph / NG list;
    - ``pair_first``: first graph entry on each GT pair (any predicate);
    - ``imr_first``: the NG first hit counted among entries of the same predicate;
    - ``prank``: rank of each GT triplet among its pair's distinct NG predicates, -1 if not
      found;
    - ``legacy_first``: first hit among graph entries on GT pairs (legacy A@k);
    - ``matched_gt``: GT instances some prediction matched;
    - ``zero_shot``: GT triplets of a type never seen in training (None without statistics);
    - ``panoptic``: panoptic quality's counts (None without masks on both sides, or a GT
      that does not record ``iscrowd``); the same under every protocol.
    - ``detections``: under ``oiv6``, the image's ranked candidates with their true-positive
      flags (``graph_first`` is then the first candidate hitting each GT triplet).
    """

    image_id: str
    missing: bool
    relations: np.ndarray
    gt_labels: np.ndarray
    matched_gt: np.ndarray
    graph_first: np.ndarray
    pair_first: np.ndarray
    ng_first: np.ndarray | None = None
    imr_first: np.ndarray | None = None
    prank: np.ndarray | None = None
    legacy_first: np.ndarray | None = None
    zero_shot: np.ndarray | None = None
    diagnostics: dict[str, int] = field(default_factory=dict)
    panoptic: PanopticHits | None = None
    detections: Detections | None = None

    @property
    def n_gt_triplets(self) -> int:
        return len(self.relations)

    @property
    def predicates(self) -> np.ndarray:
        return self.relations[:, 2]


@dataclass
class ImageResult:
    """What one image adds to the accumulators: exact rational terms, never rounded floats.

    ``image_terms``: image-level metrics (``R@20``, ``InstR``...) -> (numerator, denominator);
    ``predicate_terms``: mean metrics (``mR@20``, ``PRank``...) -> predicate -> term;
    ``ratio_terms``: metrics summed over the dataset before dividing (legacy ``A@k``).
    ``skipped``: left out of every metric by the protocol (an image without relation
    proposals under ``sgbpytorch``); only its diagnostics count. ``states``: rows of
    families' declared states (``sgdask.metrics.state.StateRows``).
    """

    image_id: str
    missing: bool
    n_gt_triplets: int
    gt_per_predicate: dict[int, int] = field(default_factory=dict)
    image_terms: dict[str, Term] = field(default_factory=dict)
    predicate_terms: dict[str, dict[int, Term]] = field(default_factory=dict)
    ratio_terms: dict[str, Term] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    states: list[StateRows] = field(default_factory=list)
