"""Rows to entries: a writer's rows built into Pulsar batches, compressed, ready to
send whole (``Producer.send_entry_async``) instead of one ``send_async`` per message.

A batch is what a batching producer would send: ``[u32 size][SingleMessageMetadata]
[value]`` per message (:func:`magnetar.protocol.batch.build_batch`), each message's
key, properties and event time in its own metadata, compressed as a whole; consumers
read it as any batch.  Rows are cut into batches of at most ``max_messages`` messages
and about ``max_bytes`` bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from magnetar.protocol.batch import build_batch
from magnetar.protocol.compression import compress, compression_type
from magnetar.protocol.pb import pb
from magnetar.spark.rows import OutgoingRow

_Single = pb.SingleMessageMetadata


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One entry to send: its payload, its message count, how it was compressed."""

    payload: bytes
    num_messages: int
    compression: tuple[int, int] | None  # (kind, uncompressed size)
    key: str | None  # the first message's, the entry's as a batching producer sets it


def _single(key: str | None, properties: dict[str, str] | None,
            event_time: int | None) -> pb.SingleMessageMetadata:
    single = _Single()
    if key is not None:
        single.partition_key = key
    if properties:
        for k, v in properties.items():
            single.properties.add(key=k, value=v)
    if event_time is not None:
        single.event_time = event_time
    return single


def batch_entries(rows: list[OutgoingRow], compression: str | None, max_messages: int,
                  max_bytes: int = 128 * 1024) -> Iterator[BatchEntry]:
    """``rows`` (all for one topic) as batch entries, in order."""
    kind = compression_type(compression) if compression else 0
    start = 0
    total = len(rows)
    while start < total:
        stop = start
        size = 0
        while stop < total and stop - start < max_messages and (size < max_bytes
                                                                 or stop == start):
            size += len(rows[stop][0])
            stop += 1
        part = rows[start:stop]
        start = stop
        if all(key is None and not props and event is None for _, key, props, event, _ in part):
            singles = [(_Single(), value) for value, *_ in part]
        else:
            singles = [(_single(key, props, event), value)
                       for value, key, props, event, _ in part]
        data = build_batch(singles)
        key = part[0][1]
        if kind:
            yield BatchEntry(compress(kind, data), len(part), (kind, len(data)), key)
        else:
            yield BatchEntry(data, len(part), None, key)
