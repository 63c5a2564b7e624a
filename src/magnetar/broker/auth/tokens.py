"""JWT tokens as Pulsar's ``AuthenticationProviderToken`` and ``pulsar tokens`` use them.

Keys are given as Pulsar spells them: ``file:///path`` (the raw key file),
``data:;base64,<base64>``, ``data:,<raw>``, a path to an existing file, or the key's
bytes in base64. A secret key is the raw HMAC key (``create-secret-key`` writes 32
random bytes); a public or private key is DER (as ``pulsar tokens create-key-pair``
writes them) or PEM. Verification is PyJWT's, with the algorithms the key allows.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.broker.auth.providers import (
    Authenticated,
    AuthenticationFailed,
    Credentials,
    SettingError,
    read_url_setting,
)

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
_SECRET_KEY_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_EC_CURVES = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}


def load_public_key(raw: bytes) -> Any:
    """A public key from DER (X.509 SubjectPublicKeyInfo) or PEM bytes."""
    try:
        if raw.lstrip().startswith(b"-----"):
            return serialization.load_pem_public_key(raw)
        return serialization.load_der_public_key(raw)
    except ValueError as exc:
        raise SettingError(f"not a public key in DER or PEM: {exc}") from None


def load_private_key(raw: bytes) -> Any:
    """A private key from DER (PKCS#8) or PEM bytes."""
    try:
        if raw.lstrip().startswith(b"-----"):
            return serialization.load_pem_private_key(raw, password=None)
        return serialization.load_der_private_key(raw, password=None)
    except (ValueError, TypeError) as exc:
        raise SettingError(f"not an unencrypted private key in DER or PEM: {exc}") from None


def algorithms_for(key: Any) -> tuple[str, ...]:
    """The signature algorithms a verification key can check."""
    if isinstance(key, bytes):
        return HMAC_ALGORITHMS
    if isinstance(key, (rsa.RSAPublicKey, rsa.RSAPrivateKey)):
        return RSA_ALGORITHMS
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)):
        return EC_ALGORITHMS
    raise SettingError(f"unsupported key type {type(key).__name__} (RSA or EC keys only)")


@dataclass
class TokenProvider:
    """The ``token`` authentication method: a JWT signed with the broker's secret key
    or by the private key of its public key; the role is the ``claim`` (``sub``)."""

    key: Any  # bytes (HMAC secret) or a cryptography public key
    claim: str = "sub"
    audience: str | None = None
    clock: Any = time.time
    method_name: str = "token"
    blocking: bool = False

    @classmethod
    def from_settings(
        cls,
        secret_key: str | None,
        public_key: str | None,
        claim: str = "sub",
        audience: str | None = None,
    ) -> TokenProvider:
        if secret_key:
            return cls(read_url_setting(secret_key), claim or "sub", audience)
        if public_key:
            key = load_public_key(read_url_setting(public_key))
            algorithms_for(key)  # refuses a key type no algorithm fits
            return cls(key, claim or "sub", audience)
        raise SettingError("token authentication needs token_secret_key or token_public_key")

    def authenticate(self, credentials: Credentials) -> Authenticated:
        token = self._token_of(credentials)
        claims = self.verify(token)
        role = claims.get(self.claim)
        if isinstance(role, list) and role and isinstance(role[0], str):
            role = role[0]  # as Pulsar: the first of a list claim
        if not isinstance(role, str) or not role:
            raise AuthenticationFailed(f"the token has no '{self.claim}' claim to take a role from")
        exp = claims.get("exp")
        expires = float(exp) if isinstance(exp, (int, float)) else None
        return Authenticated(role, self.method_name, expires)

    def _token_of(self, credentials: Credentials) -> str:
        if credentials.http_authorization is not None:
            header = credentials.http_authorization
            if not header.startswith("Bearer "):
                raise AuthenticationFailed("invalid HTTP Authorization header")
            token = header[len("Bearer "):]
        else:
            try:
                token = credentials.data.decode("ascii")
            except UnicodeDecodeError:
                raise AuthenticationFailed("the token is not ASCII text") from None
        token = token.strip()
        if not token:
            raise AuthenticationFailed("blank token")
        return token

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims once its signature, expiry and audience are checked."""
        options: dict[str, Any] = {"verify_aud": self.audience is not None, "require": []}
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=list(algorithms_for(self.key)),
                audience=self.audience,
                options=options,  # type: ignore[arg-type]
                leeway=0,
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationFailed("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise AuthenticationFailed(
                f"the token's audience does not include this broker ({self.audience})"
            ) from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationFailed(f"invalid token: {exc}") from None
        except Exception as exc:  # a malformed token can trip the key code itself
            raise AuthenticationFailed(f"invalid token: {type(exc).__name__}") from None
        if not isinstance(claims, dict):
            raise AuthenticationFailed("the token's claims are not an object")
        return claims


# ------------------------------------------------------------ making keys and tokens


def create_secret_key(algorithm: str = "HS256") -> bytes:
    if algorithm not in _SECRET_KEY_BYTES:
        raise ValueError(f"a secret key is for {', '.join(HMAC_ALGORITHMS)}, not {algorithm}")
    return secrets.token_bytes(_SECRET_KEY_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private key PKCS#8 DER, public key X.509 DER), as ``pulsar tokens create-key-pair``."""
    private: Any
    if algorithm in ("RS256", "RS384", "RS512"):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in _EC_CURVES:
        private = ec.generate_private_key(_EC_CURVES[algorithm])
    else:
        raise ValueError(f"a key pair is for RS256/384/512 or ES256/384/512, not {algorithm}")
    private_der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration(text: str) -> int:
    """Seconds in ``30s``, ``10m``, ``12h``, ``7d``, ``2w``, ``1y`` (Pulsar's units; a
    bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdwy]?)\s*", text)
    if not match:
        raise ValueError(f"not a duration (like 30s, 10m, 12h, 7d, 2w, 1y): {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: Any = None,
    algorithm: str | None = None,
    expires_in: int | None = None,
    claim: str = "sub",
    now: float | None = None,
) -> str:
    """A signed token whose ``claim`` is ``subject``; ``exp`` when ``expires_in``."""
    claims: dict[str, Any] = {claim: subject}
    if expires_in is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in)
    if secret_key is not None:
        return jwt.encode(claims, secret_key, algorithm=algorithm or "HS256")
    if private_key is None:
        raise ValueError("a token is signed with a secret key or a private key")
    default = "RS256" if isinstance(private_key, rsa.RSAPrivateKey) else _ec_algorithm(private_key)
    return jwt.encode(claims, private_key, algorithm=algorithm or default)


def _ec_algorithm(key: Any) -> str:
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"unsupported private key type {type(key).__name__}")
    size = key.curve.key_size
    return {256: "ES256", 384: "ES384", 521: "ES512"}.get(size, "ES256")


def show_token(token: str) -> str:
    """``header---claims`` as ``pulsar tokens show`` prints them (no verification)."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise ValueError(f"not a JWT: {exc}") from None
    return json.dumps(header, separators=(",", ":")) + "---" + json.dumps(
        claims, separators=(",", ":")
    )
