"""Retry topics: ``reconsume_later`` publishes a delayed copy to
``{topic}-{subscription}-RETRY``, which the consumer also subscribes to, acks the
original and counts RECONSUMETIMES; past ``max_redeliver_count`` the copy goes to the
DLQ (read back with the official ``pulsar`` client)."""

from __future__ import annotations

import asyncio
import re
import uuid

import pulsar
import pytest

from magnetar.client import AlreadyClosed, Client, DeadLetterPolicy, Message, TimeoutError
from magnetar.client import sync as msync
from magnetar.client.consuming.dead_letter import (
    DELAY_TIME,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    RECONSUMETIMES,
    java_message_id,
)
from magnetar.client.consuming.retry_topic import reconsume_properties, retry_letter_policy
from magnetar.protocol.message_id import MessageId
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(90)


def _topic(prefix: str = "retry") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------ units


def test_retry_policy_names_topics_after_the_first_topic() -> None:
    policy = retry_letter_policy("persistent://public/default/a", "s", None)
    assert policy.max_redeliver_count == 16  # the Java client's default
    assert policy.retry_letter_topic == "persistent://public/default/a-s-RETRY"
    assert policy.dead_letter_topic == "persistent://public/default/a-s-DLQ"
    given = retry_letter_policy("a", "s", DeadLetterPolicy(3, dead_letter_topic="dead",
                                                            initial_subscription_name="i"))
    assert (given.max_redeliver_count, given.dead_letter_topic) == (3, "dead")
    assert given.retry_letter_topic == "a-s-RETRY"
    assert given.initial_subscription_name == "i"


def test_reconsume_properties_count_and_keep_the_origin() -> None:
    first = Message(b"x", MessageId(5, 6, partition=2), "persistent://p/n/t-partition-2",
                    properties={"app": "1"})
    props, times = reconsume_properties(first, 1.5, {"why": "db down"})
    assert times == 1
    assert props == {
        "app": "1", "why": "db down", RECONSUMETIMES: "1", DELAY_TIME: "1500",
        REAL_TOPIC: "persistent://p/n/t", ORIGIN_MESSAGE_ID: "5:6:2",
        "ORIGIN_MESSAGE_IDY_TIME": "5:6:2",
    }
    again = Message(b"x", MessageId(9, 1), "persistent://p/n/t-s-RETRY", properties=props)
    props2, times2 = reconsume_properties(again, -3, None)
    assert times2 == 2 and props2[RECONSUMETIMES] == "2" and props2[DELAY_TIME] == "0"
    assert props2[REAL_TOPIC] == "persistent://p/n/t"  # the first topic, still
    assert props2[ORIGIN_MESSAGE_ID] == "5:6:2"
    bad = Message(b"x", MessageId(9, 2), "t", properties={RECONSUMETIMES: "many"})
    with pytest.raises(ValueError, match=RECONSUMETIMES):
        reconsume_properties(bad, 0, None)


# ------------------------------------------------------------------ against a broker


async def test_retry_round_trip_then_dead_letter(
    mclient: Client, client: pulsar.Client
) -> None:
    topic = _topic()
    dlq = client.subscribe(f"{topic}-work-DLQ", "check",
                           initial_position=pulsar.InitialPosition.Earliest)
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", retry_enable=True,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
    )
    assert f"{topic}-work-RETRY" in consumer.topics
    producer = await mclient.create_producer(topic)
    original_id = await producer.send(b"job", key="k", properties={"app": "a"},
                                      event_time=1_700_000_000_000)
    loop = asyncio.get_running_loop()
    msg = await consumer.receive(10)
    assert msg.topic == topic
    delay = 0.4
    seen: list[Message] = []
    for _ in range(2):
        sent_at = loop.time()
        await consumer.reconsume_later(msg, delay, {"attempt": str(len(seen) + 1)})
        msg = await consumer.receive(20)
        assert loop.time() - sent_at >= delay - 0.05  # delivered no sooner than asked
        seen.append(msg)
    for times, retried in enumerate(seen, start=1):
        assert retried.topic == f"{topic}-work-RETRY"
        assert (retried.value, retried.key) == (b"job", "k")
        assert retried.event_time == 1_700_000_000_000
        props = retried.properties
        assert props[RECONSUMETIMES] == str(times)
        assert props[DELAY_TIME] == "400"
        assert props["attempt"] == str(times)
        assert props["app"] == "a"
        assert props[REAL_TOPIC] == topic
        assert props[ORIGIN_MESSAGE_ID] == java_message_id(original_id)
    await consumer.reconsume_later(msg, delay)  # a third time: past the limit
    letter = await asyncio.to_thread(dlq.receive, 20_000)
    assert letter.data() == b"job"
    assert letter.properties()[RECONSUMETIMES] == "3"
    assert letter.properties()[REAL_TOPIC] == topic
    with pytest.raises(TimeoutError):
        await consumer.receive(1.5)  # nothing comes back: every copy was acked
    await consumer.close()
    again = await mclient.subscribe(topic, "work", subscription_type="shared",
                                    retry_enable=True)
    with pytest.raises(TimeoutError):
        await again.receive(1.0)
    await again.close()


async def test_reconsume_later_needs_retry_enable(mclient: Client) -> None:
    topic = _topic("noretry")
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    await producer.send(b"x")
    msg = await consumer.receive(10)
    with pytest.raises(ValueError, match="retry_enable"):
        await consumer.reconsume_later(msg, 1.0)
    await consumer.close()
    with pytest.raises(ValueError, match="pattern"):
        await mclient.subscribe(re.compile(topic + ".*"), "s", retry_enable=True)


async def test_failed_reconsume_redelivers_the_original(mclient: Client) -> None:
    """The copy cannot be sent (the consumer's letter producers are shut): the error
    is raised and the original comes again at once, not after the nack delay."""
    topic = _topic("retry-fail")
    consumer = await mclient.subscribe(
        topic, "s", subscription_type="shared", retry_enable=True,
        negative_ack_redelivery_delay=60,
    )
    producer = await mclient.create_producer(topic)
    await producer.send(b"x")
    msg = await consumer.receive(10)
    assert consumer._letters is not None
    await consumer._letters.close()
    with pytest.raises(AlreadyClosed):
        await consumer.reconsume_later(msg, 0.1)
    again = await consumer.receive(10)
    assert again.value == b"x" and again.redelivery_count == 1
    await consumer.close()


def test_sync_facade_reconsumes(broker: EmbeddedBroker) -> None:
    topic = _topic("retry-sync")
    with msync.Client(broker.service_url) as client:
        consumer = client.subscribe(topic, "s", subscription_type="shared", retry_enable=True)
        producer = client.create_producer(topic)
        producer.send(b"sync")
        msg = consumer.receive(10)
        consumer.reconsume_later(msg, 0.2, {"via": "sync"})
        retried = consumer.receive(20)
        assert retried.value == b"sync"
        assert retried.properties[RECONSUMETIMES] == "1"
        assert retried.properties["via"] == "sync"
        consumer.acknowledge(retried)
