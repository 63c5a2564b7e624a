"""PIP-96 payload processors: consumers that read entries not in Pulsar's format.

A consumer made with ``payload_processor=`` hands each entry it receives to the
processor instead of cutting it into messages itself::

    class Processor:
        def process(self, payload, context, schema, emit):
            if context.get_property("entry.format") == "csv":
                rows = payload.copy().splitlines()
                for index, row in enumerate(rows):
                    emit(context.message_at(index, len(rows), MessagePayload.wrap(row), False,
                                            schema))
            else:
                PayloadProcessor.DEFAULT.process(payload, context, schema, emit)

``payload`` is a :class:`MessagePayload` (the entry's payload, decompressed as its
metadata says, viewed without a copy; ``MessagePayload.wrap`` makes one of any
bytes-like object); ``context`` an :class:`EntryContext` (the entry's metadata, and the
factory of its messages, which decode values by ``schema`` when given one); ``emit``
takes each :class:`~magnetar.client.message.Message` in order. :data:`DEFAULT_PROCESSOR`
(also ``PayloadProcessor.DEFAULT``) decodes Pulsar's own format exactly as a
consumer without a processor does.

The messages an entry gives are what the application receives, filtered as usual
(messages already acknowledged, or before a reader's start). Messages made by
``message_at`` carry the batch index they were given, so each is acknowledged on its
own and the entry once all ``num_messages`` are. An entry that gives no message is
acknowledged. A processor that raises makes ``receive()`` raise
:class:`PayloadProcessingError` for that entry, whose ``entry`` (a message holding
the raw payload) can be acknowledged or negatively acknowledged; the messages it
emitted before raising are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from magnetar.client.consuming.acks import BatchAcker, Position
from magnetar.client.errors import PulsarError
from magnetar.client.message import DecodedMessage, EntryFields, Message, received
from magnetar.client.schema import SchemaInfo, value_decoder
from magnetar.protocol.batch import next_batched, split_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb

__all__ = [
    "DEFAULT_PROCESSOR",
    "EntryContext",
    "MessagePayload",
    "PayloadProcessingError",
    "PayloadProcessor",
]

log = logging.getLogger("magnetar.client.consumer")


Emit = Callable[[Message], None]


class MessagePayload:
    """A payload: ``view`` is a ``memoryview`` of its bytes (no copy), ``copy()`` the bytes.

    ``EntryContext.message_at(..., contains_metadata=True, ...)`` reads a Pulsar batch
    from it one message after the other (as Java reads a ``ByteBuf``), so the same
    payload is passed for every index.
    """

    __slots__ = ("_data", "_offset", "_view")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = data
        self._view: memoryview | None = None  # made on first use
        self._offset = 0  # where the next batched message starts

    @classmethod
    def wrap(cls, data: object) -> MessagePayload:
        """A payload of ``data``, any bytes-like object (``bytes``, ``bytearray``, a
        ``memoryview``, an ``array``, an ``mmap``...), viewed without a copy: what
        Java's ``MessagePayloadFactory.DEFAULT.wrap(...)`` does. A ``str`` is refused
        (encode it first: a payload is bytes)."""
        if isinstance(data, (bytes, bytearray)):
            return cls(data)
        if isinstance(data, str):
            raise TypeError("a payload is bytes: encode the str first (text.encode())")
        try:
            view = memoryview(data)  # type: ignore[arg-type]  # checked here, at run time
        except TypeError:
            raise TypeError(
                f"a payload wraps a bytes-like object, not {type(data).__name__}"
            ) from None
        # Items of any size and shape, seen as the bytes they are.
        return cls(view if view.format == "B" and view.ndim == 1 else view.cast("B"))

    @property
    def view(self) -> memoryview:
        view = self._view
        if view is None:
            data = self._data
            view = self._view = data if isinstance(data, memoryview) else memoryview(data)
        return view

    def copy(self) -> bytes:
        """The payload's bytes (Java's ``copiedBuffer``)."""
        return self.view.tobytes()

    def __bytes__(self) -> bytes:
        return self.view.tobytes()

    def _value(self) -> bytes:
        """The bytes for a message's value: the payload's own ``bytes`` (immutable: no
        copy needed), else a copy."""
        data = self._data
        return data if type(data) is bytes else self.view.tobytes()

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"<MessagePayload of {len(self)} bytes>"

    def _next_single(self) -> tuple[pb.SingleMessageMetadata, bytes]:
        """The next ``[u32 size][SingleMessageMetadata][payload]`` of a Pulsar batch."""
        view = self.view
        single, start, end = next_batched(view, self._offset)
        self._offset = end
        return single, view[start:end].tobytes()


class _WithSchema(Protocol):
    @property
    def schema(self) -> SchemaInfo | None: ...


class EntryConsumer(Protocol):
    """What processing an entry needs of the topic consumer that received it (a
    :class:`~magnetar.client.consuming.topic_consumer.TopicConsumer`): its topic, its
    reader start, its batch ackers and permits, and its ack, discard and dequeue steps."""

    topic: str
    partition: int
    _start: MessageId | None
    _start_inclusive: bool
    _permits: int
    _batch_ackers: dict[Position, BatchAcker]

    @property
    def conf(self) -> _WithSchema: ...

    def _credit(self, count: int) -> None: ...

    def _discard(self, ledger: int, entry: int, reason: int, charged: int = 1) -> None: ...

    def _ack(self, position: Position, batch_index: int, acker: BatchAcker | None) -> None: ...

    def _on_dequeued(self, msg: Message) -> None: ...


class EntryContext:
    """One received entry: its metadata, and the factory of its messages.

    ``num_messages`` and ``is_batch`` read the entry's ``MessageMetadata``; they
    describe Pulsar's format only (another format may keep its count in the payload).
    """

    __slots__ = ("_acker", "_batched", "_consumer", "_metadata", "_metadata_bytes",
                 "_position", "_redelivery_count", "_shared")

    def __init__(
        self,
        consumer: EntryConsumer,
        metadata: pb.MessageMetadata,
        metadata_bytes: bytes,
        position: tuple[int, int],
        redelivery_count: int,
        batched: bool,
    ) -> None:
        self._consumer = consumer
        self._batched = batched
        self._metadata = metadata
        self._metadata_bytes = metadata_bytes
        self._position = position
        self._redelivery_count = redelivery_count
        self._acker: BatchAcker | None = None
        self._shared: EntryFields | None = None

    def get_property(self, key: str) -> str | None:
        """The entry's property ``key`` (e.g. ``"entry.format"``), or ``None``."""
        for kv in self._metadata.properties:
            if kv.key == key:
                return kv.value
        return None

    @property
    def properties(self) -> dict[str, str]:
        return {kv.key: kv.value for kv in self._metadata.properties}

    @property
    def num_messages(self) -> int:
        """``num_messages_in_batch``, or 1 when the entry is not a batch."""
        return self._metadata.num_messages_in_batch if self._batched else 1

    @property
    def is_batch(self) -> bool:
        return self._batched

    @property
    def metadata(self) -> pb.MessageMetadata:
        """The entry's whole ``MessageMetadata`` (do not modify it)."""
        return self._metadata

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def message_id(self) -> MessageId:
        """The entry's id (no batch index)."""
        ledger, entry = self._position
        return MessageId(ledger, entry, -1, self._consumer.partition)

    def message_at(
        self,
        index: int,
        num_messages: int,
        payload: MessagePayload,
        contains_metadata: bool,
        schema: SchemaInfo | None = None,
    ) -> Message:
        """Message ``index`` of ``num_messages`` made from this entry.

        Its id carries ``index`` as batch index and ``num_messages`` as batch size;
        the entry is acknowledged once all ``num_messages`` of it are. With
        ``contains_metadata`` the message is read from ``payload`` in Pulsar's batch
        format (its ``SingleMessageMetadata``, then its bytes: each call reads the
        next one); otherwise ``payload`` is the message's value, and its key,
        properties and event time are unset until the processor sets them
        (``msg.key = ...``). Publish time, producer name and the sequence id
        (the entry's plus ``index``, unless set) come from the entry. With a
        ``schema`` (the one ``process`` was given: the consumer's), the message's
        ``value`` is its bytes decoded by it (``SchemaInfo.decode``: AVRO, JSON,
        STRING, primitives) and ``data()`` the bytes; without one, or with BYTES,
        ``value`` is the bytes.
        """
        if not 0 <= index < num_messages:
            raise IndexError(f"message index {index} outside a batch of {num_messages}")
        acker = self._acker
        if acker is None or acker.size != num_messages:
            acker = self._acker = self._acker_for(num_messages)
        single: pb.SingleMessageMetadata | None
        if contains_metadata:
            single, value = payload._next_single()
        else:
            single, value = None, payload._value()
        shared = self._shared
        if shared is None:
            metadata = self._metadata
            shared = self._shared = (
                metadata.publish_time, metadata.schema_version or None, metadata.sequence_id
            )
        consumer = self._consumer
        decode = value_decoder(schema)
        if decode is None:
            return received(value, self._position, index, consumer.topic,
                            self._redelivery_count, consumer, acker,
                            self._metadata.producer_name, shared, single)
        return _decoded(decode, value, self._position, index, consumer.topic,
                        self._redelivery_count, consumer, acker, self._metadata.producer_name,
                        shared, single)

    def as_single_message(
        self, payload: MessagePayload, schema: SchemaInfo | None = None
    ) -> Message:
        """The entry as one message (no batch index) whose value is ``payload`` (decoded
        by ``schema``, as :meth:`message_at` does) and whose metadata fields are the
        entry's."""
        consumer = self._consumer
        decode = value_decoder(schema)
        if decode is None:
            return received(payload._value(), self._position, -1, consumer.topic,
                            self._redelivery_count, consumer, None,
                            self._metadata.producer_name, self._metadata_bytes, None)
        return _decoded(decode, payload._value(), self._position, -1, consumer.topic,
                        self._redelivery_count, consumer, None, self._metadata.producer_name,
                        self._metadata_bytes, None)

    def _pulsar_batch(self, payload: MessagePayload,
                      schema: SchemaInfo | None = None) -> list[Message]:
        """Every message of a Pulsar batch at once: what ``message_at(index, n, payload,
        True, schema)`` gives for each index, with one call instead of one per message
        (DEFAULT's hot path)."""
        count = self.num_messages
        offset = payload._offset
        data = payload._value() if not offset else payload.view[offset:].tobytes()
        items = split_batch(data, count)
        payload._offset = len(payload)
        acker = self._acker = self._acker_for(count)
        metadata = self._metadata
        shared = self._shared = (
            metadata.publish_time, metadata.schema_version or None, metadata.sequence_id
        )
        consumer = self._consumer
        position = self._position
        topic = consumer.topic
        redelivery_count = self._redelivery_count
        producer_name = metadata.producer_name
        decode = value_decoder(schema)
        if decode is not None:
            return [_decoded(decode, value, position, index, topic, redelivery_count,
                             consumer, acker, producer_name, shared, single)
                    for index, (single, value) in enumerate(items)]
        return [received(value, position, index, topic, redelivery_count, consumer, acker,
                         producer_name, shared, single)
                for index, (single, value) in enumerate(items)]

    def _acker_for(self, size: int) -> BatchAcker:
        """The entry's batch acker: the consumer keeps it across redeliveries, so that
        messages acknowledged before are recognised when the entry comes again."""
        ackers = self._consumer._batch_ackers
        acker = ackers.get(self._position)
        if acker is None or acker.size != size:
            acker = ackers[self._position] = BatchAcker(size)
        return acker


def _decoded(
    decode: Callable[[bytes], Any], data: bytes, position: tuple[int, int], index: int,
    topic: str, redelivery_count: int, consumer: Any, acker: BatchAcker | None,
    producer_name: str, meta: EntryFields | bytes, single: pb.SingleMessageMetadata | None,
) -> Message:
    """``received(...)`` with a value ``decode`` made of ``data``, which ``data()`` gives."""
    msg = received(decode(data), position, index, topic, redelivery_count, consumer, acker,
                   producer_name, meta, single, DecodedMessage)
    msg._data = data  # type: ignore[attr-defined]
    return msg


class PayloadProcessor(Protocol):
    """Turns an entry's payload into messages (PIP-96).

    ``PayloadProcessor.DEFAULT`` is :data:`DEFAULT_PROCESSOR`.
    """

    def process(
        self,
        payload: MessagePayload,
        context: EntryContext,
        schema: SchemaInfo | None,
        emit: Emit,
    ) -> None:
        """Call ``emit`` with each message of the entry, in order."""


class _DefaultPayloadProcessor:
    """Pulsar's own format, decoded as a consumer without a processor decodes it."""

    __slots__ = ()

    def process(
        self,
        payload: MessagePayload,
        context: EntryContext,
        schema: SchemaInfo | None,
        emit: Emit,
    ) -> None:
        if context._batched:  # is_batch, without the property call (hot path)
            # As Java's: emit(context.message_at(i, n, payload, True, schema)) for each
            # index, done in one call.
            for msg in context._pulsar_batch(payload, schema):
                emit(msg)
        else:
            emit(context.as_single_message(payload, schema))

    def __repr__(self) -> str:
        return "PayloadProcessor.DEFAULT"


DEFAULT_PROCESSOR: PayloadProcessor = _DefaultPayloadProcessor()
# Java's name; set here rather than in the class body, which would make it a member
# every processor must have.
PayloadProcessor.DEFAULT = DEFAULT_PROCESSOR  # type: ignore[attr-defined]


class PayloadProcessingError(PulsarError):
    """The payload processor failed on an entry (raised by ``receive()``).

    ``entry`` is the entry as one message (its raw payload as ``value``, its id
    without batch index): acknowledge it to skip the entry, or negatively
    acknowledge it to have it delivered again. ``__cause__`` is what the processor
    raised.
    """

    def __init__(self, message: str, entry: Message) -> None:
        super().__init__(message)
        self.entry = entry

    @property
    def message_id(self) -> MessageId:
        return self.entry.message_id


def process_entry(
    consumer: EntryConsumer,
    processor: PayloadProcessor,
    command: pb.CommandMessage,
    position: tuple[int, int],
    batched: bool,
    metadata: pb.MessageMetadata,
    metadata_bytes: bytes,
    payload: bytes,
) -> list[Message]:
    """The messages ``processor`` makes of a received entry, filtered as the consumer
    filters a batch (acknowledged messages, the broker's ``ack_set``, a reader's
    start); raises :class:`PayloadProcessingError` if the processor fails.

    Permits: the broker charged the entry's count (its ``num_messages_in_batch``, at
    least 1); each message the application takes gives one back, and the difference
    is settled here, so that a processor that makes more or fewer messages than that
    neither starves the consumer nor asks for more than its queue holds.
    """
    ledger, entry = position
    charged = max(metadata.num_messages_in_batch, 1) if batched else 1
    # PIP-54: of a partly acknowledged batch the broker sends (and charges permits for)
    # only the messages its ack_set leaves, as bits set.
    ack_set = command.ack_set if batched else None
    wanted_bits: int | None = None
    if ack_set:
        wanted_bits = _bits(ack_set) & ((1 << charged) - 1)
        charged = wanted_bits.bit_count()
    start = consumer._start
    at_start = start is not None and start.ledger_id == ledger
    if at_start and not batched and start is not None and _prior(
        entry, start.entry_id, consumer._start_inclusive
    ):
        consumer._credit(charged)  # before a reader's start, as without a processor
        return []
    if metadata.compression:
        try:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
        except ProtocolError as exc:
            log.error("%s: entry %d:%d cannot be decompressed (%s); discarding it",
                      consumer.topic, ledger, entry, exc)
            consumer._discard(ledger, entry, pb.CommandAck.DecompressionError)
            if charged > 1:
                consumer._credit(charged - 1)
            return []
    context = EntryContext(consumer, metadata, metadata_bytes, position,
                           command.redelivery_count, batched)
    made: list[Message] = []
    try:
        processor.process(MessagePayload(payload), context, consumer.conf.schema, made.append)
    except Exception as exc:
        failed = context.as_single_message(MessagePayload(payload))
        consumer._on_dequeued(failed)  # the application takes the entry as the error
        if charged > 1:
            consumer._credit(charged - 1)
        error = PayloadProcessingError(
            f"{consumer.topic}: payload processor {processor!r} failed on entry "
            f"{ledger}:{entry}: {exc!r}",
            failed,
        )
        raise error from exc
    if not made:
        # Nothing in it to consume (only a format's control records, say): done with it.
        log.debug("%s: entry %d:%d gave no message; acknowledging it",
                  consumer.topic, ledger, entry)
        consumer._credit(charged)
        consumer._ack(position, -1, None)
        return []
    acker = context._acker
    # Usually every message is wanted: the per-message tests only when one may not be.
    if at_start or wanted_bits is not None or (acker is not None and not acker.none_acked):
        made = _wanted(made, wanted_bits, start if at_start else None, entry,
                       consumer._start_inclusive)
        if not made and acker is not None and acker.complete:
            consumer._batch_ackers.pop(position, None)
    owed = charged - len(made)
    if owed > 0:
        consumer._credit(owed)
    elif owed < 0:
        consumer._permits += owed  # taking the extra messages must not ask for more
    return made


def _wanted(
    made: list[Message], wanted_bits: int | None, start: MessageId | None, entry: int,
    inclusive: bool,
) -> list[Message]:
    """The messages to hand out: not acknowledged here, left by the broker's ``ack_set``
    (when it sent one) and not before a reader's ``start``."""
    skip_prior = start is not None and start.entry_id == entry
    out = []
    for msg in made:
        index = msg._index
        acker = msg._acker
        if index < 0:
            if start is not None and _prior(entry, start.entry_id, inclusive):
                continue
        elif acker is not None and acker.is_acked(index):
            continue
        elif wanted_bits is not None and not (wanted_bits >> index) & 1:
            if acker is not None:
                acker.ack(index)  # acked at the broker: acking the others acks the entry
            continue
        elif skip_prior and start is not None and _prior(index, start.batch_index, inclusive):
            continue
        out.append(msg)
    return out


def _prior(index: int, start: int, inclusive: bool) -> bool:
    return index < start if inclusive else index <= start


def _bits(words: Iterable[int]) -> int:
    """Pulsar's ``ack_set`` (int64 words, lowest first) as one integer bitmask."""
    bits = 0
    for shift, word in enumerate(words):
        bits |= (word & 0xFFFFFFFFFFFFFFFF) << (64 * shift)
    return bits
