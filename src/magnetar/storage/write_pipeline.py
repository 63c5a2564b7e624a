"""The write pipeline of a ledger: append, group commit, fsync jobs and segment rolls.

This is the broker's publish hot path:

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
  commit).  When the sync is done ``confirmed_id`` advances and the callbacks fire
  in order;
- under ``"interval"`` the callbacks fire right after the write and a timer runs an
  fdatasync every ``sync_interval`` seconds while there is unsynced data.

Rolling to a new segment is a worker job as well: cut the full segment's reserve,
fdatasync it, write its index, create its successor, fsync the directory.  Because a successor only
exists once its predecessor is durable, recovery may treat damage anywhere but in the
last segment as corruption.  At most one job (sync or roll) runs at a time for a
ledger.

After a sync (and its callbacks) the pipeline records how far the active segment is
durable (the synced-offset record, ``synced_offset.py``) at most every
``synced_record_interval`` seconds, in a job of its own that never delays a commit,
and on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from magnetar.storage.cache import EntryCache
from magnetar.storage.errors import LedgerClosed, LedgerFailed, StorageError
from magnetar.storage.fsutil import preallocate, pwritev_all
from magnetar.storage.grouped_syncs import sync_groups
from magnetar.storage.job_threads import DISK_JOBS, SETTLE_JOBS
from magnetar.storage.ledger_config import LedgerConfig, LedgerStats
from magnetar.storage.owed_syncs import OwedSyncs
from magnetar.storage.record import HEADER, HEADER_SIZE, MAX_DATA_SIZE, crc32c
from magnetar.storage.segment import Segment, segment_path
from magnetar.storage.segment_set import SegmentSet
from magnetar.storage.sync_jobs import SyncJobs
from magnetar.storage.sync_load import SyncLoad
from magnetar.storage.synced_offset import SyncedOffsetRecorder

logger = logging.getLogger("magnetar.storage")


class State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # close() is flushing: no appends, the pipeline still runs
    FAILED = "failed"  # a write or sync failed: no appends, reads still work
    CLOSED = "closed"


class WritePipeline:
    """Turns appends into durable records of the segment set's active segment.

    Loop thread only; fdatasync and segment creation run on worker threads and
    touch nothing but file descriptors.
    """

    def __init__(self, directory: Path, config: LedgerConfig, segments: SegmentSet,
                 cache: EntryCache, stats: LedgerStats, executor: Executor | None,
                 sync_load: SyncLoad, fdatasync: Callable[[int], None],
                 owed: OwedSyncs | None = None, fresh: bool = False) -> None:
        """``fresh``: the ledger's directory was made by this open (its synced-offset
        record holds nothing: it is made empty when its first sync settles what the
        ledger owes)."""
        self.directory = directory  # the ledger's, for messages
        self.config = config
        self.stats = stats
        self.on_failure: Callable[[BaseException], None] | None = None
        self.on_written: Callable[[int], None] | None = None
        self.error: BaseException | None = None
        self._segments = segments
        self._cache = cache
        self._jobs = SyncJobs(fdatasync, owed)  # a new ledger's owed fsyncs go first
        self._reserve_max = config.reserve_max_bytes
        self._sync_load = sync_load
        self._ledger_dir = segments.active.path.parent  # directory / "ledger", unparsed
        self._executor = executor
        self._always = config.sync_policy == "always"
        next_id = segments.active.end_entry_id
        self.next_id = next_id
        self.write_next = next_id  # id of the oldest entry not yet written
        self.synced_id = next_id - 1  # highest entry id covered by an fdatasync
        self.confirmed_id = next_id - 1

        self.state = State.OPEN
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[bytes] = []  # appended, not yet written (ids from write_next)
        self._callbacks: deque[tuple[int, Callable[[int], None]]] = deque()
        # (first entry id, monotonic time) of each write batch not yet confirmed in full:
        # one clock read per batch gives every entry's append-to-durable latency.
        self._batch_marks: deque[tuple[int, float]] = deque()
        # flush() calls, few and rare: a list (a deque's first block is ~600 bytes, and
        # a broker has a pipeline per loaded topic)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._write_scheduled = False
        self._roll_needed = False
        self._job: asyncio.Future[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._interval_due = False
        self._recorder = SyncedOffsetRecorder(
            directory, self._ledger_dir, config.synced_record_interval, executor, fresh
        )

    # ---------------------------------------------------------------- appending

    def append(self, data: bytes, on_durable: Callable[[int], None] | None = None) -> int:
        """See ``ManagedLedger.append``."""
        if self.state is not State.OPEN:
            raise self.unusable()
        size = len(data)
        if not 0 < size <= MAX_DATA_SIZE:
            raise ValueError(f"entry size {size} outside 1..{MAX_DATA_SIZE}")
        entry_id = self.next_id
        self.next_id = entry_id + 1
        self._pending.append(data)
        if on_durable is not None:
            self._callbacks.append((entry_id, on_durable))
        self._cache.put(entry_id, data)
        if not self._write_scheduled:
            # Everything appended during this loop iteration goes out in one writev.
            loop = self._loop
            if loop is None or not loop.is_running():
                # (Python 3.11's get_running_loop costs a getpid system call.)
                loop = self._loop = asyncio.get_running_loop()
            self._write_scheduled = True
            self._batch_marks.append((entry_id, time.monotonic()))
            self._sync_load.writes_due += 1
            loop.call_soon(self._write_soon)
        return entry_id

    async def flush(self) -> None:
        """Return once everything appended so far is written and fdatasynced."""
        if self.state is State.CLOSED or self.state is State.FAILED:
            raise self.unusable()
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._write_pending()
        if self.failed:
            raise self.unusable()
        target = self.next_id - 1
        if target <= self.synced_id:
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((target, waiter))
        self._maybe_start_job()
        await waiter

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    def unusable(self) -> StorageError:
        if self.state is State.FAILED:
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
        if not pending or self._roll_needed or self.state is State.FAILED \
                or self.state is State.CLOSED:
            return
        segment = self._segments.active
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
            self._segments.size_bytes += offset - start
            self.stats.writes += 1
            self.stats.bytes_written += offset - start
            self.write_next += count
            if count == len(pending):
                self._pending = []
            else:
                del pending[:count]
        if self._pending:
            self._roll_needed = True
        if count and self.on_written is not None:
            try:
                self.on_written(self.write_next - 1)
            except Exception:
                logger.exception("%s: on_written callback failed", self.directory)
        if not self._always and count:
            self._confirm(self.write_next - 1)
            if self.state is State.OPEN or self.state is State.CLOSING:
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
        """Advance confirmed_id to ``entry_id`` and run the callbacks it covers."""
        if entry_id <= self.confirmed_id:
            return
        self.confirmed_id = entry_id
        if self._batch_marks:
            self._observe_latency(entry_id)
        callbacks = self._callbacks
        while callbacks and callbacks[0][0] <= entry_id:
            confirmed, callback = callbacks.popleft()
            try:
                callback(confirmed)
            except Exception:
                logger.exception("%s: on_durable callback for entry %d failed",
                                 self.directory, confirmed)

    def _observe_latency(self, entry_id: int) -> None:
        """Count the entries up to ``entry_id`` in the write latency, a batch at a time."""
        marks = self._batch_marks
        now = time.monotonic()
        latency = self.stats.write_latency
        while marks and marks[0][0] <= entry_id:
            first, stamped = marks[0]
            batch_end = marks[1][0] - 1 if len(marks) > 1 else self.next_id - 1
            last = min(batch_end, entry_id)
            latency.observe(now - stamped, last - first + 1)
            if last == batch_end:
                marks.popleft()
            else:  # the rest of the batch is confirmed later
                marks[0] = (last + 1, stamped)

    def _resolve_waiters(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.synced_id:
            _, waiter = waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)

    def _arm_timer(self) -> None:
        if self._timer is None and self._loop is not None \
                and self.write_next - 1 > self.synced_id:
            self._timer = self._loop.call_later(self.config.sync_interval, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._interval_due = True
        self._maybe_start_job()
        if self._job is None:
            self._interval_due = False  # nothing left to sync: a flush got there first

    # ---------------------------------------------------------------- sync jobs

    def _maybe_start_job(self) -> None:
        """Start a roll or a sync on a worker thread if one is due and none is running."""
        if self._job is not None or self._loop is None:
            return
        if self.state is State.FAILED or self.state is State.CLOSED:
            return
        written = self.write_next - 1
        job: asyncio.Future[Any]
        if self._roll_needed:
            old = self._segments.active
            path = segment_path(self._ledger_dir, old.end_entry_id)
            job = self._run_job(self._jobs.roll, old, path)
            job.add_done_callback(functools.partial(self._on_roll_done, written, path))
        elif written > self.synced_id and (self._always or self._interval_due or self._waiters):
            self._interval_due = False
            if (
                self._always
                and written - self.synced_id <= self.config.inline_sync_max_entries
                and not self._jobs.owed.owed  # a new topic's directory fsyncs: a worker's
                and self._sync_load.allows_inline(
                    self.config.inline_sync_max_seconds, self._write_scheduled
                )
            ):
                self._sync_inline(written)
                return
            active = self._segments.active
            if self._executor is None and self._jobs.owed.owed:
                # A new ledger's first sync settles its directory fsyncs and files
                # first (owed_syncs.py): journal commits that take milliseconds each
                # when thousands of new topics are first written at once. Its own
                # threads, so that the plain syncs of topics written before never queue
                # behind them, in a group or in the disk-job threads' queue.
                job = SETTLE_JOBS.run(self._loop, self._jobs.sync, active.fd)
            elif self._executor is None and \
                    self._sync_load.mean_seconds <= self.config.inline_sync_max_seconds:
                # With the other ledgers' syncs of this loop turn, while syncs are fast
                # (a group waits for its slowest member): see grouped_syncs.py.
                job = sync_groups(self._loop).run(self._jobs.sync, active.fd)
            else:
                job = self._run_job(self._jobs.sync, active.fd)
            job.add_done_callback(functools.partial(
                self._on_sync_done, written, (active.first_entry_id, active.size)))
        else:
            return
        self._job = job
        self._sync_load.job_started(job)

    def _run_job(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` on a worker thread: the given executor's, or the process's
        disk-job threads (job_threads.py: a third of run_in_executor's CPU per job)."""
        assert self._loop is not None
        if self._executor is None:
            return DISK_JOBS.run(self._loop, fn, *args)
        return self._loop.run_in_executor(self._executor, fn, *args)

    def _sync_inline(self, target: int) -> None:
        active = self._segments.active
        started = time.perf_counter()
        try:
            self._jobs.fdatasync(active.fd)
        except OSError as exc:
            self._fail(exc)
            return
        self._sync_load.observe(time.perf_counter() - started)
        self.stats.syncs += 1
        self.stats.inline_syncs += 1
        position = (active.first_entry_id, active.size)
        self._synced(target)
        self._recorder.synced(*position)

    def _job_outcome(self, job: asyncio.Future[Any]) -> BaseException | None:
        """Common start of the job callbacks; returns the job's exception, if any."""
        self._job = None
        if job.cancelled():
            return LedgerClosed("sync cancelled")
        return job.exception()

    def _on_sync_done(self, target: int, position: tuple[int, int],
                      job: asyncio.Future[Any]) -> None:
        exc = self._job_outcome(job)
        if self.state is State.CLOSED or self.state is State.FAILED:
            return
        if exc is not None:
            self._fail(exc)
            return
        self._sync_load.observe(job.result())
        self.stats.syncs += 1
        self._synced(target)
        self._recorder.synced(*position)

    def _on_roll_done(self, target: int, path: Path, job: asyncio.Future[Any]) -> None:
        exc = self._job_outcome(job)
        if self.state is State.CLOSED or self.state is State.FAILED:
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
        self._segments.add(Segment(path, self._segments.active.end_entry_id, fd))
        self._roll_needed = False
        self.stats.syncs += 1
        self.stats.rolls += 1
        self._synced(target)
        self._write_pending()

    def _synced(self, target: int) -> None:
        """An fdatasync covering every entry up to ``target`` has completed."""
        if target > self.synced_id:
            self.synced_id = target
        if self._always:
            self._confirm(target)
        self._resolve_waiters()
        if self.state is State.OPEN or self.state is State.CLOSING:
            self._maybe_start_job()
            if not self._always:
                self._arm_timer()

    # ---------------------------------------------------------- failure, closing

    def _fail(self, exc: BaseException) -> None:
        """A write or sync failed: refuse further appends and fail the waiters."""
        if self.state is State.FAILED or self.state is State.CLOSED:
            return
        self.state = State.FAILED
        self.error = exc
        logger.error("%s: storage failure, the ledger refuses appends from now on: %r",
                     self.directory, exc)
        self._pending = []
        self._callbacks.clear()
        self._batch_marks.clear()
        self._cancel_timer()
        self._fail_waiters()
        if self.on_failure is not None:
            try:
                self.on_failure(exc)
            except Exception:
                logger.exception("%s: on_failure callback failed", self.directory)

    def _fail_waiters(self) -> None:
        while self._waiters:
            _, waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_exception(self.unusable())

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def stop(self) -> None:
        """End of close(): stop the timers, wait for the running jobs, become CLOSED,
        bring the synced-offset record up to date and give back the active segment's
        unused reserve."""
        self._cancel_timer()
        while self._job is not None:
            await asyncio.wait([self._job])
        failed = self.state is State.FAILED
        self.state = State.CLOSED
        await self._recorder.stop(write=not failed)
        active = self._segments.active
        if active.allocated > active.size and active.fd >= 0:
            # On a worker: a truncate waits for the file system's journal, which is
            # slow while many topics are created (a 43 ms loop stall with 10,000).
            loop = asyncio.get_running_loop()
            with contextlib.suppress(OSError):  # tidiness only: recovery copes
                await loop.run_in_executor(self._executor, os.ftruncate, active.fd, active.size)

    def abort(self) -> None:
        """Become CLOSED at once, dropping unwritten entries (the ledger is deleted)."""
        self.state = State.CLOSED
        self._pending = []
        self._callbacks.clear()
        self._batch_marks.clear()
        self._cancel_timer()
        self._recorder.stop_soon()
        self._fail_waiters()

    def close_files(self) -> None:
        """Close the segment files, once a running fdatasync (it holds the lock) is done."""
        self._jobs.close_files(self._segments.close_all)
        self._recorder.close()  # waits for a running record write
