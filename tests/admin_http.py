"""The tests' one admin HTTP helper: plain calls (urllib) to a broker's admin port, the
reply's status, reason, body and headers; ``answer`` for a status and parsed answer,
``ok`` for calls that must succeed, and a poll for what the broker does asynchronously
(acks arriving, clients reconnecting).

It lives in tests/ itself (on sys.path through the rootdir conftest), so every test
package imports it as ``from admin_http import http``.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from magnetar.testing import EmbeddedBroker

T = TypeVar("T")
TIMEOUT = 30.0  # generous: a loaded machine; a passing call never waits for it


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

    def value(self) -> Any:
        """The body as a caller reads an answer: None when empty, JSON when the call
        succeeded or the refusal is a JSON object, else the refusal's text."""
        text = self.text
        if not text:
            return None
        if self.status < 400 or text.startswith("{"):
            return json.loads(text)
        return text


def as_json(body: object) -> bytes | None:
    """Any body as JSON, a str too (a JSON string: a strategy, an initial position)."""
    return None if body is None else json.dumps(body).encode()


def encode(body: object) -> bytes | None:
    """bytes go as they are, a str as its UTF-8 text, anything else as JSON."""
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def http(target: EmbeddedBroker | str, method: str = "GET", path: str = "",
         body: object = None, *, headers: Mapping[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> Reply:
    """``method path`` on ``target`` (a broker, or the base URL of an admin server).

    A body goes with ``Content-Type: application/json`` unless ``headers`` say otherwise.
    """
    base = target if isinstance(target, str) else target.admin_url
    assert base is not None, "the broker has no admin server"
    data = encode(body)
    request = urllib.request.Request(f"{base}{path}", data=data, method=method,
                                     headers=dict(headers or {}))
    if data is not None and not request.has_header("Content-type"):
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            return Reply(response.status, response.reason, response.read(), dict(response.headers))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, exc.reason, exc.read(), dict(exc.headers))


def answer(target: EmbeddedBroker | str, method: str, path: str,
           body: object = None) -> tuple[int, Any]:
    """The status and the parsed answer (``Reply.value``) of a call whose body, a str
    too, goes as JSON: the schema routes take a strategy as a JSON string."""
    reply = http(target, method, path, as_json(body))
    return reply.status, reply.value()


def ok(broker: EmbeddedBroker, method: str, path: str, body: object = None) -> Reply:
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
