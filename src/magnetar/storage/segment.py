"""One segment file of a ledger: its name, its open file and its in-memory index.

A segment holds consecutive entries starting at ``first_entry_id`` (which is also its
file name, zero-padded so names sort by id).  The index is an ``array('Q')`` of record
offsets; the end of a record is the start of the next one (or the file's size), so
reads know every length without touching the header again.

A segment whose records were all CRC-checked (scanned at load, or written by this
process) is ``verified`` and its reads skip the header; a sealed segment trusted
through its index at load is not, and each record is checked when it is read.

The active segment keeps its file open; a sealed one reads through its store's
``SegmentFiles`` (``files``), which opens it on demand and closes the least
recently read ones beyond a bound (``segment_files.py``).
"""

from __future__ import annotations

import mmap
import os
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage.errors import CorruptLedger, StorageCorruption
from magnetar.storage.record import HEADER, HEADER_SIZE, ScanResult, crc32c, scan_records

if TYPE_CHECKING:
    from magnetar.storage.segment_files import SegmentFiles

SUFFIX = ".seg"


def segment_path(directory: Path, first_entry_id: int) -> Path:
    return directory / f"{first_entry_id:020d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first entry id encoded in a segment file name, or None for other files."""
    stem, dot, ext = name.rpartition(".")
    if not dot or "." + ext != SUFFIX or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def scan_file(path: Path) -> ScanResult:
    """Scan a segment file through a read-only mapping (no copy of its contents)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            return scan_records(b"")
        with (mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped,
              memoryview(mapped) as view):
            return scan_records(view)


class Segment:
    """A segment file: open for appending while it is the active one (``fd``); read
    through ``files`` once sealed (``fd`` is then -1 while the file is closed)."""

    __slots__ = ("allocated", "fd", "files", "first_entry_id", "offsets", "path", "size",
                 "verified")

    def __init__(self, path: Path, first_entry_id: int, fd: int,
                 offsets: array[int] | None = None, size: int = 0,
                 verified: bool = True) -> None:
        self.path = path
        self.verified = verified  # False: check each record's CRC when it is read
        self.first_entry_id = first_entry_id
        self.fd = fd
        self.files: SegmentFiles | None = None  # set once sealed
        self.offsets: array[int] = offsets if offsets is not None else array("Q")
        self.size = size  # bytes of good records; appends go here
        # The file's length: past ``size`` it is zeros reserved for the next records
        # (the record scan stops at a zero header, so recovery sees where data ends).
        self.allocated = size

    @property
    def count(self) -> int:
        return len(self.offsets)

    @property
    def end_entry_id(self) -> int:
        """One past the last entry id of the segment."""
        return self.first_entry_id + len(self.offsets)

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.offsets) - 1

    def _pread(self, length: int, offset: int) -> bytes:
        files = self.files
        if files is None:
            return os.pread(self.fd, length, offset)
        return files.pread(self, length, offset)

    def _record_end(self, index: int) -> int:
        offsets = self.offsets
        return offsets[index + 1] if index + 1 < len(offsets) else self.size

    def read(self, index: int) -> bytes:
        """The data of the ``index``-th record (relative to the segment)."""
        if not self.verified:
            return self._read_checked(index)
        start = self.offsets[index] + HEADER_SIZE
        length = self._record_end(index) - start
        data = self._pread(length, start)
        if len(data) != length:
            raise StorageCorruption(f"{self.path}: short read at offset {start}")
        return data

    def _read_checked(self, index: int) -> bytes:
        start = self.offsets[index]
        length = self._record_end(index) - start
        raw = self._pread(length, start)
        if len(raw) != length:
            raise StorageCorruption(f"{self.path}: short read at offset {start}")
        return self._check(raw, 0, length, start)

    def _check(self, blob: bytes, begin: int, end: int, offset: int) -> bytes:
        """The data of the record ``blob[begin:end]`` (at ``offset`` in the file),
        after checking its header and CRC."""
        length, crc = HEADER.unpack_from(blob, begin)
        data = blob[begin + HEADER_SIZE : end]
        if length != len(data):
            raise CorruptLedger(self.path, offset, "record length does not match the index")
        if crc32c(data) != crc:
            raise CorruptLedger(self.path, offset, "CRC mismatch")
        return data

    def read_run(self, first: int, last: int, max_bytes: int, at_least_one: bool) -> list[bytes]:
        """Records ``first..last`` (inclusive, segment-relative) while they fit ``max_bytes``.

        One ``pread`` covers the whole run: a single system call beats one per entry
        even though slicing the entries out of it costs a copy.
        """
        offsets = self.offsets
        stop = first
        total = 0
        while stop <= last:
            length = self._record_end(stop) - offsets[stop] - HEADER_SIZE
            if total + length > max_bytes and not (at_least_one and stop == first):
                break
            total += length
            stop += 1
        if stop == first:
            return []
        if stop == first + 1:
            return [self.read(first)]
        base = offsets[first]
        span = self._record_end(stop - 1) - base
        blob = self._pread(span, base)
        if len(blob) != span:
            raise StorageCorruption(f"{self.path}: short read at offset {base}")
        out = []
        if not self.verified:
            for index in range(first, stop):
                out.append(self._check(blob, offsets[index] - base,
                                       self._record_end(index) - base, offsets[index]))
            return out
        for index in range(first, stop):
            out.append(blob[offsets[index] - base + HEADER_SIZE : self._record_end(index) - base])
        return out

    def close(self) -> None:
        if self.files is not None:
            self.files.release(self)
        elif self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
