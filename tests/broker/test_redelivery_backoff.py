"""Broker-side redelivery backoff with the official client (which has only a fixed nack
delay) against a real broker in real time. The assertions are about order and growth,
with generous bounds: the broker guarantees a lower bound (a message is not sent before
its backoff has passed); a slow machine only makes gaps longer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.client import Client, MultiplierRedeliveryBackoff
from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS

CT = pulsar.ConsumerType


@pytest.fixture
def backoff_broker() -> Iterator[EmbeddedBroker]:
    """The issue's policy as the broker's default: 1 s, doubling, at most 8 s."""
    with EmbeddedBroker(
        redelivery_backoff_min_ms=1000,
        redelivery_backoff_max_ms=8000,
        redelivery_backoff_multiplier=2.0,
    ) as broker:
        yield broker


def test_official_client_with_a_fixed_nack_delay_sees_growing_gaps(
    backoff_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client], topic: str
) -> None:
    client = client_factory(backoff_broker.service_url)
    consumer = client.subscribe(
        topic, "gaps", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    producer.send(b"poison")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    last = time.monotonic()
    gaps: list[float] = []
    others: list[bytes] = []
    for count in range(1, 5):
        consumer.negative_acknowledge(msg)
        # A message published while the poison one is held is not held up by it.
        producer.send(f"other-{count}".encode())
        while True:
            msg = consumer.receive(timeout_millis=20_000)
            if msg.data() == b"poison":
                break
            others.append(msg.data())
            consumer.acknowledge(msg)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
        assert msg.redelivery_count() == count
        # The other message was sent after the nack and still came first.
        assert others[-1] == f"other-{count}".encode()
    consumer.acknowledge(msg)
    print("gaps between deliveries (s):", [round(g, 2) for g in gaps])
    # 0.1 s in the client, then the broker's 1, 2, 4, 8 s.
    for gap, backoff in zip(gaps, [1.0, 2.0, 4.0, 8.0], strict=True):
        assert gap >= backoff, gaps
        assert gap < backoff + 5.0, gaps
    assert gaps == sorted(gaps)


@pytest.fixture
def long_hold_broker() -> Iterator[EmbeddedBroker]:
    """A 10-minute backoff: held and not held differ without measuring time."""
    with EmbeddedBroker(
        redelivery_backoff_min_ms=600_000, redelivery_backoff_max_ms=600_000
    ) as broker:
        yield broker


CRASHING_CONSUMER = """
import sys, time, pulsar
client = pulsar.Client(sys.argv[1], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
consumer = client.subscribe(sys.argv[2], "work", consumer_type=pulsar.ConsumerType.Shared)
print("subscribed", flush=True)
print(consumer.receive(timeout_millis=20_000).data().decode(), flush=True)
time.sleep(60)  # killed -9 here, the message unacked
"""


def test_a_consumer_crash_is_not_delayed_a_nack_is(
    long_hold_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client], topic: str
) -> None:
    crashing = subprocess.Popen(
        [sys.executable, "-c", CRASHING_CONSUMER, long_hold_broker.service_url, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert crashing.stdout is not None
        assert crashing.stdout.readline().strip() == "subscribed"
        producer = client_factory(long_hold_broker.service_url).create_producer(topic)
        producer.send(b"job")
        assert crashing.stdout.readline().strip() == "job"
        survivor = client_factory(long_hold_broker.service_url).subscribe(
            topic, "work", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=100
        )
    finally:
        crashing.kill()  # SIGKILL: no close, the connection just drops
        crashing.wait(30)
    again = survivor.receive(timeout_millis=RECEIVE_MS)  # not held 10 minutes
    assert (again.data(), again.redelivery_count()) == (b"job", 1)
    survivor.negative_acknowledge(again)
    with pytest.raises(pulsar.Timeout):  # a nack is held
        late = survivor.receive(timeout_millis=2000)
        pytest.fail(f"{late.data()!r} redelivered at once after a nack")


@pytest.mark.parametrize("subscription_type", ["shared", "exclusive"])
def test_a_consumer_that_backs_off_itself_is_not_held_by_the_broker(
    long_hold_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client], topic: str,
    subscription_type: str,
) -> None:
    """magnetar's client declares magnetar.redelivery-backoff=client: its own backoff
    (0.2 s doubling) spaces its redeliveries, the broker's 10 minutes do not stack on
    it; an official consumer on the same topic is held by the broker's policy."""
    service = long_hold_broker.service
    assert service is not None
    official = client_factory(long_hold_broker.service_url).subscribe(
        topic, "official", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=100)

    async def scenario() -> list[int]:
        async with Client(long_hold_broker.service_url) as ours:
            consumer = await ours.subscribe(
                topic, "ours", subscription_type=subscription_type,
                negative_ack_redelivery_backoff=MultiplierRedeliveryBackoff(0.2, 0.8, 2))
            producer = await ours.create_producer(topic)
            await producer.send(b"poison")
            counts = []
            held = service.topics[topic].subscriptions["ours"].delayed
            for _ in range(4):
                msg = await consumer.receive(20)  # a broker hold would take 10 minutes
                counts.append(msg.redelivery_count)
                consumer.negative_acknowledge(msg)
                assert len(held) == 0
            return counts

    assert asyncio.run(scenario()) == [0, 1, 2, 3]
    msg = official.receive(timeout_millis=RECEIVE_MS)
    official.negative_acknowledge(msg)
    held = service.topics[topic].subscriptions["official"].delayed
    deadline = time.monotonic() + 30
    while len(held) == 0:  # the policy is in force: the official client's nack is held
        assert time.monotonic() < deadline
        time.sleep(0.05)
