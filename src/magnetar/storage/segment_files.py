"""A bound on the file descriptors that sealed segments keep open for reads.

A ledger appends to one active segment, which keeps its descriptor for as long as the
ledger is open.  Its sealed segments are only ever read, so a store bounds how many
of them may hold a descriptor at once (``LedgerConfig.max_open_segment_files``): a
sealed segment opens its file on the first read, and when the budget is full the
least recently read sealed segment closes its descriptor, to open it again on its
next read.  A broker with thousands of topics and old segments thus holds a bounded
number of descriptors for them, however many there are.

Segments join when the ledger that recovered them opens (closed until read) and when
a roll seals the active segment (its descriptor joins as it is).  The lock covers
the ``pread`` as well, so a descriptor is never closed (and its number reused) while
another thread reads through it; in practice reads come from the event loop.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.storage.segment import Segment

SEALED_FLAGS = os.O_RDONLY | os.O_CLOEXEC


class SegmentFiles:
    """The open read descriptors of sealed segments, at most ``max_open``, LRU."""

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self.opens = 0  # files opened again for a read
        self.closes = 0  # descriptors closed to stay within the bound
        self._lock = threading.Lock()
        self._open: OrderedDict[Segment, None] = OrderedDict()  # least recently read first

    def __len__(self) -> int:
        """How many sealed segments hold a descriptor."""
        return len(self._open)

    def __repr__(self) -> str:
        return f"<SegmentFiles {len(self._open)}/{self.max_open} open>"

    def pread(self, segment: Segment, length: int, offset: int) -> bytes:
        """Read ``length`` bytes at ``offset`` of the sealed ``segment``, opening its
        file if needed."""
        with self._lock:
            fd = segment.fd
            if fd < 0:
                fd = os.open(segment.path, SEALED_FLAGS)
                segment.fd = fd
                self.opens += 1
                self._open[segment] = None
                self._evict()
            else:
                self._open.move_to_end(segment)
            return os.pread(fd, length, offset)

    def adopt(self, segment: Segment) -> None:
        """``segment`` was just sealed: from now on its descriptor counts here (and
        it is reopened read-only when it was closed to make room)."""
        with self._lock:
            segment.files = self
            if segment.fd >= 0:
                self._open[segment] = None
                self._evict()

    def release(self, segment: Segment) -> None:
        """Close the segment's descriptor for good (trim, ledger close)."""
        with self._lock:
            self._open.pop(segment, None)
            segment.files = None
            if segment.fd >= 0:
                os.close(segment.fd)
                segment.fd = -1

    def _evict(self) -> None:
        open_ = self._open
        while len(open_) > self.max_open:
            segment, _ = open_.popitem(last=False)
            if segment.fd >= 0:
                os.close(segment.fd)
                segment.fd = -1
                self.closes += 1
