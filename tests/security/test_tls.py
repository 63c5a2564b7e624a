"""TLS: pulsar+ssl:// with the official client (trust file, hostname verification on)
and magnetar's, a client that does not trust the broker's CA is refused, TLS below 1.2
is refused, client certificates (mTLS) give the role their CN, and the admin API on
HTTPS."""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Iterator

import pulsar
import pytest
import trustme
from admin_http import http
from official_client import quiet_logger

from magnetar.client import AuthenticationTLS, AuthenticationToken, Client
from magnetar.client.errors import AuthorizationError, ConnectError
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, Pki, bearer


def tls_url(broker: EmbeddedBroker, host: str = "localhost") -> str:
    assert broker.server is not None
    return f"pulsar+ssl://{host}:{broker.server.service.config.tls_port}"


@pytest.fixture(scope="module")
def broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        admin=True,
        tls_port=0,
        admin_tls_port=0,
        tls_cert_file=str(pki.cert_file),
        tls_key_file=str(pki.key_file),
    ) as b:
        yield b


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_official_client_over_tls_with_hostname_verification(
    broker: EmbeddedBroker, pki: Pki, topic: str, host: str
) -> None:
    client = pulsar.Client(
        tls_url(broker, host),
        tls_trust_certs_file_path=str(pki.ca_file),
        tls_validate_hostname=True,
        logger=quiet_logger(),
        operation_timeout_seconds=10,
    )
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"over tls")
        assert consumer.receive(timeout_millis=10_000).data() == b"over tls"
    finally:
        client.close()


def test_official_client_without_the_right_ca_is_refused(
    broker: EmbeddedBroker, pki: Pki, topic: str
) -> None:
    other = trustme.CA()
    path = pki.folder / "other-ca.pem"
    other.cert_pem.write_to_path(str(path))
    client = pulsar.Client(
        tls_url(broker),
        tls_trust_certs_file_path=str(path),
        tls_validate_hostname=True,
        logger=quiet_logger(),
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()


async def test_magnetar_client_over_tls(broker: EmbeddedBroker, pki: Pki, topic: str) -> None:
    async with Client(
        tls_url(broker), tls_trust_certs_file_path=str(pki.ca_file), tls_validate_hostname=True
    ) as client:
        consumer = await client.subscribe(topic, "s")
        await (await client.create_producer(topic)).send(b"m")
        assert (await consumer.receive()).value == b"m"
    other = trustme.CA()
    path = pki.folder / "other-ca-2.pem"
    other.cert_pem.write_to_path(str(path))
    async with Client(
        tls_url(broker), tls_trust_certs_file_path=str(path), operation_timeout=5,
        connection_timeout=5,
    ) as client:
        with pytest.raises(ConnectError):
            await client.create_producer(topic)


def test_tls_below_1_2_is_refused(broker: EmbeddedBroker, pki: Pki) -> None:
    import socket

    context = ssl.create_default_context(cafile=str(pki.ca_file))
    with warnings.catch_warnings():  # the point is to use what is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    assert broker.server is not None
    port = broker.server.service.config.tls_port
    assert port is not None
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        context.wrap_socket(raw, server_hostname="localhost")


def test_plain_port_still_serves_with_tls_on(broker: EmbeddedBroker, topic: str) -> None:
    client = pulsar.Client(broker.service_url, logger=quiet_logger(), operation_timeout_seconds=10)
    try:
        client.create_producer(topic).send(b"plain")
    finally:
        client.close()


def test_admin_over_https(broker: EmbeddedBroker, pki: Pki) -> None:
    assert broker.server is not None and broker.server.admin is not None
    port = broker.server.admin.tls_port
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    reply = http(f"https://localhost:{port}/admin/v2/persistent/public/default", context=context)
    assert reply.status == 200
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        http(f"https://localhost:{port}/metrics", context=ssl.create_default_context())


@pytest.fixture(scope="module")
def mtls_broker(pki: Pki, keys: Keys) -> Iterator[EmbeddedBroker]:
    """Client certificates are required and give the role (tls); tokens work too."""
    with EmbeddedBroker(
        admin=True,
        tls_port=0,
        admin_tls_port=0,
        tls_cert_file=str(pki.cert_file),
        tls_key_file=str(pki.key_file),
        tls_trust_certs_file=str(pki.ca_file),
        tls_require_trusted_client_cert=True,
        authentication_enabled=True,
        authentication_providers="tls,token",
        token_secret_key=keys.url,
        authorization_enabled=True,
        superuser_roles="boss",
    ) as b:
        yield b


def test_official_client_mtls_role_from_the_certificate_cn(
    mtls_broker: EmbeddedBroker, pki: Pki, topic: str
) -> None:
    for cn, allowed in (("boss", True), ("intern", False)):
        cert, key = pki.client_cert(cn)
        client = pulsar.Client(
            tls_url(mtls_broker),
            tls_trust_certs_file_path=str(pki.ca_file),
            tls_validate_hostname=True,
            authentication=pulsar.AuthenticationTLS(str(cert), str(key)),
            logger=quiet_logger(),
            operation_timeout_seconds=5,
        )
        try:
            if allowed:
                client.create_producer(topic).send(b"from boss")
            else:
                with pytest.raises(pulsar.PulsarException):
                    client.create_producer(topic)
        finally:
            client.close()


async def test_magnetar_client_mtls(mtls_broker: EmbeddedBroker, pki: Pki, topic: str) -> None:
    cert, key = pki.client_cert("boss")
    auth = AuthenticationTLS(str(cert), str(key))
    async with Client(
        tls_url(mtls_broker), auth=auth, tls_trust_certs_file_path=str(pki.ca_file),
        tls_validate_hostname=True,
    ) as client:
        await (await client.create_producer(topic)).send(b"mtls")
    cert, key = pki.client_cert("intern")
    async with Client(
        tls_url(mtls_broker), auth=AuthenticationTLS(str(cert), str(key)),
        tls_trust_certs_file_path=str(pki.ca_file), operation_timeout=5,
    ) as client:
        with pytest.raises(AuthorizationError):
            await client.create_producer(topic)


async def test_no_client_certificate_is_refused_in_the_handshake(
    mtls_broker: EmbeddedBroker, pki: Pki, keys: Keys, topic: str
) -> None:
    # A good token is not enough: the handshake itself wants a trusted certificate.
    async with Client(
        tls_url(mtls_broker), auth=AuthenticationToken(keys.token("boss")),
        tls_trust_certs_file_path=str(pki.ca_file), operation_timeout=5, connection_timeout=5,
    ) as client:
        with pytest.raises(ConnectError):
            await client.create_producer(topic)
    # The plain port takes tokens.
    async with Client(
        mtls_broker.service_url, auth=AuthenticationToken(keys.token("boss"))
    ) as client:
        await (await client.create_producer(topic)).send(b"token on the plain port")


def test_admin_https_with_a_client_certificate(
    mtls_broker: EmbeddedBroker, pki: Pki, keys: Keys
) -> None:
    assert mtls_broker.server is not None and mtls_broker.server.admin is not None
    port = mtls_broker.server.admin.tls_port
    url = f"https://localhost:{port}/admin/v2/persistent/public/default"
    for cn, status in (("boss", 200), ("intern", 403)):
        cert, key = pki.client_cert(cn)
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        context.load_cert_chain(str(cert), str(key))
        assert http(url, context=context).status == status
    assert http(
        f"{mtls_broker.admin_url}/admin/v2/persistent/public/default",
        headers=bearer(keys.token("boss")),
    ).status == 200
