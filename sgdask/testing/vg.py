"""A synthetic Visual Genome (VG150) dataset with a Scene-Graph-Benchmark.pytorch-like model.

``write_vg_dataset`` writes, for ``n_test`` test images (plus ``n_train`` training images and
a few images its loader drops):

- ``VG-SGG-with-attri.h5`` in the layout of the real file (``split``, ``img_to_first_box``,
  ``img_to_last_box``, ``img_to_first_rel``, ``img_to_last_rel``, ``boxes_1024`` and
  ``boxes_512`` as int32 centre/size, ``labels``, ``relationships``, ``predicates``,
  ``attributes``), ``VG-SGG-dicts-with-attri.json`` (VG150's 150 classes and 50 predicates)
  and ``image_data.json`` (with the four corrupted images the loader skips);
- what an sgdet model exported by ``sgdask export-sgb`` looks like: a box submission JSON
  (``pred_boxes`` boxes per image with a category and a score; perturbed copies of the GT
  boxes among them) and a scores Parquet file (``pairs`` scored subject/object pairs per
  image, a probability per predicate, mostly zero, rows in the post-processor's order).

Counts follow VG150's test split: about 11.5 boxes and 6 relations per image (a few exact
duplicate relations, as in the real file), long-tailed classes and predicates. Everything is
vectorized numpy: 26,446 test images take seconds. Same arguments, same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VG150_CLASSES: tuple[str, ...] = (
    "airplane", "animal", "arm", "bag", "banana", "basket", "beach", "bear", "bed", "bench",
    "bike", "bird", "board", "boat", "book", "boot", "bottle", "bowl", "box", "boy", "branch",
    "building", "bus", "cabinet", "cap", "car", "cat", "chair", "child", "clock", "coat",
    "counter", "cow", "cup", "curtain", "desk", "dog", "door", "drawer", "ear", "elephant",
    "engine", "eye", "face", "fence", "finger", "flag", "flower", "food", "fork", "fruit",
    "giraffe", "girl", "glass", "glove", "guy", "hair", "hand", "handle", "hat", "head",
    "helmet", "hill", "horse", "house", "jacket", "jean", "kid", "kite", "lady", "lamp",
    "laptop", "leaf", "leg", "letter", "light", "logo", "man", "men", "motorcycle", "mountain",
    "mouth", "neck", "nose", "number", "orange", "pant", "paper", "paw", "people", "person",
    "phone", "pillow", "pizza", "plane", "plant", "plate", "player", "pole", "post", "pot",
    "racket", "railing", "rock", "roof", "room", "screen", "seat", "sheep", "shelf", "shirt",
    "shoe", "short", "sidewalk", "sign", "sink", "skateboard", "ski", "skier", "sneaker",
    "snow", "sock", "stand", "street", "surfboard", "table", "tail", "tie", "tile", "tire",
    "toilet", "towel", "tower", "track", "train", "tree", "truck", "trunk", "umbrella", "vase",
    "vegetable", "vehicle", "wave", "wheel", "window", "windshield", "wing", "wire", "woman",
    "zebra"
)  # fmt: skip

VG150_PREDICATES: tuple[str, ...] = (
    "above", "across", "against", "along", "and", "at", "attached to", "behind",
    "belonging to", "between", "carrying", "covered in", "covering", "eating", "flying in",
    "for", "from", "growing on", "hanging from", "has", "holding", "in", "in front of",
    "laying on", "looking at", "lying on", "made of", "mounted on", "near", "of", "on",
    "on back of", "over", "painted on", "parked on", "part of", "playing", "riding", "says",
    "sitting on", "standing on", "to", "under", "using", "walking in", "walking on",
    "watching", "wearing", "wears", "with",
)  # fmt: skip

#: VG150's predicates from most to least frequent (roughly): the long tail of the samples
PREDICATE_FREQUENCY_ORDER: tuple[str, ...] = (
    "on", "has", "wearing", "of", "in", "near", "behind", "with", "holding", "above",
    "sitting on", "wears", "under", "riding", "in front of", "standing on", "at", "carrying",
    "attached to", "walking on", "over", "for", "looking at", "watching", "hanging from",
    "laying on", "eating", "and", "belonging to", "parked on", "using", "covering", "between",
    "along", "covered in", "part of", "lying on", "on back of", "to", "walking in",
    "mounted on", "across", "against", "from", "growing on", "painted on", "playing",
    "made of", "says", "flying in",
)  # fmt: skip

CORRUPTED_IDS = (1592, 1722, 4616, 4617)
TRAIN_FLAG, TEST_FLAG = 0, 2
BOX_SCALES = (1024, 512)
NONZERO_PREDICATES = 4  # predicate probabilities per pair that are not 0
CHUNK_ROWS = 1 << 18  # score rows per Parquet row group (bounds the generator's memory)


@dataclass(frozen=True)
class VGSynthPaths:
    h5: Path
    dicts: Path
    image_data: Path
    submission: Path
    scores: Path


def vg_synth_paths(root: str | Path) -> VGSynthPaths:
    root = Path(root)
    return VGSynthPaths(root / "VG-SGG-with-attri.h5", root / "VG-SGG-dicts-with-attri.json",
                        root / "image_data.json", root / "submission.json",
                        root / "scores.parquet")


@dataclass(frozen=True)
class GTLayout:
    """Every h5 image (N) with its boxes (B) and relations (R), in file order."""

    ids: np.ndarray  # (N,) int image ids
    flags: np.ndarray  # (N,) split flags
    widths: np.ndarray
    heights: np.ndarray
    n_boxes: np.ndarray  # (N,)
    n_rels: np.ndarray  # (N,)
    boxes: np.ndarray  # (B, 4) int32 centre/size at scale 1024
    labels: np.ndarray  # (B,) 1-based
    relationships: np.ndarray  # (R, 2) image-relative box indices
    predicates: np.ndarray  # (R,) 1-based

    @property
    def first_box(self) -> np.ndarray:
        return starts(self.n_boxes)

    @property
    def first_rel(self) -> np.ndarray:
        return starts(self.n_rels)


def starts(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def owners(counts: np.ndarray) -> np.ndarray:
    """The owner index of each of ``sum(counts)`` items."""
    return np.repeat(np.arange(len(counts)), counts)


def positions(counts: np.ndarray) -> np.ndarray:
    """Each item's position inside its owner."""
    return np.arange(int(counts.sum())) - np.repeat(starts(counts), counts)


def zipf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


def write_vg_dataset(root: str | Path, n_test: int = 200, n_train: int | None = None,
                     seed: int = 0, pred_boxes: int = 80, pairs: int = 100,
                     dropped_fraction: float = 0.02, missing_fraction: float = 0.0,
                     no_pairs_fraction: float = 0.0) -> VGSynthPaths:
    """Write the dataset under ``root``; returns the paths.

    ``n_train`` defaults to ``n_test``; ``dropped_fraction`` adds that share of images
    without boxes or without relations (the loader drops them); ``missing_fraction`` of the
    test images have no prediction at all, ``no_pairs_fraction`` boxes but no scored pair.
    """
    paths = vg_synth_paths(root)
    paths.h5.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    gt = gt_layout(rng, n_test, n_test if n_train is None else n_train, dropped_fraction)
    write_h5(paths.h5, gt)
    write_dicts(paths.dicts)
    write_image_data(paths.image_data, gt, rng)
    test = np.flatnonzero((gt.flags == TEST_FLAG) & (gt.n_boxes > 0) & (gt.n_rels > 0))
    submitted = test[rng.random(len(test)) >= missing_fraction]
    write_predictions(paths, rng, gt, submitted, pred_boxes, pairs, no_pairs_fraction)
    return paths


# --------------------------------------------------------------------------- ground truth


def gt_layout(rng: np.random.Generator, n_test: int, n_train: int,
              dropped_fraction: float) -> GTLayout:
    n_dropped = int(np.ceil(dropped_fraction * (n_test + n_train)))
    n = n_test + n_train + n_dropped
    flags = np.concatenate([np.full(n_test, TEST_FLAG), np.full(n_train, TRAIN_FLAG),
                            rng.choice([TRAIN_FLAG, TEST_FLAG], n_dropped)])
    n_boxes = np.minimum(2 + rng.poisson(9.5, n), 62)
    n_rels = 1 + rng.poisson(5.0, n)
    dropped = np.arange(n) >= n_test + n_train
    without_boxes = dropped & (rng.random(n) < 0.5)
    n_boxes[without_boxes] = 0
    n_rels[dropped] = 0
    order = rng.permutation(n)
    flags, n_boxes, n_rels = flags[order], n_boxes[order], n_rels[order]
    ids = 5000 + np.cumsum(rng.integers(1, 40, n))  # above the corrupted ids
    long_side = np.where(rng.random(n) < 0.75, 500, 800)
    short_side = (long_side * rng.uniform(0.5, 1.0, n)).astype(np.int64)
    landscape = rng.random(n) < 0.7
    widths = np.where(landscape, long_side, short_side)
    heights = np.where(landscape, short_side, long_side)
    boxes = scaled_boxes(rng, n_boxes, widths, heights)
    labels = 1 + rng.choice(len(VG150_CLASSES), len(boxes), p=zipf(len(VG150_CLASSES), 0.9))
    relationships, predicates = relations(rng, n_boxes, n_rels)
    return GTLayout(ids, flags, widths, heights, n_boxes, n_rels, boxes, labels,
                    relationships, predicates)


def scaled_boxes(rng: np.random.Generator, n_boxes: np.ndarray, widths: np.ndarray,
                 heights: np.ndarray) -> np.ndarray:
    """int32 (cx, cy, w, h) at scale 1024 as VG's converter encodes them (``cx = x +
    floor(w / 2)``); a tenth of the boxes touch the left or top border."""
    image = owners(n_boxes)
    scale = 1024 / np.maximum(widths, heights)[image]
    sizes = np.stack([widths[image] * scale, heights[image] * scale], axis=1).astype(np.int64)
    extent = np.maximum(2, (sizes * rng.uniform(0.05, 0.7, sizes.shape)).astype(np.int64))
    corner = (rng.random(sizes.shape) * np.maximum(sizes - extent, 1)).astype(np.int64)
    corner[rng.random(sizes.shape) < 0.1] = 0
    return np.concatenate([corner + extent // 2, extent], axis=1).astype(np.int32)


def relations(rng: np.random.Generator, n_boxes: np.ndarray, n_rels: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Image-relative (subject, object) pairs of distinct boxes and 1-based predicates; about
    4 % repeat the relation before them exactly (duplicate relations, as in VG150)."""
    image = owners(n_rels)
    n = n_boxes[image]
    subjects = (rng.random(len(image)) * n).astype(np.int64)
    objects = (subjects + 1 + (rng.random(len(image)) * (n - 1)).astype(np.int64)) % n
    by_rank = [VG150_PREDICATES.index(p) + 1 for p in PREDICATE_FREQUENCY_ORDER]
    predicates = np.asarray(by_rank)[rng.choice(len(by_rank), len(image),
                                                p=zipf(len(by_rank), 1.3))]
    pairs = np.stack([subjects, objects], axis=1)
    repeat = (positions(n_rels) > 0) & (rng.random(len(image)) < 0.04)
    pairs[repeat] = pairs[np.flatnonzero(repeat) - 1]
    predicates[repeat] = predicates[np.flatnonzero(repeat) - 1]
    return pairs, predicates


def write_h5(path: Path, gt: GTLayout) -> None:
    """The real file's keys, dtypes and shapes (gzip-compressed: the reader does not care)."""
    first_box = np.where(gt.n_boxes > 0, gt.first_box, -1)
    last_box = np.where(gt.n_boxes > 0, gt.first_box + gt.n_boxes - 1, -1)
    first_rel = np.where(gt.n_rels > 0, gt.first_rel, -1)
    last_rel = np.where(gt.n_rels > 0, gt.first_rel + gt.n_rels - 1, -1)
    absolute = gt.relationships + np.repeat(gt.first_box, gt.n_rels)[:, None]
    columns = {
        "split": gt.flags.astype(np.int32),
        "img_to_first_box": first_box.astype(np.int32),
        "img_to_last_box": last_box.astype(np.int32),
        "img_to_first_rel": first_rel.astype(np.int32),
        "img_to_last_rel": last_rel.astype(np.int32),
        "boxes_1024": gt.boxes,
        "boxes_512": (gt.boxes // 2).clip(min=1).astype(np.int32),
        "labels": gt.labels.astype(np.int64)[:, None],
        "relationships": absolute.astype(np.int32),
        "predicates": gt.predicates.astype(np.int64)[:, None],
        "attributes": np.zeros((len(gt.boxes), 10), dtype=np.int64),
    }
    with h5py.File(path, "w") as f:
        for key, values in columns.items():
            f.create_dataset(key, data=values, compression="gzip", compression_opts=1)


def write_dicts(path: Path) -> None:
    label_to_idx = {name: i + 1 for i, name in enumerate(VG150_CLASSES)}
    predicate_to_idx = {name: i + 1 for i, name in enumerate(VG150_PREDICATES)}
    doc = {"label_to_idx": label_to_idx,
           "idx_to_label": {str(i): n for n, i in label_to_idx.items()},
           "predicate_to_idx": predicate_to_idx,
           "idx_to_predicate": {str(i): n for n, i in predicate_to_idx.items()},
           "attribute_to_idx": {}, "idx_to_attribute": {}}
    path.write_text(json.dumps(doc))


def write_image_data(path: Path, gt: GTLayout, rng: np.random.Generator) -> None:
    """One entry per h5 image in order, with the corrupted images' entries in between."""
    entries = [{"width": w, "height": h, "image_id": i}
               for i, w, h in zip(gt.ids.tolist(), gt.widths.tolist(), gt.heights.tolist(),
                                  strict=True)]
    for image_id in CORRUPTED_IDS:
        entries.insert(int(rng.integers(0, len(entries) + 1)),
                       {"width": 800, "height": 600, "image_id": image_id})
    path.write_text(json.dumps(entries, separators=(",", ":")))


# --------------------------------------------------------------------------- predictions


def pixel_boxes(gt: GTLayout, images: np.ndarray) -> np.ndarray:
    """The GT boxes of ``images`` in pixels (corners, unclipped), image after image."""
    counts = gt.n_boxes[images]
    rows = np.repeat(gt.first_box[images], counts) + positions(counts)
    centre = gt.boxes[rows].astype(np.float64)
    x1y1 = np.trunc(centre[:, :2] - centre[:, 2:] / 2)
    corners = np.concatenate([x1y1, x1y1 + centre[:, 2:]], axis=1)
    long_side = np.maximum(gt.widths, gt.heights)[images][owners(counts)]
    return corners / 1024 * long_side[:, None]


def write_predictions(paths: VGSynthPaths, rng: np.random.Generator, gt: GTLayout,
                      images: np.ndarray, pred_boxes: int, pairs: int,
                      no_pairs_fraction: float) -> None:
    """The box submission and the scores file of an sgdet-like model on ``images``."""
    gt_boxes = pixel_boxes(gt, images)
    n_gt = gt.n_boxes[images]
    n_pred = np.maximum(n_gt, pred_boxes)
    owner = owners(n_pred)
    slot = positions(n_pred)
    widths, heights = gt.widths[images][owner], gt.heights[images][owner]

    # boxes: the first n_gt slots copy a GT box with jitter, the rest are anywhere
    from_gt = slot < n_gt[owner]
    gt_row = np.repeat(starts(n_gt), n_pred) + np.minimum(slot, np.maximum(n_gt[owner] - 1, 0))
    size = np.stack([widths, heights], axis=1).astype(np.float64)
    random_box = random_pixel_boxes(rng, size)
    source = np.where(from_gt[:, None], gt_boxes[gt_row] if len(gt_boxes) else random_box,
                      random_box)
    extent = np.tile(source[:, 2:] - source[:, :2], 2)
    boxes = source + rng.normal(0, 0.08, source.shape) * extent
    boxes = np.round(boxes * 4) / 4
    boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, (widths - 1)[:, None])
    boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, (heights - 1)[:, None])
    boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2])

    gt_labels = gt.labels[np.repeat(gt.first_box[images], n_pred) + np.minimum(
        slot, np.maximum(n_gt[owner] - 1, 0))]
    wrong = rng.random(len(owner)) < 0.15
    random_labels = 1 + rng.choice(len(VG150_CLASSES), len(owner),
                                   p=zipf(len(VG150_CLASSES), 0.9))
    labels = np.where(from_gt & ~wrong, gt_labels, random_labels)
    quality = np.where(from_gt, rng.beta(5, 2, len(owner)), rng.beta(2, 5, len(owner)))
    scores = np.maximum(np.round(quality * 256), 1) / 256

    # shuffle each image's boxes (a detector's order is not the GT's)
    order = np.lexsort((rng.random(len(owner)), owner))
    position_of = np.empty_like(order)
    position_of[order] = np.arange(len(order))
    boxes, labels, scores = boxes[order], labels[order], scores[order]
    slot_index = position_of - np.repeat(starts(n_pred), n_pred)  # new index of each slot

    with_pairs = rng.random(len(images)) >= no_pairs_fraction
    pair_rows = scored_pairs(rng, gt, images, n_pred, slot_index, with_pairs, pairs)
    write_submission(paths.submission, gt.ids[images], n_pred, boxes, labels, scores)
    write_scores(paths.scores, rng, gt.ids[images], pair_rows, scores, starts(n_pred))


def random_pixel_boxes(rng: np.random.Generator, size: np.ndarray) -> np.ndarray:
    extent = size * rng.uniform(0.05, 0.6, size.shape)
    corner = rng.random(size.shape) * (size - extent)
    return np.concatenate([corner, corner + extent], axis=1)


@dataclass(frozen=True)
class PairRows:
    """Scored pairs: image (position in the submitted images), subject, object and the GT
    predicate (1-based) when the pair is a GT relation's, else 0."""

    image: np.ndarray
    subject: np.ndarray
    object: np.ndarray
    true_predicate: np.ndarray


def scored_pairs(rng: np.random.Generator, gt: GTLayout, images: np.ndarray,
                 n_pred: np.ndarray, slot_index: np.ndarray, with_pairs: np.ndarray,
                 pairs: int) -> PairRows:
    """Per image: the GT relations' pairs (through the boxes copied from the GT), then
    random pairs of distinct boxes, duplicates removed, at most ``pairs``."""
    counts = gt.n_rels[images]
    rel_image = owners(counts)
    rel_rows = np.repeat(gt.first_rel[images], counts) + positions(counts)
    base = np.repeat(starts(n_pred), counts)
    true_s = slot_index[base + gt.relationships[rel_rows, 0]]
    true_o = slot_index[base + gt.relationships[rel_rows, 1]]
    n_random = np.full(len(images), pairs)
    rand_image = owners(n_random)
    k = n_pred[rand_image]
    rand_s = (rng.random(len(rand_image)) * k).astype(np.int64)
    rand_o = (rand_s + 1 + (rng.random(len(rand_image)) * (k - 1)).astype(np.int64)) % k
    image = np.concatenate([rel_image, rand_image])
    subject = np.concatenate([true_s, rand_s])
    obj = np.concatenate([true_o, rand_o])
    truth = np.concatenate([gt.predicates[rel_rows], np.zeros(len(rand_image), np.int64)])
    key = (image * n_pred.max() + subject) * n_pred.max() + obj
    _, first = np.unique(key, return_index=True)  # a GT relation's pair wins over a random one
    first = first[with_pairs[image[first]]]
    first = first[np.lexsort((first, image[first]))]  # per image: GT pairs first
    rank = positions(np.bincount(image[first], minlength=len(images)))
    keep = first[rank < pairs]
    return PairRows(image[keep], subject[keep], obj[keep], truth[keep])


@dataclass(frozen=True)
class SparseScores:
    """Each pair's nonzero predicate probabilities: ``NONZERO_PREDICATES`` (predicate,
    probability) per row (a predicate may repeat: the later entry wins)."""

    predicates: np.ndarray  # (n, NONZERO_PREDICATES) 0-based
    values: np.ndarray  # (n, NONZERO_PREDICATES) float32

    def dense(self, order: np.ndarray, n_predicates: int) -> np.ndarray:
        """(n, P) float32 rows in ``order``."""
        out = np.zeros((len(order), n_predicates), dtype=np.float32)
        rows = np.repeat(np.arange(len(order)), NONZERO_PREDICATES)
        out[rows, self.predicates[order].reshape(-1)] = self.values[order].reshape(-1)
        return out

    def best(self) -> np.ndarray:
        """Each row's largest probability (the later entry of a repeated predicate wins)."""
        later = (self.predicates[:, :, None] == self.predicates[:, None, :]) & np.triu(
            np.ones((NONZERO_PREDICATES,) * 2, dtype=bool), k=1)
        return np.where(later.any(axis=2), 0, self.values).max(axis=1)


def predicate_probabilities(rng: np.random.Generator, truth: np.ndarray, n_predicates: int
                            ) -> SparseScores:
    """Probabilities of ``NONZERO_PREDICATES`` predicates per pair (the background's share
    left out, the rest 0); a GT pair's predicate among them with a large share 70 % of the
    time."""
    n = len(truth)
    by_rank = np.asarray([VG150_PREDICATES.index(p) for p in PREDICATE_FREQUENCY_ORDER])
    chosen = by_rank[rng.choice(n_predicates, (n, NONZERO_PREDICATES),
                                p=zipf(n_predicates, 1.1))]
    hit = (truth > 0) & (rng.random(n) < 0.7)
    chosen[hit, 0] = truth[hit] - 1
    weights = rng.gamma(1.0, 1.0, (n, NONZERO_PREDICATES))
    weights[hit, 0] += 3.0
    background = rng.gamma(2.0, 1.0, n)
    share = weights / (weights.sum(axis=1) + background)[:, None]
    return SparseScores(chosen, share.astype(np.float32))


def write_scores(path: Path, rng: np.random.Generator, image_ids: np.ndarray, rows: PairRows,
                 instance_scores: np.ndarray, first_instance: np.ndarray) -> None:
    """The scores Parquet, each image's rows in the post-processor's order: descending
    ``best predicate x subject x object`` score in float32."""
    n_predicates = len(VG150_PREDICATES)
    sparse = predicate_probabilities(rng, rows.true_predicate, n_predicates)
    inst = instance_scores.astype(np.float32)
    base = first_instance[rows.image]
    triple = sparse.best() * inst[base + rows.subject] * inst[base + rows.object]
    order = np.lexsort((-triple, rows.image))
    writer = None
    try:
        for chunk in np.array_split(order, max(1, -(-len(order) // CHUNK_ROWS))):
            values = pa.array(sparse.dense(chunk, n_predicates).reshape(-1), type=pa.float32())
            table = pa.table({
                "image_id": pa.array(image_ids[rows.image[chunk]], type=pa.int64()),
                "subject": pa.array(rows.subject[chunk], type=pa.int16()),
                "object": pa.array(rows.object[chunk], type=pa.int16()),
                "scores": pa.FixedSizeListArray.from_arrays(values, n_predicates),
            })
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema, compression="zstd",
                                          use_dictionary=False)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def write_submission(path: Path, image_ids: np.ndarray, counts: np.ndarray, boxes: np.ndarray,
                     labels: np.ndarray, scores: np.ndarray) -> None:
    """SGBench JSON: per image its instances (box, 0-based category, score) and no triplet
    list of its own (the lists come from the scores file).

    Boxes are multiples of 1/4 and scores of 1/256, so every number is spelled through a
    look-up table and the strings are concatenated elementwise (object arrays): formatting
    two million instances one by one would dominate the generator's time.
    """
    quarters = np.round(boxes * 4).astype(np.int64)
    coordinate_spelling = spelled(np.arange(int(quarters.max(initial=0)) + 1) / 4)
    category_spelling = spelled(np.arange(len(VG150_CLASSES)))
    score_spelling = spelled(np.arange(257) / 256)
    first = starts(counts)
    with open(path, "w") as f:
        f.write('{"version":1,"images":[')
        for chunk in np.array_split(np.arange(len(counts)), max(1, len(counts) // 2048)):
            if not len(chunk):
                continue
            rows = slice(first[chunk[0]], first[chunk[-1]] + counts[chunk[-1]])
            xy = coordinate_spelling[quarters[rows]]
            instances = ('{"bbox":[' + xy[:, 0] + "," + xy[:, 1] + "," + xy[:, 2] + ","
                         + xy[:, 3] + '],"category":' + category_spelling[labels[rows] - 1]
                         + ',"score":'
                         + score_spelling[np.round(scores[rows] * 256).astype(np.int64)]
                         + "}").tolist()
            start = 0
            for i in chunk.tolist():
                stop = start + int(counts[i])
                f.write(f'{"," if i else ""}{{"id":{image_ids[i]},"triplets":[],"instances":['
                        f'{",".join(instances[start:stop])}]}}')
                start = stop
        f.write("]}")


def spelled(values: np.ndarray) -> np.ndarray:
    """JSON spellings of the values (Python's repr), as an object array to index."""
    return np.asarray([repr(v) for v in values.tolist()], dtype=object)
