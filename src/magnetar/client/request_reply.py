"""PIP-371 request-reply (client side). Filled in after the core client."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.message_id import MessageId


@dataclass(frozen=True, slots=True)
class ReplyResult:
    request_message_id: MessageId
    value: bytes
    is_error: bool


class PendingRequests:
    pass


class Request:
    pass
