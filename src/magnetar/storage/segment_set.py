"""The segment set of a ledger: its segment files in id order, and reading them.

Owns the list of open segments (the last one is the active segment the write
pipeline appends to), finding the segment that holds an entry id, reads of one entry
or a run of entries (through the tail cache first), the byte count of the files, and
trimming whole segments off the front.  It does not know what is durable: callers
pass the highest id they may read.  Sealed segments read through the store's
``SegmentFiles``, which bounds how many of them keep their file open.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from magnetar.storage.cache import EntryCache
from magnetar.storage.errors import EntryNotFound
from magnetar.storage.ledger_config import LedgerStats
from magnetar.storage.segment import Segment
from magnetar.storage.segment_files import SegmentFiles
from magnetar.storage.segment_index import index_path

DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024


class SegmentSet:
    """The segments of one ledger, oldest first; never empty."""

    def __init__(self, segments: list[Segment], cache: EntryCache, stats: LedgerStats,
                 files: SegmentFiles) -> None:
        self.segments = segments
        self._files = files
        for segment in segments[:-1]:
            files.adopt(segment)
        self._firsts = [segment.first_entry_id for segment in segments]
        self.size_bytes = sum(segment.size for segment in segments)  # record headers included
        self._cache = cache
        self._stats = stats

    @property
    def active(self) -> Segment:
        """The segment appends go to."""
        return self.segments[-1]

    @property
    def first_entry_id(self) -> int:
        return self.segments[0].first_entry_id

    def add(self, segment: Segment) -> None:
        """A new active segment, after a roll: the one before it is sealed."""
        self._files.adopt(self.segments[-1])
        self.segments.append(segment)
        self._firsts.append(segment.first_entry_id)

    def segment_for(self, entry_id: int) -> Segment:
        return self.segments[bisect_right(self._firsts, entry_id) - 1]

    def read(self, entry_id: int) -> bytes:
        """One entry, from the cache or the disk; the caller checked the upper bound."""
        if entry_id < self.first_entry_id:
            raise EntryNotFound(entry_id)
        data = self._cache.get(entry_id)
        if data is not None:
            self._stats.cache_hits += 1
            return data
        self._stats.cache_misses += 1
        segment = self.segment_for(entry_id)
        return segment.read(entry_id - segment.first_entry_id)

    def read_range(self, start: int, stop: int, max_bytes: int) -> list[bytes]:
        """Consecutive entries ``start..stop`` while they fit ``max_bytes`` (at least one)."""
        if start < self.first_entry_id:
            raise EntryNotFound(start)
        out: list[bytes] = []
        budget = max_bytes
        entry_id = start
        cache = self._cache
        stats = self._stats
        while entry_id <= stop:
            if entry_id >= cache.first_id:
                # The cache is a contiguous run up to the newest entry: all of the rest is in it.
                for data in cache.iter_from(entry_id, stop):
                    if len(data) > budget and out:
                        break
                    out.append(data)
                    budget -= len(data)
                    stats.cache_hits += 1
                break
            segment = self.segment_for(entry_id)
            last = min(stop, cache.first_id - 1, segment.last_entry_id)
            first_index = entry_id - segment.first_entry_id
            run = segment.read_run(first_index, last - segment.first_entry_id,
                                   budget, at_least_one=not out)
            stats.cache_misses += len(run)
            out.extend(run)
            budget -= sum(map(len, run))
            entry_id += len(run)
            if entry_id <= last:
                break  # the byte budget ran out inside this segment
        return out

    def is_cold(self, entry_id: int) -> bool:
        """Whether ``entry_id`` lies in a sealed segment below the cache (a read would
        go to the disk)."""
        return (entry_id < self._cache.first_id
                and entry_id < self.segments[-1].first_entry_id
                and entry_id >= self.first_entry_id)

    def sealed_run_reader(self, start: int, max_bytes: int) -> Callable[[], list[bytes]] | None:
        """A function that reads entries from ``start`` within its sealed segment and
        below the cache, up to ``max_bytes`` (at least one), safe to call on a worker
        thread (a sealed segment's records never change, and its reads go through the
        store's locked descriptors); None when ``start`` is not cold."""
        if not self.is_cold(start):
            return None
        segment = self.segment_for(start)
        last = min(self._cache.first_id - 1, segment.last_entry_id)
        first_index = start - segment.first_entry_id
        last_index = last - segment.first_entry_id

        def read() -> list[bytes]:
            return segment.read_run(first_index, last_index, max_bytes, at_least_one=True)

        return read

    def trim(self, before_entry_id: int) -> int:
        """Delete whole segments whose entries are all below ``before_entry_id``.

        Never the active segment.  Returns the number of entries removed.  Files go
        oldest first, so a crash part-way leaves a gap that recovery recognises.
        """
        removed, paths = self.detach_before(before_entry_id)
        delete_segment_files(paths)
        return removed

    def detach_before(self, before_entry_id: int) -> tuple[int, list[Path]]:
        """Drop the whole segments below ``before_entry_id`` from the set (never the
        active one) and close them; returns the entries removed and the files to
        delete, oldest first, with ``delete_segment_files`` (a worker thread may: an
        unlink of a big file can take tens of milliseconds).  Nothing reads them
        once detached."""
        removed = 0
        paths: list[Path] = []
        segments = self.segments
        while len(segments) > 1 and segments[0].end_entry_id <= before_entry_id:
            segment = segments.pop(0)
            self._firsts.pop(0)
            removed += segment.count
            self.size_bytes -= segment.size
            segment.close()
            paths.append(segment.path)
        if removed:
            self._cache.drop_before(self.first_entry_id)
        return removed, paths

    def close_all(self) -> None:
        for segment in self.segments:
            segment.close()


def delete_segment_files(paths: list[Path]) -> None:
    """Delete detached segments' files, oldest first, each one's index before it (a
    segment without an index is scanned; an index without its segment is an orphan)."""
    for path in paths:
        # FileNotFoundError: no index (a segment scanned at load), or the topic deleted
        for doomed in (index_path(path), path):
            with contextlib.suppress(FileNotFoundError):
                doomed.unlink()
