"""ManagedLedger: the append-only log of one topic, and the keeper of its cursors.

The write path is the broker's publish hot path:

- ``append`` assigns the entry id, queues the data and its callback, puts the data in
  the tail cache and, on the first append of an event-loop iteration, schedules
  ``_write_pending`` with ``call_soon``;
- ``_write_pending`` writes everything queued in that iteration with one ``pwritev``,
  into zeros reserved ahead with fallocate (so the fdatasync has no file size to
  commit), then hands the new entries to ``on_written`` (readers that may see them
  before they are durable);
- under ``"always"`` a sync job covers everything written so far: a small group is
  fdatasynced on the loop thread at once (see ``LedgerConfig``), a larger one in a
  worker thread.  Appends that arrive while a worker syncs are written and wait for
  the next job, so one fdatasync serves every entry that arrived meanwhile (group
  commit).  When the sync is done ``last_confirmed_entry_id`` advances and the
  callbacks fire in order;
- under ``"interval"`` the callbacks fire right after the write and a timer runs an
  fdatasync every ``sync_interval`` seconds while there is unsynced data.

Rolling to a new segment is a worker job as well: cut the full segment's reserve,
fdatasync it, create its successor, fsync the directory.  Because a successor only
exists once its predecessor is durable, recovery may treat damage anywhere but in the
last segment as corruption.  At most one job (sync or roll) runs at a time for a
ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import functools
import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.storage.cache import EntryCache
from magnetar.storage.cursor import ManagedCursor, cursor_name_from_file, cursor_path
from magnetar.storage.errors import (
    EntryNotFound,
    LedgerClosed,
    LedgerFailed,
    StorageError,
)
from magnetar.storage.fsutil import fdatasync, fsync_dir, preallocate, pwritev_all
from magnetar.storage.record import HEADER, HEADER_SIZE, MAX_DATA_SIZE, crc32c
from magnetar.storage.recovery import create_segment_file, recover_segments
from magnetar.storage.segment import Segment, segment_path
from magnetar.storage.sync_load import SyncLoad

logger = logging.getLogger("magnetar.storage")

SYNC_POLICIES = ("always", "interval")
DEFAULT_READ_MAX_BYTES = 4 * 1024 * 1024


@dataclass
class LedgerConfig:
    segment_max_bytes: int = 64 * 1024 * 1024  # roll to a new segment file beyond this
    cache_max_bytes: int = 64 * 1024 * 1024  # bounded read cache of recent entries
    # "always": fdatasync (group commit) before on_durable;
    # "interval": on_durable right after write(), fdatasync every sync_interval seconds.
    sync_policy: str = "always"
    sync_interval: float = 0.05
    # "always" only: a group of at most this many entries, with no sync running, is
    # fdatasynced on the loop thread itself, right after on_written has put it on the
    # wire for readers, while syncs are fast (their moving average is under
    # inline_sync_max_seconds) and no other ledger sharing the SyncLoad has a write
    # due in the same loop round. A lone quiet ledger on a fast disk saves the thread
    # hand-offs, whose wake-ups and GIL transfers cost more than the loop loses while
    # it waits; a busy ledger (larger groups), ledgers busy together (their syncs
    # overlap on workers), or a slow disk keep the loop free. 0 disables.
    inline_sync_max_entries: int = 4
    inline_sync_max_seconds: float = 0.001
    # Reserve segment space ahead of the writes (zeros, with fallocate) in steps that
    # double from 64 KiB up to this, so an fdatasync never has a file size to commit
    # as well. 0 disables.
    reserve_max_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.sync_policy not in SYNC_POLICIES:
            raise ValueError(
                f"sync_policy must be one of {SYNC_POLICIES}, not {self.sync_policy!r}"
            )
        if self.segment_max_bytes <= HEADER_SIZE:
            raise ValueError("segment_max_bytes is too small")
        if self.cache_max_bytes < 0:
            raise ValueError("cache_max_bytes must not be negative")
        if not self.sync_interval > 0:
            raise ValueError("sync_interval must be positive")
        if self.reserve_max_bytes < 0:
            raise ValueError("reserve_max_bytes must not be negative")


@dataclass
class LedgerStats:
    """Counters for metrics and tests (system calls are what group commit saves)."""

    writes: int = 0  # writev calls on segment files
    bytes_written: int = 0
    syncs: int = 0  # fdatasync calls, including the one that seals a segment on roll
    inline_syncs: int = 0  # of which made on the loop thread (small groups)
    rolls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # close() is flushing: no appends, the pipeline still runs
    FAILED = "failed"  # a write or sync failed: no appends, reads still work
    CLOSED = "closed"


def _lock_directory(directory: Path) -> int:
    """Hold an exclusive lock so two ledgers (or processes) never write one directory."""
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"{directory} is already open by another ledger") from None
    return fd


class ManagedLedger:
    """The append-only log of one topic: segment files plus cursors.

    Not thread-safe: use it from the event loop thread (only fdatasync and segment
    creation run on worker threads, and they touch nothing but file descriptors).
    """

    @classmethod
    def open(cls, directory: Path, config: LedgerConfig, *,
             executor: Executor | None = None,
             sync_load: SyncLoad | None = None) -> ManagedLedger:
        """Open (creating if needed) the ledger in ``directory`` and recover its segments.

        ``executor`` runs the fdatasyncs; None means the event loop's default executor.
        ``sync_load`` is shared by the ledgers on one disk and loop (None: its own).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock_directory(directory)
        try:
            segments = recover_segments(directory / "ledger")
            (directory / "cursors").mkdir(exist_ok=True)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(directory, config, segments, lock_fd, executor, sync_load)

    def __init__(self, directory: Path, config: LedgerConfig, segments: list[Segment],
                 lock_fd: int, executor: Executor | None,
                 sync_load: SyncLoad | None = None) -> None:
        """Use ``ManagedLedger.open``; this only wires up already recovered segments."""
        self.directory = directory
        self.config = config
        self.cursors: dict[str, ManagedCursor] = {}
        self.stats = LedgerStats()
        # Called once, on the loop, if a write or fdatasync fails (entries above
        # last_confirmed_entry_id will then never be confirmed).
        self.on_failure: Callable[[BaseException], None] | None = None
        # Called on the loop with the highest id just handed to the OS (before any
        # fdatasync): such entries survive a crash of this process, not of the machine.
        self.on_written: Callable[[int], None] | None = None
        self._reserve_max = config.reserve_max_bytes
        self._sync_load = sync_load if sync_load is not None else SyncLoad()
        self.error: BaseException | None = None

        self._ledger_dir = directory / "ledger"
        self._lock_fd = lock_fd
        self._executor = executor
        self._always = config.sync_policy == "always"
        self._segments = segments
        self._firsts = [segment.first_entry_id for segment in segments]
        self._active = segments[-1]
        self._size_bytes = sum(segment.size for segment in segments)
        next_id = self._active.end_entry_id
        self._next_id = next_id
        self._write_next = next_id  # id of the oldest entry not yet written
        self._synced_id = next_id - 1  # highest entry id covered by an fdatasync
        self._confirmed_id = next_id - 1
        self._cache = EntryCache(config.cache_max_bytes, next_id)

        self._state = _State.OPEN
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[bytes] = []  # appended, not yet written (ids from _write_next)
        self._callbacks: deque[tuple[int, Callable[[int], None]]] = deque()
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()  # flush() calls
        self._write_scheduled = False
        self._roll_needed = False
        self._job: asyncio.Future[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._interval_due = False
        # Held by a worker around its system calls, and by the loop before it closes the
        # files, so a worker never syncs a descriptor that was closed (and maybe reused).
        self._io_lock = threading.Lock()
        self._io_closed = False

    def __repr__(self) -> str:
        return (f"<ManagedLedger {self.directory} entries {self.first_entry_id}.."
                f"{self._next_id - 1} confirmed {self._confirmed_id} {self._state.value}>")

    # ----------------------------------------------------------------- positions

    @property
    def first_entry_id(self) -> int:
        """Oldest entry still stored (== next_entry_id when the ledger is empty)."""
        return self._segments[0].first_entry_id

    @property
    def next_entry_id(self) -> int:
        """The id the next append gets; ids are never reused, even after a trim."""
        return self._next_id

    @property
    def last_confirmed_entry_id(self) -> int:
        """Highest entry id that is durable (per the sync policy) and readable; -1 if none."""
        return self._confirmed_id

    @property
    def last_written_entry_id(self) -> int:
        """Highest entry handed to the OS; -1 if none. Never below last_confirmed."""
        return self._write_next - 1

    @property
    def closed(self) -> bool:
        return self._state is _State.CLOSED

    @property
    def failed(self) -> bool:
        return self._state is _State.FAILED

    def entry_count(self) -> int:
        return self._next_id - self.first_entry_id

    def size_bytes(self) -> int:
        """Bytes in segment files (record headers included)."""
        return self._size_bytes

    # ---------------------------------------------------------------- write path

    def append(self, data: bytes, on_durable: Callable[[int], None] | None = None) -> int:
        """Queue ``data`` as the next entry and return its id at once.

        Call from the event loop thread.  ``on_durable(entry_id)`` runs on the loop, in
        append order, once the entry is durable under the sync policy;
        ``last_confirmed_entry_id`` covers the entry by then.  The ledger keeps a
        reference to ``data`` (no copy), so it must not be mutated afterwards.
        """
        if self._state is not _State.OPEN:
            raise self._unusable()
        size = len(data)
        if not 0 < size <= MAX_DATA_SIZE:
            raise ValueError(f"entry size {size} outside 1..{MAX_DATA_SIZE}")
        entry_id = self._next_id
        self._next_id = entry_id + 1
        self._pending.append(data)
        if on_durable is not None:
            self._callbacks.append((entry_id, on_durable))
        self._cache.put(entry_id, data)
        if not self._write_scheduled:
            # Everything appended during this loop iteration goes out in one writev.
            loop = asyncio.get_running_loop()
            self._loop = loop
            self._write_scheduled = True
            self._sync_load.writes_due += 1
            loop.call_soon(self._write_soon)
        return entry_id

    async def flush(self) -> None:
        """Return once everything appended so far is written and fdatasynced."""
        if self._state is _State.CLOSED or self._state is _State.FAILED:
            raise self._unusable()
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._write_pending()
        if self.failed:
            raise self._unusable()
        target = self._next_id - 1
        if target <= self._synced_id:
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((target, waiter))
        self._maybe_start_job()
        await waiter

    def _unusable(self) -> StorageError:
        if self._state is _State.FAILED:
            error = LedgerFailed(f"{self.directory}: ledger failed: {self.error!r}")
            error.__cause__ = self.error
            return error
        return LedgerClosed(f"{self.directory}: ledger is closed")

    def _write_soon(self) -> None:
        self._write_scheduled = False
        self._sync_load.writes_due -= 1
        self._write_pending()

    def _write_pending(self) -> None:
        """Write the queued entries that fit the active segment, with one writev."""
        pending = self._pending
        if not pending or self._roll_needed or self._state is _State.FAILED \
                or self._state is _State.CLOSED:
            return
        segment = self._active
        limit = self.config.segment_max_bytes
        start = segment.size
        offset = start
        parts: list[bytes] = []
        new_offsets: list[int] = []
        pack = HEADER.pack
        for data in pending:
            record_size = HEADER_SIZE + len(data)
            if offset and offset + record_size > limit:
                break  # an empty segment takes any record, however big
            parts.append(pack(len(data), crc32c(data)))
            parts.append(data)
            new_offsets.append(offset)
            offset += record_size
        count = len(new_offsets)
        if count:
            if offset > segment.allocated and self._reserve_max:
                self._reserve(segment, offset)
            try:
                pwritev_all(segment.fd, parts, start)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    # Leave no partial record behind: recovery would stop at it.
                    os.ftruncate(segment.fd, start)
                    segment.allocated = start
                self._fail(exc)
                return
            segment.offsets.extend(new_offsets)
            segment.size = offset
            self._size_bytes += offset - start
            self.stats.writes += 1
            self.stats.bytes_written += offset - start
            self._write_next += count
            if count == len(pending):
                self._pending = []
            else:
                del pending[:count]
        if self._pending:
            self._roll_needed = True
        if count and self.on_written is not None:
            try:
                self.on_written(self._write_next - 1)
            except Exception:
                logger.exception("%s: on_written callback failed", self.directory)
        if not self._always and count:
            self._confirm(self._write_next - 1)
            if self._state is _State.OPEN or self._state is _State.CLOSING:
                self._arm_timer()
        self._maybe_start_job()

    def _reserve(self, segment: Segment, end: int) -> None:
        """Grow the zero-filled reserve of ``segment`` to cover at least ``end``."""
        step = min(max(segment.allocated, 64 * 1024), self._reserve_max)
        target = max(end, min(segment.allocated + step, self.config.segment_max_bytes))
        if preallocate(segment.fd, segment.allocated, target):
            segment.allocated = target
        else:
            self._reserve_max = 0  # the file system cannot: plain appends from now on
            logger.info("%s: cannot reserve file space; appending without", self.directory)

    def _confirm(self, entry_id: int) -> None:
        """Advance last_confirmed to ``entry_id`` and run the callbacks it covers."""
        if entry_id <= self._confirmed_id:
            return
        self._confirmed_id = entry_id
        callbacks = self._callbacks
        while callbacks and callbacks[0][0] <= entry_id:
            confirmed, callback = callbacks.popleft()
            try:
                callback(confirmed)
            except Exception:
                logger.exception("%s: on_durable callback for entry %d failed",
                                 self.directory, confirmed)

    def _resolve_waiters(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._synced_id:
            _, waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _arm_timer(self) -> None:
        if self._timer is None and self._loop is not None \
                and self._write_next - 1 > self._synced_id:
            self._timer = self._loop.call_later(self.config.sync_interval, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._interval_due = True
        self._maybe_start_job()
        if self._job is None:
            self._interval_due = False  # nothing left to sync: a flush got there first

    def _maybe_start_job(self) -> None:
        """Start a roll or a sync on a worker thread if one is due and none is running."""
        if self._job is not None or self._loop is None:
            return
        if self._state is _State.FAILED or self._state is _State.CLOSED:
            return
        written = self._write_next - 1
        job: asyncio.Future[Any]
        if self._roll_needed:
            old = self._active
            path = segment_path(self._ledger_dir, old.end_entry_id)
            job = self._loop.run_in_executor(
                self._executor, self._roll_io, old.fd, old.size, path
            )
            job.add_done_callback(functools.partial(self._on_roll_done, written, path))
        elif written > self._synced_id and (self._always or self._interval_due or self._waiters):
            self._interval_due = False
            if (
                self._always
                and written - self._synced_id <= self.config.inline_sync_max_entries
                and self._sync_load.allows_inline(
                    self.config.inline_sync_max_seconds, self._write_scheduled
                )
            ):
                self._sync_inline(written)
                return
            job = self._loop.run_in_executor(self._executor, self._sync_io, self._active.fd)
            job.add_done_callback(functools.partial(self._on_sync_done, written))
        else:
            return
        self._job = job

    def _sync_inline(self, target: int) -> None:
        started = time.perf_counter()
        try:
            fdatasync(self._active.fd)
        except OSError as exc:
            self._fail(exc)
            return
        self._sync_load.observe(time.perf_counter() - started)
        self.stats.syncs += 1
        self.stats.inline_syncs += 1
        self._synced(target)

    def _sync_io(self, fd: int) -> float:
        """Worker thread: make everything written to the active segment durable;
        returns how long the fdatasync took."""
        with self._io_lock:
            if self._io_closed:
                raise LedgerClosed("ledger closed during sync")
            started = time.perf_counter()
            fdatasync(fd)
            return time.perf_counter() - started

    def _roll_io(self, old_fd: int, old_size: int, path: Path) -> int:
        """Worker thread: seal the full segment, then create and register its successor.

        The sealed file loses its reserved tail first: recovery takes zeros after the
        records for damage in any segment but the last.
        """
        with self._io_lock:
            if self._io_closed:
                raise LedgerClosed("ledger closed during roll")
            os.ftruncate(old_fd, old_size)
            fdatasync(old_fd)
            fd = create_segment_file(path)
            try:
                fsync_dir(path.parent)
            except BaseException:
                os.close(fd)
                raise
            return fd

    def _job_outcome(self, job: asyncio.Future[Any]) -> BaseException | None:
        """Common start of the job callbacks; returns the job's exception, if any."""
        self._job = None
        if job.cancelled():
            return LedgerClosed("sync cancelled")
        return job.exception()

    def _on_sync_done(self, target: int, job: asyncio.Future[Any]) -> None:
        exc = self._job_outcome(job)
        if self._state is _State.CLOSED or self._state is _State.FAILED:
            return
        if exc is not None:
            self._fail(exc)
            return
        self._sync_load.observe(job.result())
        self.stats.syncs += 1
        self._synced(target)

    def _on_roll_done(self, target: int, path: Path, job: asyncio.Future[Any]) -> None:
        exc = self._job_outcome(job)
        if self._state is _State.CLOSED or self._state is _State.FAILED:
            if exc is None:
                fd = job.result()
                assert isinstance(fd, int)
                os.close(fd)
            return
        if exc is not None:
            self._fail(exc)
            return
        fd = job.result()
        assert isinstance(fd, int)
        segment = Segment(path, self._active.end_entry_id, fd)
        self._segments.append(segment)
        self._firsts.append(segment.first_entry_id)
        self._active = segment
        self._roll_needed = False
        self.stats.syncs += 1
        self.stats.rolls += 1
        self._synced(target)
        self._write_pending()

    def _synced(self, target: int) -> None:
        """An fdatasync covering every entry up to ``target`` has completed."""
        if target > self._synced_id:
            self._synced_id = target
        if self._always:
            self._confirm(target)
        self._resolve_waiters()
        if self._state is _State.OPEN or self._state is _State.CLOSING:
            self._maybe_start_job()
            if not self._always:
                self._arm_timer()

    def _fail(self, exc: BaseException) -> None:
        """A write or sync failed: refuse further appends and fail the waiters."""
        if self._state is _State.FAILED or self._state is _State.CLOSED:
            return
        self._state = _State.FAILED
        self.error = exc
        logger.error("%s: storage failure, the ledger refuses appends from now on: %r",
                     self.directory, exc)
        self._pending = []
        self._callbacks.clear()
        self._cancel_timer()
        self._fail_waiters()
        if self.on_failure is not None:
            try:
                self.on_failure(exc)
            except Exception:
                logger.exception("%s: on_failure callback failed", self.directory)

    def _fail_waiters(self) -> None:
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(self._unusable())

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ----------------------------------------------------------------- read path

    def _check_readable(self) -> None:
        if self._state is _State.CLOSED:
            raise LedgerClosed(f"{self.directory}: ledger is closed")

    def _segment_for(self, entry_id: int) -> Segment:
        return self._segments[bisect_right(self._firsts, entry_id) - 1]

    def read(self, entry_id: int) -> bytes:
        """One entry, from the cache or the disk.

        Entries are readable once written to the OS (``last_written_entry_id``),
        which may be before they are durable (``last_confirmed_entry_id``); callers
        that must only see durable entries stop at the latter. Raises EntryNotFound
        if the entry was trimmed or is not written yet. Records written by this
        process are not CRC-checked on read: every record was checked when the
        ledger was opened or was written by this process.
        """
        self._check_readable()
        if entry_id >= self._write_next or entry_id < self.first_entry_id:
            raise EntryNotFound(entry_id)
        data = self._cache.get(entry_id)
        if data is not None:
            self.stats.cache_hits += 1
            return data
        self.stats.cache_misses += 1
        segment = self._segment_for(entry_id)
        return segment.read(entry_id - segment.first_entry_id)

    def read_range(self, start: int, max_count: int,
                   max_bytes: int = DEFAULT_READ_MAX_BYTES) -> list[bytes]:
        """Consecutive entries from ``start``, up to last_confirmed_entry_id.

        Stops after ``max_count`` entries or before exceeding ``max_bytes`` of data, but
        returns at least one entry when ``start`` is readable.  Returns [] when
        ``start`` is beyond last_confirmed_entry_id; raises EntryNotFound when
        ``start`` was trimmed (entries would otherwise come back under other ids).
        """
        self._check_readable()
        if start < self.first_entry_id:
            raise EntryNotFound(start)
        stop = min(self._confirmed_id, start + max_count - 1)
        out: list[bytes] = []
        budget = max_bytes
        entry_id = start
        cache = self._cache
        while entry_id <= stop:
            if entry_id >= cache.first_id:
                # The cache is a contiguous run up to the newest entry: all of the rest is in it.
                for data in cache.iter_from(entry_id, stop):
                    if len(data) > budget and out:
                        break
                    out.append(data)
                    budget -= len(data)
                    self.stats.cache_hits += 1
                break
            segment = self._segment_for(entry_id)
            last = min(stop, cache.first_id - 1, segment.last_entry_id)
            first_index = entry_id - segment.first_entry_id
            run = segment.read_run(first_index, last - segment.first_entry_id,
                                   budget, at_least_one=not out)
            self.stats.cache_misses += len(run)
            out.extend(run)
            budget -= sum(map(len, run))
            entry_id += len(run)
            if entry_id <= last:
                break  # the byte budget ran out inside this segment
        return out

    # ---------------------------------------------------------------------- trim

    def trim(self, before_entry_id: int) -> int:
        """Delete whole segments whose entries are all below ``before_entry_id``.

        Never the active segment.  Returns the number of entries removed.  Files go
        oldest first, so a crash part-way leaves a gap that recovery recognises.
        """
        self._check_readable()
        removed = 0
        segments = self._segments
        while len(segments) > 1 and segments[0].end_entry_id <= before_entry_id:
            segment = segments.pop(0)
            self._firsts.pop(0)
            removed += segment.count
            self._size_bytes -= segment.size
            segment.close()
            segment.path.unlink()
        if removed:
            self._cache.drop_before(self.first_entry_id)
        return removed

    def trim_consumed(self) -> int:
        """Trim what every durable cursor has acknowledged; keep everything without cursors.

        Dirty cursors are flushed first, so no trimmed entry lies beyond the position a
        cursor would be reloaded at after a crash.  Cursors persisted on disk but not
        opened (yet) count too.
        """
        self.flush_cursors()
        marks = [cursor.mark_delete for cursor in self.cursors.values()]
        for name in self.persisted_cursor_names():
            if name not in self.cursors:
                marks.append(ManagedCursor.load(self._cursor_path(name)).mark_delete)
        if not marks:
            return 0
        return self.trim(min(marks) + 1)

    # ------------------------------------------------------------------- cursors

    def _cursor_path(self, name: str) -> Path:
        return cursor_path(self.directory / "cursors", name)

    def open_cursor(self, name: str, initial_mark_delete: int) -> ManagedCursor:
        """The cursor ``name``: loaded if persisted, else created at ``initial_mark_delete``."""
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor
        path = self._cursor_path(name)
        if path.exists():
            cursor = ManagedCursor.load(path)
        else:
            cursor = ManagedCursor(name, path, initial_mark_delete)
            cursor.dirty = True
            cursor.flush()
        self.cursors[name] = cursor
        return cursor

    def rewind_cursors_past_end(self) -> list[str]:
        """Make every opened cursor acknowledge nothing past the end of the log.

        For readers that see entries before their fdatasync: if the machine lost
        such entries, their ids are handed out again and must not count as
        acknowledged. Returns the names of the cursors that were rewound.
        """
        last = self._next_id - 1
        rewound = []
        for cursor in self.cursors.values():
            ranges = cursor.individually_acked_ranges()
            if cursor.mark_delete <= last and not (ranges and ranges[-1][1] > last):
                continue
            logger.warning(
                "%s: cursor %s acknowledged past the end %d of the log; rewound",
                self.directory, cursor.name, last,
            )
            cursor.reset(min(cursor.mark_delete, last))
            cursor.flush()
            rewound.append(cursor.name)
        return rewound

    def delete_cursor(self, name: str) -> None:
        """Forget the cursor and remove its file (no error if there is none)."""
        self.cursors.pop(name, None)
        path = self._cursor_path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)

    def persisted_cursor_names(self) -> list[str]:
        """Names of the cursors on disk, so subscriptions can be reopened at startup."""
        names = []
        for path in sorted((self.directory / "cursors").iterdir()):
            name = cursor_name_from_file(path.name)
            if name is not None:
                names.append(name)
        return names

    def flush_cursors(self) -> None:
        """Persist every dirty cursor."""
        for cursor in list(self.cursors.values()):
            cursor.flush()

    # ----------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Flush entries and cursors, stop background work and close the files."""
        if self._state is _State.CLOSED:
            return
        if self._state is _State.OPEN:
            self._state = _State.CLOSING
        try:
            if self._state is _State.CLOSING:
                # A failure was logged already; closing must still release the files.
                with contextlib.suppress(LedgerFailed):
                    await self.flush()
            self.flush_cursors()
        finally:
            self._cancel_timer()
            while self._job is not None:
                await asyncio.wait([self._job])
            self._state = _State.CLOSED
            active = self._active
            if active.allocated > active.size and active.fd >= 0:
                with contextlib.suppress(OSError):  # tidiness only: recovery copes
                    os.ftruncate(active.fd, active.size)
            self._release()

    def delete(self) -> None:
        """Close the files and remove the whole directory; unwritten entries are dropped."""
        self._state = _State.CLOSED
        self._pending = []
        self._callbacks.clear()
        self._cancel_timer()
        self._fail_waiters()
        self._release()
        self.cursors.clear()
        shutil.rmtree(self.directory)

    def _release(self) -> None:
        # Wait for a running fdatasync (it holds the lock) before closing its descriptor.
        with self._io_lock:
            self._io_closed = True
            for segment in self._segments:
                segment.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # also drops the flock
            self._lock_fd = -1
