"""Helpers of the admin REST tests: plain HTTP calls (urllib) to a broker's admin port,
the reply's status, reason, body and headers, and a poll for what the broker does
asynchronously (acks arriving, clients reconnecting)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from magnetar.testing import EmbeddedBroker

T = TypeVar("T")


@dataclass
class Reply:
    status: int
    reason: str
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def http(broker: EmbeddedBroker, method: str, path: str, body: bytes | str | None = None,
         content_type: str = "application/json") -> Reply:
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(f"{broker.admin_url}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return Reply(response.status, response.reason, response.read(), dict(response.headers))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.reason, exc.read(), dict(exc.headers))


def ok(broker: EmbeddedBroker, method: str, path: str, body: bytes | str | None = None) -> Reply:
    reply = http(broker, method, path, body)
    assert reply.status in (200, 204), (method, path, reply)
    return reply


def wait_for(probe: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """Poll ``probe`` until it returns something truthy (generous: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or probe}")
        time.sleep(0.05)
