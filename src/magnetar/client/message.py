"""Messages as consumers see them, and the one place where an entry becomes messages.

:func:`payload_to_messages` is the PIP-96 seam: it turns an entry's metadata and
payload into ``(single metadata, payload)`` pairs (decompressing and splitting
batches).  A payload processor for non-Pulsar entry formats replaces this one
function; nothing else in the consumer looks inside a payload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.protocol.client_codec import split_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.client.acks import BatchAcker

# (entry metadata, payload bytes) -> [(single message metadata or None, payload)]
EntryPayloadProcessor = Callable[
    [pb.MessageMetadata, bytes], list[tuple[pb.SingleMessageMetadata | None, bytes]]
]


def payload_to_messages(
    metadata: pb.MessageMetadata, payload: bytes
) -> list[tuple[pb.SingleMessageMetadata | None, bytes]]:
    """Decompress an entry's payload and cut it into its messages (Pulsar's format).

    A non-batched entry gives one pair whose single metadata is ``None`` (the
    entry metadata describes the message).
    """
    if metadata.compression:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    if metadata.HasField("num_messages_in_batch"):
        return split_batch(payload, metadata.num_messages_in_batch)  # type: ignore[return-value]
    return [(None, payload)]


_new_object = object.__new__
_set_ledger = vars(MessageId)["ledger_id"].__set__
_set_entry = vars(MessageId)["entry_id"].__set__
_set_batch_index = vars(MessageId)["batch_index"].__set__
_set_partition = vars(MessageId)["partition"].__set__
_set_batch_size = vars(MessageId)["batch_size"].__set__


def new_id(ledger: int, entry: int, batch_index: int, partition: int, batch_size: int) -> MessageId:
    """``MessageId(...)`` without the frozen dataclass's slow ``__init__`` (hot path)."""
    mid: MessageId = _new_object(MessageId)
    _set_ledger(mid, ledger)
    _set_entry(mid, entry)
    _set_batch_index(mid, batch_index)
    _set_partition(mid, partition)
    _set_batch_size(mid, batch_size)
    return mid


class Message:
    """A received message.

    ``value`` is the payload bytes; ``key`` the partition key (``None`` if unset);
    ``properties`` a dict of str; ``publish_time`` and ``event_time`` are
    milliseconds since the epoch (``event_time`` is ``None`` when unset).
    """

    __slots__ = (
        "_acker",
        "_consumer",
        "event_time",
        "key",
        "message_id",
        "ordering_key",
        "producer_name",
        "properties",
        "publish_time",
        "redelivery_count",
        "schema_version",
        "sequence_id",
        "topic",
        "value",
    )

    def __init__(
        self,
        value: bytes,
        message_id: MessageId,
        topic: str,
        key: str | None = None,
        ordering_key: bytes | None = None,
        properties: dict[str, str] | None = None,
        event_time: int | None = None,
        publish_time: int = 0,
        redelivery_count: int = 0,
        producer_name: str = "",
        sequence_id: int = 0,
        schema_version: bytes | None = None,
        consumer: Any = None,
        acker: BatchAcker | None = None,
    ) -> None:
        # Positional on the consumer's hot path: keyword calls cost more.
        self.value = value
        self.message_id = message_id
        self.topic = topic
        self.key = key
        self.ordering_key = ordering_key
        self.properties = properties if properties is not None else {}
        self.event_time = event_time
        self.publish_time = publish_time
        self.redelivery_count = redelivery_count
        self.producer_name = producer_name
        self.sequence_id = sequence_id
        self.schema_version = schema_version
        self._consumer = consumer
        self._acker = acker

    # Method-style accessors with the official client's names.
    def data(self) -> bytes:
        return self.value

    def partition_key(self) -> str | None:
        return self.key

    def __repr__(self) -> str:
        preview = self.value[:32]
        return (
            f"<Message {self.message_id} topic={self.topic!r} key={self.key!r} "
            f"value={preview!r}{'...' if len(self.value) > 32 else ''}>"
        )
