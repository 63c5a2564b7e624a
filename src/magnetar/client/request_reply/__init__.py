"""PIP-371 request-reply, client side: the requests of a producer waiting for their
replies and a received request (:mod:`.requests`), and the responder loop
(:mod:`.responder`).

``magnetar.client.request_reply`` keeps the names it had as a single module.
"""

from magnetar.client.request_reply.requests import (
    REQUEST_TIMEOUT_PROPERTY,
    PendingRequest,
    PendingRequests,
    ReplyReceipt,
    ReplyResult,
    Request,
    RequestKey,
    request_timeout_ms,
)

__all__ = [
    "REQUEST_TIMEOUT_PROPERTY",
    "PendingRequest",
    "PendingRequests",
    "ReplyReceipt",
    "ReplyResult",
    "Request",
    "RequestKey",
    "request_timeout_ms",
]
