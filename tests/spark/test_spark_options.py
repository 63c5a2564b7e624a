"""The source's and sink's options as pulsar-spark and the official clients spell them,
strictly: every form of a token in ``authParams`` (checked against a broker that
requires one), TLS trust options (against a TLS broker), misspelt or misplaced options
refused with the nearest valid name, an end before a start refused, namespace-relative
patterns."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path

import pytest
import trustme

from magnetar.broker.auth.tokens import create_secret_key, create_token
from magnetar.protocol.message_id import MessageId
from magnetar.spark import id_to_json
from magnetar.spark.auth_options import AuthSpec
from magnetar.spark.options import ClientSettings, SinkConfig, SourceConfig, normalise
from magnetar.testing import EmbeddedBroker

BASE = {"service.url": "pulsar://127.0.0.1:6650", "topic": "events"}


def source(**options: str) -> SourceConfig:
    return SourceConfig.from_options({**BASE, **options}, streaming=False)


def settings_of(options: dict[str, str]) -> ClientSettings:
    return ClientSettings.from_options(normalise(options))


def token_of(plugin: str, params: str) -> bytes:
    spec = AuthSpec.from_options(plugin, params)
    assert spec is not None
    return spec.provider().auth_data()


def test_every_token_form_of_auth_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzcGFyayJ9.c2ln"
    path = tmp_path / "token.txt"
    path.write_text(jwt + "\n")
    monkeypatch.setenv("SPARK_TEST_TOKEN", jwt)
    b64 = base64.b64encode(jwt.encode()).decode()
    for params in (jwt, f"token:{jwt}", f"file://{path}", f"file:{path}",
                   f"data:;base64,{b64}", f"data:application/json;base64,{b64}",
                   f"data:,{jwt}", "env:SPARK_TEST_TOKEN", json.dumps({"token": jwt}),
                   json.dumps({"token": f"file://{path}"})):
        assert token_of(plugin, params) == jwt.encode(), params
    # A file is read at each connect: a rotated token is picked up.
    spec = AuthSpec.from_options(plugin, f"file://{path}")
    assert spec is not None
    provider = spec.provider()
    path.write_text("rotated")
    assert provider.auth_data() == b"rotated"
    for bad in (f"file://{tmp_path}/missing", "env:NO_SUCH_VARIABLE_HERE", "data:;base64,@@",
                '{"nottoken": 1}', "{not json"):
        with pytest.raises(ValueError):
            AuthSpec.from_options(plugin, bad)


def test_tls_and_basic_plugins_and_their_params(tmp_path: Path) -> None:
    basic = AuthSpec.from_options("org.apache.pulsar.client.impl.auth.AuthenticationBasic",
                                  json.dumps({"userId": "ann", "password": "pw"}))
    assert basic is not None and basic.provider().auth_data() == b"ann:pw"
    tls = AuthSpec.from_options("org.apache.pulsar.client.impl.auth.AuthenticationTls",
                                "tlsCertFile:/c.pem,tlsKeyFile:/k.pem")
    assert tls is not None
    provider = tls.provider()
    assert (provider.certificate_path, provider.private_key_path) == (  # type: ignore[attr-defined]
        "/c.pem", "/k.pem")
    with pytest.raises(ValueError, match="not supported"):
        AuthSpec.from_options("org.example.AuthenticationKerberos", "x")
    with pytest.raises(ValueError, match="authPluginClassName"):
        AuthSpec.from_options("", "token:abc")


def test_misspelt_and_misplaced_options_are_refused_naming_the_right_one() -> None:
    with pytest.raises(ValueError, match="did you mean 'startingOffsets'"):
        source(startingOffset="earliest")
    with pytest.raises(ValueError, match=r"did you mean 'pulsar\.client\.authParams'"):
        source(**{"pulsar.client.authParam": "token:x"})
    with pytest.raises(ValueError, match="did you mean 'maxEntriesPerTrigger'"):
        SourceConfig.from_options({**BASE, "maxEntriesPerTriger": "5"}, streaming=True)
    with pytest.raises(ValueError, match="applies to writing only"):
        source(**{"pulsar.producer.batchingEnabled": "false"})
    with pytest.raises(ValueError, match="applies to reading only"):
        SinkConfig.from_options({**BASE, "startingOffsets": "earliest"}, ("value",))
    with pytest.raises(ValueError, match="needs no admin client"):
        source(**{"pulsar.admin.authParams": "x"})
    with pytest.raises(ValueError, match="streaming queries only"):
        source(maxBytesPerTrigger="1000")
    # Spark's own options pass; case does not matter.
    assert source(CheckpointLocation="/tmp/x", STARTINGOFFSETS="earliest").starting == "earliest"
    stream = SourceConfig.from_options({**BASE, "maxBytesPerTrigger": "65536"}, streaming=True)
    assert stream.max_bytes_per_trigger == 65536


def test_an_end_before_its_start_is_an_error() -> None:
    topic = "persistent://public/default/events"
    at = {i: json.dumps({topic: id_to_json(MessageId(7, i, -1))}) for i in (3, 5)}
    batch = {j: json.dumps({topic: id_to_json(MessageId(7, 9, j, -1, 4))}) for j in (1, 2)}
    with pytest.raises(ValueError, match="is before its startingOffsets"):
        source(startingOffsets=at[5], endingOffsets=at[3])
    with pytest.raises(ValueError, match="is before its startingOffsets"):
        source(startingOffsets=batch[2], endingOffsets=batch[1])
    # Start and end on one message: that message.
    assert source(startingOffsets=at[5], endingOffsets=at[5]).ending


def test_topics_pattern_is_completed_as_a_topic_name_is() -> None:
    assert source(topic="", topicsPattern="public/default/pat-.*").selection.pattern == \
        "persistent://public/default/pat-.*"
    assert source(topic="", topicsPattern="acme/ns1/x.*").selection.pattern == \
        "persistent://acme/ns1/x.*"
    assert source(topic="", topicsPattern="pat-.*").selection.pattern == \
        "persistent://public/default/pat-.*"
    with pytest.raises(ValueError, match="not a regular expression"):
        source(topic="", topicsPattern="pat-(")


def test_token_forms_against_a_broker_that_requires_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = create_secret_key()
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(secret)
    jwt = create_token("spark", secret_key=secret)
    token_file = tmp_path / "token"
    token_file.write_text(jwt)
    monkeypatch.setenv("SPARK_TEST_TOKEN", jwt)
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    topic = f"persistent://public/default/spark-auth-{uuid.uuid4().hex[:8]}"

    async def partitions(settings: ClientSettings) -> list[str]:
        client = settings.connect()
        try:
            return await client.get_topic_partitions(topic)
        finally:
            await client.close()

    with EmbeddedBroker(authentication_enabled=True,
                        token_secret_key=f"file://{key_file}") as broker:
        for params in (f"file://{token_file}", "env:SPARK_TEST_TOKEN",
                       json.dumps({"token": jwt}),
                       "data:;base64," + base64.b64encode(jwt.encode()).decode()):
            settings = settings_of({
                "service.url": broker.service_url, "pulsar.client.operationTimeoutMs": "5000",
                "pulsar.client.authPluginClassName": plugin,
                "pulsar.client.authParams": params})
            assert asyncio.run(partitions(settings)) == [topic], params


def test_tls_trust_certs_file_path(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert, key = tmp_path / "ca.pem", tmp_path / "b.crt", tmp_path / "b.key"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key))
    topic = f"persistent://public/default/spark-tls-{uuid.uuid4().hex[:8]}"

    async def partitions(settings: ClientSettings) -> list[str]:
        client = settings.connect()
        try:
            return await client.get_topic_partitions(topic)
        finally:
            await client.close()

    with pytest.raises(ValueError, match="is not a file"):
        settings_of({"service.url": "pulsar+ssl://localhost:1",
                                     "pulsar.client.tlsTrustCertsFilePath": "/no/such.pem"})
    with EmbeddedBroker(tls_port=0, tls_cert_file=str(cert), tls_key_file=str(key)) as broker:
        assert broker.server is not None
        url = f"pulsar+ssl://localhost:{broker.server.service.config.tls_port}"
        settings = settings_of({
            "service.url": url, "pulsar.client.tlsTrustCertsFilePath": str(ca_file),
            "pulsar.client.tlsHostnameVerificationEnable": "true"})
        assert asyncio.run(partitions(settings)) == [topic]
