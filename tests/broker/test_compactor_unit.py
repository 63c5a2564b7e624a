"""The two-phase compactor on entries built as clients send them (unbatched, batched,
compressed), written to real compacted-ledger files: latest value per key, tombstones,
keyless messages, batches kept per message under their original batch index, and a
second compaction over the first one's output plus new entries."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.broker.features.compaction import (
    CompactionCancelled,
    compact,
    kept_part,
    parse_entry,
    run_compaction,
)
from magnetar.protocol.batch import build_batch, split_batch
from magnetar.protocol.compression import LZ4, NONE, ZSTD, compress, decompress
from magnetar.protocol.frames import build_entry, parse_payload
from magnetar.protocol.pb import pb
from magnetar.storage import LedgerConfig, ManagedLedger
from magnetar.storage.compacted_ledger import CompactedLedger, new_file_name
from magnetar.storage.log_snapshot import LogSnapshot

Entry = tuple[int, bytes]


def single(key: str | None, value: bytes | None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    if value is None:
        metadata.null_value = True
    return build_entry(metadata.SerializeToString(), value or b"")


def batch(messages: list[tuple[str | None, bytes | None]], compression: int = NONE) -> bytes:
    singles = []
    for key, value in messages:
        meta = pb.SingleMessageMetadata()
        if key is not None:
            meta.partition_key = key
        if value is None:
            meta.null_value = True
        singles.append((meta, value or b""))
    raw = build_batch(singles)
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1,
        num_messages_in_batch=len(messages), compression=compression,  # type: ignore[arg-type]
        uncompressed_size=len(raw),
    )
    return build_entry(metadata.SerializeToString(), compress(compression, raw))


def messages_of(entry: bytes) -> list[tuple[str | None, bytes, bool]]:
    """(key, value, compacted_out) of each message of a batch entry."""
    section = parse_payload(entry)  # the CRC must hold after a rewrite
    metadata = pb.MessageMetadata.FromString(section.metadata)
    raw = decompress(metadata.compression, section.payload, metadata.uncompressed_size)
    assert metadata.uncompressed_size == len(raw)
    return [
        (s.partition_key if s.HasField("partition_key") else None, payload, s.compacted_out)
        for s, payload in split_batch(raw, metadata.num_messages_in_batch)
    ]


def run(entries: list[Entry], tmp_path: Path, retain_null_key: bool = False,
        horizon: int | None = None) -> CompactedLedger:
    def sources() -> Iterator[Entry]:
        return iter(entries)

    result = compact(sources, tmp_path / new_file_name(1),
                     horizon if horizon is not None else entries[-1][0],
                     retain_null_key, threading.Event())
    return result.ledger


def test_latest_value_per_key_and_tombstones(tmp_path: Path) -> None:
    entries = [
        (0, single("a", b"a1")),
        (1, single("b", b"b1")),
        (2, single("a", b"a2")),
        (3, single("c", b"c1")),
        (4, single(None, b"no key")),
        (5, single("c", None)),  # the official client's tombstone: null_value
        (6, single("b", b"")),  # an empty value removes the key too, as in Pulsar
        (7, single("d", b"d1")),
    ]
    ledger = run(entries, tmp_path)
    try:
        assert [(p, e) for p, e in ledger.entries()] == [entries[2], entries[7]]
        assert ledger.horizon == 7
        assert ledger.retained(2) is None
    finally:
        ledger.close()


def test_keyless_messages_stay_when_asked(tmp_path: Path) -> None:
    entries = [(0, single(None, b"x")), (1, single("k", b"v")), (2, single(None, None))]
    ledger = run(entries, tmp_path, retain_null_key=True)
    try:
        assert [p for p, _ in ledger.entries()] == [0, 1]
    finally:
        ledger.close()


@pytest.mark.parametrize("compression", [NONE, LZ4, ZSTD])
def test_batches_keep_their_size_and_indexes(tmp_path: Path, compression: int) -> None:
    entries = [
        (0, batch([("a", b"a1"), ("b", b"b1"), ("c", b"c1")], compression)),
        (1, batch([("a", b"a2"), (None, b"nokey"), ("c", None)], compression)),
        (2, batch([("d", b"d1"), ("e", b"e1")], compression)),
    ]
    ledger = run(entries, tmp_path)
    try:
        kept = dict(ledger.entries())
        assert sorted(kept) == [0, 1, 2]
        # b survives in entry 0 at index 1; a and c are placeholders there.
        assert messages_of(kept[0]) == [(None, b"", True), ("b", b"b1", False), (None, b"", True)]
        assert ledger.retained(0) == 0b010
        assert messages_of(kept[1]) == [("a", b"a2", False), (None, b"", True), (None, b"", True)]
        assert ledger.retained(1) == 0b001
        assert kept[2] == entries[2][1]  # everything in it is latest: stored as it came
        assert ledger.retained(2) is None
    finally:
        ledger.close()


def test_a_batch_with_nothing_left_is_dropped(tmp_path: Path) -> None:
    entries = [(0, batch([("a", b"1"), ("b", b"1")])), (1, batch([("a", b"2"), ("b", b"2")]))]
    ledger = run(entries, tmp_path)
    try:
        assert [p for p, _ in ledger.entries()] == [1]
    finally:
        ledger.close()


def test_markers_and_unreadable_batches(tmp_path: Path) -> None:
    marker = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, marker_type=1)
    broken = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                num_messages_in_batch=3, partition_key="a")
    entries = [
        (0, build_entry(marker.SerializeToString(), b"")),
        (1, build_entry(broken.SerializeToString(), b"\x00\x00\x00\x05abc")),
        (2, single("a", b"later")),
    ]
    ledger = run(entries, tmp_path)
    try:
        # Pulsar: a batch that cannot be read "will be included in output" whole.
        assert [p for p, _ in ledger.entries()] == [1, 2]
        assert parse_entry(entries[0][1]).messages == []
    finally:
        ledger.close()


def test_a_second_compaction_reads_the_first_and_the_new_entries(tmp_path: Path) -> None:
    first = [
        (0, batch([("a", b"a1"), ("b", b"b1")], LZ4)),
        (1, single("c", b"c1")),
        (2, single("a", b"a2")),
    ]
    old = run(first, tmp_path)
    old.close()
    later = [(3, single("c", None)), (4, batch([("d", b"d1"), ("b", b"b2")], LZ4))]
    # A real log, from which the snapshot takes only what follows the horizon.

    async def build() -> LogSnapshot:
        ledger = ManagedLedger.open(tmp_path / "log", LedgerConfig())
        for _, entry in first + later:
            ledger.append(entry)
        await ledger.flush()
        snapshot = ledger.log_snapshot(3, 4)
        await ledger.close()
        return snapshot

    snapshot = asyncio.run(build())
    result = run_compaction(old.path, snapshot, tmp_path / new_file_name(2), 4, False,
                            threading.Event())
    try:
        kept = dict(result.ledger.entries())
        assert sorted(kept) == [2, 4]  # b1 lost to b2, c deleted, a2 and d1, b2 kept
        assert result.ledger.horizon == 4
        assert result.keys == 3
        assert result.entries_read == 5  # three kept by the first compaction, two new
        assert messages_of(kept[4]) == [("d", b"d1", False), ("b", b"b2", False)]
    finally:
        result.ledger.close()


def test_a_placeholder_is_never_taken_for_a_message(tmp_path: Path) -> None:
    """Compacting an already compacted batch again keeps it as it is."""
    entry = batch([("a", b"a1"), ("b", b"b1")])
    latest = {"b": (0, 1)}
    part = kept_part(0, entry, latest, False)
    assert part is not None
    rewritten, mask = part
    assert mask == 0b10
    again = kept_part(0, rewritten, latest, False)
    assert again == (rewritten, 0b10)


def test_cancelled_leaves_nothing(tmp_path: Path) -> None:
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(CompactionCancelled):
        compact(lambda: iter([(0, single("a", b"1"))]), tmp_path / new_file_name(1), 0,
                False, cancelled)
    assert list(tmp_path.iterdir()) == []
