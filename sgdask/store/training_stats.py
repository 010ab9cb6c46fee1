"""Training-split statistics: how often each (subject category, object category, predicate)
occurs in ``train_image_ids``. They define zero-shot triplets (zR@k), the compositional
diversity weights of wIMR@k and the default predicate groups (mR@k[G]) of a GT other than
VG150. Stored as ``train_stats.parquet`` in the GT store, or wherever
``sgdask stats`` writes them."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sgdask.errors import InputError, StoreError
from sgdask.io.archive import printable
from sgdask.io.fs import StorageOptions, file_digest, filesystem, join, unreadable
from sgdask.types import ZeroShot

if TYPE_CHECKING:
    from sgdask.store.store import StoreReader

STATS_SCHEMA = pa.schema([("subject_category", pa.int32()), ("object_category", pa.int32()),
                          ("predicate", pa.int32()), ("count", pa.int64())])
STATS_FILE = "train_stats.parquet"


def train_stats(doc: Any, file: str) -> pa.Table:
    """Triplet-type counts over the training split of a parsed psg.json: every category,
    instance index and predicate an integer within the document's vocabularies."""
    train = {str(i) for i in doc.get("train_image_ids") or []}
    n_classes = len(doc.get("thing_classes") or []) + len(doc.get("stuff_classes") or [])
    n_predicates = len(doc.get("predicate_classes") or [])
    counts: Counter[tuple[int, int, int]] = Counter()
    for index, entry in enumerate(doc["data"]):
        if not isinstance(entry, dict) or str(entry.get("image_id")) not in train:
            continue
        where = {"image": printable(str(entry.get("image_id")))[:100]}
        source = entry.get("segments_info") or entry.get("annotations") or []
        if not isinstance(source, list) or not all(isinstance(s, dict) for s in source):
            raise InputError(file, "not a list of objects", field=f"data[{index}].segments_info",
                             **where)
        cats = [_index(s.get("category_id"), n_classes or None, file,
                       f"data[{index}].segments_info[{i}].category_id", where)
                for i, s in enumerate(source)]
        relations = entry.get("relations") or []
        for r, relation in enumerate(relations if isinstance(relations, list) else [None]):
            field = f"data[{index}].relations[{r}]"
            if not isinstance(relation, list) or len(relation) != 3:
                raise InputError(file, "not [subject, object, predicate]", field=field, **where)
            s, o = (_index(v, len(cats), file, field, where) for v in relation[:2])
            p = _index(relation[2], n_predicates or None, file, field, where)
            counts[(cats[s], cats[o], p)] += 1
    rows = sorted(counts.items())
    return pa.table({"subject_category": [r[0][0] for r in rows],
                     "object_category": [r[0][1] for r in rows],
                     "predicate": [r[0][2] for r in rows],
                     "count": [r[1] for r in rows]}, schema=STATS_SCHEMA)


def _index(value: Any, n: int | None, file: str, field: str, where: dict[str, str]) -> int:
    """``value`` when it is an integer in 0..n-1 (0..2^31-1 when ``n`` is None), else the
    InputError naming the field: 0.9, "1", True, -5 or 99999 never reach the counts."""
    top = (n if n is not None else 2**31) - 1
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top:
        return value
    shown = printable(repr(value))[:40]
    raise InputError(file, f"{shown} is not an index in 0..{top}", field=field, **where)


def write_stats(table: pa.Table, url: str, storage_options: StorageOptions | None = None
                ) -> None:
    fs, path = filesystem(url, storage_options)
    with fs.open(path, "wb") as f:
        pq.write_table(table, f, write_page_checksum=True)


def stats_digest(url: str, storage_options: StorageOptions | None = None) -> str:
    """Content hash of a statistics file: cached results depend on what it holds, not on
    its URL (a file rewritten in place must miss the cache)."""
    try:
        return file_digest(url, storage_options)
    except FileNotFoundError:
        raise StoreError(f"{url}: no training statistics here (write them with "
                         "`sgdask stats`)") from None


def read_stats(url: str, storage_options: StorageOptions | None = None,
               data: bytes | None = None) -> pa.Table:
    """Training statistics from ``url`` (or from ``data``, its bytes already read and
    checked by a store reader)."""
    try:
        if data is None:
            fs, path = filesystem(url, storage_options)
            data = fs.cat_file(path)
        table = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True).read()
    except FileNotFoundError:
        raise StoreError(f"{url}: no training statistics here (write them with "
                         "`sgdask stats`)") from None
    except IsADirectoryError as err:
        raise InputError(url, unreadable(err),
                         expected="training statistics from `sgdask stats`") from None
    except (pa.ArrowException, OSError, ValueError) as err:
        detail = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise InputError(url, f"not a readable Parquet file ({detail})",
                         expected="training statistics from `sgdask stats`") from None
    missing = [c for c in STATS_SCHEMA.names if c not in table.column_names]
    if missing:
        raise InputError(url, f"missing columns {missing}", expected=str(STATS_SCHEMA.names))
    return table.select(STATS_SCHEMA.names).cast(STATS_SCHEMA)


def zero_shot_from(table: pa.Table, n_classes: int, n_predicates: int) -> ZeroShot:
    """The seen triplet types as a ZeroShot look-up."""
    subj, obj, pred = (table[c].to_numpy().astype(np.int64)
                       for c in ("subject_category", "object_category", "predicate"))
    z = ZeroShot(np.empty(0, dtype=np.int64), n_classes, n_predicates)
    return ZeroShot(np.unique(z.key(subj, obj, pred)), n_classes, n_predicates)


def composition_counts(table: pa.Table) -> dict[int, int]:
    """Predicate -> number of distinct (subject, object) category pairs it has in training."""
    pred = table["predicate"].to_numpy()
    values, counts = np.unique(pred, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def predicate_counts(table: pa.Table) -> dict[int, int]:
    """Predicate -> training triplets (the frequency the default predicate groups split)."""
    pred, count = table["predicate"].to_numpy(), table["count"].to_numpy()
    values, inverse = np.unique(pred, return_inverse=True)
    totals = np.zeros(len(values), dtype=np.int64)
    np.add.at(totals, inverse.reshape(-1), count)
    return dict(zip(values.tolist(), totals.tolist(), strict=True))


def gt_stats_table(gt: StoreReader, stats: str | None, options: StorageOptions | None
                   ) -> pa.Table | None:
    """The training statistics of an evaluation against the GT store ``gt``: ``stats`` when
    given, else the GT store's own; None without either."""
    own = gt.manifest.get("train_stats")
    url = stats or (join(gt.url, own) if own else None)
    if url is None:
        return None
    return read_stats(url, options, None if stats else gt.read_file(own))


def gt_training_stats(gt: StoreReader, stats: str | None, options: StorageOptions | None
                      ) -> tuple[ZeroShot | None, dict[int, int] | None]:
    """Zero-shot look-up and wIMR composition counts of an evaluation against the GT store
    ``gt``: from ``stats`` when given, else from the GT store's own; (None, None) without
    either."""
    table = gt_stats_table(gt, stats, options)
    if table is None:
        return None, None
    n_classes = len(gt.manifest["thing_classes"]) + len(gt.manifest["stuff_classes"])
    n_predicates = len(gt.manifest["predicate_classes"])
    return zero_shot_from(table, n_classes, n_predicates), composition_counts(table)
