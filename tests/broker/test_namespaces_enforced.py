"""Namespaces are real in the binary protocol: a topic whose tenant or namespace does
not exist gets TopicNotFound, as from Pulsar, until the admin API creates it.

The official client raises TopicNotFound for its producer, consumer, reader and
partition lookup (with a 30 s operation timeout: the error type shows it was not a
timeout); magnetar's client does the same; a raw LOOKUP and PARTITIONED_METADATA answer
Pulsar's error. ``allow_auto_namespace_creation`` lets the first topic create the
namespace and its tenant, and what it created is there after a restart.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.client import Client
from magnetar.client.errors import TopicNotFound
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as b:
        yield b


def official(broker: EmbeddedBroker) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        logger=quiet_logger(),
        operation_timeout_seconds=30,
    )


def put(broker: EmbeddedBroker, path: str, body: bytes = b"") -> int:
    request = urllib.request.Request(f"{broker.admin_url}{path}", data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def get_json(broker: EmbeddedBroker, path: str) -> object:
    with urllib.request.urlopen(f"{broker.admin_url}{path}", timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def tenant() -> str:
    return f"nx-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("missing", ["tenant", "namespace"])
def test_the_official_client_gets_topic_not_found(
    broker: EmbeddedBroker, tenant: str, missing: str
) -> None:
    if missing == "namespace":  # the tenant exists, the namespace does not
        assert put(broker, f"/admin/v2/tenants/{tenant}") == 204
    topic = f"persistent://{tenant}/ns/t"
    client = official(broker)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic)
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(topic, "s")
        with pytest.raises(pulsar.TopicNotFound):
            client.create_reader(topic, pulsar.MessageId.earliest)
        with pytest.raises(pulsar.TopicNotFound):
            client.get_topic_partitions(topic)
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"non-persistent://{tenant}/ns/t")
    finally:
        client.close()
    assert not (broker.data_dir / "persistent" / tenant).exists()  # nothing was created


def test_it_works_once_the_admin_api_creates_the_namespace(
    broker: EmbeddedBroker, tenant: str
) -> None:
    topic = f"persistent://{tenant}/orders/t"
    client = official(broker)
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic)
        assert put(broker, f"/admin/v2/tenants/{tenant}") == 204
        assert put(broker, f"/admin/v2/namespaces/{tenant}/orders") == 204
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"after")
        assert consumer.receive(10_000).data() == b"after"
        assert put(broker, f"/admin/v2/persistent/{tenant}/orders/parted/partitions", b"2") == 204
        assert client.get_topic_partitions(f"persistent://{tenant}/orders/parted") == [
            f"persistent://{tenant}/orders/parted-partition-{i}" for i in range(2)
        ]
    finally:
        client.close()


def test_raw_lookups_answer_pulsars_error(broker: EmbeddedBroker, tenant: str) -> None:
    peer = RawPeer(broker.port)
    try:
        topic = f"persistent://{tenant}/ns/t"
        peer.send(BaseCommand(type=BaseCommand.LOOKUP, lookupTopic=pb.CommandLookupTopic(
            topic=topic, request_id=1)))
        lookup = peer.expect(BaseCommand.LOOKUP_RESPONSE).command.lookupTopicResponse
        assert lookup.response == pb.CommandLookupTopicResponse.Failed
        assert lookup.error == pb.TopicNotFound
        assert lookup.message == f"Namespace {tenant}/ns not found"
        peer.send(BaseCommand(
            type=BaseCommand.PARTITIONED_METADATA,
            partitionMetadata=pb.CommandPartitionedTopicMetadata(topic=topic, request_id=2),
        ))
        meta = peer.expect(BaseCommand.PARTITIONED_METADATA_RESPONSE).command
        assert meta.partitionMetadataResponse.error == pb.TopicNotFound
        # A PRODUCER sent without a lookup (magnetar's client, a proxy) is refused too.
        peer.send(BaseCommand(type=BaseCommand.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=1, request_id=3)))
        error = peer.expect(BaseCommand.ERROR).command.error
        assert error.error == pb.TopicNotFound and f"{tenant}/ns" in error.message
    finally:
        peer.close()


def test_magnetars_client_gets_topic_not_found(broker: EmbeddedBroker, tenant: str) -> None:
    async def run() -> None:
        async with Client(broker.service_url, operation_timeout=30) as client:
            with pytest.raises(TopicNotFound):
                await client.create_producer(f"persistent://{tenant}/ns/t")
            with pytest.raises(TopicNotFound):
                await client.subscribe(f"persistent://{tenant}/ns/t", "s")

    asyncio.run(run())


def test_the_python_api_refuses_a_topic_in_a_missing_namespace(
    broker: EmbeddedBroker, tenant: str
) -> None:
    with pytest.raises(LookupError, match="not found"):
        broker.create_partitioned_topic(f"persistent://{tenant}/ns/parted", 2)
    broker.create_namespace(f"{tenant}/ns")
    broker.create_partitioned_topic(f"persistent://{tenant}/ns/parted", 2)
    assert get_json(broker, f"/admin/v2/persistent/{tenant}/ns/partitioned") == [
        f"persistent://{tenant}/ns/parted"
    ]


def test_auto_namespace_creation_creates_namespace_and_tenant(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path, allow_auto_namespace_creation=True) as b:
        client = official(b)
        try:
            consumer = client.subscribe("persistent://made/by-use/t", "s")
            client.create_producer("persistent://made/by-use/t").send(b"one")
            assert consumer.receive(10_000).data() == b"one"
            # A lookup alone creates nothing: the namespace comes with its first topic.
            assert client.get_topic_partitions("persistent://looked/up/t") == [
                "persistent://looked/up/t"
            ]
        finally:
            client.close()
        assert get_json(b, "/admin/v2/namespaces/made") == ["made/by-use"]
        assert "looked" not in get_json(b, "/admin/v2/tenants")  # type: ignore[operator]
        b.restart()
        assert get_json(b, "/admin/v2/namespaces/made") == ["made/by-use"]
        assert get_json(b, "/admin/v2/tenants/made") == {
            "adminRoles": [], "allowedClusters": ["standalone"],
        }


def test_auto_topic_creation_off_still_names_the_missing_namespace(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, allow_auto_topic_creation=False) as b:
        peer = RawPeer(b.port)
        try:
            peer.send(BaseCommand(type=BaseCommand.PRODUCER, producer=pb.CommandProducer(
                topic="persistent://gone/ns/t", producer_id=1, request_id=1)))
            error = peer.expect(BaseCommand.ERROR).command.error
            assert error.error == pb.TopicNotFound
            assert error.message == "Namespace gone/ns not found"
        finally:
            peer.close()


def test_embedded_create_namespace_in_a_subprocess_broker(tmp_path: Path) -> None:
    with EmbeddedBroker(mode="subprocess", admin=True, data_dir=tmp_path) as b:
        b.create_namespace("sub/ns")
        b.create_namespace("sub/ns")  # again: it exists, nothing to do
        client = official(b)
        try:
            client.create_producer("persistent://sub/ns/t").send(b"x")
        finally:
            client.close()
        assert get_json(b, "/admin/v2/namespaces/sub") == ["sub/ns"]
