"""Message deduplication on a topic, as Pulsar's broker does it (MessageDeduplication).

With deduplication on, the broker remembers each producer's highest sequence id twice:
*pushed* (sent to the log, maybe not durable yet) and *persisted* (durable). A message
whose sequence id is not above the pushed one is a duplicate: if it is not above the
persisted one either, it is stored already and is answered at once with a send receipt
for message id -1:-1; otherwise its first copy is still being written, and it is
refused with a ``PersistenceError`` send error (Pulsar's MessageDupUnknownException),
on which clients reconnect and send it again. A producer learns its pushed sequence id
in ``PRODUCER_SUCCESS.last_sequence_id`` and continues from there.

The persisted map is snapshotted every ``entries_interval`` recorded entries, every
``snapshot_interval_s`` seconds if entries came meanwhile, and before retention trims
the log (storage/dedup_snapshot.py); loading a topic reads the snapshot and replays
the entries after it, so kill -9 loses nothing that was persisted. The map is bounded
to ``max_producers`` names, and the names of producers gone for
``inactivity_timeout_ms`` are forgotten.

Entries that no producer sent (PIP-96 raw entries) are neither checked nor recorded;
replay skips those of the raw ingest's own producer name. Of a chunked message only
the last chunk is checked and recorded (all chunks carry the message's sequence id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import parse_metadata, parse_payload
from magnetar.protocol.pb import pb
from magnetar.storage.dedup_snapshot import (
    DedupSnapshot,
    read_snapshot,
    remove_snapshot,
    snapshot_path,
    write_snapshot,
)
from magnetar.storage.errors import StorageCorruption

if TYPE_CHECKING:
    from pathlib import Path

    from magnetar.storage import ManagedLedger

log = logging.getLogger("magnetar.broker.dedup")

# Pulsar's MessageDupStatus
NOT_DUP = 0
DUP = 1
UNKNOWN = 2  # a copy is pushed but not persisted yet: the client must try again

# broker/features/raw_entries.py's default producer name (not imported: that module imports topics)
RAW_PRODUCER_NAME = "magnetar-raw-ingest"


@dataclass(frozen=True, slots=True)
class DedupSettings:
    """Pulsar's brokerDeduplication* settings."""

    max_producers: int = 10_000
    entries_interval: int = 1_000
    snapshot_interval_s: float = 120.0  # 0: no time-based snapshots
    inactivity_timeout_ms: int = 360 * 60_000


def highest_sequence_id(
    sequence_id: int, send_highest: int, metadata: pb.MessageMetadata
) -> int:
    """The highest sequence id an entry carries: the SEND's or the metadata's
    ``highest_sequence_id`` (Java clients set them for batches), and for a batch at
    least ``sequence_id + n - 1``: the official C++-based clients set neither, and a
    batch's messages have increasing sequence ids, so that is never too high."""
    highest = sequence_id
    if send_highest > highest:
        highest = send_highest
    if metadata.highest_sequence_id > highest:
        highest = metadata.highest_sequence_id
    count = metadata.num_messages_in_batch
    if count > 1 and sequence_id + count - 1 > highest:
        highest = sequence_id + count - 1
    return highest


def is_tracked(metadata: pb.MessageMetadata) -> bool:
    """False for entries deduplication leaves alone: markers and every chunk of a
    chunked message but its last (Pulsar checks only the last chunk)."""
    if metadata.HasField("marker_type"):
        return False
    return not (
        metadata.HasField("chunk_id") and metadata.chunk_id < metadata.num_chunks_from_msg - 1
    )


class SequenceTracker:
    """The pushed and persisted maps of one topic, bounded, with inactivity expiry.
    Pure bookkeeping: no files, no loop; ``clock_ms`` is injected."""

    def __init__(self, max_producers: int, clock_ms: Callable[[], int]) -> None:
        self.max_producers = max_producers
        self.clock_ms = clock_ms
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        # Producers not connected since (epoch ms), oldest first: purge stops early.
        self.inactive: dict[str, int] = {}
        self.evicted = 0

    def check(self, name: str, sequence_id: int, highest: int) -> int:
        """NOT_DUP (and ``highest`` is now pushed), DUP or UNKNOWN."""
        pushed = self.pushed
        last = pushed.get(name)
        if last is not None:
            if sequence_id <= last:
                persisted = self.persisted.get(name)
                return DUP if persisted is not None and sequence_id <= persisted else UNKNOWN
            pushed[name] = highest
            return NOT_DUP
        pushed[name] = highest
        if len(pushed) > self.max_producers:
            self._evict(keep=name)
        return NOT_DUP

    def record_persisted(self, name: str, highest: int) -> None:
        self.persisted[name] = highest
        if name not in self.pushed:  # evicted while its entry was being written
            self.pushed[name] = highest
            if len(self.pushed) > self.max_producers:
                self._evict(keep=name)

    def restore(self, name: str, highest: int) -> None:
        """From a snapshot or a replayed entry: pushed and persisted, and inactive
        (as Pulsar marks them) until the producer connects."""
        self.pushed[name] = highest
        self.persisted[name] = highest
        self.inactive.pop(name, None)
        self.inactive[name] = self.clock_ms()
        if len(self.pushed) > self.max_producers:
            self._evict(keep=name)

    def last_sequence_id(self, name: str) -> int:
        return self.pushed.get(name, -1)

    def producer_added(self, name: str) -> None:
        self.inactive.pop(name, None)

    def producer_removed(self, name: str) -> None:
        if name in self.pushed:  # untracked names would grow the map without bound
            self.inactive.pop(name, None)
            self.inactive[name] = self.clock_ms()

    def purge_inactive(self, timeout_ms: int) -> int:
        """Forget producers inactive for longer than ``timeout_ms``; how many."""
        cutoff = self.clock_ms() - timeout_ms
        expired = []
        for name, since in self.inactive.items():
            if since >= cutoff:
                break
            expired.append(name)
        for name in expired:
            self._forget(name)
        return len(expired)

    def _evict(self, keep: str) -> None:
        """Over the bound: forget the longest inactive producer, else the one tracked
        longest (its later resends would no longer be recognised)."""
        victim = next(iter(self.inactive), None)
        if victim is None or victim == keep:
            victim = next((n for n in self.pushed if n != keep), None)
        if victim is not None:
            self._forget(victim)
            self.evicted += 1

    def _forget(self, name: str) -> None:
        self.pushed.pop(name, None)
        self.persisted.pop(name, None)
        self.inactive.pop(name, None)


class MessageDeduplication:
    """Deduplication of one topic: off until :meth:`apply` turns it on. Loop thread only."""

    def __init__(
        self,
        topic_name: str,
        ledger: ManagedLedger,
        loop: asyncio.AbstractEventLoop,
        clock_ms: Callable[[], int],
        settings: DedupSettings | None = None,
    ) -> None:
        self.topic_name = topic_name
        self.ledger = ledger
        self.loop = loop
        self.clock_ms = clock_ms
        self.settings = settings or DedupSettings()
        self.enabled = False  # a plain attribute: read on every SEND
        self.tracker: SequenceTracker | None = None
        self.duplicates = 0  # answered as duplicates (receipt -1:-1)
        self.unknown = 0  # refused while their first copy was being written
        self._recorded = -1  # position of the last entry recorded
        self._snapshot_position = -1
        self._snapshot_ms = 0
        self._since_snapshot = 0
        self._writing: asyncio.Future[None] | None = None
        self._again = False  # a snapshot was due while one was being written
        self._closed = False

    @property
    def path(self) -> Path:
        """The topic's snapshot file (a property: a topic without deduplication, most
        of them, never builds it)."""
        return snapshot_path(self.ledger.directory)

    @property
    def status(self) -> str:
        """As Pulsar's topic stats name it."""
        return "Enabled" if self.enabled else "Disabled"

    # ------------------------------------------------------------ on and off

    def apply(self, should_be_enabled: bool) -> None:
        """Turn deduplication on (loading the snapshot and replaying the log after it)
        or off (forgetting the state and deleting the snapshot), as Pulsar's
        checkStatus does when a policy changes or the topic loads. Blocking file work,
        small and rare."""
        if should_be_enabled and not self.enabled and not self._closed:
            self._enable()
        elif not should_be_enabled:
            was = self.enabled
            self.enabled = False
            self.tracker = None
            if not self.ledger.created or was:
                # A ledger this load created has no snapshot: no unlink on the loop.
                remove_snapshot(self.path)
            if was:
                log.info("deduplication disabled on %s", self.topic_name)

    def _enable(self) -> None:
        tracker = SequenceTracker(self.settings.max_producers, self.clock_ms)
        ledger = self.ledger
        try:
            snapshot = read_snapshot(self.path)
        except StorageCorruption as exc:
            # Replaying the whole log rebuilds what the snapshot held.
            log.error("%s; replaying all of %s", exc, self.topic_name)
            snapshot = DedupSnapshot(ledger.first_entry_id - 1)
        replayed = 0
        if snapshot is None:
            # First time on: track from the end of the log, as a new dedup cursor does.
            # Written before anything is tracked, so a crash cannot lose the start.
            snapshot = DedupSnapshot(ledger.next_entry_id - 1)
            write_snapshot(self.path, snapshot)
        else:
            for name, sequence_id in snapshot.producers.items():
                tracker.restore(name, sequence_id)
            replayed = self._replay(tracker, snapshot.position)
        self.tracker = tracker
        self.enabled = True
        self._snapshot_position = self._recorded = snapshot.position
        self._snapshot_ms = self.clock_ms()
        self._since_snapshot = replayed
        log.info(
            "deduplication enabled on %s: %d producers tracked, %d entries replayed",
            self.topic_name, len(tracker.pushed), replayed,
        )
        if replayed >= self.settings.entries_interval:
            self._snapshot(self._recorded)

    def _replay(self, tracker: SequenceTracker, position: int) -> int:
        """Apply the entries after ``position`` that the log holds; how many."""
        ledger = self.ledger
        start = max(position + 1, ledger.first_entry_id)
        end = ledger.last_written_entry_id
        if position + 1 < ledger.first_entry_id:
            log.info(
                "%s: the dedup snapshot at %d predates the log's first entry %d",
                self.topic_name, position, ledger.first_entry_id,
            )
        for entry_id in range(start, end + 1):
            try:
                entry = parse_payload(ledger.read(entry_id), verify_checksum=False)
                metadata = parse_metadata(entry)
            except ProtocolError as exc:  # stored as received; a client's bad bytes
                log.warning("%s: entry %d skipped by dedup replay: %s",
                            self.topic_name, entry_id, exc)
                continue
            if is_tracked(metadata) and metadata.producer_name != RAW_PRODUCER_NAME:
                tracker.restore(
                    metadata.producer_name,
                    highest_sequence_id(metadata.sequence_id, -1, metadata),
                )
        if end >= start:
            self._recorded = end
        return max(0, end - start + 1)

    # ------------------------------------------------------------ publish path

    def check(self, name: str, sequence_id: int, highest: int) -> int:
        """NOT_DUP, DUP or UNKNOWN for a message about to be appended (enabled only)."""
        assert self.tracker is not None
        verdict = self.tracker.check(name, sequence_id, highest)
        if verdict == DUP:
            self.duplicates += 1
        elif verdict == UNKNOWN:
            self.unknown += 1
        return verdict

    def record(self, name: str, highest: int, entry_id: int) -> None:
        """The entry ``entry_id`` that ``check`` let through is durable."""
        tracker = self.tracker
        if tracker is None or entry_id <= self._recorded:
            return  # turned off meanwhile (and maybe on again: it was before the start)
        tracker.record_persisted(name, highest)
        self._recorded = entry_id
        self._since_snapshot += 1
        if self._since_snapshot >= self.settings.entries_interval:
            self._snapshot(entry_id)

    def last_sequence_id(self, name: str) -> int:
        """For PRODUCER_SUCCESS: the highest sequence id pushed (-1: none, or off)."""
        tracker = self.tracker
        return -1 if tracker is None else tracker.last_sequence_id(name)

    def producer_added(self, name: str) -> None:
        if self.tracker is not None:
            self.tracker.producer_added(name)

    def producer_removed(self, name: str) -> None:
        if self.tracker is not None:
            self.tracker.producer_removed(name)

    # ------------------------------------------------------------ snapshots

    def _snapshot(self, position: int) -> None:
        """Write the persisted map as of ``position`` on a worker thread (one at a time)."""
        tracker = self.tracker
        if tracker is None or self._closed:
            return
        self._since_snapshot = 0
        if self._writing is not None:
            self._again = True
            return
        snapshot = DedupSnapshot(position, dict(tracker.persisted))
        job = self.loop.run_in_executor(None, write_snapshot, self.path, snapshot)
        self._writing = job
        job.add_done_callback(lambda done: self._snapshot_written(done, position))

    def _snapshot_written(self, job: asyncio.Future[None], position: int) -> None:
        self._writing = None
        exc = None if job.cancelled() else job.exception()
        if exc is not None:
            log.warning("%s: writing the dedup snapshot failed: %s", self.topic_name, exc)
        elif self.enabled:
            self._snapshot_position = position
            self._snapshot_ms = self.clock_ms()
        else:
            remove_snapshot(self.path)  # turned off while it was written
            return
        if self._again:
            self._again = False
            if self._recorded > self._snapshot_position:
                self._snapshot(self._recorded)

    def _behind(self) -> bool:
        return self.enabled and self._recorded > self._snapshot_position

    async def snapshot_now(self, trim_up_to: int | None = None) -> None:
        """Snapshot what is recorded, if the snapshot is behind, and wait for it.
        Before retention trims the log up to ``trim_up_to`` (at most), so that the
        entries it removes are not needed for a replay: only when some of them came
        after the snapshot."""
        behind = self._behind()
        if behind and trim_up_to is not None:
            behind = trim_up_to > self._snapshot_position
        if behind:
            self._snapshot(self._recorded)
        while self._writing is not None:  # and the follow-up its callback starts
            await asyncio.shield(self._writing)

    def tick(self) -> None:
        """The periodic work: forget inactive producers; snapshot if it is time."""
        tracker = self.tracker
        if tracker is None:
            return
        settings = self.settings
        purged = tracker.purge_inactive(settings.inactivity_timeout_ms)
        if purged:
            log.info("%s: forgot %d inactive producers", self.topic_name, purged)
            self._snapshot(self._recorded)
            return
        interval_ms = settings.snapshot_interval_s * 1000
        if interval_ms > 0 and self._behind() and (
            self.clock_ms() - self._snapshot_ms >= interval_ms
        ):
            self._snapshot(self._recorded)

    async def close(self) -> None:
        """No more snapshots; wait for the one being written (the topic's directory
        may be deleted next)."""
        self._closed = True
        while self._writing is not None:
            try:
                await asyncio.shield(self._writing)
            except Exception:
                break
