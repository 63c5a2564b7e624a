"""Authentication providers: what the client puts in CONNECT (and AUTH_RESPONSE), and
the TLS context of a ``pulsar+ssl://`` connection."""

from __future__ import annotations

import ssl
from collections.abc import Callable


class Authentication:
    """Base provider: no authentication."""

    method_name: str = ""

    def auth_data(self) -> bytes:
        return b""


class AuthenticationToken(Authentication):
    """A JWT token, fixed or supplied by a function (called on every (re)connect, and
    when the broker asks for fresh credentials with AUTH_CHALLENGE)."""

    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode()


class AuthenticationBasic(Authentication):
    """A user name and password, checked by the broker's htpasswd file (the official
    clients' AuthenticationBasic: ``user:password`` in the auth data)."""

    method_name = "basic"

    def __init__(self, username: str, password: str) -> None:
        if ":" in username:
            raise ValueError("a user name cannot contain ':'")
        self._data = f"{username}:{password}".encode()

    def auth_data(self) -> bytes:
        return self._data


class AuthenticationTLS(Authentication):
    """A client certificate (PEM files) presented in the TLS handshake; the broker
    takes the role from its CN. Needs a ``pulsar+ssl://`` service URL."""

    method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path


def tls_context(
    *,
    trust_certs_file: str | None = None,
    validate_hostname: bool = False,
    allow_insecure_connection: bool = False,
    auth: Authentication | None = None,
) -> ssl.SSLContext:
    """The client's SSLContext, with the official client's options: the broker's
    certificate is checked against ``trust_certs_file`` (else the system's CAs),
    its host name too with ``validate_hostname``; TLS 1.2 at least."""
    context = ssl.create_default_context(cafile=trust_certs_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = validate_hostname and not allow_insecure_connection
    if allow_insecure_connection:
        context.verify_mode = ssl.CERT_NONE
    if isinstance(auth, AuthenticationTLS):
        context.load_cert_chain(auth.certificate_path, auth.private_key_path)
    return context
