"""Readers of whole entries: an entry's metadata, its decompressed payload and its id,
with no message object per message.

A bulk consumer (the Spark source, a PIP-96 processor that converts a format into
columns) wants an entry as it is stored: one ``MessageMetadata`` and one payload, a
Pulsar batch of ``num_messages`` messages when it is batched, which it cuts itself
(:func:`magnetar.protocol.batch.split_batch`, or where the values of a batch without
keys or properties lie, :mod:`magnetar.protocol.batch_scan`).  An
:class:`EntryReader` is a reader whose consumer has a PIP-96 payload processor that
hands each entry on whole, so it shares everything a reader does: lookup,
reconnection, flow control, seeks, a reader's start position (an entry before it is
not delivered; the entry holding it is, whole), and the decompression of
:func:`~magnetar.client.payload_processor.process_entry`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from magnetar.client.consuming.reader import Reader
from magnetar.client.payload_processor import EntryContext, MessagePayload
from magnetar.client.schema import SchemaInfo
from magnetar.protocol.batch import split_batch
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import partition_index

if TYPE_CHECKING:
    from magnetar.client.client import Client
    from magnetar.client.message import Message

_parse_metadata = pb.MessageMetadata.FromString
# A reader acknowledges what it read now and then, as the official readers do (the Java
# reader acks each message cumulatively): a broker counts an exclusive consumer's
# unacknowledged entries (magnetar's stops dispatching at max_unacked_per_consumer,
# 50,000), and a reader that never acks would stall there.
ACK_EVERY = 1000


class Entry(NamedTuple):
    """One entry of a topic partition."""

    ledger_id: int
    entry_id: int
    partition: int
    metadata: pb.MessageMetadata
    payload: bytes  # decompressed

    @property
    def batched(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")

    @property
    def num_messages(self) -> int:
        return self.metadata.num_messages_in_batch if self.batched else 1

    @property
    def message_id(self) -> MessageId:
        """The entry's id (no batch index)."""
        return MessageId(self.ledger_id, self.entry_id, -1, self.partition)

    def messages(self) -> list[tuple[pb.SingleMessageMetadata | None, bytes]]:
        """``(single metadata, value)`` per message; ``None`` for an entry that is no
        batch (its ``metadata`` describes its one message)."""
        if self.batched:
            return split_batch(self.payload, self.metadata.num_messages_in_batch)  # type: ignore[return-value]
        return [(None, self.payload)]


class _WholeEntries:
    """A PIP-96 processor that makes one message of each entry: its payload whole, its
    metadata kept serialized (parsed by :meth:`EntryReader.read_next`)."""

    __slots__ = ()

    def process(self, payload: MessagePayload, context: EntryContext,
                schema: SchemaInfo | None, emit: object) -> None:
        emit(context.as_single_message(payload))  # type: ignore[operator]

    def __repr__(self) -> str:
        return "<whole entries>"


WHOLE_ENTRIES = _WholeEntries()


class EntryReader:
    """Reads a topic partition entry by entry (see the module's docstring)."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._partition = partition_index(reader.topic)
        self._last: tuple[int, int] | None = None  # the last entry read
        self._unacked = 0  # entries read since the last cumulative ack

    @classmethod
    async def create(
        cls,
        client: Client,
        topic: str,
        start_message_id: MessageId,
        *,
        start_message_id_inclusive: bool = False,
        receiver_queue_size: int = 100,
        subscription_role_prefix: str | None = None,
    ) -> EntryReader:
        """A reader of ``topic`` (one partition) from the entry of ``start_message_id``;
        ``receiver_queue_size`` counts entries."""
        reader = await client.create_reader(
            topic, start_message_id, start_message_id_inclusive=start_message_id_inclusive,
            receiver_queue_size=receiver_queue_size,
            subscription_role_prefix=subscription_role_prefix,
            payload_processor=WHOLE_ENTRIES,
        )
        return cls(reader)

    @property
    def topic(self) -> str:
        return self._reader.topic

    async def read_next(self, timeout: float | None = None) -> Entry:
        """The next entry; waits up to ``timeout`` seconds (forever if ``None``)."""
        msg: Message = await self._reader.read_next(timeout)
        meta = msg._meta
        assert isinstance(meta, bytes)  # as_single_message keeps the entry's metadata so
        ledger, entry = self._last = msg._position
        self._unacked += 1
        if self._unacked >= ACK_EVERY:
            self._unacked = 0
            await self._reader._consumer.acknowledge_cumulative(msg)
        return Entry(ledger, entry, self._partition, _parse_metadata(meta), msg.value)

    async def has_message_available(self) -> bool:
        """Whether an entry after the last one read exists (asks the broker).  The
        reader's own test compares message ids, and the last message of a batch has a
        batch index that an entry read whole never carries."""
        if self._last is None:
            return await self._reader.has_message_available()
        last = await self._reader._consumer.get_last_message_id()
        return (last.ledger_id, last.entry_id) > self._last

    async def seek(self, target: MessageId | int) -> None:
        self._last = None
        await self._reader.seek(target)

    async def close(self) -> None:
        await self._reader.close()
