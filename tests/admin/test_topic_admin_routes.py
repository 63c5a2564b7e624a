"""Topic admin routes over HTTP against a real broker, with the official client making
the traffic: stats in Pulsar's field names (rates included), partitioned-stats,
growing a partitioned topic, internalStats (ledgers, cursors with mark-delete and
individually deleted ranges), lastMessageId, examinemessage, unload (the clients
reconnect on their own and go on), and the health probes; and the moving-window
rates on their own, with an explicit clock."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from admin_http import http, ok, wait_for

from magnetar.broker.observability.rates import MovingRate, RateTracker
from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as broker:
        yield broker


@pytest.fixture
def client(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> pulsar.Client:
    return client_factory(broker.service_url, operation_timeout_seconds=30)


@pytest.fixture
def local() -> str:
    return f"tadm-{uuid.uuid4().hex[:10]}"


def full(local: str) -> str:
    return f"persistent://public/default/{local}"


# ------------------------------------------------------------ rates (no broker)


def test_moving_rate_is_the_counter_growth_over_the_window() -> None:
    rate = MovingRate(window=10.0)
    assert rate.rate() == 0.0
    for second in range(0, 21):
        rate.add(float(second), second * 100)  # 100 a second
    assert rate.rate() == pytest.approx(100.0)
    for second in range(21, 40):
        rate.add(float(second), 2000)  # then nothing more
    assert rate.rate() == 0.0  # the window has moved past the growth


def test_rate_tracker_samples_topics_producers_and_consumers(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    producer = client.create_producer(full(local), batching_enabled=False)
    for _ in range(4):
        producer.send(b"x" * 10)
    assert broker.service is not None
    topic = broker.service.topics[full(local)]
    tracker = RateTracker(window=10.0)
    tracker.sample(100.0, [topic])
    topic.stats.messages_in += 50  # as 50 more publishes would
    tracker.sample(102.0, [topic])
    assert tracker.rate(topic, "msg_in") == pytest.approx(25.0)
    assert tracker.rate(producer, "msg_in") == 0.0  # sampled, but it sent nothing since
    assert tracker.rate(topic, "no such counter") == 0.0


# ------------------------------------------------------------ stats


def test_stats_have_pulsars_fields_and_rates(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    consumer = client.subscribe(full(local), "s1", consumer_name="c-one")
    producer = client.create_producer(full(local), producer_name="p-one",
                                      batching_enabled=False)
    # Publish for a few seconds, so that the sampler (every second) sees the rate.
    deadline = time.monotonic() + 3.0
    sent = 0
    while time.monotonic() < deadline:
        producer.send(b"m" * 100)
        sent += 1
        time.sleep(0.02)
    for _ in range(sent):
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))

    def rates_seen() -> dict[str, object] | None:
        doc = ok(broker, "GET", f"{NS}/{local}/stats").json()
        sub = doc["subscriptions"]["s1"]
        if (doc["msgRateIn"] > 0 and sub["msgRateOut"] > 0 and doc["msgOutCounter"] == sent
                and sub["msgBacklog"] == 0):  # the acks arrived
            return dict(doc)
        return None

    doc = wait_for(rates_seen, what="rates in the stats")
    assert doc["msgInCounter"] == sent
    assert doc["bytesInCounter"] >= sent * 100
    assert doc["bytesOutCounter"] >= sent * 100
    assert doc["msgThroughputIn"] > 0 and doc["msgThroughputOut"] > 0
    assert doc["storageSize"] > 0 and doc["backlogSize"] == 0
    [publisher] = doc["publishers"]  # type: ignore[misc]
    assert publisher["producerName"] == "p-one"
    assert isinstance(publisher["producerId"], int)
    assert publisher["address"].startswith("127.0.0.1:")
    assert publisher["clientVersion"]  # what the official client said in CONNECT
    assert publisher["connectedSince"].endswith("Z")
    assert publisher["msgRateIn"] > 0
    sub = doc["subscriptions"]["s1"]  # type: ignore[index]
    assert sub["type"] == "Exclusive" and sub["isDurable"] is True
    assert sub["msgBacklog"] == 0 and sub["msgOutCounter"] == sent
    assert sub["activeConsumerName"] == "c-one"
    [cons] = sub["consumers"]
    assert cons["consumerName"] == "c-one"
    assert cons["clientVersion"] and cons["connectedSince"].endswith("Z")
    assert cons["availablePermits"] > 0 and cons["unackedMessages"] == 0
    assert cons["address"].startswith("127.0.0.1:")
    assert cons["msgRateOut"] > 0 and cons["bytesOutCounter"] >= sent * 100


def test_partitioned_topic_grows_and_has_partitioned_stats(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    ok(broker, "PUT", f"{NS}/{local}/partitions", "2")
    ok(broker, "POST", f"{NS}/{local}/partitions", "4")  # POST grows it
    assert ok(broker, "GET", f"{NS}/{local}/partitions").json() == {"partitions": 4}
    shrink = http(broker, "POST", f"{NS}/{local}/partitions", "3")
    assert shrink.status == 409 and "grater than exists 4" in shrink.json()["reason"]
    missing = http(broker, "POST", f"{NS}/nope-{local}/partitions", "3")
    assert missing.status == 404
    consumer = client.subscribe(full(local), "agg")
    producer = client.create_producer(
        full(local), batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(8):
        producer.send(f"m{i}".encode())
    for _ in range(8):
        consumer.receive(timeout_millis=30_000)  # not acked: a backlog of 8
    doc = ok(broker, "GET", f"{NS}/{local}/partitioned-stats").json()
    assert doc["metadata"] == {"partitions": 4}
    assert doc["msgInCounter"] == 8
    assert sorted(doc["partitions"]) == [f"{full(local)}-partition-{i}" for i in range(4)]
    assert sum(p["msgInCounter"] for p in doc["partitions"].values()) == 8
    assert doc["subscriptions"]["agg"]["msgBacklog"] == 8
    assert len(doc["subscriptions"]["agg"]["consumers"]) == 4  # one per partition
    assert len(doc["publishers"]) == 4
    brief = ok(broker, "GET", f"{NS}/{local}/partitioned-stats?perPartition=false").json()
    assert brief["partitions"] == {} and brief["msgInCounter"] == 8
    # The plain stats route is for one topic (or one partition).
    assert http(broker, "GET", f"{NS}/{local}/stats").status == 404
    assert ok(broker, "GET", f"{NS}/{local}-partition-3/stats").json()["msgInCounter"] == 2


def test_internal_stats_show_ledgers_and_cursor_positions(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    consumer = client.subscribe(full(local), "cur")
    producer = client.create_producer(full(local), batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(6)]
    messages = [consumer.receive(timeout_millis=30_000) for _ in range(6)]
    for index in (0, 1, 3, 4):  # 2 and 5 stay unacked
        consumer.acknowledge(messages[index])
    ledger = ids[0].ledger_id()
    e = [m.entry_id() for m in ids]

    def cursor_settled() -> dict[str, object] | None:
        doc = ok(broker, "GET", f"{NS}/{local}/internalStats").json()
        cursor = doc["cursors"]["cur"]
        return dict(doc) if cursor["markDeletePosition"] == f"{ledger}:{e[1]}" and \
            cursor["totalNonContiguousDeletedMessagesRange"] == 1 else None

    doc = wait_for(cursor_settled, what="the acks in internalStats")
    assert doc["numberOfEntries"] == 6 and doc["entriesAddedCounter"] == 6
    assert doc["totalSize"] > 0
    assert doc["lastConfirmedEntry"] == f"{ledger}:{e[5]}"
    assert doc["currentLedgerEntries"] == 6
    assert [(x["ledgerId"], x["entries"]) for x in doc["ledgers"]] == [(ledger, 6)]  # type: ignore[attr-defined]
    assert doc["ledgers"][0]["size"] > 0  # type: ignore[index]
    cursor = doc["cursors"]["cur"]  # type: ignore[index]
    # Pulsar's Guava ranges: (last unacked..last acked], acked above the mark-delete.
    assert cursor["individuallyDeletedMessages"] == f"[({ledger}:{e[2]}..{ledger}:{e[4]}]]"
    assert cursor["messagesConsumedCounter"] == 4
    assert cursor["readPosition"] == f"{ledger}:{e[5] + 1}"
    assert cursor["active"] is True


def test_last_message_id_and_examine_message(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    empty = client.create_producer(full(local), batching_enabled=False)
    nothing = http(broker, "GET", f"{NS}/{local}/examinemessage?initialPosition=earliest")
    assert nothing.status == 404 and "Message not found" in nothing.json()["reason"]
    ids = [empty.send(f"plain-{i}".encode(), properties={"k": f"v{i}"}, partition_key=f"key{i}")
           for i in range(3)]
    compressed = client.create_producer(
        full(local), batching_enabled=False, compression_type=pulsar.CompressionType.LZ4)
    ids.append(compressed.send(b"z" * 5000))
    last = ok(broker, "GET", f"{NS}/{local}/lastMessageId").json()
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    first = ok(broker, "GET",
               f"{NS}/{local}/examinemessage?initialPosition=earliest&messagePosition=2")
    assert first.body == b"plain-1"
    assert first.headers["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert first.headers["X-Pulsar-PROPERTY-k"] == "v1"
    assert first.headers["X-Pulsar-partition-key"] == "key1"
    assert first.headers["X-Pulsar-publish-time"].endswith("Z")
    latest = ok(broker, "GET",
                f"{NS}/{local}/examinemessage?initialPosition=latest&messagePosition=1")
    assert latest.body == b"z" * 5000  # decompressed, as Pulsar answers
    past = http(broker, "GET",
                f"{NS}/{local}/examinemessage?initialPosition=earliest&messagePosition=9")
    assert past.status == 404
    bad = http(broker, "GET", f"{NS}/{local}/examinemessage?initialPosition=middle")
    assert bad.status == 412


def test_batched_entry_is_examined_whole_with_its_count(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    producer = client.create_producer(full(local), batching_enabled=True,
                                      batching_max_messages=3,
                                      batching_max_publish_delay_ms=60_000)
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    reply = ok(broker, "GET", f"{NS}/{local}/examinemessage?initialPosition=earliest")
    assert reply.headers["X-Pulsar-num-batch-message"] == "3"
    for i in range(3):
        assert f"b{i}".encode() in reply.body


def test_unload_makes_clients_reconnect_transparently(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    assert broker.service is not None
    consumer = client.subscribe(full(local), "u")
    producer = client.create_producer(full(local), batching_enabled=False)
    producer.send(b"before")
    first = consumer.receive(timeout_millis=30_000)
    assert first.data() == b"before"
    consumer.acknowledge(first)
    wait_for(lambda: ok(broker, "GET", f"{NS}/{local}/stats").json()
             ["subscriptions"]["u"]["msgBacklog"] == 0, what="the ack")
    before = broker.service.topics[full(local)]
    assert http(broker, "PUT", f"{NS}/{local}/unload").status == 204
    assert broker.service.topics.get(full(local)) is not before  # it was closed
    producer.send(b"after")  # the client reconnects on its own, which loads it again
    message = consumer.receive(timeout_millis=30_000)
    assert message.data() == b"after"
    consumer.acknowledge(message)
    assert broker.service.topics[full(local)] is not before
    assert http(broker, "PUT", f"{NS}/nosuch-{local}/unload").status == 404


def test_health_and_ready(broker: EmbeddedBroker) -> None:
    for path in ("/admin/v2/brokers/health", "/admin/v2/brokers/ready"):
        reply = ok(broker, "GET", path)
        assert (reply.status, reply.text) == (200, "ok")
