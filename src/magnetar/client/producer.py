"""Producers as the application sees them: one per topic, routing to partitions.

:class:`Producer` picks a :class:`~magnetar.client.partition_producer.PartitionProducer`
for each message (one per partition of a partitioned topic, a single one
otherwise) and offers ``send``, ``send_async``, ``flush``, ``close``, the
PIP-371 ``request`` / ``request_async`` and the PIP-96 ``send_entry`` /
``send_entry_async``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from magnetar.client.partition_producer import (
    ACCESS_MODES,
    OutgoingMessage,
    PartitionProducer,
    ProducerConfig,
    Value,
    to_bytes,
)
from magnetar.client.request_reply import REQUEST_TIMEOUT_PROPERTY, ReplyResult
from magnetar.client.routing import Router
from magnetar.protocol.message_id import MessageId

if TYPE_CHECKING:
    from magnetar.client.client import Client

__all__ = ["ACCESS_MODES", "PartitionProducer", "Producer", "ProducerConfig", "Value"]


class Producer:
    """A producer of one topic (all partitions of it when it is partitioned)."""

    def __init__(
        self,
        client: Client,
        topic: str,
        partitions: list[PartitionProducer],
        router: Router,
        partitioned: bool,
    ) -> None:
        self._client = client
        self._topic = topic
        self._partitions = partitions
        self._router = router
        self._partitioned = partitioned
        self._closed = False

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def producer_name(self) -> str:
        return self._partitions[0].producer_name or ""

    @property
    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self._partitions)

    @property
    def topic_epoch(self) -> int | None:
        return self._partitions[0].topic_epoch

    @property
    def num_partitions(self) -> int:
        return len(self._partitions) if self._partitioned else 0

    def is_connected(self) -> bool:
        return all(p.connected for p in self._partitions)

    def _pick(self, key: str | None) -> PartitionProducer:
        if len(self._partitions) == 1:
            return self._partitions[0]
        return self._partitions[self._router(key, len(self._partitions))]

    def _message(
        self,
        value: Value,
        key: str | None,
        ordering_key: bytes | str | None,
        properties: Mapping[str, str] | None,
        event_time: int | None,
        sequence_id: int | None,
        deliver_after: float | None,
        deliver_at: int | None,
    ) -> OutgoingMessage:
        if deliver_after is not None:
            deliver_at = int((time.time() + deliver_after) * 1000)
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        return OutgoingMessage(
            to_bytes(value), key, ordering_key, properties, event_time, sequence_id, deliver_at
        )

    def send_async(
        self,
        value: Value,
        *,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        sequence_id: int | None = None,
        deliver_after: float | None = None,
        deliver_at: int | None = None,
        callback: Callable[[asyncio.Future[MessageId]], None] | None = None,
    ) -> asyncio.Future[MessageId]:
        """Queue a message; the returned future completes with its :class:`MessageId`.

        ``deliver_after`` is in seconds, ``deliver_at`` and ``event_time`` in
        milliseconds since the epoch.
        """
        msg = self._message(value, key, ordering_key, properties, event_time, sequence_id,
                            deliver_after, deliver_at)
        future = self._pick(key).send_async(msg)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    async def send(
        self,
        value: Value,
        *,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        sequence_id: int | None = None,
        deliver_after: float | None = None,
        deliver_at: int | None = None,
    ) -> MessageId:
        """Send a message and wait for the broker's receipt."""
        msg = self._message(value, key, ordering_key, properties, event_time, sequence_id,
                            deliver_after, deliver_at)
        return await self._pick(key).send_async(msg)

    def request_async(
        self,
        value: Value,
        *,
        timeout: float = 30.0,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        deliver_after: float | None = None,
        deliver_at: int | None = None,
        callback: Callable[[asyncio.Future[ReplyResult]], None] | None = None,
    ) -> asyncio.Future[ReplyResult]:
        """PIP-371: send a request; the future completes with the consumer's reply.

        The message fields are those of :meth:`send_async`, but for ``sequence_id``:
        the producer numbers requests itself, as replies are matched by that number.
        The request carries its timeout (``magnetar.request.timeout.ms``) so the
        consumer can skip stale work; after ``timeout`` seconds the future fails
        with :class:`~magnetar.client.errors.RequestTimeout` and a late reply is
        ignored.  A delayed request (``deliver_after`` seconds, ``deliver_at`` ms
        since the epoch) must be delivered before its timeout runs out, or it could
        never be answered: that is a ``ValueError``.  ``callback`` is added to the
        returned future.
        """
        if timeout <= 0:
            raise ValueError("a request needs a positive timeout")
        if (deliver_after is not None and deliver_after >= timeout) or (
            deliver_at is not None and deliver_at >= (time.time() + timeout) * 1000
        ):
            raise ValueError(
                f"a request delivered after its timeout of {timeout}s cannot be answered in "
                "time: deliver it sooner or give it a longer timeout"
            )
        props = dict(properties or {})
        props[REQUEST_TIMEOUT_PROPERTY] = str(int(timeout * 1000))
        msg = self._message(value, key, ordering_key, props, event_time, None,
                            deliver_after, deliver_at)
        future = self._pick(key).request_async(msg, timeout)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    async def request(
        self,
        value: Value,
        *,
        timeout: float = 30.0,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        deliver_after: float | None = None,
        deliver_at: int | None = None,
    ) -> ReplyResult:
        """PIP-371: send a request and wait for its reply (see :meth:`request_async`)."""
        return await self.request_async(
            value, timeout=timeout, key=key, ordering_key=ordering_key, properties=properties,
            event_time=event_time, deliver_after=deliver_after, deliver_at=deliver_at,
        )

    def send_entry_async(
        self,
        payload: Value,
        *,
        num_messages: int | None = None,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        sequence_id: int | None = None,
        compression: tuple[int, int] | None = None,
    ) -> asyncio.Future[MessageId]:
        """PIP-96: queue ``payload`` as one whole entry; the future gets its id.

        The payload goes out as given: no batch framing, no compression, whatever
        the producer's settings. ``num_messages`` (at least 1) becomes the entry's
        ``num_messages_in_batch``, the count the broker charges against consumers'
        permits; ``None`` leaves it out (the entry is one message). ``properties``
        tag its format, e.g. ``{"entry.format": "kafka"}``; consumers read such
        entries with a payload processor (``subscribe(..., payload_processor=...)``).
        A caller that compressed ``payload`` itself (a bulk writer building Pulsar
        batches) says how with ``compression=(kind, uncompressed size)``.
        """
        if num_messages is not None and num_messages < 1:
            raise ValueError(f"num_messages must be at least 1, not {num_messages}")
        msg = self._message(payload, key, ordering_key, properties, event_time, sequence_id,
                            None, None)
        msg.raw = True
        msg.num_messages = num_messages
        msg.compression = compression
        return self._pick(key).send_async(msg)

    async def send_entry(
        self,
        payload: Value,
        *,
        num_messages: int | None = None,
        key: str | None = None,
        ordering_key: bytes | str | None = None,
        properties: Mapping[str, str] | None = None,
        event_time: int | None = None,
        sequence_id: int | None = None,
    ) -> MessageId:
        """PIP-96: send ``payload`` as one whole entry and wait for the broker's receipt
        (see :meth:`send_entry_async`)."""
        return await self.send_entry_async(
            payload, num_messages=num_messages, key=key, ordering_key=ordering_key,
            properties=properties, event_time=event_time, sequence_id=sequence_id,
        )

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._partitions))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(p.close() for p in self._partitions), return_exceptions=True)
        self._client._forget(self)

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Producer {self.producer_name!r} on {self._topic}>"
