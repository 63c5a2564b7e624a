"""Pulsar's HTTP lookup service: a client whose service URL is the admin address.

The official client given ``http://host:admin-port`` asks the partition count, the
broker and the topics of a namespace over HTTP; it produces and consumes, on plain and
partitioned topics, through regex subscriptions and readers, as it does with the
binary service URL. The answers have Pulsar's JSON shapes; a listener is chosen by
``listenerName`` or the ``X-Pulsar-ListenerName`` header.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    port = free_port()
    listeners = f"internal:pulsar://127.0.0.1:{port},external:pulsar://localhost:{port}"
    with EmbeddedBroker(port=port, admin=True, advertised_listeners=listeners) as b:
        yield b


@pytest.fixture
def client(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> pulsar.Client:
    assert broker.admin_url is not None
    # http://127.0.0.1:<admin port>: the HTTP lookup service
    return client_factory(broker.admin_url, operation_timeout_seconds=30)


def get(broker: EmbeddedBroker, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, Any]:
    request = urllib.request.Request(f"{broker.admin_url}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def put(broker: EmbeddedBroker, path: str, body: bytes) -> int:
    request = urllib.request.Request(f"{broker.admin_url}{path}", data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.fixture
def local() -> str:
    return f"hl-{uuid.uuid4().hex[:10]}"


def test_produce_and_consume_through_the_http_service_url(
    client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    got = []
    for _ in range(5):
        msg = consumer.receive(10_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(5)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"m0"


def test_partitioned_topics_through_the_http_service_url(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    assert put(broker, f"/admin/v2/persistent/public/default/{local}/partitions", b"3") == 204
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False,
    )
    sent = {f"p{i}".encode() for i in range(9)}
    for payload in sorted(sent):
        producer.send(payload)
    received = []
    for _ in sent:
        msg = consumer.receive(10_000)
        received.append(msg)
        consumer.acknowledge(msg)
    assert {m.data() for m in received} == sent
    assert {m.topic_name() for m in received} == {f"{topic}-partition-{i}" for i in range(3)}


def test_regex_subscriptions_list_the_namespace_over_http(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    names = [f"persistent://public/default/{local}-{k}" for k in ("a", "b")]
    for name in names:
        client.create_producer(name).close()
    status, listed = get(broker, "/admin/v2/namespaces/public/default/topics")
    assert status == 200 and set(names) <= set(listed)
    consumer = client.subscribe(re.compile(f"persistent://public/default/{local}-.*"), "s")
    for name in names:
        client.create_producer(name).send(name.encode())
    assert {consumer.receive(10_000).data() for _ in names} == {n.encode() for n in names}


def test_auto_created_partitioned_topics_over_http(local: str) -> None:
    with EmbeddedBroker(admin=True, default_partitions=2) as broker:
        assert broker.admin_url is not None
        client = pulsar.Client(broker.admin_url, operation_timeout_seconds=30,
                               logger=quiet_logger())
        try:
            topic = f"persistent://public/default/{local}"
            client.create_producer(topic).send(b"x")
            assert get(broker, f"/admin/v2/persistent/public/default/{local}/partitions"
                       ) == (200, {"partitions": 2})
        finally:
            client.close()


def test_the_lookup_answer_has_pulsars_shape(broker: EmbeddedBroker) -> None:
    port, admin = broker.port, broker.admin_port
    status, answer = get(broker, "/lookup/v2/topic/persistent/public/default/any")
    assert status == 200
    assert answer == {
        "brokerUrl": f"pulsar://127.0.0.1:{port}",
        "httpUrl": f"http://127.0.0.1:{admin}",
        "nativeUrl": f"pulsar://127.0.0.1:{port}",
        "brokerUrlSsl": "",
    }
    for path, headers in [
        ("/lookup/v2/topic/persistent/public/default/any?listenerName=external", {}),
        ("/lookup/v2/topic/non-persistent/public/default/any",
         {"X-Pulsar-ListenerName": "external"}),
    ]:
        status, answer = get(broker, path, headers)
        assert status == 200
        assert answer["brokerUrl"] == f"pulsar://localhost:{port}"
        assert answer["httpUrl"] == f"http://localhost:{admin}"
    status, answer = get(broker, "/lookup/v2/topic/persistent/public/default/any?listenerName=x")
    assert status == 400 and answer == {"reason": "the broker do not have x listener"}
    assert get(broker, "/lookup/v2/topic/elsewhere/public/default/any")[0] == 412


def test_namespace_topic_lists_by_mode(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    persistent = f"persistent://public/default/{local}"
    transient = f"non-persistent://public/default/{local}"
    client.create_producer(persistent)
    client.create_producer(transient)
    path = "/admin/v2/namespaces/public/default/topics"
    assert persistent in get(broker, path)[1] and transient not in get(broker, path)[1]
    only_np = get(broker, path + "?mode=NON_PERSISTENT")[1]
    assert transient in only_np and persistent not in only_np
    assert {persistent, transient} <= set(get(broker, path + "?mode=ALL")[1])
    assert get(broker, path + "?mode=SOME")[0] == 400


def test_a_missing_namespace_over_http(broker: EmbeddedBroker, client: pulsar.Client) -> None:
    """Pulsar answers 404, and the official client's HTTP lookup reports every HTTP
    error as ConnectError (its curl is told to fail on errors): at once, as from Pulsar."""
    assert get(broker, "/admin/v2/persistent/gone/ns/t/partitions?checkAllowAutoCreation=true"
               ) == (404, {"reason": "Namespace gone/ns does not exist"})
    with pytest.raises(pulsar.ConnectError):
        client.create_producer("persistent://gone/ns/t")
