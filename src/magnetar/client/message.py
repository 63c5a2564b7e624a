"""Messages as consumers see them, and the one place where an entry becomes messages.

:func:`payload_to_messages` turns an entry's metadata and payload into ``(single
metadata, payload)`` pairs (decompressing and splitting batches): Pulsar's format.
A consumer with a PIP-96 payload processor (:mod:`magnetar.client.consuming.payload_processor`)
has the processor make the messages instead, through the same :func:`received`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from magnetar.protocol.batch import split_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.client.consuming.acks import BatchAcker

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


_parse_metadata = pb.MessageMetadata.FromString
T = TypeVar("T")

# What the messages of a batch share: publish time, schema version and the sequence
# id of the first.
EntryFields = tuple[int, bytes | None, int]


class _MetadataField(Generic[T]):
    """A metadata field of a message. On a received message, the first read or write
    of any of them fills them all from the entry's metadata (a write fills first, so
    that a later read cannot undo it)."""

    __slots__ = ("slot",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    @overload
    def __get__(self, msg: None, owner: type) -> _MetadataField[T]: ...
    @overload
    def __get__(self, msg: Message, owner: type) -> T: ...
    def __get__(self, msg: Message | None, owner: type) -> T | _MetadataField[T]:
        if msg is None:
            return self
        if msg._meta is not None:
            msg._read_metadata()
        return getattr(msg, self.slot)  # type: ignore[no-any-return]

    def __set__(self, msg: Message, value: T) -> None:
        if msg._meta is not None:
            msg._read_metadata()
        setattr(msg, self.slot, value)


class Message:
    """A received message.

    ``value`` is the payload bytes; ``key`` the partition key (``None`` if unset);
    ``properties`` a dict of str; ``publish_time`` and ``event_time`` are
    milliseconds since the epoch (``event_time`` is ``None`` when unset).

    On a received message the id and the metadata fields are properties, built
    on first use (see :func:`received`); they read and write like attributes.
    """

    __slots__ = (
        "_acker",
        "_consumer",
        "_event_time",
        "_index",
        "_key",
        "_message_id",
        "_meta",
        "_ordering_key",
        "_position",
        "_properties",
        "_publish_time",
        "_schema_version",
        "_sequence_id",
        "_single",
        "producer_name",
        "redelivery_count",
        "topic",
        "value",
    )
    _message_id: MessageId | None
    _position: tuple[int, int]
    _index: int
    _meta: EntryFields | bytes | None
    _single: pb.SingleMessageMetadata | None

    key: _MetadataField[str | None] = _MetadataField()
    ordering_key: _MetadataField[bytes | None] = _MetadataField()
    properties: _MetadataField[dict[str, str]] = _MetadataField()
    event_time: _MetadataField[int | None] = _MetadataField()
    publish_time: _MetadataField[int] = _MetadataField()
    sequence_id: _MetadataField[int] = _MetadataField()
    schema_version: _MetadataField[bytes | None] = _MetadataField()

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
        self.value = value
        self.topic = topic
        self.redelivery_count = redelivery_count
        self._key = key
        self._ordering_key = ordering_key
        self._properties = properties if properties is not None else {}
        self._event_time = event_time
        self._publish_time = publish_time
        self.producer_name = producer_name
        self._sequence_id = sequence_id
        self._schema_version = schema_version
        self._consumer = consumer
        self._acker = acker
        self._meta = None
        self._single = None
        self.message_id = message_id

    @property
    def message_id(self) -> MessageId:
        mid = self._message_id
        if mid is None:
            ledger, entry = self._position
            acker = self._acker
            mid = self._message_id = new_id(ledger, entry, self._index, self._consumer.partition,
                                            0 if acker is None else acker.size)
        return mid

    @message_id.setter
    def message_id(self, value: MessageId) -> None:
        self._message_id = value
        # What an ack reads, so that it need not build the id.
        self._position = (value.ledger_id, value.entry_id)
        self._index = value.batch_index

    def _read_metadata(self) -> None:
        """Set every metadata field at once from ``_meta``, then let go of it."""
        meta = self._meta
        source: pb.MessageMetadata | pb.SingleMessageMetadata | None
        if isinstance(meta, bytes):  # a message of its own: all in the entry's metadata
            source = _parse_metadata(meta)
            self._publish_time = source.publish_time
            self._schema_version = source.schema_version or None
            self._sequence_id = source.sequence_id
        else:  # in a batch: the entry's fields, shared, and the message's own
            assert meta is not None  # (the descriptors call this only then)
            self._publish_time, self._schema_version, base = meta
            source = self._single
            if source is not None and source.HasField("sequence_id"):
                self._sequence_id = source.sequence_id
            else:
                self._sequence_id = base + self._index
        if source is None:  # a PIP-96 processor's message inside a batch: no metadata
            self._key = self._ordering_key = self._event_time = None
            self._properties = {}
        else:
            self._key = source.partition_key if source.HasField("partition_key") else None
            self._ordering_key = source.ordering_key or None
            self._event_time = source.event_time or None
            properties = source.properties
            self._properties = {kv.key: kv.value for kv in properties} if properties else {}
        self._meta = self._single = None

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


class DecodedMessage(Message):
    """A message a PIP-96 payload processor made with a schema: ``value`` is the
    payload decoded by it (see ``SchemaInfo.decode``), ``data()`` the payload's bytes."""

    __slots__ = ("_data",)
    _data: bytes

    def data(self) -> bytes:
        return self._data

    def __repr__(self) -> str:
        return f"<Message {self.message_id} topic={self.topic!r} key={self.key!r} " \
               f"value={self.value!r:.60}>"


def received(
    value: Any,
    position: tuple[int, int],
    index: int,
    topic: str,
    redelivery_count: int,
    consumer: Any,
    acker: BatchAcker | None,
    producer_name: str,
    meta: EntryFields | bytes,
    single: pb.SingleMessageMetadata | None,
    cls: type[Message] = Message,
) -> Message:
    """A message of a received entry (the consumer's hot path).

    Its id is built, and its metadata fields read, only when first asked for:
    most applications never look at most of them.  ``index`` is -1 outside a
    batch.  A lone message keeps its entry's metadata serialized (a parsed one
    holds over 1 KiB while the message lives) and parses it again when read; a
    message of a batch keeps the fields its entry's messages share and its own
    ``single`` metadata.
    """
    msg: Message = _new_object(cls)
    msg.value = value
    msg.topic = topic
    msg.redelivery_count = redelivery_count
    msg.producer_name = producer_name  # at once: a PIP-371 reply needs it
    msg._consumer = consumer
    msg._acker = acker
    msg._message_id = None
    msg._position = position
    msg._index = index
    msg._meta = meta
    msg._single = single
    return msg
