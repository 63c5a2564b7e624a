"""Security settings: off by default (and then nothing is checked: credentials are
ignored, the admin API is open), refusals of settings that cannot work, keys as Pulsar
spells them, audience and claim, and the grants file's shape."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import jwt
import pytest
from admin_http import http

from magnetar.broker.auth.authorization import AuthorizationService
from magnetar.broker.auth.providers import (
    AuthenticationFailed,
    Credentials,
    SettingError,
    read_url_setting,
)
from magnetar.broker.auth.tokens import TokenProvider, create_token, parse_duration
from magnetar.broker.config import BrokerConfig, ConfigError, load_config
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_name import TopicName
from magnetar.client import AuthenticationToken, Client
from magnetar.storage.metadata import NamespacePolicies
from magnetar.testing import EmbeddedBroker

from .helpers import Keys


async def test_security_is_off_by_default(topic: str) -> None:
    config = BrokerConfig()
    assert not config.authentication_enabled and not config.authorization_enabled
    assert config.service_url_tls is None  # no certificate: no TLS port
    with EmbeddedBroker(admin=True) as broker:
        assert broker.server is not None
        service = broker.server.service
        assert service.authentication is None and service.authorization is None
        assert service.tls_context is None
        # Credentials are not looked at when authentication is off.
        async with Client(broker.service_url, auth=AuthenticationToken("junk")) as c:
            await (await c.create_producer(topic)).send(b"x")
        assert http(f"{broker.admin_url}/admin/v2/persistent/public/default").status == 200


def test_permission_routes_keep_grants_with_authorization_off(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        path = "/admin/v2/namespaces/public/default/permissions"
        assert http(broker, "POST", f"{path}/r", ["produce"]).status == 204
        assert http(broker, "GET", path).json() == {"r": ["produce"]}
    saved = NamespacePolicies.load(NamespacePolicies.path_for(tmp_path, "public", "default"))
    assert saved.policies["auth_policies"]["namespace_auth"] == {"r": ["produce"]}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"authorization_enabled": True}, "authorization_enabled"),
        ({"tls_cert_file": "/x.pem"}, "tls_key_file"),
        ({"tls_key_file": "/x.pem"}, "tls_cert_file"),
        ({"admin_tls_port": 8443}, "admin_tls_port"),
        ({"tls_require_trusted_client_cert": True}, "tls_require_trusted_client_cert"),
        ({"authentication_providers": "kerberos"}, "authentication_providers"),
        ({"authentication_refresh_check_seconds": 0}, "authentication_refresh_check_seconds"),
        ({"tls_port": 70000}, "tls_port"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(**settings).validate()  # type: ignore[arg-type]
    assert refused.value.setting == named


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"authentication_enabled": True}, "authentication_providers"),
        ({"authentication_enabled": True, "token_secret_key": "file:///nonexistent/k"},
         "token_secret_key"),
        ({"authentication_enabled": True, "token_public_key": "data:;base64,AAAA"},
         "token_public_key"),
        ({"authentication_enabled": True, "authentication_providers": "basic"},
         "basic_auth_file"),
        ({"authentication_enabled": True, "authentication_providers": "tls"},
         "tls_trust_certs_file"),
        ({"tls_cert_file": "/nonexistent.pem", "tls_key_file": "/nonexistent.key"},
         "tls_cert_file"),
    ],
)
def test_unusable_keys_and_files_stop_the_broker(
    tmp_path: Path, settings: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerService(BrokerConfig(data_dir=tmp_path, **settings))  # type: ignore[arg-type]
    assert refused.value.setting == named


def test_settings_from_the_environment(keys: Keys) -> None:
    config = load_config(None, env={
        "MAGNETAR_AUTHENTICATION_ENABLED": "true",
        "MAGNETAR_TOKEN_SECRET_KEY": keys.url,
        "MAGNETAR_SUPERUSER_ROLES": "a,b",
        "MAGNETAR_TLS_PORT": "off",
    })
    assert config.authentication_enabled and config.token_secret_key == keys.url
    assert config.tls_port is None


def test_key_urls(tmp_path: Path) -> None:
    raw = b"\x00\x01secret\xff"
    path = tmp_path / "k"
    path.write_bytes(raw)
    encoded = base64.b64encode(raw).decode()
    assert read_url_setting(f"file://{path}") == raw
    assert read_url_setting(str(path)) == raw
    assert read_url_setting(f"data:;base64,{encoded}") == raw
    assert read_url_setting("data:,plain%20text") == b"plain text"
    assert read_url_setting(encoded) == raw
    for bad in ("data:;base64,***", "data:nocomma", "not base64 !"):
        with pytest.raises(SettingError):
            read_url_setting(bad)


def test_audience_and_claim(keys: Keys) -> None:
    provider = TokenProvider(keys.secret, claim="role", audience="magnetar")

    def token(claims: dict[str, object]) -> Credentials:
        return Credentials(jwt.encode(claims, keys.secret, algorithm="HS256").encode())

    assert provider.authenticate(token({"role": "r", "aud": "magnetar"})).role == "r"
    assert provider.authenticate(token({"role": ["first", "x"], "aud": ["a", "magnetar"]})).role \
        == "first"
    with pytest.raises(AuthenticationFailed, match="audience"):
        provider.authenticate(token({"role": "r", "aud": "elsewhere"}))
    with pytest.raises(AuthenticationFailed):
        provider.authenticate(token({"role": "r"}))  # no audience at all
    with pytest.raises(AuthenticationFailed, match="'role' claim"):
        provider.authenticate(token({"sub": "r", "aud": "magnetar"}))
    plain = TokenProvider(keys.secret)
    assert plain.authenticate(Credentials(create_token("s", secret_key=keys.secret).encode())
                              ).expires_at is None
    expiring = create_token("s", secret_key=keys.secret, expires_in=60, now=1_000.0)
    assert json.loads(base64.urlsafe_b64decode(expiring.split(".")[1] + "=="))["exp"] == 1060


def test_durations() -> None:
    assert [parse_duration(t) for t in ("30", "30s", "10m", "2h", "7d", "2w", "1y")] == [
        30, 30, 600, 7200, 604_800, 1_209_600, 31_536_000]
    with pytest.raises(ValueError):
        parse_duration("1 month")


def test_a_hand_edited_grants_file_counts_as_no_grants(tmp_path: Path) -> None:
    path = NamespacePolicies.path_for(tmp_path, "t", "ns")
    NamespacePolicies(path, {"auth_policies": {"namespace_auth": "oops",
                                               "destination_auth": {"x": 5}}}).save()
    service = AuthorizationService(["root"], tmp_path)
    name = TopicName.parse("persistent://t/ns/topic")
    assert not service.can_produce("someone", name)
    assert service.can_produce("root", name) and not service.can_produce(None, name)
    service.grant_topic(name.partition(0), "p", ["produce"])
    assert service.can_produce("p", name.partition(0))
    service.grant_topic(name, "whole", ["consume"])  # a grant on the partitioned topic
    assert service.can_consume("whole", name.partition(3))
    other = NamespacePolicies.load(path).policies
    other["redeliveryBackoff"] = {"minDelayMs": 1}  # another policy in the same file
    NamespacePolicies(path, other).save()
    service.revoke_topic(name, "whole")
    assert NamespacePolicies.load(path).policies["redeliveryBackoff"] == {"minDelayMs": 1}
