"""The fields of Pulsar's TopicStats and SubscriptionStats that tools read, with real
values from the official client's traffic: a subscription's counters outlive its
consumer, redelivery rates, ack and consume times, the backlog's earliest publish time,
delayed messages, chunked publishing, the last compaction, and the fields whose concept
magnetar lacks (offload) at zero."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from admin_http import http, wait_for

from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, max_message_size=64 * 1024) as b:
        yield b


@pytest.fixture
def client(broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]) -> pulsar.Client:
    return client_factory(broker.service_url)


def stats(broker: EmbeddedBroker, local: str) -> Any:
    reply = http(broker, "GET", f"{NS}/{local}/stats")
    assert reply.status == 200, reply
    return reply.json()


def test_subscription_counters_outlive_the_consumer_and_times_are_real(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = f"shape-{uuid.uuid4().hex[:10]}"
    topic = f"persistent://public/default/{local}"
    before_ms = int(time.time() * 1000)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode())
    received = [consumer.receive(10_000) for _ in range(5)]
    consumer.acknowledge(received[0])
    consumer.negative_acknowledge(received[1])  # redelivered: msgRateRedeliver

    def redelivered() -> Any:
        doc = stats(broker, local)
        sub = doc["subscriptions"]["s"]
        return doc if sub["msgRateRedeliver"] > 0 and sub["lastConsumedTimestamp"] else None

    doc = wait_for(redelivered, what="a redelivery rate and a consume time")
    sub = doc["subscriptions"]["s"]
    assert sub["lastAckedTimestamp"] >= before_ms
    assert sub["lastConsumedTimestamp"] >= before_ms - 1000  # sampled: within a second
    assert sub["consumers"][0]["lastConsumedTimestamp"] >= before_ms - 1000
    assert sub["msgRateExpired"] == 0.0 and sub["msgDelayed"] == 0
    assert sub["msgBacklogNoDelayed"] == sub["msgBacklog"] == 4
    assert sub["blockedSubscriptionOnUnackedMsgs"] is False
    # The backlog's oldest message is m1 (m0 is acked): its publish time.
    assert sub["earliestMsgPublishTimeInBacklog"] == received[1].publish_timestamp()
    assert doc["earliestMsgPublishTimeInBacklogs"] == received[1].publish_timestamp()
    assert doc["offloadedStorageSize"] == 0 and doc["waitingPublishers"] == 0
    assert doc["msgChunkPublished"] is False
    assert doc["compaction"]["lastCompactionSucceedTimestamp"] == 0
    sent = sub["msgOutCounter"]
    assert sent >= 5 and sub["bytesOutCounter"] > 0

    consumer.close()

    def left() -> Any:
        entry = stats(broker, local)["subscriptions"]["s"]
        return entry if not entry["consumers"] else None

    after = wait_for(left, what="the consumer gone")
    assert after["msgOutCounter"] == sent  # Pulsar's counters do not reset
    assert after["bytesOutCounter"] == sub["bytesOutCounter"]


def test_delayed_messages_chunks_and_compaction_show_in_stats(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    local = f"shape-{uuid.uuid4().hex[:10]}"
    topic = f"persistent://public/default/{local}"
    consumer = client.subscribe(topic, "d", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    producer.send(b"later", deliver_after=datetime.timedelta(minutes=10))
    producer.send(b"now", partition_key="k")
    producer.send(bytes(200 * 1024), partition_key="k")  # over 64 KiB: chunked
    assert consumer.receive(10_000).data() == b"now"

    def held() -> Any:
        doc = stats(broker, local)
        return doc if doc["subscriptions"]["d"]["msgDelayed"] == 1 else None

    doc = wait_for(held, what="the delayed message held")
    sub = doc["subscriptions"]["d"]
    assert sub["msgBacklogNoDelayed"] == sub["msgBacklog"] - 1
    assert doc["msgChunkPublished"] is True

    assert http(broker, "PUT", f"{NS}/{local}/compaction").status == 204
    def compacted() -> Any:
        last = stats(broker, local)["compaction"]
        return last if last["lastCompactionSucceedTimestamp"] else None

    done = wait_for(compacted, what="compaction")
    assert done["lastCompactionDurationTimeInMills"] >= 0
    assert done["lastCompactionFailedTimestamp"] == 0
    assert done["lastCompactionRemovedEventCount"] >= 0
