"""A submission ZIP is read in place: opening it reads its central directory, reading a
member reads that member's bytes (its local header, then its data), and nothing else of the
file is read: no whole-file copy, in memory or on disk."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from sgdask.io.archive import ArchiveLimits, SafeZip

MEMBER = 1 << 20


class CountingFile(io.FileIO):
    """A real file that counts the bytes read from it."""

    bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        n = super().readinto(buffer)
        self.bytes_read += n or 0
        return n


@pytest.fixture
def big_zip(tmp_path: Path) -> Path:
    """triplets.json and four incompressible 1 MiB members."""
    path = tmp_path / "submission.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("triplets.json", b'{"version": 1, "images": []}')
        for i in range(4):
            archive.writestr(f"{i}.tiff", os.urandom(MEMBER))
    return path


def test_reading_one_member_reads_only_it(big_zip: Path) -> None:
    with CountingFile(big_zip) as f:
        archive = SafeZip(f, str(big_zip), ArchiveLimits())
        opened = f.bytes_read
        assert opened < 64 * 1024  # the central directory (and the end record's search)
        data = archive.read("2.tiff")
        assert len(data) == MEMBER
        info = archive.entries["2.tiff"]
        member_bytes = f.bytes_read - opened
        assert info.compress_size <= member_bytes <= info.compress_size + 30 + 64
        assert archive.read("triplets.json") == b'{"version": 1, "images": []}'
        assert f.bytes_read < 2 * MEMBER < big_zip.stat().st_size
