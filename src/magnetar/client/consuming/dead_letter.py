"""Dead-letter topics (PIP-106 in full): where a message goes once it failed too often.

Behaves as the Java client's ``ConsumerImpl``:

* A message delivered with a redelivery count of ``max_redeliver_count`` or more is a
  *candidate*: if it is negatively acknowledged (or its ack times out) once more, it is
  published to the dead-letter topic instead of being redelivered; one that arrives
  with a count above ``max_redeliver_count`` (its previous failure was not caught here,
  e.g. the consumer crashed) never reaches the application and goes there at once.
* Each message of a batch becomes a DLQ message of its own (those of the batch still
  unacknowledged), then the whole entry is acknowledged on the original subscription.
* A DLQ message carries the original payload, key, ordering key, properties and event
  time, plus ``REAL_TOPIC`` (the origin topic without its partition suffix) and
  ``ORIGIN_MESSAGE_ID``.
* The DLQ producer is created on first use (no batching, so each dead letter is
  receipted on its own). With ``initial_subscription_name`` that subscription is
  created on the DLQ topic first, so nothing published there is lost before anyone
  subscribes (PIP-124).

:class:`DeadLetterCandidates` is the sans-IO bookkeeping of one topic consumer;
:class:`LetterProducers` owns a consumer's DLQ and retry producers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from magnetar.client.consuming.acks import Position
from magnetar.client.errors import AlreadyClosed, ConsumerBusy
from magnetar.client.message import Message
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import partitioned_base

log = logging.getLogger("magnetar.client.dead_letter")

# Property names of the Java client's RetryMessageUtil, so that tools written for
# Apache Pulsar read magnetar's dead and retry letters unchanged.
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
# The Java client still writes its first, misspelt name of the property beside the
# new one "for compatibility with the old version"; so does magnetar.
LEGACY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_IDY_TIME"
DLQ_SUFFIX = "-DLQ"
RETRY_SUFFIX = "-RETRY"
# The Java client's max_redeliver_count when retries are enabled without a policy.
DEFAULT_MAX_RECONSUME_TIMES = 16
# The Java client gives a consumer with a dead-letter policy this ack timeout when it
# has none, so that a message the application never acknowledges comes back too.
DEFAULT_ACK_TIMEOUT_FOR_DEAD_LETTER = 30.0


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """Where messages go after ``max_redeliver_count`` failed deliveries.

    ``dead_letter_topic`` defaults to ``{topic}-{subscription}-DLQ`` (for a
    partitioned topic, the partition's name, as the Java client does),
    ``retry_letter_topic`` to ``{topic}-{subscription}-RETRY`` (used with
    ``subscribe(..., retry_enable=True)``). ``initial_subscription_name``: a
    subscription created on the DLQ topic before the first dead letter is published.
    """

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    retry_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        count = self.max_redeliver_count
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise ValueError(f"max_redeliver_count must be an integer > 0, not {count!r}")
        for name in ("dead_letter_topic", "retry_letter_topic", "initial_subscription_name"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None, not {value!r}")

    def dead_letter_topic_for(self, topic: str, subscription: str) -> str:
        return self.dead_letter_topic or f"{topic}-{subscription}{DLQ_SUFFIX}"

    def retry_letter_topic_for(self, topic: str, subscription: str) -> str:
        return self.retry_letter_topic or f"{topic}-{subscription}{RETRY_SUFFIX}"


def java_message_id(message_id: MessageId) -> str:
    """A message id as the Java client prints it (``ledger:entry:partition[:batch]``),
    the form ``ORIGIN_MESSAGE_ID`` has in Apache Pulsar."""
    text = f"{message_id.ledger_id}:{message_id.entry_id}:{message_id.partition}"
    if message_id.batch_index >= 0:
        text += f":{message_id.batch_index}"
    return text


def origin_properties(msg: Message) -> dict[str, str]:
    """The message's properties plus where it came from (kept if it already says:
    a retried message keeps naming its first topic and id)."""
    properties = dict(msg.properties)
    origin_id = java_message_id(msg.message_id)
    properties.setdefault(REAL_TOPIC, partitioned_base(msg.topic))
    properties.setdefault(LEGACY_ORIGIN_MESSAGE_ID, origin_id)
    properties.setdefault(ORIGIN_MESSAGE_ID, origin_id)
    return properties


class DeadLetterCandidates:
    """Received entries that go to the DLQ, not back to the broker, on their next failure.

    Sans-IO: the topic consumer screens what it decodes and asks, before it
    requests a redelivery, which entries to divert instead.
    """

    __slots__ = ("_entries", "max_redeliver_count")

    def __init__(self, max_redeliver_count: int) -> None:
        self.max_redeliver_count = max_redeliver_count
        self._entries: dict[Position, list[Message]] = {}

    def screen(self, position: Position, redelivery_count: int,
               messages: list[Message]) -> bool:
        """Note an entry just decoded. True: it failed more often than allowed and goes
        to the DLQ now, without reaching the application."""
        if redelivery_count < self.max_redeliver_count or not messages:
            return False
        self._entries[position] = messages
        return redelivery_count > self.max_redeliver_count

    def divert(self, positions: Iterable[Position]) -> tuple[dict[Position, list[Message]],
                                                             list[Position]]:
        """Split entries due for redelivery: those for the DLQ (they leave the
        candidates) and the rest."""
        entries = self._entries
        diverted: dict[Position, list[Message]] = {}
        rest: list[Position] = []
        for position in positions:
            messages = entries.pop(position, None)
            if messages is None:
                rest.append(position)
            else:
                diverted[position] = messages
        return diverted, rest

    def discard(self, position: Position) -> None:
        """The entry was acknowledged."""
        self._entries.pop(position, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, position: object) -> bool:
        return position in self._entries


def still_unacked(messages: list[Message]) -> list[Message]:
    """The messages of an entry that the application has not acknowledged yet."""
    return [m for m in messages
            if m._acker is None or m._index < 0 or not m._acker.is_acked(m._index)]


class LetterProducer(Protocol):
    """What a producer of letters is used for (:class:`~magnetar.client.Producer` is one)."""

    async def send(
        self,
        value: bytes,
        *,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        deliver_after: float | None = None,
    ) -> MessageId: ...

    async def close(self) -> None: ...


class Closable(Protocol):
    async def close(self) -> None: ...


class LetterFactory(Protocol):
    """Where letter producers come from (:class:`~magnetar.client.Client` is one): a
    producer of a topic, and a subscription to create the DLQ's initial one."""

    async def create_producer(
        self, topic: str, *, batching: bool = False, block_if_queue_full: bool = True
    ) -> LetterProducer: ...

    async def subscribe(
        self,
        topic: str,
        subscription: str,
        *,
        subscription_type: str = "exclusive",
        initial_position: str = "latest",
        receiver_queue_size: int = 1000,
    ) -> Closable: ...


class LetterProducers:
    """A consumer's producers of dead and retry letters, each created on first use.

    One producer per topic name: the partitions of a topic and the retry topic share
    a DLQ producer when they share the DLQ.
    """

    def __init__(self, client: LetterFactory, initial_subscription_name: str | None) -> None:
        self._client = client
        self._initial_subscription = initial_subscription_name
        self._producers: dict[str, LetterProducer] = {}
        self._creating: dict[str, asyncio.Lock] = {}
        self._closed = False

    async def producer(self, topic: str, *, dead_letters: bool) -> LetterProducer:
        existing = self._producers.get(topic)
        if existing is not None:
            return existing
        lock = self._creating.setdefault(topic, asyncio.Lock())
        async with lock:
            existing = self._producers.get(topic)
            if existing is not None:
                return existing
            if dead_letters and self._initial_subscription:
                await self._create_initial_subscription(topic, self._initial_subscription)
            # Unbatched, as the Java client's letter producers: each letter is receipted
            # before the original is acknowledged. A full queue fails the send (the
            # original is then redelivered) rather than blocking the consumer.
            producer = await self._client.create_producer(
                topic, batching=False, block_if_queue_full=False
            )
            if self._closed:
                await producer.close()
                raise AlreadyClosed(f"the consumer closed while its producer of {topic} started")
            self._producers[topic] = producer
            return producer

    async def _create_initial_subscription(self, topic: str, subscription: str) -> None:
        """Subscribe to the DLQ and leave (PIP-124's first implementation): the durable
        subscription stays and keeps every dead letter from the first one on."""
        try:
            consumer = await self._client.subscribe(
                topic, subscription, subscription_type="shared", initial_position="earliest",
                receiver_queue_size=1,
            )
        except ConsumerBusy:
            return  # someone holds it exclusively: it exists
        await consumer.close()

    async def send(self, topic: str, msg: Message, properties: Mapping[str, str], *,
                   dead_letters: bool, deliver_after: float | None = None) -> MessageId:
        """Publish a copy of ``msg`` (payload, key, ordering key, event time) with
        ``properties`` to ``topic``."""
        producer = await self.producer(topic, dead_letters=dead_letters)
        return await producer.send(
            msg.data(), key=msg.key, ordering_key=msg.ordering_key, properties=properties,
            event_time=msg.event_time, deliver_after=deliver_after,
        )

    async def close(self) -> None:
        self._closed = True
        producers = list(self._producers.values())
        self._producers.clear()
        await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)


async def send_dead_letters(letters: LetterProducers, topic: str,
                            entries: Mapping[Position, list[Message]]) -> list[Position]:
    """Publish the unacknowledged messages of each entry to the DLQ ``topic``;
    returns the entries whose every message is now there (the others failed and
    are logged)."""
    done: list[Position] = []
    for position, messages in entries.items():
        try:
            await asyncio.gather(*(
                letters.send(topic, m, origin_properties(m), dead_letters=True)
                for m in still_unacked(messages)
            ))
        except Exception as exc:  # the entry is redelivered and tried again
            log.warning("could not send entry %d:%d to the dead-letter topic %s: %s",
                        position[0], position[1], topic, exc)
            continue
        done.append(position)
    return done
