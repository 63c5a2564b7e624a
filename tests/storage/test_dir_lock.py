"""The data-directory lock: one holder at a time, the holder's pid for the refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.storage.dir_lock import LOCK_FILE, DataDirInUse, DataDirLock


def test_one_holder_at_a_time_and_the_refused_learn_its_pid(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = DataDirLock(data)
    first.acquire()  # creates the directory
    assert first.held and (data / LOCK_FILE).read_text().strip() == str(os.getpid())
    second = DataDirLock(data)  # another open file: refused even in this process
    with pytest.raises(DataDirInUse) as refused:
        second.acquire()
    assert refused.value.pid == os.getpid()
    assert str(refused.value) == (
        f"data directory {data} is in use by another broker (pid {os.getpid()})"
    )
    assert not second.held
    assert (data / LOCK_FILE).read_text().strip() == str(os.getpid())  # not truncated
    first.release()
    second.acquire()
    second.release()


def test_a_directory_that_cannot_be_made_raises_os_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        DataDirLock(tmp_path / "file" / "data").acquire()
