"""What a partition producer sends: a message as the application gave it
(:class:`OutgoingMessage`) and a SEND frame waiting for its receipt (:class:`SendOp`,
a single message or a batch)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.client.request_reply.requests import PendingRequest
from magnetar.protocol.message_id import MessageId

Value = bytes | bytearray | memoryview | str


def to_bytes(value: Value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"message value must be bytes or str, not {type(value).__name__}")


@dataclass(slots=True)
class OutgoingMessage:
    payload: bytes
    key: str | None = None
    ordering_key: bytes | None = None
    properties: Mapping[str, str] | None = None
    event_time: int | None = None
    sequence_id: int | None = None
    deliver_at: int | None = None  # ms since the epoch
    request: PendingRequest | None = None  # PIP-371: this message is a request
    raw: bool = False  # PIP-96: the payload is a whole entry (send_entry), sent as given
    num_messages: int | None = None  # with raw: the entry's num_messages_in_batch
    compression: tuple[int, int] | None = None  # with raw: (kind, uncompressed size)


class SendOp:
    """One SEND frame waiting for its receipt: a single message or a batch."""

    __slots__ = ("batched", "deadline", "first_copy_after", "frame", "futures",
                 "highest_sequence_id", "num_messages", "requests", "sequence_id")

    def __init__(
        self,
        sequence_id: int,
        highest_sequence_id: int,
        frame: bytes,
        futures: list[asyncio.Future[MessageId]],
        deadline: float,
        requests: list[Any] | None,
        batched: bool = False,
    ) -> None:
        self.batched = batched
        self.sequence_id = sequence_id
        self.highest_sequence_id = highest_sequence_id
        self.num_messages = len(futures)
        self.frame = frame
        self.futures = futures
        self.deadline = deadline
        self.requests = requests  # PIP-371: per message, its pending request or None
        # PIP-371, for brokers that do not name a reply's request_sequence_id: set
        # when the op went out again after a reconnect as the only one with a
        # request (the broker may hold it twice): the newest receipted position then.
        self.first_copy_after: tuple[int, int] | None = None
