"""Readers: a non-durable, exclusive subscription that starts at a chosen message."""

from __future__ import annotations

from collections.abc import AsyncIterator

from magnetar.client.consuming.consumer import Consumer
from magnetar.client.errors import AlreadyClosed
from magnetar.client.message import Message
from magnetar.protocol.message_id import MessageId


class Reader:
    """Reads a topic from ``start_message_id`` on.

    What it reads it acknowledges cumulatively, as the official readers do: its
    subscription is non-durable (nothing is kept for it), but the broker holds back a
    consumer with ``max_unacked_per_consumer`` entries unacknowledged, and a reader that
    acknowledged nothing stopped there (50,000 entries by default)."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription_name(self) -> str:
        return self._consumer.subscription_name

    async def read_next(self, timeout: float | None = None) -> Message:
        """The next message; waits up to ``timeout`` seconds (forever if ``None``)."""
        message = await self._consumer.receive(timeout)
        await self._consumer.acknowledge_cumulative(message)
        return message

    async def has_message_available(self) -> bool:
        """Whether a message after the last one read exists (asks the broker)."""
        return await self._consumer.has_message_available()

    async def seek(self, target: MessageId | int) -> None:
        """Move to a message id, or to a publish time in ms since the epoch."""
        await self._consumer.seek(target)

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def has_reached_end_of_topic(self) -> bool:
        return self._consumer.has_reached_end_of_topic()

    async def close(self) -> None:
        await self._consumer.close()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.read_next()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Reader on {self.topic}>"
