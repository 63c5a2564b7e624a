"""Entries in the receiver queue: a MESSAGE frame kept undecoded until the application
takes it (:class:`RawEntry`), an entry a payload processor failed on
(:class:`FailedEntry`), and how many permits an entry cost (:func:`message_count`)."""

from __future__ import annotations

from typing import Protocol

from google.protobuf.message import DecodeError

from magnetar.client.consuming.acks import bits_from_words
from magnetar.client.consuming.dead_letter import DeadLetterCandidates
from magnetar.client.consuming.payload_processor import PayloadProcessingError
from magnetar.client.message import Message
from magnetar.protocol.client_codec import split_entry
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.pb import pb

_parse_metadata = pb.MessageMetadata.FromString


class EntryOwner(Protocol):
    """What the consumer asks of the topic consumer an entry came from (a
    :class:`~magnetar.client.consuming.topic_consumer.TopicConsumer`) when the
    application takes the entry."""

    _dead_letters: DeadLetterCandidates | None

    def decode(self, raw: RawEntry) -> list[Message]: ...

    def screen_dead_letters(self, raw: RawEntry, messages: list[Message]) -> list[Message]: ...


class RawEntry:
    """A MESSAGE frame waiting in the receiver queue, decoded when it is taken."""

    __slots__ = ("_consumer", "body", "command")

    def __init__(self, consumer: EntryOwner, command: pb.CommandMessage, body: bytes) -> None:
        self._consumer = consumer
        self.command = command
        self.body = body


class FailedEntry(RawEntry):
    """An entry its payload processor failed on, put back at the head of the queue
    (``batch_receive`` returned the messages before it first): taking it raises again."""

    __slots__ = ("error",)

    def __init__(self, consumer: EntryOwner, error: PayloadProcessingError) -> None:
        super().__init__(consumer, pb.CommandMessage(), b"")
        self.error = error


def message_count(raw: RawEntry) -> int:
    """How many messages of a received entry the broker charged to our permits (its
    batch size, or what its ``ack_set`` leaves; 1 if unreadable)."""
    try:
        metadata = _parse_metadata(split_entry(raw.body, verify_checksum=False)[0])
    except (ProtocolError, DecodeError):
        return 1
    n = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    ack_set = raw.command.ack_set
    if ack_set:  # (a mask of the words' width: n may be a lie of 2**31)
        return (bits_from_words(ack_set) & ((1 << min(n, 64 * len(ack_set))) - 1)).bit_count()
    return n
