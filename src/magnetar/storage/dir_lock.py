"""An exclusive lock on a data directory, so that one broker at a time uses it.

``DataDirLock.acquire`` creates the directory if needed and takes
``flock(LOCK_EX | LOCK_NB)`` on ``<directory>/.lock``, then writes its process id
there for whoever is refused next. The lock lasts until ``release`` or until the
process ends, however it ends (the kernel drops a flock with its last file
descriptor), so a broker killed with SIGKILL leaves no stale lock behind. The file
itself stays: removing it would let a process that opened it just before lock an
inode no one else can see.

A flock conflicts with any other open file description, in this process too, so two
brokers in one process are refused as well.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from magnetar.storage.errors import StorageError

LOCK_FILE = ".lock"


class DataDirInUse(StorageError):
    """Another holder (another broker, in this process or another) has the directory."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        self.directory = directory
        self.pid = pid
        holder = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(f"data directory {directory} is in use by another broker ({holder})")


class DataDirLock:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def acquire(self) -> None:
        """Take the lock: DataDirInUse if another holder has it, OSError if the
        directory or the lock file cannot be created."""
        if self._fd >= 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        # No O_TRUNC: the holder's pid must stay readable for the one refused.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DataDirInUse(self.directory, _read_pid(fd)) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)  # drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
