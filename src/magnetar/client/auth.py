"""Authentication providers: what the client puts in CONNECT (and AUTH_RESPONSE)."""

from __future__ import annotations

from collections.abc import Callable


class Authentication:
    """Base provider: no authentication."""

    method_name: str = ""

    def auth_data(self) -> bytes:
        return b""


class AuthenticationToken(Authentication):
    """A JWT token, fixed or supplied by a function (called on every (re)connect)."""

    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode()
