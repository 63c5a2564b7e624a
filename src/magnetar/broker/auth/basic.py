"""The ``basic`` authentication method, as Pulsar's AuthenticationProviderBasic: a user
name and password checked against an htpasswd file.

Entries as Apache's ``htpasswd`` writes them: ``$apr1$`` (its default, MD5),
``$2y$``/``$2b$``/``$2a$`` (``-B``, bcrypt, checked by the ``bcrypt`` package),
``{SHA}`` (``-s``) and crypt(3) (``-d``; also ``$1$``/``$5$``/``$6$`` where the C
library has them). No maintained package implements apr1 (passlib, which did, has
had no release since 2020 and breaks with bcrypt 4.1+), so :func:`apr1_crypt` follows
the documented algorithm (Poul-Henning Kamp's md5crypt with Apache's ``$apr1$``
magic) on hashlib's MD5; it only checks passwords against existing hashes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.auth.providers import (
    Authenticated,
    AuthenticationFailed,
    Credentials,
    SettingError,
    read_url_setting,
)

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_FAILED = "unknown user or invalid password"  # one message: no hint which it was


def _to64(value: int, count: int) -> str:
    out = []
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def apr1_crypt(password: bytes, salt: str, magic: str = "$apr1$") -> str:
    """The md5crypt hash of ``password`` with ``salt`` (at most 8 characters)."""
    salt_b = salt[:8].encode()
    magic_b = magic.encode()
    alternate = hashlib.md5(password + salt_b + password).digest()
    ctx = hashlib.md5(password + magic_b + salt_b)
    for remaining in range(len(password), 0, -16):
        ctx.update(alternate[: min(remaining, 16)])
    length = len(password)
    while length:
        ctx.update(b"\0" if length & 1 else password[:1])
        length >>= 1
    final = ctx.digest()
    for i in range(1000):  # the algorithm's fixed stretching
        step = hashlib.md5(password if i & 1 else final)
        if i % 3:
            step.update(salt_b)
        if i % 7:
            step.update(password)
        step.update(final if i & 1 else password)
        final = step.digest()
    encoded = "".join(
        _to64((final[a] << 16) | (final[b] << 8) | final[c], 4)
        for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))
    )
    encoded += _to64(final[11], 2)
    return f"{magic}{salt[:8]}${encoded}"


def _system_crypt() -> Callable[[str, str], str | None] | None:
    """crypt(3): the stdlib module before Python 3.13, the crypt-r package after."""
    for name in ("crypt", "crypt_r"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                module: Any = importlib.import_module(name)
        except ImportError:
            continue
        return module.crypt  # type: ignore[no-any-return]
    return None


def check_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches the htpasswd hash ``stored``."""
    secret = password.encode()
    if stored.startswith("$apr1$"):
        parts = stored.split("$")
        if len(parts) != 4:
            return False
        return hmac.compare_digest(apr1_crypt(secret, parts[2]), stored)
    if stored.startswith(("$2y$", "$2b$", "$2a$")):
        import bcrypt  # on first use: only htpasswd files with bcrypt hashes need it

        try:
            return bcrypt.checkpw(secret, stored.encode())
        except ValueError:
            return False
    if stored.startswith("{SHA}"):
        digest = base64.b64encode(hashlib.sha1(secret).digest()).decode()
        return hmac.compare_digest(digest, stored[5:])
    crypt = _system_crypt()
    if crypt is None or len(stored) < 2:
        return False
    hashed = crypt(password, stored)
    return hashed is not None and hmac.compare_digest(hashed, stored)


def parse_htpasswd(text: str) -> dict[str, str]:
    """user -> hash of each ``user:hash`` line (blank lines and # comments skipped)."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, stored = line.partition(":")
        if not colon or not user or not stored or ":" in stored:
            raise SettingError(f"line {number} is not user:hash")
        users[user] = stored
    return users


@dataclass
class BasicProvider:
    """``basic``: CONNECT's auth_data is ``user:password`` (the official clients'
    AuthenticationBasic); HTTP's is ``Authorization: Basic base64(user:password)``.
    The role is the user name."""

    users: dict[str, str] = field(default_factory=dict)
    method_name: str = "basic"
    blocking: bool = True  # bcrypt costs milliseconds by design

    @classmethod
    def from_setting(cls, basic_auth_file: str) -> BasicProvider:
        raw = read_url_setting(basic_auth_file)
        try:
            return cls(parse_htpasswd(raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise SettingError("the htpasswd file is not UTF-8 text") from None

    def authenticate(self, credentials: Credentials) -> Authenticated:
        user, password = self._user_and_password(credentials)
        stored = self.users.get(user)
        if stored is None or not check_password(stored, password):
            raise AuthenticationFailed(_FAILED)
        return Authenticated(user, self.method_name)

    def _user_and_password(self, credentials: Credentials) -> tuple[str, str]:
        if credentials.http_authorization is not None:
            scheme, _, encoded = credentials.http_authorization.partition(" ")
            if scheme.lower() != "basic" or not encoded.strip():
                raise AuthenticationFailed('the Authorization header must be "Basic <base64>"')
            try:
                raw = base64.b64decode(encoded.strip(), validate=True)
            except ValueError:  # binascii.Error
                raise AuthenticationFailed("the Basic credentials are not base64") from None
        else:
            raw = credentials.data
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("the credentials are not UTF-8 text") from None
        user, colon, password = text.partition(":")
        if not colon or not user:
            raise AuthenticationFailed("basic credentials are user:password")
        return user, password
