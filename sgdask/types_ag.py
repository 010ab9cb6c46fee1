"""Action Genome's vocabulary and the inputs of its evaluation: one video's GT frames, as
STTran's loader and ``evaluate_scene_graph`` build them, and one video's model output, as
STTran-family models return it.

numpy only: the readers (``sgdask/io/actiongenome.py``), the generator and the kernels
share these records; ``AGFramePred`` is one frame's output as the evaluation pipeline
carries it (an ``ImagePred``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdask.types import ImagePred

#: the 36 object classes after ``__background__``, spelled as the annotation pickles spell
#: them (STTran's loader renames the five ``object_classes.txt`` spells without a slash)
OBJECT_CLASSES = (
    "__background__", "person", "bag", "bed", "blanket", "book", "box", "broom", "chair",
    "closet/cabinet", "clothes", "cup/glass/bottle", "dish", "door", "doorknob", "doorway",
    "floor", "food", "groceries", "laptop", "light", "medicine", "mirror", "paper/notebook",
    "phone/camera", "picture", "pillow", "refrigerator", "sandwich", "shelf", "shoe",
    "sofa/couch", "table", "television", "towel", "vacuum", "window",
)
#: the 26 predicates in ``relationship_classes.txt`` order: 3 attention, 6 spatial, 17
#: contacting
PREDICATES = (
    "looking_at", "not_looking_at", "unsure",
    "above", "beneath", "in_front_of", "behind", "on_the_side_of", "in",
    "carrying", "covered_by", "drinking_from", "eating", "have_it_on_the_back", "holding",
    "leaning_on", "lying_on", "not_contacting", "other_relationship", "sitting_on",
    "standing_on", "touching", "twisting", "wearing", "wiping", "writing_on",
)
ATTENTION = PREDICATES[0:3]
SPATIAL = PREDICATES[3:9]
CONTACTING = PREDICATES[9:]
#: first predicate index of each kind (attention, spatial, contacting)
OFFSETS = (0, len(ATTENTION), len(ATTENTION) + len(SPATIAL))
#: the person's class (``gt_classes[0] = 1``)
PERSON = 1
SETTINGS = ("predcls", "sgcls", "sgdet")
CONSTRAINTS = ("with", "semi", "no")
#: the score a spatial or contacting predicate must exceed under the ``semi`` constraint
SEMI_THRESHOLD = 0.9


@dataclass(frozen=True)
class AGFrame:
    """One GT frame: ``boxes`` (n, 4) float64 x1 y1 x2 y2, row 0 the person; ``classes``
    (n,) int64, ``classes[0] == PERSON``; ``relations`` (r, 3) int64 (subject, object,
    predicate): per visible object, its attention relation (person, object), its spatial
    ones (object, person), its contacting ones (person, object), in that order."""

    name: str
    boxes: np.ndarray
    classes: np.ndarray
    relations: np.ndarray


@dataclass(frozen=True)
class AGVideo:
    """One video's GT frames, in the order of ``person_bbox.pkl``'s keys, after the loader's
    filters (``sgdask.io.actiongenome.gt_videos``)."""

    name: str
    frames: tuple[AGFrame, ...]


@dataclass(frozen=True)
class AGVideoPred:
    """One video's model output, as ``evaluate_scene_graph`` reads it: ``boxes`` (m, 4)
    float64 (the columns after the frame index), ``labels`` (m,) int64 and ``scores`` (m,)
    in their own float dtype (the no-constraint ranking multiplies them in it) of the
    setting (PredCls: ``labels``/``scores``, else ``pred_labels``/``pred_scores``);
    ``pairs`` (p, 2) int64 indices into the video's boxes, ``frames`` (p,) int64 each pair's
    frame; ``attention`` (p, 3), ``spatial`` (p, 6), ``contacting`` (p, 17) float64
    probabilities (the attention distribution after STTran's softmax)."""

    boxes: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    pairs: np.ndarray
    frames: np.ndarray
    attention: np.ndarray
    spatial: np.ndarray
    contacting: np.ndarray


@dataclass
class AGFramePred(ImagePred):
    """One frame's model output as the pipeline carries it: ``output`` its pairs, boxes and
    distributions as a one-frame ``AGVideoPred``; the ``ImagePred`` fields are the frame's
    boxes (``labels`` 0-based like the store's categories, ``scores``) and one ``graph``
    row (subject, object, 0) per pair, which the protocol lint counts."""

    output: AGVideoPred | None = None
