"""A submission ZIP is read in place: opening it reads its central directory, reading a
member reads that member's bytes (its local header, then its data), and nothing else of the
file is read: no whole-file copy, in memory or on disk."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from sgdask.errors import InputError
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


def test_a_task_reads_its_checked_members_without_the_central_directory(big_zip: Path) -> None:
    """A task given the entries the driver's check saw (``checked``) reads its members
    straight at their offsets: not a byte of the central directory, the same bytes."""
    with open(big_zip, "rb") as f:
        driver = SafeZip(f, str(big_zip), ArchiveLimits())
        entries = driver.checked_entries(["1.tiff", "3.tiff", "absent.tiff"])
        expected = {name: driver.read(name) for name in entries}
    assert sorted(entries) == ["1.tiff", "3.tiff"]
    with CountingFile(big_zip) as f:
        task = SafeZip(f, str(big_zip), ArchiveLimits(), checked=entries)
        assert f.bytes_read == 0 and task.problems == []
        for name, data in expected.items():
            assert task.read(name) == data
        member_bytes = sum(e.compress_size for e in entries.values())
        assert member_bytes <= f.bytes_read <= member_bytes + 2 * (30 + 64)
        with pytest.raises(InputError, match="missing from the archive"):
            task.read("0.tiff")  # not one of the task's members


def test_a_member_changed_after_the_check_is_one_line(big_zip: Path) -> None:
    """The task still checks each member it reads (local header, size, CRC-32)."""
    with open(big_zip, "rb") as f:
        entries = SafeZip(f, str(big_zip), ArchiveLimits()).checked_entries(["2.tiff"])
    info = entries["2.tiff"]
    data = bytearray(big_zip.read_bytes())
    data[info.header_offset + 30 + len("2.tiff") + 100] ^= 0xFF  # inside the deflate stream
    big_zip.write_bytes(bytes(data))
    with open(big_zip, "rb") as f, \
            pytest.raises(InputError, match=r"2\.tiff: cannot be read from the archive"):
        SafeZip(f, str(big_zip), ArchiveLimits(), checked=entries).read("2.tiff")
