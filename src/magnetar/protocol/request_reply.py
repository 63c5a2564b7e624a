"""PIP-371 message properties: what marks a message (or a batch entry) as a request.

A request carries its timeout in ``magnetar.request.timeout.ms``; a batch entry that
holds requests carries the largest of their timeouts in its own metadata too, so the
broker knows an entry holds requests without opening the batch. With authentication
on, the broker stamps the publishing role into ``magnetar.request.role`` (and strips a
producer's own copy of it), so a reply goes only to that role's producer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

REQUEST_TIMEOUT_PROPERTY = "magnetar.request.timeout.ms"
REQUEST_ROLE_PROPERTY = "magnetar.request.role"


class KeyValue(Protocol):
    key: str
    value: str


def request_properties(properties: Iterable[KeyValue]) -> tuple[int | None, str | None]:
    """``(timeout_ms, role)`` of an entry's metadata properties; ``timeout_ms`` is None
    for an entry that holds no request, or whose timeout is not a positive number."""
    timeout: int | None = None
    role: str | None = None
    for kv in properties:
        if kv.key == REQUEST_TIMEOUT_PROPERTY:
            try:
                timeout = int(kv.value)
            except ValueError:
                timeout = None
            else:
                if timeout <= 0:
                    timeout = None
        elif kv.key == REQUEST_ROLE_PROPERTY:
            role = kv.value
    return timeout, role
