"""Reader of per-pair predicate score files (Parquet or NPZ, ``schemas/scores.md``).

Validates every row, then derives each image's graph and NG list with
``sgdask.kernels.scores``. NPZ archives are read with ``allow_pickle=False``: an object
array is refused, never unpickled.
"""

from __future__ import annotations

import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sgdask.errors import Choose, InputError, Option, SettingError, SgdaskError, SgdaskWarning
from sgdask.formats.registry import PARQUET, Signature, register_signature
from sgdask.io.archive import (
    ZIP_ERRORS,
    ArchiveLimits,
    archive_problems,
    limit_hint,
    printable,
)
from sgdask.io.fs import StorageOptions, filesystem, unreadable
from sgdask.kernels.scores import (
    PREDICATE,
    RANK_BY,
    TRIPLET,
    DerivedLists,
    top_predicates,
    triplet_lists,
    triplet_ranked_lists,
)

PARQUET_MAGIC = b"PAR1"
ZIP_MAGIC = b"PK\x03\x04"
REQUIRED = ("image_id", "subject", "object", "scores")
NO_RELATION = "no_relation"
#: .npy format version -> its header reader (version 3 is 2 with a UTF-8 header)
NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
               (2, 0): np.lib.format.read_array_header_2_0}
NPZ_ARRAYS = {  # name -> (accepted dtype kinds, dimensions, what is expected)
    "image_id": ("iuU", 1, "a 1-D str or int array"),
    "subject": ("iu", 1, "a 1-D int array"),
    "object": ("iu", 1, "a 1-D int array"),
    "scores": ("iuf", 2, "an N x P float array, one column per predicate"),
    NO_RELATION: ("iuf", 1, "a 1-D float array"),
}


@dataclass(frozen=True)
class ScoreRows:
    """All rows of a score file as numpy arrays (N rows, P predicates), not yet validated."""

    image_ids: np.ndarray
    subjects: np.ndarray
    objects: np.ndarray
    scores: np.ndarray
    no_rel: np.ndarray | None


@dataclass(frozen=True)
class SubmissionInstances:
    """What a score file is checked against: per image of the submission, its instance count
    and instance scores (None where the submission gives none). ``file`` names the
    submission in errors."""

    file: str
    counts: Mapping[str, int]
    scores: Mapping[str, np.ndarray | None]


def load_score_lists(url: str, storage_options: StorageOptions | None = None,
                     ng_limit: int | None = None, rank_by: str = PREDICATE,
                     instances: SubmissionInstances | None = None,
                     limits: ArchiveLimits | None = None, n_predicates: int | None = None,
                     unique_pairs: bool = False) -> dict[str, DerivedLists]:
    """Image id -> derived graph and NG lists and each pair's best predicates
    (``DerivedLists.pairs``, what the ``oiv6`` protocol ranks), images in the order they
    first occur.

    ``n_predicates``: the GT's predicate vocabulary; a file with one more score column
    has the background (no relation) in column 0, which is dropped (not renormalised); any
    other number of columns is refused. ``unique_pairs``: a pair scored twice in an image
    is refused (the ``oiv6`` protocol takes one score vector per pair) instead of merged.

    With ``instances``, every image of the file must be one of the submission's and its
    indices within its instance count. ``rank_by="triplet"`` needs them, with instance
    scores for every image that has score rows; ``no_relation`` is then ignored (with a
    warning).
    """
    if rank_by not in RANK_BY:
        raise SettingError("rank_by", f"{rank_by!r} is not a ranking",
                           fix=Choose(rank_by, tuple(RANK_BY)))
    if rank_by == TRIPLET and instances is None:
        raise ValueError("rank_by='triplet' needs the submission's instances")
    rows = without_background(read_score_rows(url, storage_options, limits), n_predicates)
    check_columns(rows, url, n_predicates)
    check_values(rows, url, rank_by)
    if rank_by == TRIPLET and rows.no_rel is not None:
        warnings.warn(SgdaskWarning(f"{url}: {NO_RELATION}: ignored under ",
                                    Option("rank_by", TRIPLET), " (pairs are ranked by "
                                    "predicate x subject x object score)"), stacklevel=2)
    lists = {}
    for image_id, index in rows_by_image(rows.image_ids).items():
        subjects, objects, scores = rows.subjects[index], rows.objects[index], rows.scores[index]
        if instances is not None:
            check_instances(url, image_id, subjects, objects, instances, rank_by)
        if unique_pairs:
            check_unique_pairs(url, image_id, subjects, objects)
        if rank_by == TRIPLET:
            assert instances is not None
            derived = triplet_ranked_lists(subjects, objects, scores,
                                           instances.scores[image_id], ng_limit)
        else:
            derived = triplet_lists(subjects, objects, scores,
                                    None if rows.no_rel is None else rows.no_rel[index],
                                    ng_limit=ng_limit)
        lists[image_id] = replace(derived, pairs=top_predicates(subjects, objects, scores))
    return lists


def without_background(rows: ScoreRows, n_predicates: int | None) -> ScoreRows:
    """The rows without their background column: column 0 of a file with one more score
    column than the ``n_predicates`` of the vocabulary (as PySGG's models write them)."""
    if n_predicates is None or rows.scores.shape[1] != n_predicates + 1:
        return rows
    return replace(rows, scores=np.ascontiguousarray(rows.scores[:, 1:]))


def check_columns(rows: ScoreRows, url: str, n_predicates: int | None) -> None:
    """InputError unless the rows have one score per predicate of the GT's vocabulary
    (``n_predicates``, when known; the background column already dropped)."""
    if n_predicates is None or not len(rows.image_ids) or rows.scores.shape[1] == n_predicates:
        return
    raise InputError(url, f"{rows.scores.shape[1]} scores per row", image=rows.image_ids[0],
                     field="scores", expected=f"{n_predicates} (one per predicate of the GT) "
                     f"or {n_predicates + 1} (the background first)")


def check_unique_pairs(url: str, image_id: str, subjects: np.ndarray, objects: np.ndarray
                       ) -> None:
    """InputError naming the first (subject, object) pair an image scores twice."""
    pairs = np.stack([subjects, objects], axis=1)
    _, first, counts = np.unique(pairs, axis=0, return_index=True, return_counts=True)
    twice = np.flatnonzero(counts > 1)
    if len(twice):
        row = int(first[twice[np.argmin(first[twice])]])
        raise InputError(url, f"pair ({subjects[row]}, {objects[row]}) scored twice",
                         image=image_id, field="subject/object",
                         expected="one row per pair: a protocol that ranks pairs takes "
                         "one score vector per pair")


def check_instances(url: str, image_id: str, subjects: np.ndarray, objects: np.ndarray,
                    instances: SubmissionInstances, rank_by: str) -> None:
    """InputError unless the image is in the submission, its rows' indices name its
    instances, and (ranking by triplet) the submission scores them."""
    n = instances.counts.get(image_id)
    if n is None:
        raise InputError(url, "no such image in the submission", image=image_id,
                         field="image_id")
    largest = int(max(subjects.max(), objects.max()))
    if largest >= n:
        raise InputError(url, f"instance index {largest} out of range", image=image_id,
                         field="subject/object", expected=f"indices in 0..{n - 1}")
    if rank_by != TRIPLET:
        return
    scores = instances.scores.get(image_id)
    if scores is None:
        raise InputError(instances.file, ("no instance scores, which ",
                                          Option("rank_by", TRIPLET),
                                          " multiplies into the ranking"),
                         image=image_id, field="score",
                         expected="a score for every instance of an image with score rows")
    with np.errstate(over="ignore"):
        bad = ~(np.isfinite(scores.astype(np.float32)) & (scores >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(instances.file, f"{float(scores[i])} cannot be multiplied into a ranking",
                         image=image_id, field=f"score of instance {i}",
                         expected="non-negative numbers within float32 range (probabilities)")


def read_score_rows(url: str, storage_options: StorageOptions | None,
                    limits: ArchiveLimits | None = None) -> ScoreRows:
    """The rows of a Parquet or NPZ score file, told apart by their magic bytes (an NPZ
    archive's entries are checked against the archive ``limits`` first, as a ZIP's)."""
    fs, path = filesystem(url, storage_options)
    try:
        f = fs.open(path, "rb")
    except FileNotFoundError:
        raise InputError(url, "file not found") from None
    except OSError as err:
        raise SgdaskError(f"{url}: {unreadable(err)}") from err
    with f:
        magic = f.read(4)
        f.seek(0)
        limits = limits or ArchiveLimits()
        if magic == PARQUET_MAGIC:
            return parquet_rows(f, url, limits)
        if magic == ZIP_MAGIC:
            check_npz_entries(f, url, limits)
            f.seek(0)
            return npz_rows(f, url, limits)
    raise InputError(url, f"unknown file format (starts with {magic!r})",
                     expected="a Parquet file or an NPZ archive")


def rows_by_image(image_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Image id -> its row indices (ascending), images in first-occurrence order."""
    _, first, inverse = np.unique(image_ids, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    grouped = np.split(np.argsort(inverse, kind="stable"),
                       np.cumsum(np.bincount(inverse, minlength=len(first)))[:-1])
    return {str(image_ids[first[g]]): grouped[g] for g in np.argsort(first)}


def check_values(rows: ScoreRows, file: str, rank_by: str = PREDICATE) -> None:
    """InputError naming the first offending row's image for any value out of its domain.

    Ranking by triplet multiplies scores in float32: they must be non-negative (a product
    of two negative numbers would rank high) and finite as float32.
    """
    if rank_by == TRIPLET:
        with np.errstate(over="ignore"):
            as_float32 = rows.scores.astype(np.float32)
        bad_scores = ~(np.isfinite(as_float32) & (rows.scores >= 0)).all(axis=1)
        expected_scores = "non-negative numbers within float32 range (probabilities)"
    else:
        bad_scores = ~np.isfinite(rows.scores).all(axis=1)
        expected_scores = "finite numbers (no null, NaN or inf)"
    checks = [
        ("subject", rows.subjects, rows.subjects < 0, "a non-negative instance index"),
        ("object", rows.objects, rows.objects < 0, "a non-negative instance index"),
        ("scores", rows.scores, bad_scores, expected_scores),
    ]
    if rows.no_rel is not None:
        in_range = (rows.no_rel >= 0.0) & (rows.no_rel <= 1.0)
        checks.append((NO_RELATION, rows.no_rel, ~in_range, "a number in [0, 1]"))
    for field, values, bad, expected in checks:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(file, f"row {row}: invalid value {values[row].tolist()}",
                             image=rows.image_ids[row], field=field, expected=expected)


def parquet_rows(f: IO[bytes], file: str, limits: ArchiveLimits) -> ScoreRows:
    """The rows of a Parquet score file (columns and types checked, values not yet), sized
    from its footer first: rows, score values and the rows of an image a row group's
    statistics show (``parquet_budget``), then each image's rows from the ``image_id``
    column alone, before any other column is read."""
    try:
        parquet = pq.ParquetFile(f)
        parquet_budget(parquet.metadata, file, limits)
        names = parquet.schema_arrow.names
        for name in REQUIRED:
            if name not in names:
                raise InputError(file, "missing column", field=name,
                                 expected=f"columns {', '.join(REQUIRED)} [, {NO_RELATION}]")
        image_ids = parquet_image_ids(
            parquet.read(columns=["image_id"]).column(0).combine_chunks(), file)
        check_pairs_per_image(image_ids, file, limits)
        table = parquet.read(columns=[n for n in (*REQUIRED[1:], NO_RELATION) if n in names])
    except (pa.ArrowException, OSError) as err:  # a bad page is an OSError (ArrowIOError)
        detail = " ".join(str(err).split())  # pyarrow's messages span lines
        raise InputError(file, f"not a readable Parquet file ({detail})") from err
    columns = {name: table.column(name).combine_chunks()
               for name in (*REQUIRED[1:], NO_RELATION) if name in table.column_names}
    del table
    return ScoreRows(
        image_ids,
        parquet_indices(columns["subject"], image_ids, file, "subject"),
        parquet_indices(columns["object"], image_ids, file, "object"),
        parquet_scores(columns["scores"], image_ids, file, limits),
        (parquet_floats(columns[NO_RELATION], image_ids, file, NO_RELATION)
         if NO_RELATION in columns else None),
    )


def parquet_budget(meta: pq.FileMetaData, file: str, limits: ArchiveLimits) -> None:
    """InputError when a Parquet score file's footer declares more rows or score values
    than the limits, or a row group whose ``image_id`` statistics (min == max) show more
    rows of one image than ``max_pairs_per_image``: all before a column is read (a file
    of millions of identical rows compresses to a few kilobytes)."""
    if meta.num_rows > limits.max_score_rows:
        raise InputError(file, f"declares {meta.num_rows} rows",
                         expected=limit_hint(limits, "max_score_rows"))
    values, one_image = 0, 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            if column.file_path:  # a _metadata footer: never follow it to another file
                raise InputError(file, "not a readable Parquet file (its column chunks are "
                                 "in another file)")
            top = column.path_in_schema.split(".")[0]
            if top == "scores":
                values += column.num_values
            stats = column.statistics if top == "image_id" else None
            if stats is not None and stats.has_min_max and stats.min == stats.max:
                one_image = max(one_image, group.num_rows)
    if values > limits.max_score_values:
        raise InputError(file, f"declares {values} scores", field="scores",
                         expected=limit_hint(limits, "max_score_values"))
    if one_image > limits.max_pairs_per_image:
        raise InputError(file, f"declares {one_image} rows of one image", field="image_id",
                         expected=limit_hint(limits, "max_pairs_per_image"))


def check_pairs_per_image(image_ids: np.ndarray, file: str, limits: ArchiveLimits) -> None:
    """InputError naming the first image with more score rows than ``max_pairs_per_image``
    (each row is a pair, and each pair's scores become P triplets of its NG list)."""
    if not len(image_ids):
        return
    names, first, counts = np.unique(image_ids, return_index=True, return_counts=True)
    over = np.flatnonzero(counts > limits.max_pairs_per_image)
    if len(over):
        worst = over[np.argmin(first[over])]
        raise InputError(file, f"{counts[worst]} rows", image=str(names[worst]),
                         field="image_id", expected=limit_hint(limits, "max_pairs_per_image"))


def first_null(column: pa.Array, image_ids: np.ndarray | None, file: str, field: str) -> None:
    """InputError for the first null entry of a column, if any."""
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        image = None if image_ids is None else image_ids[row]
        raise InputError(file, f"row {row}: null", image=image, field=field)


def parquet_image_ids(column: pa.Array, file: str) -> np.ndarray:
    """Image ids as a str array (integer ids become their decimal spelling)."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
            or pa.types.is_integer(column.type)):
        raise InputError(file, f"column has type {column.type}", field="image_id",
                         expected="string or integer")
    first_null(column, None, file, "image_id")
    encoded = column.cast(pa.string()).dictionary_encode()
    names = np.asarray(encoded.dictionary.to_numpy(zero_copy_only=False), dtype=str)
    return names[encoded.indices.to_numpy(zero_copy_only=False)]


def parquet_indices(column: pa.Array, image_ids: np.ndarray, file: str, field: str
                    ) -> np.ndarray:
    """An integer column as int64."""
    if not pa.types.is_integer(column.type):
        raise InputError(file, f"column has type {column.type}", field=field,
                         expected="an integer column")
    first_null(column, image_ids, file, field)
    return column.to_numpy(zero_copy_only=False).astype(np.int64)


def parquet_floats(column: pa.Array, image_ids: np.ndarray, file: str, field: str
                   ) -> np.ndarray:
    """A numeric column as float64."""
    if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        raise InputError(file, f"column has type {column.type}", field=field,
                         expected="a float column")
    first_null(column, image_ids, file, field)
    return column.cast(pa.float64()).to_numpy(zero_copy_only=False)


def parquet_scores(column: pa.Array, image_ids: np.ndarray, file: str,
                   limits: ArchiveLimits) -> np.ndarray:
    """The ``scores`` list column as an (N, P) float64 array; null elements become NaN."""
    kind = column.type
    is_list = (pa.types.is_list(kind) or pa.types.is_large_list(kind)
               or pa.types.is_fixed_size_list(kind))
    if not is_list or not (pa.types.is_floating(kind.value_type)
                           or pa.types.is_integer(kind.value_type)):
        raise InputError(file, f"column has type {kind}", field="scores",
                         expected="list<float>, one score per predicate")
    first_null(column, image_ids, file, "scores")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    n_predicates = int(lengths[0]) if len(lengths) else 0
    if n_predicates > limits.max_score_columns:
        raise InputError(file, f"row 0 has {n_predicates} scores", image=image_ids[0],
                         field="scores", expected=limit_hint(limits, "max_score_columns"))
    ragged = np.flatnonzero(lengths != n_predicates)
    if len(ragged):
        row = int(ragged[0])
        raise InputError(file, f"row {row} has {lengths[row]} scores but row 0 has "
                         f"{n_predicates}", image=image_ids[row], field="scores",
                         expected="the same number of scores (one per predicate) in every row")
    if len(column) and n_predicates == 0:
        raise InputError(file, "row 0 has no scores", image=image_ids[0], field="scores",
                         expected="one score per predicate")
    values = column.flatten().cast(pa.float64()).to_numpy(zero_copy_only=False)
    return values.reshape(len(column), n_predicates)


def check_npz_entries(f: IO[bytes], file: str, limits: ArchiveLimits) -> None:
    """Raise the first problem of an NPZ archive's entries (sizes, expansion ratio, count,
    names), from its central directory, before numpy decompresses anything."""
    try:
        with zipfile.ZipFile(f) as archive:
            infos = archive.infolist()
    except ZIP_ERRORS as err:
        raise InputError(file, f"not a readable NPZ archive ({printable(str(err))})") \
            from None
    problems = archive_problems(infos, file, limits)
    if problems:
        raise problems[0]


def npz_headers(f: IO[bytes], file: str, limits: ArchiveLimits
                ) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Array name -> shape and dtype, from the ``.npy`` headers of an NPZ's arrays alone:
    every array read must be a ``.npy`` member whose header declares no more data than the
    member holds, and the rows and scores declared must be within the limits, before numpy
    allocates anything (a 100-byte header may declare a terabyte)."""
    declared = {}
    with zipfile.ZipFile(f) as archive:
        members = {info.filename: info for info in archive.infolist()}
        for name in (*REQUIRED, NO_RELATION):
            info = members.get(f"{name}.npy") or members.get(name)
            if info is None:
                continue
            with archive.open(info) as member:
                try:
                    shape, _, dtype = NPY_HEADERS[np.lib.format.read_magic(member)](member)
                except (ValueError, SyntaxError, TypeError, OverflowError, KeyError) as err:
                    raise InputError(file, f"not a .npy array ({printable(str(err))})",
                                     field=name, expected=NPZ_ARRAYS[name][2]) from None
                header = member.tell()
            if dtype.hasobject:
                raise InputError(file, f"unreadable array (dtype {dtype})", field=name,
                                 expected=f"{NPZ_ARRAYS[name][2]}; object arrays are refused")
            size = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if size > info.file_size - header:
                raise InputError(file, f"header declares shape {shape} ({size} bytes) but the "
                                 f"member holds {info.file_size - header}", field=name,
                                 expected="a .npy array as numpy.savez writes it")
            declared[name] = (tuple(shape), dtype)
    return declared


def check_npz_budget(declared: dict[str, tuple[tuple[int, ...], np.dtype]], file: str,
                     limits: ArchiveLimits) -> None:
    """InputError when an NPZ's headers declare more rows, scores or score columns than the
    limits."""
    rows = max((shape[0] for shape, _ in declared.values() if shape), default=0)
    if rows > limits.max_score_rows:
        raise InputError(file, f"declares {rows} rows",
                         expected=limit_hint(limits, "max_score_rows"))
    shape = declared.get("scores", ((),))[0]
    if len(shape) == 2:
        if shape[1] > limits.max_score_columns:
            raise InputError(file, f"declares {shape[1]} scores per row", field="scores",
                             expected=limit_hint(limits, "max_score_columns"))
        if shape[0] * shape[1] > limits.max_score_values:
            raise InputError(file, f"declares {shape[0] * shape[1]} scores", field="scores",
                             expected=limit_hint(limits, "max_score_values"))


def npz_rows(f: IO[bytes], file: str, limits: ArchiveLimits) -> ScoreRows:
    """The rows of an NPZ score file (array kinds and shapes checked, values not yet),
    sized from its ``.npy`` headers first, then each image's rows from ``image_id``."""
    try:
        check_npz_budget(npz_headers(f, file, limits), file, limits)
        f.seek(0)
        archive = np.load(f, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as err:
        raise InputError(file, f"not a readable NPZ archive ({printable(str(err))})") \
            from err
    with archive:
        image_ids = npz_array(archive, "image_id", file).astype(str)
        check_pairs_per_image(image_ids, file, limits)
        arrays = {name: npz_array(archive, name, file, len(image_ids))
                  for name in (*REQUIRED[1:], NO_RELATION)
                  if name in REQUIRED or name in archive.files}
    scores = arrays["scores"].astype(np.float64)
    if len(image_ids) and scores.shape[1] == 0:
        raise InputError(file, "no columns (no predicate scores)", image=image_ids[0],
                         field="scores", expected=NPZ_ARRAYS["scores"][2])
    no_rel = arrays.get(NO_RELATION)
    return ScoreRows(image_ids, arrays["subject"].astype(np.int64),
                     arrays["object"].astype(np.int64), scores,
                     None if no_rel is None else no_rel.astype(np.float64))


def npz_array(archive: np.lib.npyio.NpzFile, name: str, file: str,
              n_rows: int | None = None) -> np.ndarray:
    """One array of the archive, checked for dtype kind, dimensions and row count."""
    kinds, ndim, expected = NPZ_ARRAYS[name]
    if name not in archive.files:
        raise InputError(file, "missing array", field=name,
                         expected=f"arrays {', '.join(REQUIRED)} [, {NO_RELATION}]")
    try:
        array = archive[name]
    except (ValueError, OSError, zipfile.BadZipFile) as err:
        raise InputError(file, f"unreadable array ({err})", field=name,
                         expected=f"{expected}; object arrays are refused") from err
    if not isinstance(array, np.ndarray):  # a member that is not .npy: numpy's bytes
        raise InputError(file, "not a .npy array", field=name, expected=expected)
    if array.dtype.kind not in kinds or array.ndim != ndim:
        raise InputError(file, f"array has dtype {array.dtype} and shape {array.shape}",
                         field=name, expected=expected)
    if n_rows is not None and len(array) != n_rows:
        raise InputError(file, f"{len(array)} rows but image_id has {n_rows}", field=name,
                         expected="one row per pair")
    return array

# --------------------------------------------------------------------------- sniffing

# what ``sniff`` tells apart of this format (an ``.npz`` score file is ``results.NPZ``)
register_signature(Signature(
    PARQUET, "a Parquet file (a score file or training statistics)", "head", 20,
    lambda head: head.startswith(PARQUET_MAGIC), accepted_as=frozenset({"scores"})))
