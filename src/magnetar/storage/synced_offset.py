"""The synced-offset record of a ledger: how far its newest segment is known durable.

The file ``synced`` beside the segment files holds two 32-byte slots 4 KiB apart;
each is ``struct "<4sQQQI"`` = (magic, sequence number, first entry id of a segment,
byte offset in it, CRC32C of the rest).  Writes alternate between the slots, so a
torn write spoils at most the slot being written and the other still holds the
previous value; a reader takes the intact slot with the higher sequence number.

The record is written only after an fdatasync of the segment up to that offset has
completed, so whichever version of it survives a crash never claims more than was
durable: it is a lower bound that may lag behind (``SyncedOffsetRecorder`` writes it
at most every ``synced_record_interval`` seconds, in a job of its own that never
delays a commit, and on close).  Recovery takes a bad record below
it for damage rather than for a torn write.  A ledger without the file (written
before it existed, or with both slots unreadable) loads as before: any bad record in
the last segment is taken for a torn tail.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import struct
import threading
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from magnetar.storage.fsutil import fdatasync, fsync_dir
from magnetar.storage.record import crc32c
from magnetar.storage.synced_batch import record_batch

logger = logging.getLogger("magnetar.storage")

FILE_NAME = "synced"
_SLOT = struct.Struct("<4sQQQI")
_MAGIC = b"MGSO"
_STRIDE = 4096  # one slot per page: a torn page write cannot spoil both


@dataclass(frozen=True, slots=True)
class SyncedOffset:
    segment_first_entry_id: int  # names the segment (its file name)
    offset: int  # every record of that segment below this byte offset is durable
    seq: int


def _encode(seq: int, first: int, offset: int) -> bytes:
    body = _SLOT.pack(_MAGIC, seq, first, offset, 0)[: _SLOT.size - 4]
    return body + crc32c(body).to_bytes(4, "little")


def _decode(raw: bytes) -> SyncedOffset | None:
    if len(raw) < _SLOT.size:
        return None
    magic, seq, first, offset, crc = _SLOT.unpack_from(raw)
    if magic != _MAGIC or crc32c(raw[: _SLOT.size - 4]) != crc:
        return None
    return SyncedOffset(first, offset, seq)


def read_synced_offset(directory: Path) -> SyncedOffset | None:
    """The newest intact record in ``directory`` (a ledger's segment directory), if any."""
    try:
        raw = (directory / FILE_NAME).read_bytes()
    except FileNotFoundError:
        return None
    slots = [_decode(raw[start : start + _SLOT.size]) for start in (0, _STRIDE)]
    intact = [slot for slot in slots if slot is not None]
    return max(intact, key=lambda slot: slot.seq) if intact else None


def remove_synced_offset(directory: Path) -> bool:
    """Delete the record (the caller fsyncs the directory); True if there was one."""
    try:
        (directory / FILE_NAME).unlink()
    except FileNotFoundError:
        return False
    return True


class SyncedOffsetWriter:
    """Writes the record; one write at a time, from a worker thread or the loop."""

    def __init__(self, directory: Path, empty: bool = False) -> None:
        """``empty``: the file is known to hold no record (a new ledger's, made empty
        when what its ledger owes the disk settles: see owed_syncs.py), so it is not
        read."""
        self._directory = directory
        current = None if empty else read_synced_offset(directory)
        self._seq = current.seq if current is not None else 0
        self._fd = -1
        self._lock = threading.Lock()
        self._closed = False

    def write(self, segment_first_entry_id: int, offset: int) -> None:
        """Record that ``offset`` bytes of the segment are durable, and make the record
        durable too (its own fdatasync, never the segment's)."""
        with self._lock:
            if self._closed:
                return
            if self._fd < 0:  # its path is made here: most topics' ledgers never write
                path = os.path.join(self._directory, FILE_NAME)
                created = not os.path.exists(path)
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                if created:
                    fsync_dir(self._directory)
            self._seq += 1
            slot = _encode(self._seq, segment_first_entry_id, offset)
            os.pwrite(self._fd, slot, (self._seq % 2) * _STRIDE)
            fdatasync(self._fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class SyncedOffsetRecorder:
    """Keeps a write pipeline's record up to date, on the loop thread.

    ``synced`` is told what each completed sync covers; at most one write runs at a
    time, in the executor, and at most one starts per ``interval`` (a timer catches
    up with the latest position when the interval is over).
    """

    def __init__(self, owner: Path, directory: Path, interval: float,
                 executor: Executor | None, empty: bool = False) -> None:
        self._owner = owner  # the ledger, for messages
        self._writer = SyncedOffsetWriter(directory, empty)
        self._interval = interval
        self._executor = executor
        self._position: tuple[int, int] | None = None  # covered by the latest sync
        self._recorded: tuple[int, int] | None = None  # what the record says (or will)
        self._job: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # loop time of the next write
        self._stopped = False
        self._failing = False

    def synced(self, segment_first_entry_id: int, offset: int) -> None:
        """A sync of the segment up to ``offset`` completed (loop thread)."""
        self._position = (segment_first_entry_id, offset)
        self._maybe_write()

    def _maybe_write(self) -> None:
        position = self._position
        if self._stopped or position is None or position == self._recorded \
                or self._job is not None or self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now < self._due:
            self._timer = loop.call_at(self._due, self._on_timer)
            return
        self._due = now + self._interval
        self._recorded = position
        # With the other ledgers' writes of this loop turn: one worker hop for all.
        job = record_batch(loop, self._executor).submit(
            functools.partial(self._writer.write, *position)
        )
        job.add_done_callback(self._on_done)
        self._job = job

    def _on_timer(self) -> None:
        self._timer = None
        self._maybe_write()

    def _on_done(self, job: asyncio.Future[None]) -> None:
        self._job = None
        exc = None if job.cancelled() else job.exception()
        if exc is not None:
            # An older record (or none) is still true: a lower bound.  Retried after
            # the next sync; said once per run of failures.
            if not self._failing:
                logger.warning("%s: cannot write the synced-offset record: %r",
                               self._owner, exc)
            self._failing = True
            self._recorded = None
            return
        self._failing = False
        self._maybe_write()

    def stop_soon(self) -> None:
        """Start no more writes (a running one finishes)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def stop(self, write: bool) -> None:
        """Start no more writes, wait for the running one and, if ``write``, record
        the latest position now (on the loop: closing is not the hot path)."""
        self.stop_soon()
        while self._job is not None:
            await asyncio.wait([self._job])
        position = self._position
        if write and position is not None and position != self._recorded:
            try:
                self._writer.write(*position)
            except OSError as exc:
                logger.warning("%s: cannot write the synced-offset record: %r",
                               self._owner, exc)

    def close(self) -> None:
        self._writer.close()
