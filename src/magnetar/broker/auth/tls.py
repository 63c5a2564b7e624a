"""TLS for the broker's ``pulsar+ssl://`` port and the admin HTTPS port, and the
``tls`` authentication method (a client certificate; the role is its subject's CN),
as Pulsar's AuthenticationProviderTls.

TLS 1.2 is the least version offered. With ``tls_trust_certs_file`` a client's
certificate is checked against those CAs when it sends one (and required with
``tls_require_trusted_client_cert``, Pulsar's tlsRequireTrustedClientCertOnConnect).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from magnetar.broker.auth.providers import (
    Authenticated,
    AuthenticationFailed,
    Credentials,
    SettingError,
)


def server_context(
    cert_file: str,
    key_file: str,
    trust_file: str | None = None,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """The SSLContext a listener serves with; SettingError names an unusable file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise SettingError(f"cannot load the certificate and key: {_why(exc)}") from None
    if trust_file:
        try:
            context.load_verify_locations(cafile=trust_file)
        except (OSError, ssl.SSLError) as exc:
            raise SettingError(f"cannot load the trusted certificates: {_why(exc)}") from None
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    elif require_client_cert:
        raise SettingError("requiring client certificates needs tls_trust_certs_file")
    return context


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)


def common_name(peer_cert: dict[str, Any] | None) -> str | None:
    """The CN of a verified peer certificate's subject (``ssl.getpeercert()`` form)."""
    if not peer_cert:
        return None
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return str(value)
    return None


@dataclass
class TlsProvider:
    """``tls``: the role is the CN of the client certificate the TLS handshake
    verified against ``tls_trust_certs_file``."""

    method_name: str = "tls"
    blocking: bool = False

    def authenticate(self, credentials: Credentials) -> Authenticated:
        role = common_name(credentials.peer_cert)
        if role is None:
            raise AuthenticationFailed(
                "no trusted client certificate with a common name (tls needs pulsar+ssl:// "
                "and a certificate signed by a CA in tls_trust_certs_file)"
            )
        return Authenticated(role, self.method_name)
