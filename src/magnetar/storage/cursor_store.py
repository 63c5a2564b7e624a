"""The cursor store of a ledger: the ``cursors/`` directory and the opened cursors.

Owns opening (loading or creating), deleting, listing and flushing the cursors of
one topic (``cursors/`` is made with the first cursor: a topic nobody subscribes to
costs no directory), the lowest durable mark-delete position for trimming, and
rewinding cursors that acknowledged past the end of the log.  A flush is either synchronous
(``flush``) or split in two: ``snapshots`` on the loop and ``write_snapshots`` on a
worker thread (see ``cursor.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from magnetar.storage.cursor import (
    CursorSnapshot,
    ManagedCursor,
    cursor_name_from_file,
    cursor_path,
)
from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.owed_syncs import OwedSyncs

logger = logging.getLogger("magnetar.storage")


class CursorStore:
    def __init__(self, owner: Path, directory: Path, owed: OwedSyncs | None = None,
                 fresh: bool = False) -> None:
        """``owner`` names the ledger in log messages; ``directory`` holds the files;
        ``owed`` is settled before a new cursor is written (a new ledger's directory
        fsyncs, and that of ``directory`` itself when this made it: the subscription
        is durable once created). ``fresh``: the ledger's directory was just made, so
        ``directory`` does not exist yet."""
        self._owner = owner
        self._owed = owed if owed is not None else OwedSyncs()
        self.directory = directory
        self.cursors: dict[str, ManagedCursor] = {}
        self._directory_made = False  # known to exist, durably
        self._absent = fresh  # known not to exist: nothing persisted to list

    def path(self, name: str) -> Path:
        return cursor_path(self.directory, name)

    def open(self, name: str, initial_mark_delete: int) -> ManagedCursor:
        """The cursor ``name``: loaded if persisted, else created at ``initial_mark_delete``."""
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor
        path = self.path(name)
        if path.exists():
            cursor = ManagedCursor.load(path)
        else:
            self._make_directory()
            self._owed.settle()
            cursor = ManagedCursor(name, path, initial_mark_delete)
            cursor.dirty = True
            cursor.flush()
        self.cursors[name] = cursor
        return cursor

    def _make_directory(self) -> None:
        """Create ``cursors/`` unless it exists; its entry is owed to the disk until
        the settlement that precedes the cursor's write."""
        if self._directory_made:
            return
        self._absent = False
        try:
            os.mkdir(self.directory)
        except FileExistsError:
            pass
        else:
            self._owed.owe_dir(self.directory.parent)
        self._directory_made = True

    def durable_marks(self) -> list[int]:
        """The mark-delete positions of every cursor, opened or only on disk, after
        flushing the dirty ones (so none lies beyond what a restart would reload)."""
        self.flush()
        marks = [cursor.mark_delete for cursor in self.cursors.values()]
        for name in self.persisted_names():
            if name not in self.cursors:
                marks.append(ManagedCursor.load(self.path(name)).mark_delete)
        return marks

    def rewind_past_end(self, last: int) -> list[str]:
        """Make every opened cursor acknowledge nothing past entry ``last``; returns
        the names of the cursors that were rewound."""
        rewound = []
        for cursor in self.cursors.values():
            ranges = cursor.individually_acked_ranges()
            if cursor.mark_delete <= last and not (ranges and ranges[-1][1] > last):
                continue
            logger.warning(
                "%s: cursor %s acknowledged past the end %d of the log; rewound",
                self._owner, cursor.name, last,
            )
            cursor.reset(min(cursor.mark_delete, last))
            cursor.flush()
            rewound.append(cursor.name)
        return rewound

    def delete(self, name: str) -> None:
        """Forget the cursor and remove its file (no error if there is none)."""
        cursor = self.cursors.pop(name, None)
        if cursor is not None:
            cursor.discard()  # a worker's write in progress cannot bring the file back
        path = self.path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)

    def persisted_names(self) -> list[str]:
        """Names of the cursors on disk."""
        names: list[str] = []
        if self._absent:
            return names
        try:
            paths = sorted(self.directory.iterdir())
        except FileNotFoundError:  # no cursor was ever created
            return names
        for path in paths:
            name = cursor_name_from_file(path.name)
            if name is not None:
                names.append(name)
        return names

    def flush(self) -> None:
        """Persist every dirty cursor, on the calling thread."""
        for cursor in list(self.cursors.values()):
            cursor.flush()

    def has_dirty(self) -> bool:
        cursors = self.cursors
        return bool(cursors) and any(cursor.dirty for cursor in cursors.values())

    def snapshots(self) -> list[CursorSnapshot]:
        """The state of every dirty cursor, for ``write_snapshots`` (loop thread)."""
        return [cursor.snapshot() for cursor in self.cursors.values() if cursor.dirty]

    def discard_all(self) -> None:
        """The cursors are being deleted with the ledger: no write may follow."""
        for cursor in self.cursors.values():
            cursor.discard()

    @staticmethod
    def write_snapshots(snapshots: list[CursorSnapshot]) -> list[tuple[str, Exception]]:
        """Worker thread: write each snapshot; returns the cursors whose write failed
        (they stay dirty, so the next flush tries again) with their errors."""
        failures: list[tuple[str, Exception]] = []
        for snapshot in snapshots:
            try:
                snapshot.cursor.write(snapshot)
            except Exception as exc:
                failures.append((snapshot.cursor.name, exc))
        return failures
