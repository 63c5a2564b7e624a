"""The fsyncs a new topic's files still owe the disk: ``OwedSyncs``.

Creating a topic makes directories and files (the topic's directory with ``ledger/``
and the metadata file, and ``cursors/`` with its first cursor; the first segment and
the synced-offset record in ``ledger/``), and a name is durable only once the
directory holding it is fsynced. Nothing of a topic has to survive a machine crash
before something in it is promised: a send receipt (the first sync of its log), a
subscription (its cursor's creation), an admin's explicit creation. So creating a
topic leaves those fsyncs owed, and the first such promise settles them on the thread
that makes it (the first sync's worker, in the same job as the segment's fdatasync):
a producer attaching to a new topic waits for no fsync, and a topic nobody writes to
never pays them (three per topic, 0.3-2.5 ms each on the development VM). The
metadata file itself is written at settlement (tmp file, fsync, rename, fsync of the
topic directory), unless the topic saved it meanwhile.

A process crash before settlement leaves the topic without its metadata file: a topic
with no metadata loads with the defaults, and nothing in it was acknowledged.

The synced-offset record of the new ledger (``synced_offset.py``) is created empty at
settlement too, before the fsync of its directory, so that its first write needs no
fsync of the directory of its own and a topic never written to makes no inode for it.

Thread-safe: a second settler waits until the first is done.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from magnetar.storage.fsutil import atomic_write, fsync_dir


class OwedSyncs:
    """Directory fsyncs, empty files and one atomic file write, owed until ``settle``."""

    __slots__ = ("_dirs", "_files", "_lock", "_write", "owed")

    def __init__(self) -> None:
        self.owed = False  # read without the lock: a bool, set under it
        self._lock = threading.Lock()
        self._dirs: list[str] = []  # str: a Path's == costs more than the fsync's call
        self._files: list[str] = []
        self._write: tuple[Path, bytes] | None = None

    def owe_file(self, path: str, directory: Path) -> None:
        """``path`` (in ``directory``) must exist, durably, empty unless it exists: it
        is created at settlement, before ``directory``'s fsync (a topic never written
        to never makes it)."""
        with self._lock:
            self._files.append(path)
            if str(directory) not in self._dirs:
                self._dirs.append(str(directory))
            self.owed = True

    def owe_dir(self, path: Path) -> None:
        """``path``'s entries must be made durable (fsync of the directory)."""
        directory = str(path)
        with self._lock:
            if directory not in self._dirs:
                self._dirs.append(directory)
            self.owed = True

    def owe_write(self, path: Path, data: bytes) -> None:
        """``path`` must hold ``data`` durably (written atomically at settlement)."""
        with self._lock:
            self._write = (path, data)
            self.owed = True

    def drop_write(self, path: Path) -> None:
        """The caller writes ``path`` durably itself, now: the owed write is void (and
        a settlement writing it is over before this returns, so it cannot overwrite
        the newer version)."""
        with self._lock:
            if self._write is not None and self._write[0] == path:
                self._write = None
                self.owed = bool(self._dirs)

    def settle(self) -> None:
        """Make everything owed durable (blocking file work); what fails stays owed."""
        if not self.owed:
            return
        with self._lock:
            if self._write is not None:
                path, data = self._write
                atomic_write(path, data)  # fsyncs path's directory as well
                self._write = None
                written_in = os.path.dirname(path)
                self._dirs = [d for d in self._dirs if d != written_in]
            while self._files:  # before the fsyncs that make their names durable
                os.close(os.open(self._files[0], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
                del self._files[0]
            while self._dirs:
                fsync_dir(Path(self._dirs[0]))
                del self._dirs[0]
            self.owed = False
