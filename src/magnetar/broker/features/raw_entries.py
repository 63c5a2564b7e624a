"""Raw entries (PIP-96 ingest): appending an entry whose payload the broker never reads.

A protocol handler writes entries in its own format straight into a topic's log
(Kafka-on-Pulsar tags its Kafka record batches ``entry.format=kafka``); an embedded
user or the admin API (``POST .../{topic}/entries``) can do the same here. The
broker writes a ``MessageMetadata`` around the payload and appends it like any
published entry: stored, retained and dispatched alike, and the call returns once
the entry is durable under the sync policy, as a send receipt would.

``num_messages`` becomes the metadata's ``num_messages_in_batch``: the count the
broker charges against consumers' permits and adds to its message counters, as it
does for a Pulsar batch. It need not describe a Pulsar batch: a raw entry always
carries an ``entry.format`` property (``raw`` unless the caller names one), so it is
foreign (shield.py), also after a restart, and consumers that cannot read foreign
entries get it as one message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from magnetar.broker.session.entry_checks import oversize_refusal
from magnetar.broker.topics.entry_info import info_from_metadata
from magnetar.broker.topics.shield import ENTRY_FORMAT_PROPERTY, RAW_FORMAT
from magnetar.broker.topics.topic import Topic, TopicUnavailable
from magnetar.protocol.client_codec import encode_message_metadata
from magnetar.protocol.frames import build_entry
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.errors import StorageError

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

RAW_PRODUCER_NAME = "magnetar-raw-ingest"
# How often a wait for durability looks whether the ledger failed (a failed ledger
# drops its durability callbacks, so the wait would not end otherwise).
_FAILURE_CHECK_INTERVAL = 0.5

_parse_metadata = pb.MessageMetadata.FromString
_U64_MAX = (1 << 64) - 1


class RawEntryRefused(Exception):
    """The entry was not appended; ``error`` is the Pulsar ``ServerError`` that says why."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class EntryTooLarge(RawEntryRefused):
    """The payload exceeds the broker's ``max_message_size``, or the entry with its
    metadata would go out in a MESSAGE frame over the consumers' frame limit."""

    def __init__(self, message: str) -> None:
        super().__init__(pb.NotAllowedError, message)


async def append_raw_entry(
    service: BrokerService,
    topic: str | TopicName,
    payload: bytes | bytearray | memoryview,
    *,
    num_messages: int | None = None,
    properties: Mapping[str, str] | None = None,
    key: str | None = None,
    ordering_key: bytes | None = None,
    event_time: int | None = None,
    producer_name: str = RAW_PRODUCER_NAME,
    sequence_id: int | None = None,
    create: bool = True,
) -> MessageId:
    """Append ``payload`` to ``topic`` as one entry; its id once it is durable.

    ``num_messages`` (1 to ``max_messages_per_batch``) is written as
    ``num_messages_in_batch``; ``None`` leaves it out (the entry is one message).
    ``properties`` carry the format tag, e.g. ``{"entry.format": "kafka"}`` (``raw``
    when they have none); ``key`` and ``ordering_key`` route the entry on Key_Shared
    subscriptions; ``event_time`` is in ms since the epoch. ``sequence_id`` (0 to
    2**64-1, as ``event_time``) defaults to the entry's position in the log. A topic
    that does not exist is created when ``create`` and the broker allows auto-creation.

    Raises ``ValueError`` for bad arguments or a partitioned topic (name one of its
    partitions), ``LookupError`` for a missing topic, :class:`EntryTooLarge`, and
    :class:`RawEntryRefused` for a terminated, unloading or failed topic. A raw entry
    is no producer: PIP-68 access modes do not apply to it.
    """
    _check_numbers(service.config.max_messages_per_batch, num_messages, sequence_id, event_time)
    name = topic if isinstance(topic, TopicName) else TopicName.parse(topic)
    data = bytes(payload)
    limit = service.config.max_message_size
    if len(data) > limit:
        raise EntryTooLarge(
            f"entry of {len(data)} bytes exceeds the maximum message size of {limit} bytes"
        )
    if properties is None or ENTRY_FORMAT_PROPERTY not in properties:
        properties = {**(properties or {}), ENTRY_FORMAT_PROPERTY: RAW_FORMAT}

    def metadata_for(default_sequence_id: int) -> bytes:
        return encode_message_metadata(
            producer_name.encode(),
            default_sequence_id if sequence_id is None else sequence_id,
            service.clock_ms(),
            properties=properties,
            partition_key=key,
            num_messages_in_batch=num_messages,
            event_time=event_time or 0,
            ordering_key=ordering_key,
        )

    # Properties and key count too: the whole frame must reach consumers. Judged
    # before the topic is loaded (or created), with the widest sequence id.
    too_large = oversize_refusal(
        len(build_entry(metadata_for(_U64_MAX), data)), num_messages or 1, limit
    )
    if too_large is not None:
        raise EntryTooLarge(too_large)
    loaded = await _topic_taking_entries(service, name, create)
    ledger = loaded.ledger
    metadata = metadata_for(ledger.next_entry_id)
    info = info_from_metadata(_parse_metadata(metadata))
    entry = build_entry(metadata, data)
    durable: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_durable(entry_id: int) -> None:
        if not durable.done():
            durable.set_result(entry_id)

    try:
        loaded.append_entry(entry, info, on_durable)
    except StorageError as exc:
        raise RawEntryRefused(pb.PersistenceError, f"{loaded.name}: {exc}") from None
    return loaded.message_id(await _durable(loaded, durable))


def _check_numbers(
    most: int, num_messages: int | None, sequence_id: int | None, event_time: int | None
) -> None:
    """ValueError for a message count outside 1..``most`` or a uint64 field out of range."""
    if num_messages is not None and num_messages < 1:
        raise ValueError(f"num_messages must be at least 1, not {num_messages}")
    if num_messages is not None and num_messages > most:
        raise ValueError(
            f"num_messages must be at most {most} (max_messages_per_batch), not {num_messages}"
        )
    for field, value in (("sequence_id", sequence_id), ("event_time", event_time)):
        if value is not None and not 0 <= value <= _U64_MAX:  # uint64 on the wire
            raise ValueError(f"{field} must be 0 to 2**64-1, not {value}")


async def _topic_taking_entries(service: BrokerService, name: TopicName, create: bool) -> Topic:
    """The topic, loaded (created when ``create``), if it takes entries now; else
    RawEntryRefused (LookupError, ValueError from loading pass through)."""
    try:
        loaded = await service.load_topic(name, create=create)
    except TopicUnavailable as exc:
        error = pb.PersistenceError if exc.storage_error else pb.ServiceNotReady
        raise RawEntryRefused(error, str(exc)) from None
    if loaded.closed:
        raise RawEntryRefused(pb.ServiceNotReady, f"topic {loaded.name} is being unloaded")
    if loaded.terminated:
        raise RawEntryRefused(pb.TopicTerminatedError, f"topic {loaded.name} is terminated")
    if loaded.failure:
        raise RawEntryRefused(pb.PersistenceError, loaded.failure)
    return loaded


async def _durable(loaded: Topic, durable: asyncio.Future[int]) -> int:
    """The entry's id once it is durable; RawEntryRefused if its ledger fails or closes
    first (checked every _FAILURE_CHECK_INTERVAL seconds)."""
    ledger = loaded.ledger
    while True:
        try:
            return await asyncio.wait_for(asyncio.shield(durable), _FAILURE_CHECK_INTERVAL)
        except TimeoutError:
            if ledger.failed or ledger.closed:
                raise RawEntryRefused(
                    pb.PersistenceError,
                    loaded.failure or f"{loaded.name}: the ledger closed before the entry "
                    "was durable",
                ) from None


def append_raw_entry_blocking(
    service: BrokerService,
    topic: str | TopicName,
    payload: bytes | bytearray | memoryview,
    *,
    timeout: float = 30.0,
    **fields: object,
) -> MessageId:
    """:func:`append_raw_entry` from another thread than the broker's loop (an
    ``EmbeddedBroker``'s caller): blocks until the entry is durable."""
    coro = append_raw_entry(service, topic, payload, **fields)  # type: ignore[arg-type]
    return asyncio.run_coroutine_threadsafe(coro, service.loop).result(timeout)
