"""A small blocking client for Pulsar's admin REST API (what ``magnetar admin`` calls).

Errors come back as :class:`AdminError` carrying the status and the broker's reason
(Pulsar answers ``{"reason": "..."}``; a plain-text body is taken as the reason).
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class AdminError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}" if status else reason)
        self.status = status
        self.reason = reason


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return self.body.decode("utf-8", "replace")


def _reason(status: int, body: bytes, fallback: str) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text or fallback
    if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
        return str(doc["reason"])
    return body.decode("utf-8", "replace").strip() or fallback


class RestClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0, *,
                 authorization: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        # A whole Authorization header (Basic ...), where ``token`` makes a Bearer one.
        self.authorization = authorization
        self.ssl_context = ssl_context

    def call(self, method: str, path: str, body: Any = None,
             query: dict[str, str] | None = None) -> Response:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.authorization:
            headers["Authorization"] = self.authorization
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self.ssl_context) as answer:
                return Response(answer.status, dict(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, _reason(exc.code, exc.read(), exc.reason)) from None
        except http.client.HTTPException:
            # Something answered, but not HTTP: most likely the broker's binary port.
            raise AdminError(0, f"{self.base_url} does not answer HTTP (is it the binary "
                                "protocol port, 6650, rather than the admin port, 8080?)") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(0, f"cannot reach {self.base_url}: {reason}") from None
