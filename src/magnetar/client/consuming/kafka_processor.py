"""A PIP-96 payload processor for entries that hold Kafka record batches (as KoP writes).

An entry tagged ``entry.format=kafka`` holds one or more Kafka v2 record batches
(:mod:`magnetar.client.consuming.kafka_records`); each data record becomes a message:

- value → ``value`` (a null value gives ``b""``);
- key → ``key``, decoded as UTF-8 with ``surrogateescape`` so that any bytes round-trip
  (``msg.key.encode("utf-8", "surrogateescape")``);
- headers → ``properties``, values decoded the same way (a null value gives ``""``;
  of repeated header keys the last wins);
- timestamp → ``event_time`` (the batch's max timestamp under LOG_APPEND_TIME; unset
  when the record has none); the record's Kafka offset → ``sequence_id``.

Message ids carry the record's index in the entry as batch index, so each record is
acknowledged on its own and the entry once all its records are. Transaction markers
(control batches) give no message. Entries in another format go to ``fallback``
(Pulsar's format by default), so one consumer reads a topic that mixes both.
"""

from __future__ import annotations

from collections.abc import Collection

from magnetar.client.consuming.kafka_records import read_record_batches
from magnetar.client.consuming.payload_processor import (
    DEFAULT_PROCESSOR,
    Emit,
    EntryContext,
    MessagePayload,
    PayloadProcessor,
)
from magnetar.client.schema import SchemaInfo

__all__ = ["ENTRY_FORMAT_PROPERTY", "KAFKA_FORMAT", "KafkaPayloadProcessor"]

ENTRY_FORMAT_PROPERTY = "entry.format"
KAFKA_FORMAT = "kafka"


class KafkaPayloadProcessor:
    """Decodes entries of Kafka record batches into messages, one per record.

    ``formats``: the ``entry.format`` values read as Kafka; ``verify_crc``: check
    each batch's CRC-32C (a mismatch fails the entry); ``fallback``: the processor of
    every other entry (``None``: such an entry fails).
    """

    __slots__ = ("fallback", "formats", "verify_crc")

    def __init__(
        self,
        *,
        formats: Collection[str] = (KAFKA_FORMAT,),
        verify_crc: bool = True,
        fallback: PayloadProcessor | None = DEFAULT_PROCESSOR,
    ) -> None:
        self.formats = frozenset(formats)
        self.verify_crc = verify_crc
        self.fallback = fallback

    def process(
        self,
        payload: MessagePayload,
        context: EntryContext,
        schema: SchemaInfo | None,
        emit: Emit,
    ) -> None:
        entry_format = context.get_property(ENTRY_FORMAT_PROPERTY)
        if entry_format not in self.formats:
            if self.fallback is None:
                raise ValueError(f"entry.format is {entry_format!r}, not one of "
                                 f"{sorted(self.formats)}")
            self.fallback.process(payload, context, schema, emit)
            return
        batches = [b for b in read_record_batches(payload.view, verify_crc=self.verify_crc)
                   if not b.is_control]
        total = sum(len(batch.records) for batch in batches)
        index = 0
        message_at = context.message_at
        for batch in batches:
            append_time = batch.max_timestamp if batch.log_append_time else None
            for record in batch.records:
                value = record.value
                msg = message_at(index, total, MessagePayload(b"" if value is None else value),
                                 False, schema)
                key = record.key
                if key is not None:
                    msg.key = key.decode("utf-8", "surrogateescape")
                if record.headers:
                    msg.properties = {
                        name: "" if data is None else data.decode("utf-8", "surrogateescape")
                        for name, data in record.headers
                    }
                timestamp = record.timestamp if append_time is None else append_time
                if timestamp >= 0:
                    msg.event_time = timestamp
                msg.sequence_id = record.offset
                emit(msg)
                index += 1

    def __repr__(self) -> str:
        return f"KafkaPayloadProcessor(formats={sorted(self.formats)})"
