"""Authentication: what a provider is given and returns, and the service that picks the
provider for a connection or an HTTP request, as Pulsar's AuthenticationService does.

A provider is named by its method (``token``, ``basic``, ``tls``): the client's
CONNECT names one in ``auth_method_name`` (an HTTP request by its Authorization
scheme). A client that names none, or a method no provider has, gets the
``anonymous_user_role`` if one is set, else an authentication error.
"""

from __future__ import annotations

import base64
import binascii
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class AuthenticationFailed(Exception):
    """The credentials do not authenticate anyone; the text says why (logged, and
    told to the client)."""


class SettingError(ValueError):
    """A security setting (a key, a password file) cannot be read or used."""


@dataclass(frozen=True)
class Credentials:
    """What a client presented: CONNECT's ``auth_data`` (or AUTH_RESPONSE's), or an
    HTTP ``Authorization`` header, and the TLS client certificate if it sent one."""

    data: bytes = b""
    http_authorization: str | None = None
    peer_cert: dict[str, Any] | None = field(default=None, hash=False, compare=False)


@dataclass(frozen=True)
class Authenticated:
    """Who the client is: its role, the method that said so, and when the proof
    expires (epoch seconds; None: never)."""

    role: str
    method: str
    expires_at: float | None = None


class AuthenticationProvider(Protocol):
    method_name: str
    # True when checking costs enough CPU (bcrypt) to be done off the event loop.
    blocking: bool

    def authenticate(self, credentials: Credentials) -> Authenticated: ...


HTTP_SCHEMES = {"bearer": "token", "basic": "basic"}


class AuthenticationService:
    def __init__(
        self, providers: list[AuthenticationProvider], anonymous_role: str | None = None
    ) -> None:
        self.providers = {p.method_name: p for p in providers}
        self.anonymous_role = anonymous_role or None

    def provider_for(self, method: str) -> AuthenticationProvider | None:
        return self.providers.get(method)

    def anonymous(self, why: str) -> Authenticated:
        """The anonymous role, or AuthenticationFailed(why) when there is none."""
        if self.anonymous_role is None:
            raise AuthenticationFailed(why)
        return Authenticated(self.anonymous_role, "none")

    def authenticate_http(
        self, authorization: str | None, peer_cert: dict[str, Any] | None
    ) -> tuple[AuthenticationProvider | None, Credentials]:
        """The provider for an HTTP request and what to give it (None: anonymous)."""
        if authorization:
            scheme = authorization.split(" ", 1)[0].lower()
            method = HTTP_SCHEMES.get(scheme)
            provider = self.providers.get(method) if method else None
            if provider is None:
                raise AuthenticationFailed(
                    f"the Authorization scheme {scheme!r} is not an enabled authentication method"
                )
            return provider, Credentials(http_authorization=authorization, peer_cert=peer_cert)
        tls = self.providers.get("tls")
        if tls is not None and peer_cert:
            return tls, Credentials(peer_cert=peer_cert)
        return None, Credentials()


def read_url_setting(url: str) -> bytes:
    """The bytes a key or file setting names, as Pulsar's AuthTokenUtils.readKeyFromUrl
    reads them: ``file:///path``, ``data:;base64,...``, ``data:,raw``, a path to an
    existing file, or the content itself in base64."""
    if url.startswith("data:"):
        meta, comma, payload = url[5:].partition(",")
        if not comma:
            raise SettingError("a data: URL needs a comma before its content")
        if meta.endswith(";base64"):
            try:
                return base64.b64decode(payload, validate=True)
            except binascii.Error:
                raise SettingError("the data: URL's content is not valid base64") from None
        return urllib.parse.unquote_to_bytes(payload)
    if url.startswith("file:"):
        return _read_file(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    if url and os.path.isfile(url):
        return _read_file(url)
    try:
        return base64.b64decode(url, validate=True)
    except binascii.Error:
        raise SettingError("neither a file:/data: URL, an existing file nor base64") from None


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SettingError(f"cannot read {path}: {exc.strerror or exc}") from None
