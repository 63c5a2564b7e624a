"""Subscription admin routes over HTTP against a real broker, the official client
observing what they do: list, create at a position (earliest, latest, a message id),
delete (refused while consumers are connected unless forced), skip/{n} (the next
message received is the one after those skipped), skip_all, resetcursor to a
timestamp and to a message id (a connected consumer is closed by the broker,
resubscribes on its own and gets the messages again), expireMessages, peek."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from admin_http import http, ok, wait_for

from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"
RECEIVE_MS = 30_000


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
    return f"sadm-{uuid.uuid4().hex[:10]}"


def full(local: str) -> str:
    return f"persistent://public/default/{local}"


def publish(client: pulsar.Client, local: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(full(local), batching_enabled=False)
    try:
        return [producer.send(f"m{i}".encode()) for i in range(count)]
    finally:
        producer.close()


def backlog(broker: EmbeddedBroker, local: str, sub: str) -> int:
    stats = ok(broker, "GET", f"{NS}/{local}/stats").json()
    return int(stats["subscriptions"][sub]["msgBacklog"])


def received(consumer: pulsar.Consumer, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.acknowledge(message)
        out.append(message.data())
    return out


def test_list_create_and_delete(broker: EmbeddedBroker, client: pulsar.Client, local: str) -> None:
    ids = publish(client, local, 5)
    assert ok(broker, "GET", f"{NS}/{local}/subscriptions").json() == []
    ok(broker, "PUT", f"{NS}/{local}/subscription/at-latest")  # no body: the latest
    ok(broker, "PUT", f"{NS}/{local}/subscription/at-earliest", '{"ledgerId": -1, "entryId": -1}')
    ok(broker, "PUT", f"{NS}/{local}/subscription/by-word", '"earliest"')
    third = ids[2]
    ok(broker, "PUT", f"{NS}/{local}/subscription/at-third",
       f'{{"ledgerId": {third.ledger_id()}, "entryId": {third.entry_id()}}}')
    assert ok(broker, "GET", f"{NS}/{local}/subscriptions").json() == [
        "at-earliest", "at-latest", "at-third", "by-word"]
    assert backlog(broker, local, "at-latest") == 0
    assert backlog(broker, local, "at-earliest") == 5
    assert backlog(broker, local, "by-word") == 5
    assert backlog(broker, local, "at-third") == 3
    consumer = client.subscribe(full(local), "at-third")
    assert received(consumer, 3) == [b"m2", b"m3", b"m4"]
    again = http(broker, "PUT", f"{NS}/{local}/subscription/at-third")
    assert again.status == 409
    assert again.json() == {"reason": "Subscription already exists for topic"}
    busy = http(broker, "DELETE", f"{NS}/{local}/subscription/at-third")
    assert busy.status == 412
    assert busy.json() == {"reason": "Subscription has active connected consumers"}
    ok(broker, "DELETE", f"{NS}/{local}/subscription/at-latest")
    ok(broker, "DELETE", f"{NS}/{local}/subscription/at-third?force=true")
    assert ok(broker, "GET", f"{NS}/{local}/subscriptions").json() == ["at-earliest", "by-word"]
    missing = http(broker, "DELETE", f"{NS}/{local}/subscription/at-latest")
    assert missing.status == 404 and missing.json() == {"reason": "Subscription not found"}
    bad = http(broker, "PUT", f"{NS}/{local}/subscription/x", '{"ledger": 1}')
    assert bad.status == 400 and "message id" in bad.json()["reason"]


def test_skip_n_then_the_next_received_is_the_one_after(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    ok(broker, "PUT", f"{NS}/{local}/subscription/sk", '"earliest"')
    publish(client, local, 5)
    ok(broker, "POST", f"{NS}/{local}/subscription/sk/skip/2")
    assert backlog(broker, local, "sk") == 3
    cursor = ok(broker, "GET", f"{NS}/{local}/internalStats").json()["cursors"]["sk"]
    ledger = cursor["markDeletePosition"].split(":")[0]
    assert cursor["markDeletePosition"] == f"{ledger}:1"  # entries 0 and 1 skipped
    assert cursor["readPosition"] == f"{ledger}:2"
    stats = ok(broker, "GET", f"{NS}/{local}/stats").json()
    assert stats["subscriptions"]["sk"]["markDeletePosition"] == f"{ledger}:1"
    consumer = client.subscribe(full(local), "sk")
    assert received(consumer, 3) == [b"m2", b"m3", b"m4"]
    assert http(broker, "POST", f"{NS}/{local}/subscription/sk/skip/-1").status == 412
    assert http(broker, "POST", f"{NS}/{local}/subscription/nope/skip/1").status == 404


def test_skip_all_clears_the_backlog(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    ok(broker, "PUT", f"{NS}/{local}/subscription/all", '"earliest"')
    publish(client, local, 4)
    assert backlog(broker, local, "all") == 4
    ok(broker, "POST", f"{NS}/{local}/subscription/all/skip_all")
    assert backlog(broker, local, "all") == 0
    consumer = client.subscribe(full(local), "all")
    publish(client, local, 1)
    assert received(consumer, 1) == [b"m0"]  # the new one, not the cleared ones


def test_resetcursor_to_a_timestamp_redelivers_to_a_connected_consumer(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    consumer = client.subscribe(full(local), "rt")
    start_ms = int(time.time() * 1000) - 1
    publish(client, local, 3)
    assert received(consumer, 3) == [b"m0", b"m1", b"m2"]
    wait_for(lambda: backlog(broker, local, "rt") == 0, what="the acks")
    ok(broker, "POST", f"{NS}/{local}/subscription/rt/resetcursor/{start_ms}")
    # The broker closed the consumer; the client resubscribed at the new position.
    assert received(consumer, 3) == [b"m0", b"m1", b"m2"]
    future = int(time.time() * 1000) + 3_600_000
    ok(broker, "POST", f"{NS}/{local}/subscription/rt/resetcursor/{future}")
    assert backlog(broker, local, "rt") == 0  # past the end: nothing to read


def test_resetcursor_to_a_message_id(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    consumer = client.subscribe(full(local), "rm")
    ids = publish(client, local, 4)
    assert received(consumer, 4) == [b"m0", b"m1", b"m2", b"m3"]
    second = ids[1]
    ok(broker, "POST", f"{NS}/{local}/subscription/rm/resetcursor",
       f'{{"ledgerId": {second.ledger_id()}, "entryId": {second.entry_id()}, '
       '"partitionIndex": -1}')
    assert received(consumer, 3) == [b"m1", b"m2", b"m3"]
    assert http(broker, "POST", f"{NS}/{local}/subscription/rm/resetcursor", "").status == 400


def test_expire_messages(broker: EmbeddedBroker, client: pulsar.Client, local: str) -> None:
    ok(broker, "PUT", f"{NS}/{local}/subscription/ex", '"earliest"')
    publish(client, local, 3)
    ok(broker, "POST", f"{NS}/{local}/subscription/ex/expireMessages/3600")
    assert backlog(broker, local, "ex") == 3  # none is an hour old
    # Messages published before now are older than 0 seconds (once a millisecond passed).
    time.sleep(0.01)
    ok(broker, "POST", f"{NS}/{local}/subscription/ex/expireMessages/0")
    assert backlog(broker, local, "ex") == 0
    stats = http(broker, "GET", f"{NS}/{local}/stats").json()
    assert stats["subscriptions"]["ex"]["totalMsgExpired"] == 3  # counted as TTL's are


def test_peek_the_nth_unacked_message(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    consumer = client.subscribe(full(local), "pk")
    ids = publish(client, local, 3)
    first = consumer.receive(timeout_millis=RECEIVE_MS)
    consumer.acknowledge(first)
    wait_for(lambda: backlog(broker, local, "pk") == 2, what="the ack")
    reply = ok(broker, "GET", f"{NS}/{local}/subscription/pk/position/1")
    assert reply.body == b"m1"
    assert reply.headers["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert ok(broker, "GET", f"{NS}/{local}/subscription/pk/position/2").body == b"m2"
    assert http(broker, "GET", f"{NS}/{local}/subscription/pk/position/3").status == 404
    assert backlog(broker, local, "pk") == 2  # peeking consumes nothing


def test_partitioned_topic_subscriptions(
    broker: EmbeddedBroker, client: pulsar.Client, local: str
) -> None:
    ok(broker, "PUT", f"{NS}/{local}/partitions", "2")
    ok(broker, "PUT", f"{NS}/{local}/subscription/ps", '"earliest"')
    for index in range(2):
        part = f"{local}-partition-{index}"
        assert ok(broker, "GET", f"{NS}/{part}/subscriptions").json() == ["ps"]
    assert ok(broker, "GET", f"{NS}/{local}/subscriptions").json() == ["ps"]
    publish(client, local, 4)
    ok(broker, "POST", f"{NS}/{local}/subscription/ps/skip_all")
    stats = ok(broker, "GET", f"{NS}/{local}/partitioned-stats").json()
    assert stats["subscriptions"]["ps"]["msgBacklog"] == 0
    peek = http(broker, "GET", f"{NS}/{local}/subscription/ps/position/1")
    assert peek.status == 405
    assert peek.json() == {"reason": "Peek messages on a partitioned topic is not allowed"}
    ok(broker, "DELETE", f"{NS}/{local}/subscription/ps")
    assert ok(broker, "GET", f"{NS}/{local}/subscriptions").json() == []
