"""The in-memory evaluator: ``update`` per image, ``compute`` a Report, ``merge`` shards.

For a training loop: predictions and ground truth are arrays in memory, so nothing is
written. Each image runs the core's per-image path, the one the pipeline's tasks run
(``sgdask.core.image.hits_under``: normalize, match, select, remap), its hits are scored in
batches by the families' vectorized terms (``sgdask.core.partition.term_blocks``) and
folded into the core's partition result (``sgdask.core.result.PartitionResult``: exact
accumulators, per-image rows, per-image terms); ``compute`` builds the report as the
pipeline does (``sgdask.core.finalize.report_of``). Hence the same numbers, to the last
bit, as ``sgdask evaluate`` on the same data, whatever the order of ``update`` calls and
merges. Nothing here imports Dask, pyarrow or zarr (tested).

Inputs mirror what ``sgdask.store.partition`` reads from a store:

- ``gt``: ``relations`` (R x 3: subject, object, predicate), ``categories`` (N), and
  ``labels`` (an H x W label image: -1 void, value i = instance i) or ``boxes`` (N x 4,
  ``[x1, y1, x2, y2]``), or both; optional ``iscrowd`` (N booleans: crowd regions, which
  panoptic quality ignores; default none);
- ``pred``: ``categories`` (M), ``triplets`` (the graph list, ranked), optional
  ``ng_triplets`` and ``scores`` (M instance scores), and ``masks`` (M x H x W booleans)
  or ``boxes`` (M x 4); ``None``: the model gave nothing for the image.

Each field is a numpy array or anything with ``__array__`` or ``.numpy()`` (torch tensors
are detached and moved to the CPU first, without importing torch); ``gt`` and ``pred`` are
mappings or objects with those attributes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from sgdask.core.accum import Accumulator, KeyedSums, RationalSum
from sgdask.core.finalize import report_of
from sgdask.core.image import hits_under
from sgdask.core.partition import term_blocks
from sgdask.core.plan import EvalSettings
from sgdask.core.result import PartitionResult
from sgdask.core.settings import ONE_PROTOCOL, ScoringSettings, Settings, Submission
from sgdask.errors import InputError, SettingError, SgdaskError
from sgdask.io.triplets import EVALUATOR, row_problems
from sgdask.metrics import FAMILIES, available, metric_of
from sgdask.metrics.groups import PredicateGroups, default_groups
from sgdask.metrics.state import rows_of_plain
from sgdask.metrics.terms import inputs_of, with_zero_shot
from sgdask.protocols import get_protocol
from sgdask.report import Report
from sgdask.stats.table import TermTable
from sgdask.types import ImageGT, ImageHits, ImagePred, ZeroShot

SOURCE = "sgdask.Evaluator"
STATE_FORMAT = "sgdask.Evaluator/2"  # 2: things, all_masks (panoptic quality)
KEY = (SOURCE, "")  # the one (submission, protocol) key of the partition result
BATCH = 64  # hits scored together (the families' vectorized terms)
#: the settings an evaluator's state carries besides its protocol and ks
_STATE_FIELDS = ("aggregation", "tau", "legacy", "match_labels")
COUNTS = ("gt_images", "evaluated_images", "gt_images_without_relations",
          "submission_images", "submission_images_not_evaluated")


class EvaluatorInputError(InputError, ValueError):
    """Bad input to ``Evaluator.update``: names the image and the field."""


def fail(image_id: str, where: str, what: str, expected: str | None = None
         ) -> EvaluatorInputError:
    return EvaluatorInputError(SOURCE, what, image=image_id, field=where, expected=expected)


# --------------------------------------------------------------------------- inputs


def get_field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else ``obj.name``; None when absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def as_array(value: Any, image_id: str, where: str) -> np.ndarray:
    """A numpy array of a field: numpy as is, a tensor through ``detach().cpu().numpy()``
    (whichever of those it has), anything else through ``np.asarray``."""
    if isinstance(value, np.ndarray):
        return value
    for step in ("detach", "cpu", "numpy"):
        method = getattr(value, step, None)
        if callable(method):
            value = method()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as err:
        raise fail(image_id, where, f"not an array ({type(value).__name__}: {err})") from None


def integers(arr: np.ndarray, image_id: str, where: str) -> np.ndarray:
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise fail(image_id, where, f"dtype {arr.dtype}", "integers")
    return arr.astype(np.int64, copy=False)


def vector(obj: Any, name: str, image_id: str, where: str, required: bool = True
           ) -> np.ndarray | None:
    """A 1-d field (None when absent and not required)."""
    value = get_field(obj, name)
    if value is None:
        if required:
            raise fail(image_id, where, "missing")
        return None
    arr = as_array(value, image_id, where)
    if arr.ndim != 1:
        raise fail(image_id, where, f"shape {arr.shape}", "a 1-d array")
    return arr


def category_vector(obj: Any, image_id: str, where: str, n_classes: int) -> np.ndarray:
    cats = integers(vector(obj, "categories", image_id, where), image_id, where)
    if len(cats) and (cats.min() < 0 or cats.max() >= n_classes):
        bad = cats[(cats < 0) | (cats >= n_classes)][0]
        raise fail(image_id, where, f"category {bad} out of range",
                   f"0..{n_classes - 1} (the classes given)")
    return cats


def _checked_triplets(obj: Any, name: str, image_id: str, where: str, n: int,
                      n_predicates: int, required: bool, pred: bool) -> np.ndarray | None:
    """An (R, 3) integer field with subject and object in 0..n-1 (and different, in a
    prediction: the submission format forbids a triplet on one instance) and predicates in
    range."""
    value = get_field(obj, name)
    if value is None:
        if required:
            raise fail(image_id, where, "missing")
        return None
    arr = integers(as_array(value, image_id, where), image_id, where)
    if arr.size == 0:
        return np.empty((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise fail(image_id, where, f"shape {arr.shape}", "R x 3: subject, object, predicate")
    for p in row_problems(arr, n, n_predicates, EVALUATOR, distinct=pred):
        raise fail(image_id, f"{where}[{p.row}]", p.what, p.expected)
    return np.ascontiguousarray(arr)


def box_rows(obj: Any, image_id: str, where: str, n: int) -> np.ndarray | None:
    value = get_field(obj, "boxes")
    if value is None:
        return None
    arr = as_array(value, image_id, where)
    if arr.size == 0 and n == 0:
        return np.empty((0, 4), dtype=np.float64)
    if arr.ndim != 2 or arr.shape != (n, 4):
        raise fail(image_id, where, f"shape {arr.shape}", f"({n}, 4): one [x1, y1, x2, y2] "
                   "per instance")
    if arr.dtype.kind not in "iuf" or not np.isfinite(arr).all():
        raise fail(image_id, where, "not finite numbers", "[x1, y1, x2, y2] in pixels")
    return arr.astype(np.float64)


def gt_image(image_id: str, gt: Any, n_classes: int, n_predicates: int) -> ImageGT:
    """The ``ImageGT`` of an update's ground truth (as ``sgdask.store.partition`` reads one
    from a store: categories, relations as given, boxes, the label image)."""
    if gt is None:
        raise fail(image_id, "gt", "missing")
    cats = category_vector(gt, image_id, "gt.categories", n_classes)
    n = len(cats)
    relations = _checked_triplets(gt, "relations", image_id, "gt.relations", n, n_predicates,
                                  required=True, pred=False)
    boxes = box_rows(gt, image_id, "gt.boxes", n)
    label_image = None
    value = get_field(gt, "labels")
    if value is not None:
        labels = integers(as_array(value, image_id, "gt.labels"), image_id, "gt.labels")
        if labels.ndim != 2 or 0 in labels.shape:
            raise fail(image_id, "gt.labels", f"shape {labels.shape}",
                       "an H x W label image: -1 void, value i = instance i")
        if labels.min() < -1 or labels.max() >= n:
            bad = labels[(labels < -1) | (labels >= n)].flat[0]
            raise fail(image_id, "gt.labels", f"label {bad} out of range",
                       f"-1 (void) or an instance index 0..{n - 1}")
        label_image = labels + 1  # sgdask's kernels: 0 = none, i + 1 = instance i
    if boxes is None and label_image is None:
        raise fail(image_id, "gt", "neither labels nor boxes",
                   "labels (H x W) or boxes (N x 4)")
    return ImageGT(image_id, cats, relations, boxes, label_image,
                   crowd=_crowd_flags(gt, image_id, n))


def _crowd_flags(gt: Any, image_id: str, n: int) -> np.ndarray:
    """The GT's ``iscrowd`` (N booleans or 0/1 integers; absent: no crowd region)."""
    value = vector(gt, "iscrowd", image_id, "gt.iscrowd", required=False)
    if value is None:
        return np.zeros(n, dtype=bool)
    if len(value) != n or not (value.dtype == bool or (value.dtype.kind in "iu" and (
            value.size == 0 or (value.min() >= 0 and value.max() <= 1)))):
        raise fail(image_id, "gt.iscrowd", f"{len(value)} values of dtype {value.dtype}",
                   f"{n} booleans, one per instance")
    return value.astype(bool)


def pred_image(image_id: str, pred: Any, gt: ImageGT, n_classes: int, n_predicates: int
               ) -> tuple[ImagePred, bool]:
    """The ``ImagePred`` of an update's prediction and whether it has an NG list."""
    cats = category_vector(pred, image_id, "pred.categories", n_classes)
    n = len(cats)
    graph = _checked_triplets(pred, "triplets", image_id, "pred.triplets", n, n_predicates,
                              required=True, pred=True)
    ng = _checked_triplets(pred, "ng_triplets", image_id, "pred.ng_triplets", n, n_predicates,
                           required=False, pred=True)
    scores = vector(pred, "scores", image_id, "pred.scores", required=False)
    if scores is not None:
        if len(scores) != n or scores.dtype.kind not in "iuf" or not np.isfinite(scores).all():
            raise fail(image_id, "pred.scores", f"{len(scores)} values of dtype {scores.dtype}",
                       f"{n} finite numbers, one per instance")
        scores = scores.astype(np.float64)
    boxes = box_rows(pred, image_id, "pred.boxes", n)
    masks = pred_masks(image_id, pred, gt, n)
    if masks is None and boxes is None:
        raise fail(image_id, "pred", "neither masks nor boxes",
                   "masks (N x H x W) or boxes (N x 4)")
    if masks is not None and gt.label_image is None:
        raise fail(image_id, "pred.masks", "masks, but the GT of the image has no labels",
                   "GT labels (H x W) to match masks against")
    if masks is None and gt.boxes is None:
        raise fail(image_id, "pred.boxes", "boxes, but the GT of the image has no boxes",
                   "GT boxes (N x 4) to match boxes against")
    empty = np.empty((0, 3), dtype=np.int64)
    return (ImagePred(image_id, cats, graph, empty if ng is None else ng, boxes, masks,
                      scores), ng is not None)


def pred_masks(image_id: str, pred: Any, gt: ImageGT, n: int) -> Any:
    """Word masks of the predicted (n, H, W) boolean stack (None without masks)."""
    from sgdask.types import BitMasks

    value = get_field(pred, "masks")
    if value is None:
        return None
    masks = as_array(value, image_id, "pred.masks")
    shape = None if gt.label_image is None else gt.label_image.shape
    expected = f"({n}, H, W)" if shape is None else f"({n}, {shape[0]}, {shape[1]})"
    if masks.ndim != 3 or masks.shape[0] != n or (shape and masks.shape[1:] != shape):
        raise fail(image_id, "pred.masks", f"shape {masks.shape}",
                   f"{expected}: one mask per instance, the GT image's size")
    if masks.dtype != bool:
        if masks.dtype.kind not in "iu" or (masks.size and (masks.min() < 0
                                                            or masks.max() > 1)):
            raise fail(image_id, "pred.masks", f"dtype {masks.dtype}",
                       "booleans (threshold soft masks first, e.g. masks > 0.5)")
        masks = masks.astype(bool)
    return BitMasks.from_dense(masks)


def id_text(image_id: Any) -> str:
    """An image id as text: a 0-d tensor or numpy scalar by its value (``5``, not
    ``tensor(5)``)."""
    item = getattr(image_id, "item", None)
    if callable(item) and not isinstance(image_id, str | bytes):
        image_id = item()
    return str(image_id)


# --------------------------------------------------------------------------- statistics


def _stats_table(stats: Any) -> Any:
    """The training statistics table (pyarrow) of ``stats``: None, a statistics file URL
    (``sgdask stats``), its table, or a parsed psg.json (its ``train_image_ids``)."""
    if stats is None:
        return None
    from sgdask.store.training_stats import read_stats, train_stats

    if isinstance(stats, str):
        table = read_stats(stats)
    elif isinstance(stats, Mapping):
        table = train_stats(stats, "stats")
    elif hasattr(stats, "column_names"):
        table = stats
    else:
        raise SgdaskError(f"stats: {type(stats).__name__} (expected a statistics file URL, "
                          "its pyarrow table or a parsed psg.json)")
    return table


def _zero_shot_and_composition(table: Any, n_classes: int, n_predicates: int
                               ) -> tuple[ZeroShot | None, dict[int, int] | None]:
    """Zero-shot look-up and wIMR composition counts from a statistics table (None
    without one)."""
    if table is None:
        return None, None
    from sgdask.store.training_stats import composition_counts, zero_shot_from

    return zero_shot_from(table, n_classes, n_predicates), composition_counts(table)


def _predicate_groups(settings: Settings, predicates: list[str], table: Any
                      ) -> PredicateGroups | None:
    """The groups of mR@k[G]: the settings' groups file, else the default split (VG150's,
    else the statistics ``table``'s training frequency in thirds), else None."""
    if settings.predicate_groups is not None:
        from sgdask.io.predicate_groups import read_groups

        return read_groups(settings.predicate_groups, predicates)
    if table is None:
        return default_groups(predicates, None)
    from sgdask.store.training_stats import predicate_counts

    return default_groups(predicates, predicate_counts(table))


def names_of(value: Sequence[str] | int, what: str) -> list[str]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [str(i) for i in range(value)]
    names = [str(v) for v in value]
    if not names:
        raise SettingError(what, f"Evaluator needs the {what}' names (or their number)")
    return names


#: settings fields the Evaluator has no use for, and why: given to it, they are refused
#: rather than ignored
IGNORED_FIELDS = {
    "partition_size": "not used by Evaluator (it scores the images given to update(); "
                      "sgdask.evaluate partitions stores)",
    "ci": "not used by Evaluator (bootstrap intervals: sgdask.evaluate(..., ci=LEVEL) on "
          "stores)",
    "resamples": "not used by Evaluator (bootstrap intervals: sgdask.evaluate)",
    "seed": "not used by Evaluator (bootstrap intervals: sgdask.evaluate)",
    "ci_metrics": "not used by Evaluator (bootstrap intervals: sgdask.evaluate)",
}


# --------------------------------------------------------------------------- the evaluator


class Evaluator:
    """Scores images held in memory: ``update`` per image, ``compute`` the Report,
    ``merge`` other evaluators (data-parallel ranks), ``state`` / ``from_state`` to send it.

    ``protocol``: one protocol name (``sgdask.protocols.PROTOCOLS``); ``ks``: as ``--k`` (a
    string like ``"20,50,100,x1"`` or a list);
    ``predicates`` and ``classes``: the names (or the number) of predicate and instance
    classes; ``stats``: training statistics for the zero-shot metrics and wIMR (a
    statistics file URL from ``sgdask stats``, its pyarrow table, or a parsed psg.json with
    ``train_image_ids``); ``things``: the first ``things`` classes are things, the others
    stuff (as psg.json numbers them), for PQ_th and PQ_st (None: unknown). Panoptic quality
    is computed when every image has GT labels and predicted masks (or no prediction).
    ``settings``: the settings record (``sgdask.core.settings.Settings``) the rest
    defaults to; other keywords override its fields, as ``evaluate``'s (``aggregation``,
    ``tau``, ``legacy``, ``match_labels``; partition and interval fields do not apply, and
    are refused with a ``ValueError`` when given). Missing ``predicates`` or ``classes``:
    a ``ValueError`` too.
    """

    def __init__(self, protocol: str | None = None, ks: str | Sequence[Any] | None = None,
                 predicates: Sequence[str] | int = (), classes: Sequence[str] | int = (),
                 stats: Any = None, *, settings: Settings | None = None,
                 things: int | None = None, **fields: Any) -> None:
        for name in IGNORED_FIELDS:
            if name in fields:
                raise SettingError(name, IGNORED_FIELDS[name])
        given = {"protocols": protocol,
                 "ks": ks if ks is None or isinstance(ks, str) else ",".join(map(str, ks))}
        try:
            self.options = (settings or Settings()).with_fields(
                **{name: value for name, value in given.items() if value is not None},
                **fields)
        except SettingError as err:
            if protocol is None:
                raise
            raise err.renamed(ONE_PROTOCOL) from None  # named as this call's argument
        protocols = self.options.protocol_list
        if len(protocols) != 1:
            raise SgdaskError(f"Evaluator: one protocol, not {self.options.protocols!r}")
        self.protocol, self.ks = protocols[0], self.options.k_specs
        refusal = self.protocol.evaluator_refusal()
        if refusal is not None:
            raise SgdaskError("Evaluator: ", *refusal)
        self.predicates = names_of(predicates, "predicates")
        self.classes = names_of(classes, "classes")
        if things is not None and not (isinstance(things, int) and not isinstance(things, bool)
                                       and 0 <= things <= len(self.classes)):
            raise SgdaskError(f"Evaluator: things={things!r} (expected the number of thing "
                              f"classes, 0..{len(self.classes)})")
        self.things = things
        table = _stats_table(self.options.stats if stats is None else stats)
        self.zero_shot, self.composition = _zero_shot_and_composition(
            table, len(self.classes), len(self.predicates))
        self.groups = _predicate_groups(self.options, self.predicates, table)
        self.reset()

    def reset(self) -> None:
        """Forget every image (the settings stay)."""
        self._result = PartitionResult()
        self._pending: list[ImageHits] = []
        self._ids: set[str] = set()
        self._counts = dict.fromkeys(COUNTS, 0)
        self._any_ng = False
        self._all_masks = True  # every image so far: GT labels, predicted masks or none

    @property
    def _scoring(self) -> ScoringSettings:
        return ScoringSettings(self.options, self.zero_shot, tuple(FAMILIES))

    @property
    def _submission(self) -> Submission:
        """The images updated, as one submission with an NG list (``compute`` leaves the
        NG metrics out when no prediction had one)."""
        return Submission(SOURCE, SOURCE, (self.protocol,), True)

    def __len__(self) -> int:
        """Images updated so far (with and without relations)."""
        return len(self._ids)

    # ------------------------------------------------------------------ update

    def update(self, image_id: Any, gt: Any, pred: Any) -> None:
        """Score one image (``pred`` None: the model gave nothing for it) and fold it in.

        ``image_id``: any value; its text is the id (a 0-d tensor or numpy scalar: its
        value's text).

        An image without GT relations is counted but not evaluated, as by ``sgdask
        evaluate``. Raises ``EvaluatorInputError`` (a ``ValueError``) naming the image and
        the field for malformed input; the evaluator is then unchanged.
        """
        image_id = id_text(image_id)
        if image_id in self._ids:
            raise fail(image_id, "image_id", "updated twice", "each image once")
        n_classes, n_predicates = len(self.classes), len(self.predicates)
        image_gt = gt_image(image_id, gt, n_classes, n_predicates)
        image_pred, has_ng = (None, False) if pred is None else pred_image(
            image_id, pred, image_gt, n_classes, n_predicates)
        evaluated = len(image_gt.relations) > 0
        if evaluated:
            hits = hits_under(image_gt, image_pred, self.protocol, self._submission,
                              self._scoring, {})
            self._pending.append(with_zero_shot(hits, self.zero_shot))
        self._ids.add(image_id)
        self._any_ng |= has_ng
        self._all_masks &= image_gt.label_image is not None and (
            image_pred is None or image_pred.masks is not None)
        counts = self._counts
        counts["gt_images"] += 1
        counts["evaluated_images" if evaluated else "gt_images_without_relations"] += 1
        if image_pred is not None:
            counts["submission_images"] += 1
            counts["submission_images_not_evaluated"] += not evaluated
        if len(self._pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        """Score the pending hits (one vectorized pass) and fold them into the result."""
        if not self._pending:
            return
        hits, self._pending = self._pending, []
        self._result.add(KEY, hits, term_blocks(hits, self.protocol, True, self._scoring,
                                                self._data(True)))

    def _data(self, masks: bool) -> frozenset[str]:
        """What the images hold beyond lists (``sgdask.metrics.terms.inputs_of``): the GT's
        crowd flags (given or none), the thing split when known, masks when ``masks``."""
        return frozenset({"crowd", *(("things",) if self.things is not None else ()),
                          *(("masks",) if masks else ())})

    # ------------------------------------------------------------------ merge, compute

    def merge(self, other: Evaluator) -> Evaluator:
        """Fold another evaluator's images into this one (returns self). Both must have
        the same settings and disjoint images."""
        if not same_settings(self.settings(), other.settings()):
            raise SgdaskError("Evaluator.merge: the evaluators have different settings "
                              "(protocol, ks, classes, predicates, statistics or options)")
        both = self._ids & other._ids
        if both:
            raise SgdaskError(f"Evaluator.merge: image {min(both)} is in both evaluators "
                              f"({len(both)} such image(s))")
        self._flush()
        other._flush()
        self._result = self._result.merged(other._result)
        self._ids |= other._ids
        self._any_ng |= other._any_ng
        self._all_masks &= other._all_masks
        for key in COUNTS:
            self._counts[key] += other._counts[key]
        return self

    def compute(self) -> Report:
        """The Report of every image so far: what ``sgdask evaluate`` gives on the same
        data (``metrics``, ``per_predicate``, ``per_image``, ``diagnostics``...)."""
        self._flush()
        if not self._counts["evaluated_images"]:
            raise SgdaskError("Evaluator.compute: no updated image has a GT relation: "
                              "nothing to evaluate")
        result = (self._result if self._any_ng else
                  without_ng(self._result, self.protocol, self.options.legacy))
        settings = EvalSettings(
            self.protocol, self.options, self._any_ng, self.zero_shot is not None,
            self.groups, self._data(self._all_masks), tuple(self.classes),
            None if self.things is None else frozenset(range(self.things)))
        manifest = {"source": SOURCE, "content_hash": None,
                    "predicate_classes": list(self.predicates)}
        return Report.of(report_of(result, KEY, settings, self.composition, manifest,
                                   {"source": SOURCE, "content_hash": None},
                                   dict(self._counts)))

    # ------------------------------------------------------------------ state

    def settings(self) -> dict[str, Any]:
        """What decides the numbers (JSON-able but for the statistics' arrays)."""
        stats = None
        if self.zero_shot is not None:
            stats = {"seen": self.zero_shot.seen,
                     "composition": sorted([int(p), int(n)]
                                           for p, n in (self.composition or {}).items())}
        return {"protocol": self.protocol.name, "protocol_version": self.protocol.version,
                "ks": ",".join(k.label for k in self.ks),
                **{name: getattr(self.options, name) for name in _STATE_FIELDS},
                "predicates": list(self.predicates), "classes": list(self.classes),
                "things": self.things, "stats": stats,
                "groups": None if self.groups is None else self.groups.as_dict()}

    def state(self) -> dict[str, Any]:
        """Everything this evaluator holds as plain data: dicts, lists, strings, numbers
        and numpy arrays (nothing that needs unpickling), for ``from_state``."""
        self._flush()
        acc = self._result.accumulators.get(KEY, Accumulator())
        tables = self._result.terms.get(KEY, [])
        return {"format": STATE_FORMAT, "settings": self.settings(),
                "counts": dict(self._counts), "any_ng": self._any_ng,
                "all_masks": self._all_masks,
                "image_ids": sorted(self._ids), "accumulator": accumulator_state(acc),
                "images": [plain(row) for row in self._result.images.get(KEY, [])],
                "terms": terms_state(TermTable.concat(tables)) if tables else None}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Evaluator:
        """The evaluator ``state()`` described."""
        if state.get("format") != STATE_FORMAT:
            raise SgdaskError(f"Evaluator.from_state: format {state.get('format')!r} "
                              f"(expected {STATE_FORMAT!r})")
        s = state["settings"]
        protocol = get_protocol(s["protocol"])
        if protocol.version != s["protocol_version"]:
            raise SgdaskError(f"Evaluator.from_state: protocol {protocol.name} version "
                              f"{s['protocol_version']} (this sgdask has {protocol.version})")
        out = cls(s["protocol"], s["ks"], s["predicates"], s["classes"], None,
                  things=s["things"], **{name: s[name] for name in _STATE_FIELDS})
        if s["stats"] is not None:
            out.zero_shot = ZeroShot(np.asarray(s["stats"]["seen"], dtype=np.int64),
                                     len(out.classes), len(out.predicates))
            out.composition = {int(p): int(n) for p, n in s["stats"]["composition"]}
        out.groups = PredicateGroups.from_dict(s.get("groups") or {})
        out._counts = {key: int(state["counts"][key]) for key in COUNTS}
        out._any_ng = bool(state["any_ng"])
        out._all_masks = bool(state["all_masks"])
        out._ids = {str(i) for i in state["image_ids"]}
        if state["terms"] is not None:
            out._result = PartitionResult(
                {KEY: accumulator_of(state["accumulator"])}, {KEY: list(state["images"])},
                [], {}, {KEY: [terms_of(state["terms"])]})
        return out


# --------------------------------------------------------------------------- helpers


def without_ng(result: PartitionResult, protocol: Any, legacy: bool) -> PartitionResult:
    """The result without the metrics that need an NG list (no prediction had one: the
    evaluation then has no NG list, as a submission without ``ng_triplets``)."""
    acc, rows = result.accumulators[KEY], result.images[KEY]
    terms = TermTable.concat(result.terms[KEY])
    inputs = inputs_of(protocol, False, True, legacy)
    drop = {n for n in acc.names if (m := metric_of(n)) is not None
            and available(m, inputs) is not None}
    acc = replace(acc, kinds={n: k for n, k in acc.kinds.items() if n not in drop})
    rows = [{k: v for k, v in row.items() if k not in drop} for row in rows]
    keep_names = [n for n in terms.names if n not in drop]
    codes = np.array([keep_names.index(n) if n in keep_names else -1 for n in terms.names]
                     or [0], dtype=np.int32)
    keep = codes[terms.metric] >= 0 if len(terms.metric) else np.zeros(0, dtype=bool)
    terms = TermTable(terms.image_ids, keep_names,
                      [terms.kinds[terms.names.index(n)] for n in keep_names],
                      terms.image[keep], codes[terms.metric[keep]], terms.predicate[keep],
                      terms.num[keep], terms.den[keep])
    return PartitionResult({KEY: acc}, {KEY: rows}, terms={KEY: [terms]})


def same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two evaluators' settings are equal (the statistics' arrays compared as
    arrays)."""
    def key(s: dict[str, Any]) -> dict[str, Any]:
        stats = s["stats"]
        return {**s, "stats": None if stats is None else
                {**stats, "seen": np.asarray(stats["seen"]).tolist()}}

    return key(a) == key(b)


def plain(value: Any) -> Any:
    """numpy scalars as Python values, recursively (JSON-able rows)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


# the accumulator's tables and their (key, value) widths
SUMS = {"image_sums": (2, 2), "ratio_sums": (1, 2), "cell_sums": (3, 2), "cell_totals": (2, 2),
        "image_means": (2, 2), "gt_counts": (1, 1)}


def accumulator_state(acc: Accumulator) -> dict[str, Any]:
    out: dict[str, Any] = {"names": list(acc.names), "kinds": dict(acc.kinds),
                           "diagnostics": {k: int(v) for k, v in acc.diagnostics.items()}}
    for name in SUMS:
        sums: KeyedSums = getattr(acc, name)
        out[name] = {"keys": sums.keys, "values": sums.values}
    out["big_image_means"] = [[int(code), [[int(d), int(n)] for d, n in
                                           total.by_denominator.items()], int(total.count)]
                              for code, total in acc.big_image_means.items()]
    out["states"] = {name: rows.plain() for name, rows in acc.states.items()}
    return out


def accumulator_of(state: Mapping[str, Any]) -> Accumulator:
    sums = {}
    for name, (n_keys, n_values) in SUMS.items():
        keys = np.asarray(state[name]["keys"], dtype=np.int64).reshape(-1, n_keys)
        values = np.asarray(state[name]["values"], dtype=np.int64).reshape(-1, n_values)
        sums[name] = KeyedSums(n_keys, n_values, keys, values)
    big = {int(code): RationalSum({int(d): int(n) for d, n in pairs}, int(count))
           for code, pairs, count in state["big_image_means"]}
    return Accumulator(list(state["names"]), sums["image_sums"], sums["ratio_sums"],
                       sums["cell_sums"], sums["cell_totals"], sums["image_means"], big,
                       sums["gt_counts"], {k: int(v) for k, v in state["diagnostics"].items()},
                       dict(state["kinds"]),
                       {n: rows_of_plain(n, p) for n, p in state.get("states", {}).items()})


def terms_state(table: TermTable) -> dict[str, Any]:
    return {"image_ids": [str(i) for i in table.image_ids], "names": list(table.names),
            "kinds": list(table.kinds), "image": table.image, "metric": table.metric,
            "predicate": table.predicate, "num": table.num, "den": table.den}


def terms_of(state: Mapping[str, Any]) -> TermTable:
    return TermTable(np.array(list(state["image_ids"]), dtype=object), list(state["names"]),
                     list(state["kinds"]), np.asarray(state["image"], dtype=np.int32),
                     np.asarray(state["metric"], dtype=np.int32),
                     np.asarray(state["predicate"], dtype=np.int32),
                     np.asarray(state["num"], dtype=np.int64),
                     np.asarray(state["den"], dtype=np.int64))
