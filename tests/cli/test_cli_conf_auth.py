"""Where the client commands find their broker and credentials, as Pulsar's tools do: a
``client.conf`` (``--conf`` or ``PULSAR_CLIENT_CONF``), ``MAGNETAR_*`` variables, and
tokens written ``file://``, ``token:``, ``data:`` or ``env:``; against a real broker
that requires tokens."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.broker.auth.tokens import create_secret_key, create_token
from magnetar.testing import EmbeddedBroker

from .helpers import magnetar

PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return create_secret_key()


@pytest.fixture(scope="module")
def auth_broker(secret: bytes, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[EmbeddedBroker]:
    key = tmp_path_factory.mktemp("key") / "secret.key"
    key.write_bytes(secret)
    with EmbeddedBroker(admin=True, authentication_enabled=True, authorization_enabled=True,
                        superuser_roles="admin", token_secret_key=f"file://{key}") as b:
        yield b


@pytest.fixture
def token_file(secret: bytes, tmp_path: Path) -> Path:
    path = tmp_path / "admin.token"
    path.write_text(create_token("admin", secret_key=secret) + "\n")
    return path


def _topic() -> str:
    return f"persistent://public/default/conf-{uuid.uuid4().hex[:10]}"


def test_token_file_url(auth_broker: EmbeddedBroker, token_file: Path) -> None:
    """``--token file:///path`` reads the file (it was sent as the token: 401)."""
    url = f"file://{token_file}"
    done = magnetar("admin", "tenants", "list", "--admin-url", auth_broker.admin_url,
                    "--token", url)
    assert done.returncode == 0, done.stderr
    assert "public" in json.loads(done.stdout)
    done = magnetar("produce", _topic(), "-m", "x", "--service-url", auth_broker.service_url,
                    "--token", url)
    assert done.returncode == 0, done.stderr


def test_token_forms(auth_broker: EmbeddedBroker, token_file: Path) -> None:
    token = token_file.read_text().strip()
    encoded = base64.b64encode(token.encode()).decode()
    for form, env in [(f"token:{token}", {}), (f"data:;base64,{encoded}", {}),
                      ("env:CLI_TEST_TOKEN", {"CLI_TEST_TOKEN": token})]:
        done = magnetar("admin", "--admin-url", auth_broker.admin_url, "--token", form,
                        "tenants", "list", env=env)
        assert done.returncode == 0, (form, done.stderr)


def test_no_token_is_refused_in_one_line(auth_broker: EmbeddedBroker) -> None:
    done = magnetar("admin", "--admin-url", auth_broker.admin_url, "tenants", "list")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "401" in done.stderr


def test_a_missing_token_file_is_usage(auth_broker: EmbeddedBroker, tmp_path: Path) -> None:
    done = magnetar("admin", "--admin-url", auth_broker.admin_url, "--token",
                    f"file://{tmp_path}/nosuch", "tenants", "list")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "nosuch" in done.stderr


def _client_conf(path: Path, broker: EmbeddedBroker, token_file: Path) -> Path:
    path.write_text(
        "# Pulsar's conf/client.conf\n"
        f"webServiceUrl={broker.admin_url}/\n"
        f"brokerServiceUrl = {broker.service_url}\n"
        f"authPlugin={PLUGIN}\n"
        f"authParams=file://{token_file}\n"
        "tlsAllowInsecureConnection=false\n"
    )
    return path


def test_client_conf_flag_and_variable(auth_broker: EmbeddedBroker, token_file: Path,
                                       tmp_path: Path) -> None:
    conf = _client_conf(tmp_path / "client.conf", auth_broker, token_file)
    topic = _topic()
    done = magnetar("admin", "topics", "create", topic, "--conf", str(conf))
    assert done.returncode == 0, done.stderr
    env = {"PULSAR_CLIENT_CONF": str(conf)}
    done = magnetar("produce", topic, "-m", "from-conf", env=env)
    assert done.returncode == 0, done.stderr
    done = magnetar("consume", topic, "-s", "s", "-p", "Earliest", "--timeout", "30", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["payload"] == "from-conf"
    done = magnetar("perf", "produce", topic, "-m", "5", "-cf", str(conf))
    assert done.returncode == 0, done.stderr


def test_variables_over_the_conf_and_flags_over_both(
    auth_broker: EmbeddedBroker, token_file: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text("webServiceUrl=http://127.0.0.1:9\nbrokerServiceUrl=pulsar://127.0.0.1:9\n")
    env = {"PULSAR_CLIENT_CONF": str(conf), "MAGNETAR_ADMIN_URL": auth_broker.admin_url,
           "MAGNETAR_SERVICE_URL": auth_broker.service_url,
           "MAGNETAR_TOKEN": f"file://{token_file}"}
    assert magnetar("admin", "tenants", "list", env=env).returncode == 0
    done = magnetar("produce", _topic(), "-m", "x", env=env)
    assert done.returncode == 0, done.stderr
    done = magnetar("admin", "tenants", "list", "--admin-url", "http://127.0.0.1:9", env=env)
    assert done.returncode == 1 and "cannot reach" in done.stderr


def test_a_missing_conf_file_is_one_line(tmp_path: Path) -> None:
    done = magnetar("produce", "t", "-m", "x", env={"PULSAR_CLIENT_CONF": str(tmp_path / "no")})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "client configuration" in done.stderr


def test_an_unknown_auth_plugin_is_one_line(tmp_path: Path) -> None:
    done = magnetar("admin", "tenants", "list", "--auth-plugin", "com.example.Kerberos",
                    "--auth-params", "x")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not supported" in done.stderr
