"""Generated Action Genome data ingested as the tests use it: ``sgdask.testing.ag``'s files
and their GT store, ``ROOT/gt.store``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgdask.formats.actiongenome import ingest_ag
from sgdask.formats.ingest import BOX_STORE_PARTITION
from sgdask.testing.ag import write_ag


def ag_with_gt(folder: Path, partition_size: int = BOX_STORE_PARTITION,
               **generator: Any) -> tuple[Path, str]:
    """``write_ag(folder, **generator)``'s root and the GT store ingested from its
    annotations."""
    root = write_ag(folder, **generator)
    a = root / "annotations"
    gt = str(root / "gt.store")
    ingest_ag(str(a / "object_bbox_and_relationship.pkl"), gt, str(a / "person_bbox.pkl"),
              str(a / "frame_list.txt"), partition_size=partition_size)
    return root, gt
