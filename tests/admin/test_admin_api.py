"""The admin HTTP server against a real broker, with traffic from the official client.

Covers every route: ``/metrics`` (and ``/metrics/``), the namespace listings (topics and
partitioned topics), a topic's stats, creating partitioned and non-partitioned topics,
terminating and deleting topics, the status and reason of each refusal (invalid names,
bad partition counts, unknown, busy or partitioned topics), other tenants and namespaces,
and the non-persistent domain.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest
from admin_http import http
from official_client import quiet_logger
from prometheus_client.parser import text_string_to_metric_families

from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"
NP_NS = "/admin/v2/non-persistent/public/default"
T = TypeVar("T")


@pytest.fixture(scope="module")
def admin_broker() -> Iterator[EmbeddedBroker]:
    """A broker of this module's own, so the listings and the data dir hold only our topics."""
    with EmbeddedBroker(admin=True) as broker:
        yield broker


@pytest.fixture
def pulsar_client(
    admin_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> pulsar.Client:
    return client_factory(admin_broker.service_url)


@pytest.fixture
def local() -> str:
    return f"adm-{uuid.uuid4().hex[:10]}"


def ok_json(broker: EmbeddedBroker, path: str) -> Any:
    reply = http(broker, "GET", path)
    assert reply.status == 200, (path, reply)
    return reply.json()


def metric(text: str, name: str, topic: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("topic") == topic:
                return float(sample.value)
    return None


def scrape(broker: EmbeddedBroker, path: str = "/metrics") -> str:
    reply = http(broker, "GET", path)
    assert reply.status == 200
    return reply.text


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], timeout: float = 5.0) -> T:
    """The probe's value once ``done`` holds, or its last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def topic_dir(broker: EmbeddedBroker, local: str) -> Path:
    return broker.data_dir / "persistent" / "public" / "default" / local


# ------------------------------------------------------------------ /metrics


def test_metrics_count_messages_producers_subscriptions_and_backlog(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    consumer = pulsar_client.subscribe(
        topic, "metrics-sub", consumer_type=pulsar.ConsumerType.Shared
    )
    producer = pulsar_client.create_producer(topic, batching_enabled=False)
    sent = [f"m{i}".encode() for i in range(7)]
    for payload in sent:
        producer.send(payload)

    reply = http(admin_broker, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = reply.text
    assert metric(text, "pulsar_in_messages_total", topic) == len(sent)
    assert metric(text, "pulsar_producers_count", topic) == 1
    assert metric(text, "pulsar_subscriptions_count", topic) == 1
    assert metric(text, "pulsar_consumers_count", topic) == 1
    assert metric(text, "pulsar_msg_backlog", topic) == len(sent)
    family = next(f for f in text_string_to_metric_families(text) if f.name == "pulsar_in_messages")
    labels = next(s.labels for s in family.samples if s.labels["topic"] == topic)
    assert labels == {"cluster": "standalone", "namespace": "public/default", "topic": topic}

    received = [consumer.receive(5000) for _ in sent]
    assert sorted(m.data() for m in received) == sorted(sent)
    for message in received:
        consumer.acknowledge(message)
    # The client groups acks and sends them a little later.
    text = wait_for(
        lambda: scrape(admin_broker, "/metrics/"),
        lambda t: metric(t, "pulsar_msg_backlog", topic) == 0,
    )
    assert metric(text, "pulsar_msg_backlog", topic) == 0
    assert metric(text, "pulsar_out_messages_total", topic) == len(sent)
    assert metric(text, "pulsar_in_messages_total", topic) == len(sent)

    producer.close()
    consumer.close()
    text = scrape(admin_broker)
    assert metric(text, "pulsar_producers_count", topic) == 0
    assert metric(text, "pulsar_consumers_count", topic) == 0
    assert metric(text, "pulsar_subscriptions_count", topic) == 1, "a durable subscription stays"


# ------------------------------------------------------------------ listings


def test_namespace_lists_topics_and_partitioned_topics(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    plain, parted, used = (f"persistent://public/default/{local}-{s}" for s in "abc")
    assert http(admin_broker, "PUT", f"{NS}/{local}-a").status == 204
    assert http(admin_broker, "PUT", f"{NS}/{local}-b/partitions", b"2").status == 204
    pulsar_client.create_producer(used).send(b"creates the topic")

    topics = ok_json(admin_broker, NS)
    assert topics == sorted(topics)
    assert plain in topics and used in topics
    # Like Pulsar: a partitioned topic is listed as its partitions, not by its own name.
    assert f"{parted}-partition-0" in topics and f"{parted}-partition-1" in topics
    assert parted not in topics and f"{parted}-partition-2" not in topics

    partitioned = ok_json(admin_broker, f"{NS}/partitioned")
    assert parted in partitioned
    assert plain not in partitioned and used not in partitioned

    non_persistent = ok_json(admin_broker, NP_NS)
    assert all(t.startswith("non-persistent://") for t in non_persistent)
    assert plain not in non_persistent and f"{parted}-partition-0" not in non_persistent
    assert parted not in ok_json(admin_broker, f"{NP_NS}/partitioned")


def test_other_tenants_and_namespaces_once_created(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    tenant = f"acme-{local}"
    full = f"persistent://{tenant}/orders/incoming"
    # As in Pulsar, a topic's namespace must exist first (tests/admin/test_tenants_namespaces.py).
    missing = http(admin_broker, "PUT", f"/admin/v2/persistent/{tenant}/orders/incoming")
    assert missing.status == 404
    assert missing.json() == {"reason": f"Namespace {tenant}/orders does not exist"}
    assert http(admin_broker, "PUT", f"/admin/v2/tenants/{tenant}").status == 204
    assert http(admin_broker, "PUT", f"/admin/v2/namespaces/{tenant}/orders").status == 204
    assert http(admin_broker, "PUT", f"/admin/v2/persistent/{tenant}/orders/incoming").status == 204
    producer = pulsar_client.create_producer(full)
    producer.send(b"one")
    producer.send(b"two")

    assert ok_json(admin_broker, f"/admin/v2/persistent/{tenant}/orders") == [full]
    assert http(admin_broker, "GET", f"/admin/v2/persistent/{tenant}/unknown-ns").status == 404
    assert full not in ok_json(admin_broker, NS)
    stats = ok_json(admin_broker, f"/admin/v2/persistent/{tenant}/orders/incoming/stats")
    assert stats["msgInCounter"] == 2


# ------------------------------------------------------------------ stats


def test_stats_show_counters_publishers_subscriptions_and_consumers(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    producer = pulsar_client.create_producer(
        topic, producer_name=f"{local}-producer", batching_enabled=False
    )
    consumer = pulsar_client.subscribe(
        topic,
        "stats-sub",
        consumer_type=pulsar.ConsumerType.Shared,
        consumer_name=f"{local}-consumer",
    )
    payloads = [b"alpha", b"beta", b"gamma"]
    for payload in payloads:
        producer.send(payload)
    received = [consumer.receive(5000) for _ in payloads]
    consumer.acknowledge(received[0])

    stats = wait_for(
        lambda: ok_json(admin_broker, f"{NS}/{local}/stats"),
        lambda s: s["subscriptions"]["stats-sub"]["msgBacklog"] == 2,
    )
    assert stats["msgInCounter"] == 3
    assert stats["entries"] == 3
    assert stats["msgOutCounter"] == 3
    assert stats["bytesInCounter"] >= sum(map(len, payloads))
    assert stats["storageSize"] > 0
    assert stats["accessMode"] == "Shared" and stats["exclusiveProducer"] is None
    [publisher] = stats["publishers"]
    assert publisher["producerName"] == f"{local}-producer"
    assert publisher["msgInCounter"] == 3
    assert publisher["accessMode"] == "Shared"
    assert set(stats["subscriptions"]) == {"stats-sub"}
    sub = stats["subscriptions"]["stats-sub"]
    assert sub["type"] == "Shared" and sub["durable"] is True
    assert sub["msgBacklog"] == 2 and sub["unackedMessages"] == 2
    [member] = sub["consumers"]
    assert member["consumerName"] == f"{local}-consumer"
    assert member["msgOutCounter"] == 3 and member["unackedMessages"] == 2
    assert member["address"].startswith("127.0.0.1")


def test_stats_of_an_unknown_topic_is_404_and_creates_nothing(
    admin_broker: EmbeddedBroker, local: str
) -> None:
    reply = http(admin_broker, "GET", f"{NS}/{local}/stats")
    assert reply.status == 404
    assert reply.reason == f"topic persistent://public/default/{local} not found"
    assert f"persistent://public/default/{local}" not in ok_json(admin_broker, NS)
    assert not topic_dir(admin_broker, local).exists()


# ------------------------------------------------------------------ creating topics


def test_partitioned_topic_is_created_and_served_to_the_official_client(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    base = f"persistent://public/default/{local}"
    reply = http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"3")
    assert (reply.status, reply.text) == (204, "")
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 3}
    assert ok_json(admin_broker, f"{NS}/{local}-never-made/partitions") == {"partitions": 0}

    consumer = pulsar_client.subscribe(base, "all-partitions")
    producer = pulsar_client.create_producer(base, batching_enabled=False)
    sent = [f"m{i}".encode() for i in range(30)]
    for i, payload in enumerate(sent):
        producer.send(payload, partition_key=f"key-{i}")
    received = [consumer.receive(5000) for _ in sent]
    assert sorted(m.data() for m in received) == sorted(sent)
    per_partition = Counter(m.topic_name() for m in received)
    assert set(per_partition) == {f"{base}-partition-{i}" for i in range(3)}
    for i in range(3):
        stats = ok_json(admin_broker, f"{NS}/{local}-partition-{i}/stats")
        assert stats["msgInCounter"] == per_partition[f"{base}-partition-{i}"]
        assert set(stats["subscriptions"]) == {"all-partitions"}

    again = http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"5")
    assert again.status == 409
    assert again.reason == f"partitioned topic {base} already exists"
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 3}


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"abc", 400, "the body must be the number of partitions, not 'abc'"),
        (b"", 400, "the body must be the number of partitions, not ''"),
        (b"2.5", 400, "the body must be the number of partitions, not '2.5'"),
        (b"0", 406, "Number of partitions should be more than 0"),
        (b"-2", 406, "Number of partitions should be more than 0"),
        (b"1001", 412, "Number of partitions should be less than or equal to 1000"),
    ],
)
def test_bad_partition_counts_are_refused_and_create_nothing(
    admin_broker: EmbeddedBroker, local: str, body: bytes, status: int, reason: str
) -> None:
    reply = http(admin_broker, "PUT", f"{NS}/{local}/partitions", body)
    assert (reply.status, reply.reason) == (status, reason)
    assert reason in reply.text
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 0}
    assert f"persistent://public/default/{local}" not in ok_json(admin_broker, f"{NS}/partitioned")


def test_partitions_cannot_be_made_on_a_partition_name_or_an_existing_topic(
    admin_broker: EmbeddedBroker, local: str
) -> None:
    reply = http(admin_broker, "PUT", f"{NS}/{local}-partition-1/partitions", b"2")
    assert reply.status == 412
    partition = f"persistent://public/default/{local}-partition-1"
    assert reply.reason == f"{partition} is itself a partition name"

    assert http(admin_broker, "PUT", f"{NS}/{local}").status == 204
    reply = http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"2")
    assert reply.status == 409
    full = f"persistent://public/default/{local}"
    assert reply.reason == f"non-partitioned topic {full} already exists"


def test_put_creates_a_non_partitioned_topic(admin_broker: EmbeddedBroker, local: str) -> None:
    full = f"persistent://public/default/{local}"
    reply = http(admin_broker, "PUT", f"{NS}/{local}")
    assert (reply.status, reply.text) == (204, "")
    assert full in ok_json(admin_broker, NS)
    assert topic_dir(admin_broker, local).is_dir()
    stats = ok_json(admin_broker, f"{NS}/{local}/stats")
    assert (stats["msgInCounter"], stats["entries"]) == (0, 0)
    assert (stats["publishers"], stats["subscriptions"]) == ([], {})
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 0}
    again = http(admin_broker, "PUT", f"{NS}/{local}")
    assert (again.status, again.reason) == (409, f"topic {full} already exists")


def test_put_on_a_partitioned_topic_name_is_409(admin_broker: EmbeddedBroker, local: str) -> None:
    assert http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"2").status == 204
    reply = http(admin_broker, "PUT", f"{NS}/{local}")
    assert reply.status == 409
    assert reply.reason.startswith(f"topic persistent://public/default/{local} is partitioned")
    assert f"persistent://public/default/{local}" not in ok_json(admin_broker, NS)
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 2}


# ------------------------------------------------------------------ terminate


def test_terminate_stops_producers_and_keeps_what_was_stored(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    consumer = pulsar_client.subscribe(topic, "reads-to-the-end")
    producer = pulsar_client.create_producer(topic, batching_enabled=False)
    stored = [f"m{i}".encode() for i in range(3)]
    ids = [producer.send(payload) for payload in stored]

    reply = http(admin_broker, "POST", f"{NS}/{local}/terminate")
    assert reply.status == 200
    last = ids[-1]
    assert reply.json() == {
        "ledgerId": last.ledger_id(),
        "entryId": last.entry_id(),
        "partitionIndex": -1,
    }

    with pytest.raises(pulsar.TopicTerminated) as refused:
        producer.send(b"too late")
    assert "Terminated" in type(refused.value).__name__
    with pytest.raises(pulsar.TopicTerminated):
        pulsar_client.create_producer(topic)

    # Everything stored is still read, once: the official client is not sent the
    # REACHED_END_OF_TOPIC its C++ core would drop the connection over (client_quirks).
    assert [consumer.receive(5000).data() for _ in stored] == stored
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    consumer.close()

    again = http(admin_broker, "POST", f"{NS}/{local}/terminate")
    assert (again.status, again.json()) == (200, reply.json())
    stats = ok_json(admin_broker, f"{NS}/{local}/stats")
    assert stats["msgInCounter"] == 3 and stats["entries"] == 3
    assert stats["publishers"] == []


def test_terminate_of_unknown_or_partitioned_topics_is_refused(
    admin_broker: EmbeddedBroker, local: str
) -> None:
    reply = http(admin_broker, "POST", f"{NS}/{local}/terminate")
    assert reply.status == 404
    assert reply.reason == f"topic persistent://public/default/{local} does not exist"

    assert http(admin_broker, "PUT", f"{NS}/{local}-p/partitions", b"2").status == 204
    reply = http(admin_broker, "POST", f"{NS}/{local}-p/terminate")
    assert reply.status == 405
    assert reply.reason == "Termination of a partitioned topic is not allowed"


# ------------------------------------------------------------------ delete


def test_delete_refuses_a_busy_topic_then_removes_it_and_its_data(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    producer = pulsar_client.create_producer(topic)
    producer.send(b"stored")
    consumer = pulsar_client.subscribe(topic, "s")

    busy = http(admin_broker, "DELETE", f"{NS}/{local}")
    assert busy.status == 412
    assert busy.reason == f"topic {topic} has connected producers or consumers"
    assert topic in ok_json(admin_broker, NS)
    assert topic_dir(admin_broker, local).is_dir()

    producer.close()
    consumer.close()
    reply = http(admin_broker, "DELETE", f"{NS}/{local}")
    assert (reply.status, reply.text) == (204, "")
    assert topic not in ok_json(admin_broker, NS)
    assert not topic_dir(admin_broker, local).exists()
    assert http(admin_broker, "GET", f"{NS}/{local}/stats").status == 404

    gone = http(admin_broker, "DELETE", f"{NS}/{local}")
    assert (gone.status, gone.reason) == (404, f"topic {topic} not found")


def test_forced_delete_drops_the_data_under_connected_clients(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    topic = f"persistent://public/default/{local}"
    producer = pulsar_client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"old-{i}".encode())

    reply = http(admin_broker, "DELETE", f"{NS}/{local}?force=true")
    assert reply.status == 204
    # The broker closed the producer; the client reconnects and, with auto-creation on,
    # gets a new empty topic of that name: the three old messages are gone.
    producer.send(b"new")
    stats = ok_json(admin_broker, f"{NS}/{local}/stats")
    assert (stats["msgInCounter"], stats["entries"]) == (1, 1)


def test_delete_of_a_partitioned_topic_is_409_and_keeps_it(
    admin_broker: EmbeddedBroker, local: str
) -> None:
    base = f"persistent://public/default/{local}"
    assert http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"2").status == 204
    reply = http(admin_broker, "DELETE", f"{NS}/{local}")
    assert (reply.status, reply.reason) == (409, f"topic {base} is a partitioned topic")
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 2}
    assert f"{base}-partition-1" in ok_json(admin_broker, NS)


def test_delete_partitions_removes_every_partition_unless_clients_are_attached(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    base = f"persistent://public/default/{local}"
    assert http(admin_broker, "PUT", f"{NS}/{local}/partitions", b"3").status == 204
    producer = pulsar_client.create_producer(base)
    for index in range(6):
        producer.send(b"%d" % index, partition_key=str(index))

    busy = http(admin_broker, "DELETE", f"{NS}/{local}/partitions")
    assert busy.status == 412 and "has connected producers or consumers" in busy.reason
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 3}
    producer.close()

    assert http(admin_broker, "DELETE", f"{NS}/{local}/partitions").status == 204
    assert ok_json(admin_broker, f"{NS}/{local}/partitions") == {"partitions": 0}
    assert base not in ok_json(admin_broker, f"{NS}/partitioned")
    listed = ok_json(admin_broker, NS)
    assert not [name for name in listed if name.startswith(f"{base}-partition-")]
    for index in range(3):
        assert not topic_dir(admin_broker, f"{local}-partition-{index}").exists()
    missing = http(admin_broker, "DELETE", f"{NS}/{local}/partitions")
    assert (missing.status, missing.reason) == (404, f"partitioned topic {base} not found")


# ------------------------------------------------------------------ invalid names

BOGUS = "invalid topic domain 'bogus' in 'bogus://public/default/x': " + (
    "expected persistent:// or non-persistent://"
)
BOGUS_NS = "invalid topic domain 'bogus': expected persistent or non-persistent"


@pytest.mark.parametrize(
    ("method", "path", "reason"),
    [
        ("GET", "/admin/v2/bogus/public/default/x/stats", BOGUS),
        ("GET", "/admin/v2/bogus/public/default/x/partitions", BOGUS),
        ("PUT", "/admin/v2/bogus/public/default/x/partitions", BOGUS),
        ("PUT", "/admin/v2/bogus/public/default/x", BOGUS),
        ("POST", "/admin/v2/bogus/public/default/x/terminate", BOGUS),
        ("DELETE", "/admin/v2/bogus/public/default/x", BOGUS),
        ("GET", "/admin/v2/bogus/public/default", BOGUS_NS),
        ("GET", "/admin/v2/bogus/public/default/partitioned", BOGUS_NS),
        (
            "GET",
            f"{NS}/a%2Fb/stats",
            "invalid local topic name 'a/b' in 'persistent://public/default/a/b'",
        ),
        (
            "PUT",
            "/admin/v2/persistent/bad%20tenant/default/x",
            "invalid tenant 'bad tenant' in topic name 'persistent://bad tenant/default/x'",
        ),
        (
            "PUT",
            "/admin/v2/persistent/public/bad!ns/x",
            "invalid namespace 'bad!ns' in topic name 'persistent://public/bad!ns/x'",
        ),
    ],
)
def test_invalid_names_are_412_with_the_reason(
    admin_broker: EmbeddedBroker, method: str, path: str, reason: str
) -> None:
    body = b"2" if path.endswith("/partitions") and method == "PUT" else None
    reply = http(admin_broker, method, path, body)
    assert (reply.status, reply.reason) == (412, reason)
    assert reason in reply.text


# ------------------------------------------------------------------ non-persistent


def test_non_persistent_domain_routes(
    admin_broker: EmbeddedBroker, pulsar_client: pulsar.Client, local: str
) -> None:
    full = f"non-persistent://public/default/{local}"
    assert http(admin_broker, "PUT", f"{NP_NS}/{local}").status == 204
    assert full in ok_json(admin_broker, NP_NS)
    assert full not in ok_json(admin_broker, NS)
    assert f"persistent://public/default/{local}" not in ok_json(admin_broker, NS)

    consumer = pulsar_client.subscribe(full, "np-sub")
    producer = pulsar_client.create_producer(full, batching_enabled=False)
    producer.send(b"one")
    producer.send(b"two")
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"one", b"two"]
    stats = ok_json(admin_broker, f"{NP_NS}/{local}/stats")
    assert stats["msgInCounter"] == 2
    assert set(stats["subscriptions"]) == {"np-sub"}
    # Same local name, other domain: another topic, which does not exist.
    assert http(admin_broker, "GET", f"{NS}/{local}/stats").status == 404

    assert http(admin_broker, "PUT", f"{NP_NS}/{local}-p/partitions", b"2").status == 204
    assert ok_json(admin_broker, f"{NP_NS}/{local}-p/partitions") == {"partitions": 2}
    assert f"{full}-p" in ok_json(admin_broker, f"{NP_NS}/partitioned")
    assert f"{full}-p" not in ok_json(admin_broker, f"{NS}/partitioned")
    assert f"{full}-p-partition-1" in ok_json(admin_broker, NP_NS)

    busy = http(admin_broker, "DELETE", f"{NP_NS}/{local}")
    assert (busy.status, busy.reason) == (412, f"topic {full} has connected producers or consumers")
    producer.close()
    consumer.close()
    assert http(admin_broker, "DELETE", f"{NP_NS}/{local}").status == 204
    assert full not in ok_json(admin_broker, NP_NS)
    assert http(admin_broker, "GET", f"{NP_NS}/{local}/stats").status == 404


def test_put_creates_a_topic_even_where_clients_may_not(local: str) -> None:
    with EmbeddedBroker(admin=True, allow_auto_topic_creation=False) as broker:
        client = pulsar.Client(
            broker.service_url,
            logger=quiet_logger(),
            operation_timeout_seconds=5,
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                client.create_producer(f"persistent://public/default/{local}-unmade")
            assert http(broker, "PUT", f"{NS}/{local}").status == 204
            producer = client.create_producer(f"persistent://public/default/{local}")
            producer.send(b"made by the admin")
            stats = http(broker, "GET", f"{NS}/{local}/stats").json()
            assert stats["msgInCounter"] == 1
        finally:
            client.close()
