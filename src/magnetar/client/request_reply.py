"""PIP-371 request-reply (client side). Filled in after the core client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb


@dataclass(frozen=True, slots=True)
class ReplyResult:
    request_message_id: MessageId
    value: bytes
    is_error: bool


class PendingRequests:
    def sent(self, request: Any, message_id: MessageId) -> None:
        raise NotImplementedError

    def fail(self, request: Any, exc: BaseException) -> None:
        raise NotImplementedError

    def fail_all(self, exc: BaseException) -> None:
        raise NotImplementedError

    def on_receipt(self, receipt: pb.CommandRequestReceipt, body: bytes) -> None:
        raise NotImplementedError


class Request:
    pass
