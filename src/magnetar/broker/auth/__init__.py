"""Security: authentication (tokens, basic, TLS client certificates), TLS, and
authorization, built from the broker's settings. All off by default: then the broker
holds no authentication or authorization service and its handlers check nothing.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Collection

from magnetar.broker.auth.authorization import AuthorizationService
from magnetar.broker.auth.basic import BasicProvider
from magnetar.broker.auth.providers import (
    AuthenticationProvider,
    AuthenticationService,
    SettingError,
)
from magnetar.broker.auth.tls import TlsProvider, server_context
from magnetar.broker.config import BrokerConfig, ConfigError, csv_setting

__all__ = [
    "AuthenticationService",
    "AuthorizationService",
    "build_authentication",
    "build_tls_context",
]


def _providers(config: BrokerConfig) -> list[AuthenticationProvider]:
    names = csv_setting(config.authentication_providers)
    if not names:  # each method whose settings are given
        if config.token_secret_key or config.token_public_key:
            names.append("token")
        if config.basic_auth_file:
            names.append("basic")
        if config.tls_trust_certs_file and config.tls_cert_file:
            names.append("tls")
    providers: list[AuthenticationProvider] = []
    for name in names:
        if name == "token":
            # Imported here: PyJWT with cryptography costs 11 MB of RSS, which a broker
            # without token authentication should not pay.
            from magnetar.broker.auth.tokens import TokenProvider

            key = "token_secret_key" if config.token_secret_key else "token_public_key"
            try:
                providers.append(
                    TokenProvider.from_settings(
                        config.token_secret_key,
                        config.token_public_key,
                        config.token_auth_claim,
                        config.token_audience,
                    )
                )
            except SettingError as exc:
                raise ConfigError(key, getattr(config, key), str(exc)) from None
        elif name == "basic":
            if not config.basic_auth_file:
                raise ConfigError("basic_auth_file", None, "the basic method needs it")
            try:
                providers.append(BasicProvider.from_setting(config.basic_auth_file))
            except SettingError as exc:
                raise ConfigError("basic_auth_file", config.basic_auth_file, str(exc)) from None
        elif name == "tls":
            if not (config.tls_cert_file and config.tls_trust_certs_file):
                raise ConfigError(
                    "tls_trust_certs_file", config.tls_trust_certs_file,
                    "the tls method needs it and tls_cert_file",
                )
            providers.append(TlsProvider())
    return providers


def build_authentication(config: BrokerConfig) -> AuthenticationService | None:
    """The authentication service the settings ask for (None: authentication off);
    ConfigError names a setting that cannot be used."""
    if not config.authentication_enabled:
        return None
    providers = _providers(config)
    if not providers and not config.anonymous_user_role:
        raise ConfigError(
            "authentication_providers", config.authentication_providers,
            "authentication is on but no method is configured (set token_secret_key, "
            "token_public_key, basic_auth_file or tls_trust_certs_file) and there is no "
            "anonymous_user_role",
        )
    return AuthenticationService(providers, config.anonymous_user_role)


def build_authorization(
    config: BrokerConfig,
    on_namespace_written: Callable[[str, str], None] | None = None,
    tenant_admins: Callable[[str], Collection[str]] = lambda tenant: (),
) -> AuthorizationService | None:
    """The authorization service (None: authorization off). ``on_namespace_written``
    is told of each write of a namespace's policies file (others cache it);
    ``tenant_admins`` names a tenant's admin roles."""
    if not config.authorization_enabled:
        return None
    return AuthorizationService(
        csv_setting(config.superuser_roles), config.data_dir, on_namespace_written,
        tenant_admins,
    )


def build_tls_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The server SSLContext of the TLS ports (None: TLS off)."""
    if not config.tls_cert_file or not config.tls_key_file:
        return None
    try:
        return server_context(
            config.tls_cert_file,
            config.tls_key_file,
            config.tls_trust_certs_file,
            config.tls_require_trusted_client_cert,
        )
    except SettingError as exc:
        raise ConfigError("tls_cert_file", config.tls_cert_file, str(exc)) from None
