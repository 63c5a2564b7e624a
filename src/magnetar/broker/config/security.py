"""Authentication (token, basic, TLS client certificates), authorization and TLS.

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.config.errors import setting_help as _help


@dataclass
class SecuritySettings:
    authentication_enabled: bool = field(
        default=False,
        metadata=_help(
            "clients must authenticate (CONNECT's auth data, the admin API's "
            "Authorization header or a TLS client certificate), as Pulsar's "
            "authenticationEnabled"
        ),
    )
    authentication_providers: str = field(
        default="",
        metadata=_help(
            "comma-separated authentication methods: token, basic, tls (Pulsar's "
            "authenticationProviders); empty: each method whose setting is given "
            "(token_secret_key/token_public_key, basic_auth_file, tls_trust_certs_file)"
        ),
    )
    authentication_refresh_check_seconds: float = field(
        default=60.0,
        metadata=_help(
            "seconds between checks of each connection's credentials: once a token has "
            "expired the broker sends AUTH_CHALLENGE to clients that support refresh "
            "(and closes the connection if no good answer comes by the next check), and "
            "closes the others"
        ),
    )
    authorization_enabled: bool = field(
        default=False,
        metadata=_help(
            "roles need permissions (superuser_roles, or produce/consume granted on a "
            "namespace or topic through the admin API); needs authentication_enabled"
        ),
    )
    superuser_roles: str = field(
        default="", metadata=_help("comma-separated roles that may do anything")
    )
    anonymous_user_role: str | None = field(
        default=None,
        metadata=_help(
            "the role of a client that presents no credentials (with authentication on); "
            "unset: such a client is refused"
        ),
    )
    authenticate_metrics_endpoint: bool = field(
        default=False,
        metadata=_help(
            "/metrics also needs credentials when authentication is on (as Pulsar's "
            "authenticateMetricsEndpoint)"
        ),
    )
    basic_auth_file: str | None = field(
        default=None,
        metadata=_help(
            "htpasswd file of the basic method (apr1-MD5, bcrypt, SHA or crypt entries): a "
            "path, file:///path or data:;base64,..."
        ),
    )
    token_secret_key: str | None = field(
        default=None,
        metadata=_help(
            "HMAC key that signs tokens (HS256): file:///path to the raw key, or "
            "data:;base64,... (as Pulsar's tokenSecretKey)"
        ),
    )
    token_public_key: str | None = field(
        default=None,
        metadata=_help(
            "public key whose private key signs tokens (RS256/ES256...): file:///path "
            "(DER or PEM) or data:;base64,... (as Pulsar's tokenPublicKey)"
        ),
    )
    token_auth_claim: str = field(
        default="sub", metadata=_help("the token claim that holds the role")
    )
    token_audience: str | None = field(
        default=None,
        metadata=_help("when set, a token's 'aud' claim must name it (this broker)"),
    )
    tls_port: int | None = field(
        default=6651,
        metadata=_help(
            "pulsar+ssl:// port, served when tls_cert_file is set; 'off' disables"
        ),
    )
    admin_tls_port: int | None = field(
        default=None,
        metadata=_help(
            "admin HTTPS port (needs tls_cert_file and the admin server); default: none"
        ),
    )
    tls_cert_file: str | None = field(
        default=None, metadata=_help("the broker's TLS certificate chain (PEM)")
    )
    tls_key_file: str | None = field(
        default=None, metadata=_help("the private key of tls_cert_file (PEM)")
    )
    tls_trust_certs_file: str | None = field(
        default=None,
        metadata=_help(
            "CA certificates (PEM) that client certificates are checked against (the tls "
            "method: the role is the certificate's CN)"
        ),
    )
    tls_require_trusted_client_cert: bool = field(
        default=False,
        metadata=_help(
            "a TLS client without a certificate signed by tls_trust_certs_file is refused "
            "in the handshake (Pulsar's tlsRequireTrustedClientCertOnConnect)"
        ),
    )
