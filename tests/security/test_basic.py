"""Basic authentication from an htpasswd file (apr1-MD5, bcrypt, SHA, crypt entries as
htpasswd writes them), with the official client's AuthenticationBasic and magnetar's,
on the admin API, and together with tokens on one broker."""

from __future__ import annotations

import base64
import hashlib
import importlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pulsar
import pytest
from admin_http import http
from official_client import quiet_logger

from magnetar.broker.auth.basic import check_password, parse_htpasswd
from magnetar.broker.auth.providers import SettingError
from magnetar.client import AuthenticationBasic, AuthenticationToken, Client
from magnetar.client.errors import AuthenticationError
from magnetar.testing import EmbeddedBroker

from .helpers import Keys

# Written by `openssl passwd -apr1 -salt abcdefgh 'p@ss word'` (another implementation).
APR1 = "$apr1$abcdefgh$aJUuGLjz3OI4ylHF//t5U1"
APR1_PASSWORD = "p@ss word"


def _crypt(password: str, salt: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in ("crypt", "crypt_r"):
            try:
                return str(importlib.import_module(name).crypt(password, salt))
            except ImportError:
                continue
    pytest.skip("no crypt(3) here")


def entries() -> dict[str, tuple[str, str]]:
    """user -> (htpasswd hash, password)."""
    # htpasswd -B writes bcrypt with the $2y$ prefix; the algorithm is $2b$'s.
    hashed = bcrypt.hashpw(b"b-secret", bcrypt.gensalt(rounds=5)).decode()
    return {
        "apr": (APR1, APR1_PASSWORD),
        "bee": ("$2y$" + hashed[4:], "b-secret"),
        "sha": ("{SHA}" + base64.b64encode(hashlib.sha1(b"s-secret").digest()).decode(),
                "s-secret"),
        "des": (_crypt("c-secret", "ab"), "c-secret"),
    }


@pytest.mark.parametrize("user", ["apr", "bee", "sha", "des"])
def test_check_password(user: str) -> None:
    stored, password = entries()[user]
    assert check_password(stored, password)
    assert not check_password(stored, password[:-1] + "X")  # (crypt reads 8 characters)
    assert not check_password(stored, "")


def test_parse_htpasswd() -> None:
    text = "# comment\n\nalice:$apr1$x$y\nbob:{SHA}abc\n"
    assert parse_htpasswd(text) == {"alice": "$apr1$x$y", "bob": "{SHA}abc"}
    for bad in ("no-colon\n", ":hash\n", "user:\n", "a:b:c\n"):
        with pytest.raises(SettingError):
            parse_htpasswd(bad)


@pytest.fixture(scope="module")
def htpasswd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("basic") / "htpasswd"
    path.write_text("".join(f"{user}:{stored}\n" for user, (stored, _) in entries().items()))
    return path


@pytest.fixture(scope="module")
def broker(htpasswd: Path, keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        admin=True,
        authentication_enabled=True,
        authentication_providers="basic,token",
        basic_auth_file=str(htpasswd),
        token_secret_key=keys.url,
    ) as b:
        yield b


@pytest.mark.parametrize("user", ["apr", "bee", "sha"])
def test_official_client_basic(broker: EmbeddedBroker, topic: str, user: str) -> None:
    password = entries()[user][1]
    for given, ok in ((password, True), ("wrong", False)):
        client = pulsar.Client(
            broker.service_url,
            authentication=pulsar.AuthenticationBasic(user, given),
            logger=quiet_logger(),
            operation_timeout_seconds=3,
        )
        try:
            if ok:
                client.create_producer(topic).send(b"basic")
            else:
                with pytest.raises(pulsar.PulsarException):
                    client.create_producer(topic)
        finally:
            client.close()


async def test_magnetar_client_basic_and_token_on_one_broker(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    async with Client(broker.service_url, auth=AuthenticationBasic("bee", "b-secret")) as c:
        await (await c.create_producer(topic)).send(b"basic")
    async with Client(broker.service_url, auth=AuthenticationToken(keys.token("t"))) as c:
        await (await c.create_producer(topic)).send(b"token")
    for auth in (AuthenticationBasic("bee", "nope"), AuthenticationBasic("nobody", "x")):
        async with Client(broker.service_url, auth=auth, operation_timeout=5) as c:
            with pytest.raises(AuthenticationError, match="unknown user or invalid password"):
                await c.create_producer(topic)


def test_admin_with_basic_credentials(broker: EmbeddedBroker) -> None:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default"

    def basic(user: str, password: str) -> dict[str, str]:
        raw = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {raw}"}

    assert http(url, headers=basic("apr", APR1_PASSWORD)).status == 200
    assert http(url, headers=basic("apr", "wrong")).status == 401
    assert http(url, headers={"Authorization": "Basic !!!"}).status == 401
