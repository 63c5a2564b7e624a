"""A snapshot of where a run of a ledger's entries lies on disk, for a worker thread.

``ManagedLedger`` is the loop's (its cache, its segment files' bound and its write
pipeline are not thread-safe). A job that must read many entries off the loop, such as
topic compaction, takes a ``LogSnapshot`` on the loop instead: for each segment that
holds entries of the run, its path and a copy of the record offsets. The worker then
reads the files through descriptors of its own and checks every record's CRC. Only
durable entries are taken, so their records are complete on disk; a segment trimmed
after the snapshot was taken makes the read fail (FileNotFoundError) rather than return
other entries.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage.errors import CorruptLedger
from magnetar.storage.record import HEADER, HEADER_SIZE, crc32c

if TYPE_CHECKING:
    from magnetar.storage.segment import Segment

READ_CHUNK = 1024 * 1024  # bytes per pread


@dataclass(frozen=True, slots=True)
class SegmentRun:
    """Records of one segment file: ``offsets[i]`` is where the entry at position
    ``first + i`` starts; the last record ends at ``end``."""

    path: Path
    first: int
    offsets: array[int]
    end: int


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    runs: tuple[SegmentRun, ...]

    @classmethod
    def take(cls, segments: Sequence[Segment], first: int, last: int) -> LogSnapshot:
        """The entries ``first..last`` of ``segments`` (oldest first), on the loop."""
        runs = []
        for segment in segments:
            lo = max(first, segment.first_entry_id)
            hi = min(last, segment.last_entry_id)
            if lo > hi:
                continue
            i, j = lo - segment.first_entry_id, hi - segment.first_entry_id
            offsets = segment.offsets
            end = offsets[j + 1] if j + 1 < len(offsets) else segment.size
            runs.append(SegmentRun(segment.path, lo, offsets[i : j + 1], end))
        return cls(tuple(runs))

    @property
    def count(self) -> int:
        return sum(len(run.offsets) for run in self.runs)

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """Every (position, entry) of the snapshot in order (a worker thread's walk)."""
        for run in self.runs:
            yield from _read_run(run)


def _read_run(run: SegmentRun) -> Iterator[tuple[int, bytes]]:
    offsets = run.offsets
    count = len(offsets)
    fd = os.open(run.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        i = 0
        while i < count:
            j = i + 1
            while j < count and offsets[j] - offsets[i] < READ_CHUNK:
                j += 1
            base = offsets[i]
            stop = offsets[j] if j < count else run.end
            blob = os.pread(fd, stop - base, base)
            if len(blob) != stop - base:
                raise CorruptLedger(run.path, base, "short read")
            for k in range(i, j):
                begin = offsets[k] - base
                end = (offsets[k + 1] if k + 1 < count else run.end) - base
                length, crc = HEADER.unpack_from(blob, begin)
                data = blob[begin + HEADER_SIZE : end]
                if length != len(data):
                    raise CorruptLedger(run.path, offsets[k], "record length does not match")
                if crc32c(data) != crc:
                    raise CorruptLedger(run.path, offsets[k], "CRC mismatch")
                yield run.first + k, data
            i = j
    finally:
        os.close(fd)
