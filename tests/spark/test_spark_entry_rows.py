"""Entries to Arrow columns (spark/entry_rows.py) without a broker: whatever way an
entry goes (a plain batch cut by its spans, any other by split_batch, an entry that is
no batch), the rows are the messages split_batch finds, with the ids the official
clients serialise; a lying batch raises MalformedFrame."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from magnetar.client.entry_reader import Entry
from magnetar.client.schema import SchemaInfo
from magnetar.protocol.batch import build_batch, split_batch
from magnetar.protocol.batch_scan import PLAIN_METADATA
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.spark.entry_rows import PLAIN_MIN, EntryRows

Single = pb.SingleMessageMetadata
TOPIC = "persistent://public/default/rows"


def batch_entry(ledger: int, entry: int, singles: list[tuple[Single, bytes]],
                publish: int) -> Entry:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish,
                              num_messages_in_batch=len(singles))
    return Entry(ledger, entry, -1, meta, build_batch(singles))


def plain(n: int, seq: int, sizes: Iterator[int]) -> list[tuple[Single, bytes]]:
    return [(Single(sequence_id=seq + i), bytes([i % 251]) * next(sizes)) for i in range(n)]


def expected_rows(entries: list[tuple[Entry, int, int | None]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in (
        "value", "__key", "__messageId", "__publishTime", "__eventTime", "__messageProperties")}
    for entry, first, stop in entries:
        meta = entry.metadata
        if not meta.HasField("num_messages_in_batch"):
            messages: list[tuple[Any, bytes, int]] = [(meta, entry.payload, -1)]
            size = 0
        else:
            size = meta.num_messages_in_batch
            messages = [(s, v, i) for i, (s, v) in enumerate(split_batch(entry.payload, size))]
            messages = messages[first:stop]
        for single, value, index in messages:
            out["value"].append(value)
            out["__key"].append(single.partition_key.encode()
                                if single.HasField("partition_key") else None)
            out["__messageId"].append(
                MessageId(entry.ledger_id, entry.entry_id, index, -1, size).serialize())
            out["__publishTime"].append(meta.publish_time)
            out["__eventTime"].append(single.event_time if single.HasField("event_time")
                                      else None)
            out["__messageProperties"].append({kv.key: kv.value for kv in single.properties})
    return out


def rows_of(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    got = batch.to_pydict()
    got["__publishTime"] = [round(t.timestamp() * 1000) for t in got["__publishTime"]]
    got["__eventTime"] = [None if t is None else round(t.timestamp() * 1000)
                          for t in got["__eventTime"]]
    got["__messageProperties"] = [dict(p) for p in got["__messageProperties"]]
    assert set(got.pop("__topic")) == {TOPIC}
    return got


def read(entries: list[tuple[Entry, int, int | None]], every: int = 0) -> dict[str, list[Any]]:
    """The rows of ``entries`` (with index ranges), a record batch taken every
    ``every`` entries (0: one at the end)."""
    rows = EntryRows(TOPIC)
    out: dict[str, list[Any]] = {}
    for i, (entry, first, stop) in enumerate(entries, 1):
        rows.add(entry, first, stop)
        if every and i % every == 0:
            for k, v in rows_of(rows.take()).items():
                out.setdefault(k, []).extend(v)
    if len(rows):
        for k, v in rows_of(rows.take()).items():
            out.setdefault(k, []).extend(v)
    return out


def mixed_entries() -> list[tuple[Entry, int, int | None]]:
    rnd = random.Random(3)
    fixed = iter(lambda: 100, None)
    varied = iter(lambda: rnd.randrange(0, 300), None)
    keyed = [(Single(sequence_id=i, partition_key=f"k{i}" if i % 3 else "",
                     event_time=1000 + i if i % 4 else 0,
                     properties=[pb.KeyValue(key="i", value=str(i))] if i % 2 else []), b"k%d" % i)
             for i in range(40)]
    for single, _ in keyed:
        if not single.partition_key:
            single.ClearField("partition_key")
        if not single.event_time:
            single.ClearField("event_time")
    single_meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=7_000,
                                     partition_key="solo")
    return [
        (batch_entry(3, 0, plain(300, 500, fixed), 1_000), 0, None),     # strided
        (batch_entry(3, 1, plain(300, 0, fixed), 1_000), 0, None),       # ids cross 128
        (batch_entry(3, 2, plain(200, 9, varied), 2_000), 0, None),      # guessed
        (batch_entry(3, 3, plain(PLAIN_MIN - 1, 9, fixed), 2_000), 0, None),  # small
        (Entry(3, 4, -1, single_meta, b"alone"), 0, None),               # no batch
        (batch_entry(3, 5, keyed, 3_000), 0, None),                      # keys etc.
        (batch_entry(3, 6, plain(300, 500, fixed), 4_000), 17, 250),     # a part
        (batch_entry(3, 7, plain(200, 9, varied), 4_000), 150, None),
        (batch_entry(4, 0, plain(1000, 70_000, fixed), 5_000), 0, 1),
    ]


def test_every_kind_of_entry_gives_the_messages_split_batch_finds() -> None:
    entries = mixed_entries()
    want = expected_rows(entries)
    assert read(entries) == want
    assert read(entries, every=2) == want
    assert read(entries[::-1]) == expected_rows(entries[::-1])  # keys before plain rows


def test_plain_batches_alone_have_no_keys_properties_or_event_times() -> None:
    entries = [e for e in mixed_entries() if e[0].entry_id != 5 and e[0].entry_id != 4]
    rows = EntryRows(TOPIC)
    for entry, first, stop in entries:
        rows.add(entry, first, stop)
    batch = rows.take()
    assert batch.column("__key").null_count == batch.num_rows
    assert rows_of(batch) == expected_rows(entries)


def test_the_metadata_pattern_holds_in_arrows_regex_kernel() -> None:
    """Arrow's RE2 reads binary as Latin-1: the pattern must say the same there as in
    Python's re, for every byte."""
    good = [b"\x00\x00\x00\x04\x18\x05\x40" + bytes([b]) for b in range(0x80)]
    good += [b"\x00\x00\x00\x05\x18\x05\x40" + bytes([b, 1]) for b in range(0x80, 0x100)]
    good += [b"\xff\xff\xff\xff\x18" + bytes([b]) for b in range(0x80)]
    bad = [b"\x00\x00\x00\x04\x18\x05\x40" + bytes([b]) for b in range(0x80, 0x100)]
    bad += [b"\x00\x00\x00\x05\x18\x05\x40\x01" + bytes([b]) for b in range(0x100)]
    bad += [b"\x00\x00\x00\x02" + bytes([b, 5]) for b in range(0x100) if b != 0x18]
    bad += [b"\x00\x00\x00\x03\x18\x05\n", b"\x00\x00\x00\x02\x18",
            b"\x00\x00\x00\x03\x18\x05\x40",
            b"\x00\x00\x00\x0e\x18\x05\x40" + b"\x80" * 9 + b"\x01"]  # ten bytes
    matched = pc.match_substring_regex(pa.array(good + bad, pa.binary()), PLAIN_METADATA)
    assert matched.to_pylist() == [True] * len(good) + [False] * len(bad)


@pytest.mark.parametrize("cut", [lambda p: p[:-1], lambda p: p[:len(p) // 2],
                                 lambda p: b"\x00\x00\x10\x00" + p[4:],
                                 lambda p: p[:5] + b"\x7f" + p[6:]])  # a payload size
@pytest.mark.parametrize("seq", [500, 0])
def test_a_lying_batch_raises_malformed_frame(cut: Any, seq: int) -> None:
    good = batch_entry(1, 1, plain(300, seq, iter(lambda: 100, None)), 1)
    bad = good._replace(payload=cut(good.payload))
    rows = EntryRows(TOPIC)
    with pytest.raises(MalformedFrame):
        rows.add(bad)
    # A count above what the payload holds is a lie too.
    meta = pb.MessageMetadata()
    meta.CopyFrom(good.metadata)
    meta.num_messages_in_batch = 301
    with pytest.raises(MalformedFrame):
        rows.add(good._replace(metadata=meta))


def test_schema_values_are_decoded_from_plain_batches() -> None:
    info = SchemaInfo(name="s", type="INT64", schema=b"")
    singles = [(Single(sequence_id=900 + i), i.to_bytes(8, "big", signed=True))
               for i in range(-50, 50)]
    rows = EntryRows(TOPIC, value_schema=info)
    rows.add(batch_entry(1, 1, singles, 1))
    assert rows.take().column("value").to_pylist() == list(range(-50, 50))
