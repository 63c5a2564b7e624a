"""A write task's rows built into batch entries from Arrow (no Spark, no broker): the
bytes are a batching producer's, byte for byte, and the cuts are where it would cut."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from magnetar.protocol.batch import build_batch, split_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.pb import pb
from magnetar.spark.row_entries import BatchEntry, batch_entries, row_metadata

EPOCH = datetime(1970, 1, 1)


def protobuf_batch(rows: list[tuple[bytes, str | None, dict[str, str] | None, int | None]]
                   ) -> bytes:
    """What the protobuf library and ``build_batch`` make of ``rows``."""
    messages = []
    for value, key, properties, event_time in rows:
        single = pb.SingleMessageMetadata()
        if key is not None:
            single.partition_key = key
        for k, v in (properties or {}).items():
            single.properties.add(key=k, value=v)
        if event_time is not None:
            single.event_time = event_time
        messages.append((single, value))
    return build_batch(messages)


def plain(entry: BatchEntry) -> bytes:
    if entry.compression is None:
        return entry.payload
    kind, size = entry.compression
    return decompress(kind, entry.payload, size)


@pytest.mark.parametrize("columns", ["value", "key", "properties", "all"])
def test_batches_are_byte_for_byte_what_protobuf_makes(columns: str) -> None:
    rnd = random.Random(columns)
    n = 1500
    values = [rnd.randbytes(rnd.choice([0, 1, 100, 127, 128, 300, 20_000])) for _ in range(n)]
    keys = [rnd.choice([None, "", "k", "ключ" * 40]) for _ in range(n)]
    props = [rnd.choice([None, {}, {"a": "b"}, {"x" * 200: "é", "c": ""}]) for _ in range(n)]
    times = [rnd.choice([None, datetime(2024, 1, 1, 0, 0, rnd.randrange(60), 1000 * i % 10**6),
                         EPOCH]) for i in range(n)]
    arrays: dict[str, Any] = {"value": pa.array(values, pa.binary())}
    if columns in ("key", "all"):
        arrays["__key"] = pa.array(keys, pa.string())
    if columns in ("properties", "all"):
        arrays["__messageProperties"] = pa.array(
            [None if p is None else list(p.items()) for p in props],
            pa.map_(pa.string(), pa.string()))
    if columns == "all":
        arrays["__eventTime"] = pa.array(times, pa.timestamp("us"))
    batch = pa.RecordBatch.from_pydict(arrays).slice(7)  # a slice: offsets not at 0
    rows = [(values[i],
             keys[i] if "__key" in arrays else None,
             props[i] if "__messageProperties" in arrays else None,
             None if "__eventTime" not in arrays or times[i] is None
             else (times[i] - EPOCH) // timedelta(milliseconds=1))
            for i in range(7, n)]
    for compression in (None, "lz4", "zstd"):
        entries = list(batch_entries(batch.column("value"), row_metadata(batch),
                                     compression, 100, 64 * 1024))
        start = 0
        for entry in entries:
            part = rows[start:start + entry.num_messages]
            assert plain(entry) == protobuf_batch(part)
            assert entry.key == part[0][1]
            assert len(split_batch(plain(entry), entry.num_messages)) == entry.num_messages
            start += entry.num_messages
        assert start == len(rows)


def test_cut_at_max_messages_or_at_the_row_reaching_max_bytes() -> None:
    values = pa.array([b"a" * 10] * 25, pa.binary())
    cut = [e.num_messages for e in batch_entries(values, row_metadata(
        pa.RecordBatch.from_arrays([values], names=["value"])), None, 10, 1 << 20)]
    assert cut == [10, 10, 5]
    # 35 bytes: the fourth row of 10 reaches it and ends the batch.
    cut = [e.num_messages for e in batch_entries(values, row_metadata(
        pa.RecordBatch.from_arrays([values], names=["value"])), None, 10, 35)]
    assert cut == [4, 4, 4, 4, 4, 4, 1]
    # A row larger than max_bytes goes alone.
    big = pa.array([b"x" * 100, b"y", b"z" * 100], pa.binary())
    cut = [e.num_messages for e in batch_entries(big, row_metadata(
        pa.RecordBatch.from_arrays([big], names=["value"])), None, 10, 50)]
    assert cut == [1, 2]


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string(), pa.large_binary()])
def test_string_and_large_value_columns(arrow_type: pa.DataType) -> None:
    texts = ["é" * i for i in range(30)]
    values = pa.array(texts, arrow_type)
    entries = list(batch_entries(values, row_metadata(
        pa.RecordBatch.from_arrays([values], names=["value"])), "lz4", 1000))
    assert len(entries) == 1
    assert plain(entries[0]) == protobuf_batch([(t.encode(), None, None, None) for t in texts])


def test_null_values_and_early_event_times_are_refused() -> None:
    values = pa.array([b"a", None], pa.binary())
    batch = pa.RecordBatch.from_arrays([values], names=["value"])
    with pytest.raises(ValueError, match="null 'value'"):
        list(batch_entries(values, row_metadata(batch), None, 10))
    values = pa.array([b"a"], pa.binary())
    batch = pa.RecordBatch.from_pydict({"value": values, "__eventTime": pa.array([-5])})
    with pytest.raises(ValueError, match="before 1970"):
        list(batch_entries(values, row_metadata(batch), None, 10))
