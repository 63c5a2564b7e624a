"""Deduplication's bookkeeping on its own: the sequence tracker on an injected clock,
the sequence ids an entry carries, the snapshot file, and a topic's deduplication on
a real ledger (snapshots every N entries, replay of the tail at load, the bound, what
replay leaves alone)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.features.dedup import (
    DUP,
    NOT_DUP,
    RAW_PRODUCER_NAME,
    UNKNOWN,
    DedupSettings,
    MessageDeduplication,
    SequenceTracker,
    highest_sequence_id,
    is_tracked,
)
from magnetar.protocol.frames import build_entry
from magnetar.protocol.pb import pb
from magnetar.storage import LedgerConfig, ManagedLedger
from magnetar.storage.dedup_snapshot import (
    DedupSnapshot,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from magnetar.storage.errors import StorageCorruption


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


# ------------------------------------------------------------ the tracker


def test_first_message_then_duplicate_pending_then_persisted() -> None:
    tracker = SequenceTracker(10, Clock())
    assert tracker.check("p", 0, 0) == NOT_DUP
    assert tracker.last_sequence_id("p") == 0
    # Pushed, not yet persisted: nobody can tell yet whether the copy will be stored.
    assert tracker.check("p", 0, 0) == UNKNOWN
    tracker.record_persisted("p", 0)
    assert tracker.check("p", 0, 0) == DUP
    assert tracker.check("p", 1, 1) == NOT_DUP
    assert tracker.check("p", 1, 1) == UNKNOWN  # 1 pending, 0 persisted
    assert tracker.check("p", 0, 0) == DUP  # at or below the persisted one
    assert tracker.check("other", 0, 0) == NOT_DUP  # per producer name


def test_gaps_are_allowed_and_lower_ids_refused() -> None:
    tracker = SequenceTracker(10, Clock())
    assert tracker.check("p", 10, 10) == NOT_DUP
    tracker.record_persisted("p", 10)
    assert tracker.check("p", 5, 5) == DUP
    assert tracker.check("p", 20, 24) == NOT_DUP  # a batch of 20..24
    tracker.record_persisted("p", 24)
    assert tracker.check("p", 22, 22) == DUP
    assert tracker.last_sequence_id("p") == 24
    assert tracker.last_sequence_id("unknown") == -1


def test_bound_forgets_the_longest_inactive_then_the_oldest() -> None:
    clock = Clock()
    tracker = SequenceTracker(3, clock)
    for name in ("a", "b", "c"):
        tracker.check(name, 0, 0)
        tracker.record_persisted(name, 0)
    clock.now += 1
    tracker.producer_removed("b")
    clock.now += 1
    tracker.producer_removed("a")
    tracker.check("d", 0, 0)  # over the bound: b has been gone longest
    assert set(tracker.pushed) == {"a", "c", "d"}
    assert set(tracker.persisted) == {"a", "c"}
    tracker.check("e", 0, 0)  # then a, the other inactive one
    assert set(tracker.pushed) == {"c", "d", "e"}
    tracker.check("f", 0, 0)  # none inactive: the one tracked longest
    assert set(tracker.pushed) == {"d", "e", "f"}
    assert tracker.evicted == 3
    assert tracker.check("c", 0, 0) == NOT_DUP  # forgotten: a resend is not recognised


def test_inactive_producers_expire_unless_they_come_back() -> None:
    clock = Clock()
    tracker = SequenceTracker(10, clock)
    for name in ("a", "b", "c"):
        tracker.check(name, 3, 3)
        tracker.record_persisted(name, 3)
    tracker.producer_removed("a")
    clock.now += 60_000
    tracker.producer_removed("b")
    tracker.producer_removed("never-published")  # not tracked: not remembered either
    assert "never-published" not in tracker.inactive
    clock.now += 30_000
    tracker.producer_added("b")  # b is back
    assert tracker.purge_inactive(60_000) == 1  # a: gone 90 s
    assert tracker.last_sequence_id("a") == -1
    assert tracker.last_sequence_id("b") == 3
    clock.now += 10**9
    assert tracker.purge_inactive(60_000) == 0  # b connected, c never left
    assert set(tracker.pushed) == {"b", "c"}


def test_restored_producers_count_as_inactive() -> None:
    clock = Clock()
    tracker = SequenceTracker(10, clock)
    tracker.restore("old", 7)
    assert tracker.last_sequence_id("old") == 7
    assert tracker.check("old", 7, 7) == DUP
    clock.now += 5_000
    assert tracker.purge_inactive(1_000) == 1
    assert tracker.last_sequence_id("old") == -1


# ------------------------------------------------------------ what an entry carries


def metadata(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", publish_time=1, **fields)  # type: ignore[arg-type]


def test_highest_sequence_id_of_messages_and_batches() -> None:
    assert highest_sequence_id(5, -1, metadata(sequence_id=5)) == 5
    # The official (C++-based) clients send neither highest id for a batch.
    assert highest_sequence_id(5, -1, metadata(sequence_id=5, num_messages_in_batch=4)) == 8
    # Java clients do: the larger one wins.
    assert highest_sequence_id(5, 20, metadata(sequence_id=5, num_messages_in_batch=4)) == 20
    assert highest_sequence_id(
        5, -1, metadata(sequence_id=5, num_messages_in_batch=2, highest_sequence_id=9)
    ) == 9


def test_only_the_last_chunk_and_no_marker_is_tracked() -> None:
    assert is_tracked(metadata(sequence_id=1))
    assert not is_tracked(metadata(sequence_id=1, chunk_id=0, num_chunks_from_msg=3))
    assert not is_tracked(metadata(sequence_id=1, chunk_id=1, num_chunks_from_msg=3))
    assert is_tracked(metadata(sequence_id=1, chunk_id=2, num_chunks_from_msg=3))
    assert not is_tracked(metadata(sequence_id=1, marker_type=1))


# ------------------------------------------------------------ the snapshot file


def test_snapshot_file_round_trip_and_corruption(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path)
    assert read_snapshot(path) is None
    write_snapshot(path, DedupSnapshot(41, {"a": 3, "b": 9}))
    assert read_snapshot(path) == DedupSnapshot(41, {"a": 3, "b": 9})
    path.write_bytes(b'{"version": 1, "position": 4')
    with pytest.raises(StorageCorruption):
        read_snapshot(path)


# ------------------------------------------------------------ on a real ledger


def entry(name: str, seq: int, **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1, **fields)  # type: ignore[arg-type]
    return build_entry(md.SerializeToString(), b"payload")


class Log:
    """A ledger with a topic's deduplication on top, fed as the publish path feeds it."""

    def __init__(self, directory: Path, settings: DedupSettings, clock: Clock) -> None:
        self.directory = directory
        self.settings = settings
        self.clock = clock
        self.ledger = ManagedLedger.open(directory, LedgerConfig())
        self.dedup = MessageDeduplication(
            "t", self.ledger, asyncio.get_running_loop(), clock, settings
        )

    async def publish(self, name: str, seq: int, count: int = 1, **fields: object) -> int:
        """Check, append and record as the broker's SEND path does; the verdict."""
        if count > 1:
            fields["num_messages_in_batch"] = count
        data = entry(name, seq, **fields)
        highest = seq + count - 1
        dedup = self.dedup
        tracked = dedup.enabled and is_tracked(pb.MessageMetadata(**fields))  # type: ignore[arg-type]
        if tracked:
            verdict = dedup.check(name, seq, highest)
            if verdict != NOT_DUP:
                return verdict
        self.ledger.append(
            data, (lambda entry_id: dedup.record(name, highest, entry_id)) if tracked else None
        )
        await self.ledger.flush()
        return NOT_DUP

    def raw(self, data: bytes) -> None:
        self.ledger.append(data)

    async def reopen(self) -> Log:
        await self.dedup.close()
        await self.ledger.close()
        log = Log(self.directory, self.settings, self.clock)
        log.dedup.apply(True)
        return log


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[Log]:
    opened = Log(tmp_path / "topic", DedupSettings(entries_interval=5), Clock())
    yield opened
    await opened.dedup.close()
    await opened.ledger.close()


async def test_first_enable_tracks_from_the_end_and_writes_its_start(log: Log) -> None:
    for seq in range(3):
        await log.publish("before", seq)  # published while off: not tracked
    log.dedup.apply(True)
    assert read_snapshot(log.dedup.path) == DedupSnapshot(2, {})
    assert log.dedup.last_sequence_id("before") == -1
    assert await log.publish("before", 0) == NOT_DUP


async def test_state_survives_a_reopen_through_snapshot_and_replay(log: Log) -> None:
    log.dedup.apply(True)
    for seq in range(12):  # snapshots due after the 5th and the 10th
        await log.publish("a", seq)
    await log.publish("b", 100, count=10)  # a batch of 100..109
    await log.dedup.close()  # waits for the snapshot being written, starts no other
    snap = read_snapshot(log.dedup.path)
    # The one after the 5th entry, or a later one if that was written in time.
    assert snap is not None and snap.position >= 4
    # Consistent with its position: what follows it is for the replay.
    assert snap.producers["a"] == min(snap.position, 11)
    assert ("b" in snap.producers) == (snap.position >= 12)
    reopened = await log.reopen()
    try:
        assert reopened.dedup.last_sequence_id("a") == 11
        assert reopened.dedup.last_sequence_id("b") == 109
        assert await reopened.publish("a", 11) == DUP
        assert await reopened.publish("b", 105) == DUP
        assert await reopened.publish("a", 12) == NOT_DUP
    finally:
        await reopened.dedup.close()
        await reopened.ledger.close()


async def test_replay_leaves_raw_entries_and_partial_chunks_alone(log: Log) -> None:
    log.dedup.apply(True)
    await log.publish("p", 4)
    log.raw(entry(RAW_PRODUCER_NAME, 1234))  # PIP-96 ingest: no producer sent it
    # A chunked message cut short by a crash: chunks 0 and 1 of 3 are stored.
    await log.publish("p", 5, chunk_id=0, num_chunks_from_msg=3, uuid="p-5")
    await log.publish("p", 5, chunk_id=1, num_chunks_from_msg=3, uuid="p-5")
    await log.ledger.flush()
    reopened = await log.reopen()
    try:
        assert reopened.dedup.last_sequence_id(RAW_PRODUCER_NAME) == -1
        assert reopened.dedup.last_sequence_id("p") == 4
        # The client resends the whole message; its last chunk completes it.
        for chunk in range(3):
            assert await reopened.publish(
                "p", 5, chunk_id=chunk, num_chunks_from_msg=3, uuid="p-5"
            ) == NOT_DUP
        assert reopened.dedup.last_sequence_id("p") == 5
    finally:
        await reopened.dedup.close()
        await reopened.ledger.close()


async def test_a_corrupt_snapshot_replays_the_whole_log(log: Log) -> None:
    log.dedup.apply(True)
    for seq in range(3):
        await log.publish("a", seq)
    log.dedup.path.write_bytes(b"not json")
    reopened = await log.reopen()
    try:
        assert reopened.dedup.enabled
        assert reopened.dedup.last_sequence_id("a") == 2
    finally:
        await reopened.dedup.close()
        await reopened.ledger.close()


async def test_turning_it_off_forgets_and_on_again_starts_afresh(log: Log) -> None:
    log.dedup.apply(True)
    await log.publish("a", 7)
    log.dedup.apply(False)
    assert not log.dedup.path.exists()
    assert log.dedup.last_sequence_id("a") == -1
    assert await log.publish("a", 7) == NOT_DUP  # off: stored again
    log.dedup.apply(True)
    assert log.dedup.last_sequence_id("a") == -1
    assert await log.publish("a", 7) == NOT_DUP
    assert await log.publish("a", 7) == DUP


async def test_time_snapshot_and_inactivity_purge(tmp_path: Path) -> None:
    clock = Clock()
    settings = DedupSettings(
        entries_interval=1000, snapshot_interval_s=60, inactivity_timeout_ms=600_000
    )
    log = Log(tmp_path / "topic", settings, clock)
    try:
        log.dedup.apply(True)
        await log.publish("a", 1)
        await log.publish("b", 2)
        log.dedup.tick()  # too early for a time snapshot
        assert read_snapshot(log.dedup.path) == DedupSnapshot(-1, {})
        clock.now += 61_000
        log.dedup.tick()
        await log.dedup.snapshot_now()
        assert read_snapshot(log.dedup.path) == DedupSnapshot(1, {"a": 1, "b": 2})
        log.dedup.producer_removed("a")
        clock.now += 601_000
        log.dedup.tick()  # a is forgotten, and the snapshot says so
        await log.dedup.snapshot_now()
        assert log.dedup.last_sequence_id("a") == -1
        assert read_snapshot(log.dedup.path) == DedupSnapshot(1, {"b": 2})
    finally:
        await log.dedup.close()
        await log.ledger.close()


async def test_a_write_in_flight_across_off_and_on_is_not_recorded(log: Log) -> None:
    log.dedup.apply(True)
    dedup = log.dedup
    assert dedup.check("a", 1, 1) == NOT_DUP
    log.ledger.append(entry("a", 1), lambda entry_id: dedup.record("a", 1, entry_id))
    dedup.apply(False)
    dedup.apply(True)  # starts after the entry in flight
    await log.ledger.flush()
    assert dedup.last_sequence_id("a") == -1
    assert await log.publish("a", 1) == NOT_DUP


async def test_a_trim_behind_the_snapshot_needs_no_new_one(log: Log) -> None:
    log.dedup.apply(True)  # snapshot at -1
    for seq in range(3):
        await log.publish("a", seq)  # recorded up to position 2
    await log.dedup.snapshot_now(trim_up_to=-1)  # consumers have not moved
    assert read_snapshot(log.dedup.path) == DedupSnapshot(-1, {})
    await log.dedup.snapshot_now(trim_up_to=1)  # entries 0 and 1 may go
    assert read_snapshot(log.dedup.path) == DedupSnapshot(2, {"a": 2})
