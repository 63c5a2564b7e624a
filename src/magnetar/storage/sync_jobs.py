"""The system calls behind the write pipeline's jobs, and the lock that guards them.

A job runs on a worker thread (or, for a small group, inline on the loop): fdatasync
the active segment, or seal a full segment (fdatasync, then its index file) and
create its successor.  Either settles first what a new ledger still owes the disk
(``owed_syncs.py``), so nothing is confirmed before its topic's files are durable.
The loop holds the same lock before it closes the files, so a worker never syncs a
descriptor that was closed (and maybe reused).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from magnetar.storage.errors import LedgerClosed
from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.owed_syncs import OwedSyncs
from magnetar.storage.recovery import create_segment_file
from magnetar.storage.segment import Segment
from magnetar.storage.segment_index import write_index

logger = logging.getLogger("magnetar.storage")


class SyncJobs:
    def __init__(self, fdatasync: Callable[[int], None],
                 owed: OwedSyncs | None = None) -> None:
        self.fdatasync = fdatasync
        self.owed = owed if owed is not None else OwedSyncs()
        self._io_lock = threading.Lock()
        self._io_closed = False

    def sync(self, fd: int) -> float:
        """Worker thread: make everything written to the active segment durable;
        returns how long the fdatasync took."""
        with self._io_lock:
            if self._io_closed:
                raise LedgerClosed("ledger closed during sync")
            self.owed.settle()  # not timed: the moving average is fdatasync's
            started = time.perf_counter()
            self.fdatasync(fd)
            return time.perf_counter() - started

    def roll(self, old: Segment, path: Path) -> int:
        """Worker thread: seal the full segment, then create and register its successor.

        The sealed file loses its reserved tail first: recovery takes zeros after the
        records for damage in any segment but the last.  Its index is written once it
        is durable, so load can trust it without a scan; the successor's creation
        fsyncs the directory for both.  (The loop writes nothing to ``old`` meanwhile.)
        """
        with self._io_lock:
            if self._io_closed:
                raise LedgerClosed("ledger closed during roll")
            self.owed.settle()
            os.ftruncate(old.fd, old.size)
            self.fdatasync(old.fd)
            try:
                write_index(old.path, old.first_entry_id, old.offsets, old.size)
            except OSError as exc:  # load scans a segment without one: slower, not wrong
                logger.warning("%s: cannot write its index: %r", old.path, exc)
            fd = create_segment_file(path)
            try:
                fsync_dir(path.parent)
            except BaseException:
                os.close(fd)
                raise
            return fd

    def close_files(self, close: Callable[[], None]) -> None:
        """Run ``close`` once a running job is done; jobs started later refuse to run."""
        with self._io_lock:
            self._io_closed = True
            close()
