"""ManagedLedger: the append-only log of one topic, and the keeper of its cursors.

A facade over three parts, each in its own module:

- ``write_pipeline.py``: append, group commit, fsync jobs (inline or on workers) and
  segment rolls (``sync_jobs.py`` holds the system calls those jobs make);
- ``segment_set.py``: the segment files, finding an entry's segment, reads, trim
  (sealed segments open their file through the store's ``segment_files.py`` bound);
- ``cursor_store.py``: opening, deleting, listing and flushing the cursors.

``recovery.py`` decides what of the files survives a crash when the ledger opens,
with the help of the sealed segments' index files (``segment_index.py``) and the
synced-offset record (``synced_offset.py``, written for many ledgers at once by
``synced_batch.py``); ``repair.py`` cuts a ledger it refused. A ledger this open
creates owes its directories' fsyncs until its first sync (``owed_syncs.py``).
``ledger_config.py`` holds ``LedgerConfig`` and ``LedgerStats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import NamedTuple

from magnetar.storage.cache import CacheBudget, EntryCache
from magnetar.storage.compacted_ledger import CompactedLedger
from magnetar.storage.cursor import CursorSnapshot, ManagedCursor
from magnetar.storage.cursor_store import CursorStore
from magnetar.storage.errors import (
    EntryNotFound,
    LedgerClosed,
    LedgerExists,
    LedgerFailed,
    StorageError,
)
from magnetar.storage.fsutil import fdatasync, make_directory
from magnetar.storage.ledger_config import SYNC_POLICIES, LedgerConfig, LedgerStats
from magnetar.storage.log_snapshot import LogSnapshot
from magnetar.storage.owed_syncs import OwedSyncs
from magnetar.storage.read_ahead import ReadAhead
from magnetar.storage.recovery import new_ledger, recover_segments
from magnetar.storage.segment import Segment
from magnetar.storage.segment_files import SegmentFiles
from magnetar.storage.segment_set import (
    DEFAULT_READ_MAX_BYTES,
    SegmentSet,
    delete_segment_files,
)
from magnetar.storage.sync_load import SyncLoad
from magnetar.storage.write_pipeline import State, WritePipeline

__all__ = [
    "DEFAULT_READ_MAX_BYTES",
    "SYNC_POLICIES",
    "LedgerConfig",
    "LedgerStats",
    "ManagedLedger",
    "fdatasync",
]

logger = logging.getLogger("magnetar.storage")


class SegmentSpan(NamedTuple):
    """A sealed segment as retention sees it: entries ``first``..``end`` - 1."""

    first: int
    end: int
    size: int  # bytes, record headers included
    path: Path


def _fdatasync(fd: int) -> None:
    # Looked up in this module at each call: tests replace
    # ``magnetar.storage.ledger.fdatasync`` to slow down or break the disk.
    fdatasync(fd)


def _lock_directory(directory: Path) -> int:
    """Hold an exclusive lock so two ledgers (or processes) never write one directory.

    The flock is on the directory itself, not on a file in it: creating a topic makes
    one inode less (on an ext4 whose inode tables hold many recently deleted inodes,
    as after topics were deleted, each new inode cost 35-60 us of system CPU here).
    Where a directory cannot be locked (NFS turns flock into a write lock, which a
    read-only descriptor cannot take), the lock file ``lock`` is used instead."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _flock(fd, directory)
    except OSError:  # not lockable here (taken by another ledger is a StorageError)
        fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        _flock(fd, directory)
    return fd


def _flock(fd: int, directory: Path) -> None:
    """Lock ``fd`` exclusively, or close it and raise."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"{directory} is already open by another ledger") from None
    except OSError:
        os.close(fd)
        raise


class ManagedLedger:
    """The append-only log of one topic: segment files plus cursors.

    Not thread-safe: use it from the event loop thread (only fdatasync, segment
    creation and cursor writes run on worker threads, and they touch nothing but
    files and the cursors' written versions).
    """

    @classmethod
    def open(cls, directory: Path, config: LedgerConfig, *,
             executor: Executor | None = None,
             sync_load: SyncLoad | None = None,
             cache_budget: CacheBudget | None = None,
             segment_files: SegmentFiles | None = None,
             only_new: bool = False) -> ManagedLedger:
        """Open (creating if needed) the ledger in ``directory`` and recover its segments.

        ``only_new``: make the ledger only if its directory does not exist yet, else
        raise LedgerExists having opened nothing (a new ledger's open is a few system
        calls, cheap enough for the event loop; recovering an existing one is not).

        ``executor`` runs the fdatasyncs; None means the event loop's default executor.
        ``sync_load`` is shared by the ledgers on one disk and loop (None: its own).
        ``cache_budget`` bounds the entry caches of the ledgers that share it (a
        store's); None: a budget of ``config.cache_max_bytes`` for this ledger alone.
        ``segment_files`` likewise bounds the open files of sealed segments (None:
        ``config.max_open_segment_files`` for this ledger alone).
        May run on a worker thread: nothing shared is touched before the first append.
        """
        if not isinstance(directory, Path):  # (Path of a Path parses it again)
            directory = Path(directory)
        made_in = make_directory(directory)
        fresh = bool(made_in)
        if only_new and not fresh:
            raise LedgerExists(str(directory))
        lock_fd = _lock_directory(directory)
        # A new ledger's directory entries become durable with its first sync (or
        # cursor, or ``make_durable``): see owed_syncs.py. Its own directory's entry
        # too: ext4's journal would carry it with the first fdatasync, other file
        # systems need not.
        owed = OwedSyncs()
        try:
            if fresh:  # nothing to recover: no listing, no scan, no record to read
                segments = new_ledger(directory / "ledger", owed)
            else:  # a directory a crash left half made is recovered like any other
                segments = recover_segments(directory / "ledger", owed)
            # (cursors/ is made with the first cursor: a topic only produced to never
            # has one.)
            if owed.owed:  # a new ledger: its ledger/ entry too
                owed.owe_dir(directory)
            for parent in made_in:
                owed.owe_dir(parent)
        except BaseException:
            os.close(lock_fd)
            raise
        try:
            return cls(directory, config, segments, lock_fd, executor, sync_load,
                       cache_budget, segment_files, owed, fresh)
        except BaseException:
            for segment in segments:
                segment.close()
            os.close(lock_fd)
            raise

    def __init__(self, directory: Path, config: LedgerConfig, segments: list[Segment],
                 lock_fd: int, executor: Executor | None,
                 sync_load: SyncLoad | None = None,
                 cache_budget: CacheBudget | None = None,
                 segment_files: SegmentFiles | None = None,
                 owed: OwedSyncs | None = None, fresh: bool = False) -> None:
        """Use ``ManagedLedger.open``; this only wires up already recovered segments."""
        self.directory = directory
        # What the files of a ledger created by this open still owe the disk.
        self.owed_syncs = owed if owed is not None else OwedSyncs()
        self.created = self.owed_syncs.owed  # this open made the ledger
        # This open made the directory itself: it holds nothing but the new ledger
        # (no cursors, metadata file, compacted ledger or other file to read).
        self.fresh = fresh
        self.config = config
        self.stats = LedgerStats()
        self._lock_fd = lock_fd
        if cache_budget is None:
            cache_budget = CacheBudget(config.cache_max_bytes)
        self._cache = EntryCache(cache_budget, segments[-1].end_entry_id)
        if segment_files is None:
            segment_files = SegmentFiles(config.max_open_segment_files)
        self._segments = SegmentSet(segments, self._cache, self.stats, segment_files)
        self._sync_load = sync_load if sync_load is not None else SyncLoad()
        self._pipeline = WritePipeline(
            directory, config, self._segments, self._cache, self.stats, executor,
            self._sync_load, _fdatasync, self.owed_syncs, fresh,
        )
        self._executor = executor
        self._cursors = CursorStore(directory, directory / "cursors", self.owed_syncs, fresh)
        self._read_ahead = ReadAhead()
        self.cursors: dict[str, ManagedCursor] = self._cursors.cursors
        self._cursor_job: asyncio.Future[list[tuple[str, Exception]]] | None = None
        # Topic compaction's view of the log, when the topic was compacted (the broker
        # opens it with the ledger and replaces it after each compaction).
        self.compacted: CompactedLedger | None = None

    def __repr__(self) -> str:
        pipeline = self._pipeline
        return (f"<ManagedLedger {self.directory} entries {self.first_entry_id}.."
                f"{pipeline.next_id - 1} confirmed {pipeline.confirmed_id} "
                f"{pipeline.state.value}>")

    # ------------------------------------------------------------------ hooks

    @property
    def on_failure(self) -> Callable[[BaseException], None] | None:
        """Called once, on the loop, if a write or fdatasync fails (entries above
        last_confirmed_entry_id will then never be confirmed)."""
        return self._pipeline.on_failure

    @on_failure.setter
    def on_failure(self, callback: Callable[[BaseException], None] | None) -> None:
        self._pipeline.on_failure = callback

    @property
    def on_written(self) -> Callable[[int], None] | None:
        """Called on the loop with the highest id just handed to the OS (before any
        fdatasync): such entries survive a crash of this process, not of the machine."""
        return self._pipeline.on_written

    @on_written.setter
    def on_written(self, callback: Callable[[int], None] | None) -> None:
        self._pipeline.on_written = callback

    @property
    def error(self) -> BaseException | None:
        """What made the ledger fail, if it did."""
        return self._pipeline.error

    # ----------------------------------------------------------------- positions

    @property
    def first_entry_id(self) -> int:
        """Oldest entry still stored (== next_entry_id when the ledger is empty)."""
        return self._segments.first_entry_id

    @property
    def next_entry_id(self) -> int:
        """The id the next append gets; ids are never reused, even after a trim."""
        return self._pipeline.next_id

    @property
    def last_confirmed_entry_id(self) -> int:
        """Highest entry id that is durable (per the sync policy) and readable; -1 if none."""
        return self._pipeline.confirmed_id

    @property
    def last_written_entry_id(self) -> int:
        """Highest entry handed to the OS; -1 if none. Never below last_confirmed."""
        return self._pipeline.write_next - 1

    @property
    def closed(self) -> bool:
        return self._pipeline.state is State.CLOSED

    @property
    def failed(self) -> bool:
        return self._pipeline.state is State.FAILED

    def entry_count(self) -> int:
        return self._pipeline.next_id - self.first_entry_id

    def size_bytes(self) -> int:
        """Bytes in segment files (record headers included)."""
        return self._segments.size_bytes

    def size_from(self, entry_id: int) -> int:
        """Bytes of the records written from ``entry_id`` to the end of the log
        (headers included; trimmed ids count from the first stored entry): a
        subscription's backlog size, as Pulsar's estimate of it."""
        total = 0
        for segment in reversed(self._segments.segments):
            if segment.first_entry_id <= entry_id:
                index = entry_id - segment.first_entry_id
                if index < len(segment.offsets):
                    total += segment.size - segment.offsets[index]
                return total
            total += segment.size
        return total

    def sealed_segments(self) -> list[SegmentSpan]:
        """The segments no longer written to, oldest first (what a trim may remove)."""
        return [
            SegmentSpan(segment.first_entry_id, segment.end_entry_id, segment.size, segment.path)
            for segment in self._segments.segments[:-1]
        ]

    # ---------------------------------------------------------------- write path

    def append(self, data: bytes, on_durable: Callable[[int], None] | None = None) -> int:
        """Queue ``data`` as the next entry and return its id at once.

        Call from the event loop thread.  ``on_durable(entry_id)`` runs on the loop, in
        append order, once the entry is durable under the sync policy;
        ``last_confirmed_entry_id`` covers the entry by then.  The ledger keeps a
        reference to ``data`` (no copy), so it must not be mutated afterwards.
        """
        return self._pipeline.append(data, on_durable)

    async def flush(self) -> None:
        """Return once everything appended so far is written and fdatasynced."""
        await self._pipeline.flush()

    def make_durable(self) -> None:
        """Settle what a ledger created by this open still owes the disk (blocking;
        its first sync would): a topic an admin creates exists once the call returns."""
        self.owed_syncs.settle()

    # ----------------------------------------------------------------- read path

    def _check_readable(self) -> None:
        if self._pipeline.state is State.CLOSED:
            raise LedgerClosed(f"{self.directory}: ledger is closed")

    def read(self, entry_id: int) -> bytes:
        """One entry, from the cache or the disk.

        Entries are readable once written to the OS (``last_written_entry_id``),
        which may be before they are durable (``last_confirmed_entry_id``); callers
        that must only see durable entries stop at the latter. Raises EntryNotFound
        if the entry was trimmed or is not written yet. Records of a sealed segment
        that was trusted through its index at load are CRC-checked here (CorruptLedger
        if bad); every other record was checked when the ledger was opened or was
        written by this process.
        """
        self._check_readable()
        if entry_id >= self._pipeline.write_next:
            raise EntryNotFound(entry_id)
        ahead = self._read_ahead.get(entry_id)
        if ahead is not None and entry_id >= self._segments.first_entry_id:
            return ahead
        return self._segments.read(entry_id)

    def is_cold(self, entry_id: int) -> bool:
        """Whether reading ``entry_id`` now would wait for a sealed segment's file
        (it is neither cached nor read ahead)."""
        return self._segments.is_cold(entry_id) and not self._read_ahead.holds(entry_id)

    def read_ahead(self, start: int, max_bytes: int) -> asyncio.Future[list[bytes]] | None:
        """Read the cold run from ``start`` (up to ``max_bytes``) on a worker thread,
        for ``read`` to find; the future resolves when it is there. The read in flight
        is returned if there is one (whichever run it reads: wait, then look again).
        None when ``start`` is not cold, or its last read-ahead failed: read in place."""
        ahead = self._read_ahead
        if ahead.loading is not None:
            return ahead.loading
        if ahead.failed_at(start):
            return None
        reader = self._segments.sealed_run_reader(start, max_bytes)
        if reader is None:
            return None
        # The loop's default executor, not the fdatasyncs': a read never waits for a sync.
        loading = asyncio.get_running_loop().run_in_executor(None, reader)
        ahead.loading = loading

        def arrived(done: asyncio.Future[list[bytes]]) -> None:
            ahead.loading = None
            if done.cancelled() or done.exception() is not None:
                ahead.failed(start)
                return
            entries = done.result()
            if self._pipeline.state is State.OPEN and start >= self.first_entry_id:
                ahead.store(start, entries)
                self.stats.cache_misses += len(entries)

        loading.add_done_callback(arrived)
        return loading

    def read_range(self, start: int, max_count: int,
                   max_bytes: int = DEFAULT_READ_MAX_BYTES) -> list[bytes]:
        """Consecutive entries from ``start``, up to last_confirmed_entry_id.

        Stops after ``max_count`` entries or before exceeding ``max_bytes`` of data, but
        returns at least one entry when ``start`` is readable.  Returns [] when
        ``start`` is beyond last_confirmed_entry_id; raises EntryNotFound when
        ``start`` was trimmed (entries would otherwise come back under other ids).
        """
        self._check_readable()
        stop = min(self._pipeline.confirmed_id, start + max_count - 1)
        return self._segments.read_range(start, stop, max_bytes)

    def log_snapshot(self, first: int, last: int) -> LogSnapshot:
        """Where the durable entries ``first..last`` lie on disk, for a worker thread
        to read them by itself (see log_snapshot.py)."""
        self._check_readable()
        last = min(last, self._pipeline.confirmed_id)
        return LogSnapshot.take(self._segments.segments, max(first, self.first_entry_id), last)

    # ---------------------------------------------------------------------- trim

    def trim(self, before_entry_id: int) -> int:
        """Delete whole segments whose entries are all below ``before_entry_id``.

        Never the active segment.  Returns the number of entries removed.  Files go
        oldest first, so a crash part-way leaves a gap that recovery recognises.
        """
        self._check_readable()
        removed = self._segments.trim(before_entry_id)
        self._read_ahead.drop_before(self.first_entry_id)
        return removed

    def trim_consumed(self) -> int:
        """Trim what every durable cursor has acknowledged; keep everything without cursors.

        Dirty cursors are flushed first, so no trimmed entry lies beyond the position a
        cursor would be reloaded at after a crash.  Cursors persisted on disk but not
        opened (yet) count too.
        """
        marks = self._cursors.durable_marks()
        if not marks:
            return 0
        return self.trim(min(marks) + 1)

    async def trim_consumed_async(self, retained: Callable[[int], int] | None = None) -> int:
        """``trim_consumed`` for a periodic task on the loop: a ledger with only its
        active segment (most of them) costs nothing, dirty cursors are written on a
        worker thread first (so the marks' own flush finds almost nothing to write),
        and the trimmed files are deleted on a worker thread.

        ``retained(consumed_end)``, if given, is a retention policy: called with the id
        every durable cursor has consumed up to (exclusive; the end of the log when
        there are no cursors, as Pulsar trims a topic without subscriptions), it gives
        the id below which segments may go (at most ``consumed_end``)."""
        if len(self._segments.segments) <= 1:
            return 0
        if self.has_dirty_cursors():
            await self.flush_cursors_async()
        if self._pipeline.state is not State.OPEN:
            return 0  # closed (unloaded) meanwhile
        marks = self._cursors.durable_marks()
        if not marks and retained is None:
            return 0
        self._check_readable()
        before = min(marks) + 1 if marks else self._pipeline.next_id
        if retained is not None:
            before = min(before, retained(before))
        removed, paths = self._segments.detach_before(before)
        self._read_ahead.drop_before(self.first_entry_id)
        if paths:
            deleting = asyncio.ensure_future(asyncio.to_thread(delete_segment_files, paths))
            self._sync_load.job_started(deleting)  # no inline fsync meanwhile
            await deleting
        return removed

    # ------------------------------------------------------------------- cursors

    def open_cursor(self, name: str, initial_mark_delete: int) -> ManagedCursor:
        """The cursor ``name``: loaded if persisted, else created at ``initial_mark_delete``."""
        return self._cursors.open(name, initial_mark_delete)

    def rewind_cursors_past_end(self) -> list[str]:
        """Make every opened cursor acknowledge nothing past the end of the log.

        For readers that see entries before their fdatasync: if the machine lost
        such entries, their ids are handed out again and must not count as
        acknowledged. Returns the names of the cursors that were rewound.
        """
        return self._cursors.rewind_past_end(self._pipeline.next_id - 1)

    def delete_cursor(self, name: str) -> None:
        """Forget the cursor and remove its file (no error if there is none)."""
        self._cursors.delete(name)

    def open_persisted_cursors(self) -> None:
        """Open every cursor persisted on disk (file work: a worker thread may, before
        the ledger is handed to the loop)."""
        for name in self.persisted_cursor_names():
            self.open_cursor(name, self.first_entry_id - 1)

    def persisted_cursor_names(self) -> list[str]:
        """Names of the cursors on disk, so subscriptions can be reopened at startup."""
        return self._cursors.persisted_names()

    def flush_cursors(self) -> None:
        """Persist every dirty cursor now, on the calling thread (it waits for a
        worker's cursor write in progress)."""
        self._cursors.flush()

    def has_dirty_cursors(self) -> bool:
        # Asked of every loaded topic each cursor-flush interval: no generator, no
        # call for the topics without a subscription (most, with thousands loaded).
        cursors = self.cursors
        return bool(cursors) and any(cursor.dirty for cursor in cursors.values())

    async def flush_cursors_async(self) -> None:
        """Persist every dirty cursor with the file work on a worker thread.

        The cursors' state is taken on the loop (cheap); the writes and their fsyncs
        run in the ledger's executor, one job for all of them. A cursor is clean
        afterwards only if its write succeeded and nothing changed it meanwhile; a
        write that fails is logged and the cursor stays dirty, for the next flush.
        A flush in progress is waited for first. Cancelling the caller does not stop
        a job that started: its outcome is still logged and recorded.
        """
        while self._cursor_job is not None:
            await asyncio.wait([self._cursor_job])
        if self._pipeline.state is State.CLOSED:
            return
        snapshots = self._cursors.snapshots()
        if not snapshots:
            return
        job = asyncio.get_running_loop().run_in_executor(
            self._executor, self._cursors.write_snapshots, snapshots
        )
        self._cursor_job = job
        job.add_done_callback(functools.partial(self._cursor_job_done, snapshots))
        await asyncio.wait([job])

    def _cursor_job_done(self, snapshots: list[CursorSnapshot],
                         job: asyncio.Future[list[tuple[str, Exception]]]) -> None:
        if self._cursor_job is job:
            self._cursor_job = None
        if job.cancelled():
            return
        exc = job.exception()
        if exc is not None:
            logger.error("%s: writing %d cursor(s) failed: %r; retried at the next flush",
                         self.directory, len(snapshots), exc)
            return
        for name, error in job.result():
            logger.error("%s: cannot persist cursor %s: %r; retried at the next flush",
                         self.directory, name, error)

    # ----------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Flush entries and cursors, stop background work and close the files."""
        pipeline = self._pipeline
        if pipeline.state is State.CLOSED:
            return
        if pipeline.state is State.OPEN:
            pipeline.state = State.CLOSING
        try:
            if pipeline.state is State.CLOSING:
                # A failure was logged already; closing must still release the files.
                with contextlib.suppress(LedgerFailed):
                    await pipeline.flush()
            await self.flush_cursors_async()
            # Acks that came while the workers wrote: rare and few, written right here.
            self.flush_cursors()
        finally:
            if self._cursor_job is not None:  # the caller was cancelled meanwhile
                await asyncio.wait([self._cursor_job])
            await pipeline.stop()
            self._release()

    def abort(self) -> None:
        """Close the files and drop the lock at once, flushing nothing (a topic whose
        load failed after its ledger opened)."""
        self._pipeline.abort()
        self._release()

    def delete(self) -> None:
        """Close the files and remove the whole directory; unwritten entries are dropped."""
        self._pipeline.abort()
        self._cursors.discard_all()  # a cursor write in progress ends before the rmtree
        self._release()
        self.cursors.clear()
        shutil.rmtree(self.directory)

    def _release(self) -> None:
        # A closed ledger's entries leave the shared cache (the loop's thread, unless
        # the ledger never appended: then there is nothing to give back).
        self._cache.clear(self._pipeline.next_id)
        if self.compacted is not None:
            self.compacted.close()
        self._pipeline.close_files()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # also drops the flock
            self._lock_fd = -1
