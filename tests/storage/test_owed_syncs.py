"""A new ledger's directory fsyncs (and a new topic's metadata) are owed until something
in it is promised: its first sync, a cursor, an explicit ``make_durable``."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from pathlib import Path

import pytest

import magnetar.storage.fsutil as fsutil
import magnetar.storage.ledger as ledger_module
import magnetar.storage.owed_syncs as owed_module
from magnetar.storage import LedgerConfig, ManagedLedger, StorageError, TopicMetadata
from magnetar.storage.ledger_ids import begin_ledger
from magnetar.storage.owed_syncs import OwedSyncs


def record_disk_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """(call, path or fd, thread) of every directory fsync, atomic write and
    fdatasync of a ledger, in order (the real calls run)."""
    calls: list[tuple[str, str, str]] = []
    real_fsync_dir, real_atomic_write = fsutil.fsync_dir, fsutil.atomic_write

    def fsync_dir(path: Path) -> None:
        calls.append(("fsync_dir", str(path), threading.current_thread().name))
        real_fsync_dir(path)

    def atomic_write(path: Path, data: bytes) -> None:
        calls.append(("atomic_write", str(path), threading.current_thread().name))
        real_atomic_write(path, data)

    def fdatasync(fd: int) -> None:
        calls.append(("fdatasync", "", threading.current_thread().name))
        fsutil.fdatasync(fd)

    monkeypatch.setattr(owed_module, "fsync_dir", fsync_dir)
    monkeypatch.setattr(owed_module, "atomic_write", atomic_write)
    monkeypatch.setattr("magnetar.storage.recovery.fsync_dir", fsync_dir)
    monkeypatch.setattr(ledger_module, "fdatasync", fdatasync)
    return calls


async def test_a_new_ledger_fsyncs_its_directories_in_its_first_sync_not_at_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_disk_calls(monkeypatch)
    # Inline syncs allowed: the owed fsyncs must still keep the first one off the loop.
    config = LedgerConfig(inline_sync_max_entries=4, inline_sync_max_seconds=3600.0)
    ledger = ManagedLedger.open(tmp_path / "topic", config)
    try:
        assert ledger.created and calls == []  # opening a new ledger waits for no fsync
        confirmed: list[int] = []
        ledger.append(b"first", confirmed.append)
        await ledger.flush()
        assert confirmed == [0]
        loop_thread = threading.current_thread().name
        ledger_dir, topic_dir = str(tmp_path / "topic" / "ledger"), str(tmp_path / "topic")
        assert [(call, path) for call, path, _ in calls] == [  # the topic's own entry too
            ("fsync_dir", ledger_dir), ("fsync_dir", topic_dir), ("fsync_dir", str(tmp_path)),
            ("fdatasync", ""),
        ]
        assert all(thread != loop_thread for _, _, thread in calls)  # one worker job
        assert (tmp_path / "topic" / "ledger" / "synced").exists()
        calls.clear()
        ledger.append(b"second", confirmed.append)
        await ledger.flush()
        assert [call for call, _, _ in calls] == ["fdatasync"]  # nothing owed any more
    finally:
        await ledger.close()

    reopened = ManagedLedger.open(tmp_path / "topic", config)
    try:
        assert not reopened.created and not reopened.owed_syncs.owed
        assert [reopened.read(i) for i in range(2)] == [b"first", b"second"]
    finally:
        await reopened.close()


async def test_a_first_sync_that_settles_runs_on_threads_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new ledger's first sync (its directory fsyncs first) runs on the settle
    threads, so that when thousands of new topics are first written at once, the plain
    syncs of other topics do not queue behind their journal commits; later syncs go to
    the disk-job threads."""
    calls = record_disk_calls(monkeypatch)
    config = LedgerConfig(inline_sync_max_entries=0)  # every sync on a worker thread
    ledger = ManagedLedger.open(tmp_path / "topic", config)
    try:
        ledger.append(b"first")
        await ledger.flush()
        assert {thread.rsplit("-", 1)[0] for _, _, thread in calls} == {"magnetar-settle"}
        calls.clear()
        ledger.append(b"second")
        await ledger.flush()
        assert [(call, thread.rsplit("-", 1)[0]) for call, _, thread in calls] == [
            ("fdatasync", "magnetar-disk")]
    finally:
        await ledger.close()


async def test_a_new_cursor_settles_what_its_ledger_owes_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_disk_calls(monkeypatch)
    ledger = ManagedLedger.open(tmp_path / "topic", LedgerConfig())
    try:
        ledger.open_cursor("sub", -1)
        assert [path for call, path, _ in calls if call == "fsync_dir"][:2] == [
            str(tmp_path / "topic" / "ledger"), str(tmp_path / "topic"),
        ]
        assert not ledger.owed_syncs.owed
    finally:
        await ledger.close()


def test_make_durable_settles_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_disk_calls(monkeypatch)
    ledger = ManagedLedger.open(tmp_path / "topic", LedgerConfig())
    try:
        ledger.make_durable()  # ledger/, the topic's directory, its entry in its parent
        assert [call for call, _, _ in calls] == ["fsync_dir", "fsync_dir", "fsync_dir"]
        ledger.make_durable()  # settled: nothing more
        assert len(calls) == 3
    finally:
        ledger.abort()


def test_a_new_topics_metadata_is_written_when_settled_unless_saved_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_disk_calls(monkeypatch)
    path = tmp_path / "topic" / "metadata.json"
    path.parent.mkdir()
    owed = OwedSyncs()
    owed.owe_dir(path.parent)
    metadata = TopicMetadata.load(path)
    ids = begin_ledger(metadata, 0, 0, 1_000, owed)
    assert not path.exists() and owed.owed
    owed.settle()
    assert TopicMetadata.load(path).ledgers == ids.rows == [(1_000, 0)]
    # The atomic write fsynced the topic directory: not once more.
    assert [call for call, _, _ in calls] == ["atomic_write"]

    # A save before settlement voids the owed (older) version.
    second = TopicMetadata.load(path)
    begin_ledger(second, 5, 0, 2_000, owed)
    second.properties["k"] = "v"
    second.save()
    owed.settle()
    reloaded = TopicMetadata.load(path)
    assert reloaded.properties == {"k": "v"} and reloaded.ledger_id == 2_000
    assert not owed.owed


async def test_a_new_topic_makes_no_lock_file_and_no_cursors_directory(tmp_path: Path) -> None:
    # Each inode a topic's creation makes cost 35-60 us of system CPU on an ext4 whose
    # inode tables hold recently deleted inodes: the lock is the directory's own flock,
    # and cursors/ waits for a first cursor.
    directory = tmp_path / "topic"
    ledger = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert sorted(p.name for p in directory.iterdir()) == ["ledger"]
        with pytest.raises(StorageError, match="already open"):  # still exclusive
            ManagedLedger.open(directory, LedgerConfig())
        assert ledger.persisted_cursor_names() == []
        ledger.open_cursor("sub", -1)
        assert sorted(p.name for p in directory.iterdir()) == ["cursors", "ledger"]
    finally:
        await ledger.close()
    reopened = ManagedLedger.open(directory, LedgerConfig())  # the lock went with close
    try:
        assert reopened.persisted_cursor_names() == ["sub"]
    finally:
        await reopened.close()


async def test_the_first_cursor_of_a_settled_topic_makes_its_directory_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "topic"
    ledger = ManagedLedger.open(directory, LedgerConfig())
    ledger.make_durable()
    await ledger.close()
    calls = record_disk_calls(monkeypatch)
    reopened = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert not reopened.owed_syncs.owed and calls == []
        reopened.open_cursor("sub", -1)
        assert ("fsync_dir", str(directory)) in [(call, path) for call, path, _ in calls]
        calls.clear()
        reopened.open_cursor("other", -1)  # the directory is there: nothing owed
        assert [call for call, _, _ in calls if call == "fsync_dir"] == []
    finally:
        await reopened.close()


async def test_where_a_directory_cannot_be_locked_a_lock_file_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_flock = fcntl.flock

    def flock_files_only(fd: int, operation: int) -> None:  # as NFS, for a read-only fd
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EBADF, "Bad file descriptor")
        real_flock(fd, operation)

    monkeypatch.setattr(ledger_module.fcntl, "flock", flock_files_only)
    directory = tmp_path / "topic"
    ledger = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert (directory / "lock").exists()
        with pytest.raises(StorageError, match="already open"):
            ManagedLedger.open(directory, LedgerConfig())
    finally:
        await ledger.close()


def test_a_new_namespace_owes_the_entries_of_every_directory_it_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first topic of a namespace makes its tenant and namespace directories too:
    each new entry is made durable, by the fsync of the directory that holds it."""
    (tmp_path / "persistent").mkdir()
    calls = record_disk_calls(monkeypatch)
    ledger = ManagedLedger.open(tmp_path / "persistent" / "t" / "ns" / "topic", LedgerConfig())
    try:
        ledger.make_durable()
        synced = [path for call, path, _ in calls if call == "fsync_dir"]
        for made in ("persistent/t/ns/topic", "persistent/t/ns", "persistent/t", "persistent"):
            assert str(tmp_path / made) in synced
        assert str(tmp_path) not in synced  # persistent/ existed: its entry was durable
    finally:
        ledger.abort()
