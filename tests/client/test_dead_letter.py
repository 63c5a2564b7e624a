"""Dead-letter topics (PIP-106 in full), as the Java client has them: a message that
failed more than ``max_redeliver_count`` times goes to ``{topic}-{subscription}-DLQ``
with its payload, key, properties and event time plus REAL_TOPIC and ORIGIN_MESSAGE_ID,
and is acknowledged on its subscription. The dead letters are read back by the
official ``pulsar`` client."""

from __future__ import annotations

import asyncio
import uuid

import pulsar
import pytest

from magnetar.client import Client, DeadLetterPolicy, Message, TimeoutError
from magnetar.client.consuming.dead_letter import (
    LEGACY_ORIGIN_MESSAGE_ID,
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    DeadLetterCandidates,
    java_message_id,
)
from magnetar.protocol.message_id import MessageId
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(90)


def _topic(prefix: str = "dlq") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def _dlq_reader(client: pulsar.Client, topic: str | list[str], sub: str = "check",
                **kwargs: object) -> pulsar.Consumer:
    kwargs.setdefault("initial_position", pulsar.InitialPosition.Earliest)
    return client.subscribe(topic, sub, **kwargs)  # type: ignore[arg-type]


async def _official_receive(consumer: pulsar.Consumer, timeout: float = 20.0) -> pulsar.Message:
    msg = await asyncio.to_thread(consumer.receive, int(timeout * 1000))
    consumer.acknowledge(msg)
    return msg


async def _nothing_left(client: Client, topic: str, sub: str) -> None:
    """A new consumer of the subscription gets nothing: every message was acked."""
    consumer = await client.subscribe(topic, sub, subscription_type="shared")
    with pytest.raises(TimeoutError):
        await consumer.receive(1.0)
    await consumer.close()


# ------------------------------------------------------------------ units


def test_policy_checks_its_fields_and_names_topics() -> None:
    policy = DeadLetterPolicy(3)
    assert policy.dead_letter_topic_for("persistent://t/n/x", "sub") == "persistent://t/n/x-sub-DLQ"
    assert policy.retry_letter_topic_for("persistent://t/n/x", "sub") == (
        "persistent://t/n/x-sub-RETRY")
    named = DeadLetterPolicy(3, dead_letter_topic="dead", retry_letter_topic="again")
    assert named.dead_letter_topic_for("x", "s") == "dead"
    assert named.retry_letter_topic_for("x", "s") == "again"
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_redeliver_count"):
            DeadLetterPolicy(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dead_letter_topic"):
        DeadLetterPolicy(1, dead_letter_topic=" ")


def test_origin_message_id_is_printed_as_the_java_client_does() -> None:
    assert java_message_id(MessageId(7, 3)) == "7:3:-1"
    assert java_message_id(MessageId(7, 3, 2, 1, 5)) == "7:3:1:2"


def test_candidates_divert_only_entries_at_the_limit() -> None:
    candidates = DeadLetterCandidates(2)
    one = [Message(b"a", MessageId(1, 1), "t")]
    two = [Message(b"b", MessageId(1, 2), "t")]
    assert candidates.screen((1, 0), 1, [Message(b"z", MessageId(1, 0), "t")]) is False
    assert (1, 0) not in candidates  # below the limit: nothing kept
    assert candidates.screen((1, 1), 2, one) is False  # at the limit: delivered, kept
    assert candidates.screen((1, 2), 3, two) is True  # over it: straight to the DLQ
    diverted, rest = candidates.divert([(1, 0), (1, 1)])
    assert diverted == {(1, 1): one} and rest == [(1, 0)]
    candidates.discard((1, 2))
    assert len(candidates) == 0


# ------------------------------------------------------------------ against a broker


async def test_dead_letter_after_max_redeliveries(
    broker: EmbeddedBroker, mclient: Client, client: pulsar.Client
) -> None:
    topic = _topic()
    dlq = _dlq_reader(client, f"{topic}-work-DLQ")
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", negative_ack_redelivery_delay=0.05,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=3),
    )
    assert consumer.conf.ack_timeout == 30.0  # the Java client's default with a DLQ
    producer = await mclient.create_producer(topic)
    poison_id = await producer.send(b"poison", key="k-1", properties={"origin": "test"},
                                    event_time=1_700_000_000_123)
    await producer.send(b"fine")
    counts = []
    while True:
        try:
            msg = await consumer.receive(3.0)
        except TimeoutError:
            break
        if msg.value == b"fine":
            await consumer.acknowledge(msg)
            continue
        counts.append(msg.redelivery_count)
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2, 3]  # delivered max_redeliver_count + 1 times, no more
    letter = await _official_receive(dlq)
    assert letter.data() == b"poison"
    assert letter.partition_key() == "k-1"
    assert letter.event_timestamp() == 1_700_000_000_123
    props = letter.properties()
    assert props["origin"] == "test"
    assert props[REAL_TOPIC] == topic
    assert props[ORIGIN_MESSAGE_ID] == java_message_id(poison_id)
    assert props[LEGACY_ORIGIN_MESSAGE_ID] == java_message_id(poison_id)
    with pytest.raises(pulsar.Timeout):
        dlq.receive(500)  # one dead letter, not one per redelivery
    await consumer.close()
    await _nothing_left(mclient, topic, "work")


async def test_batch_sends_each_unacked_message(
    mclient: Client, client: pulsar.Client
) -> None:
    topic = _topic("dlq-batch")
    dlq = _dlq_reader(client, f"{topic}-work-DLQ")
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", negative_ack_redelivery_delay=0.05,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=1.0)
    futures = [producer.send_async(b"b%d" % i, properties={"i": str(i)}) for i in range(3)]
    await producer.flush()
    ids = await asyncio.gather(*futures)
    assert len({(i.ledger_id, i.entry_id) for i in ids}) == 1  # one entry
    rounds = 0
    while True:
        try:
            msg = await consumer.receive(3.0)
        except TimeoutError:
            break
        if msg.value == b"b0":
            await consumer.acknowledge(msg)
        else:
            rounds += 1
            consumer.negative_acknowledge(msg)
    assert rounds == 4  # b1 and b2, each delivered twice
    letters = [await _official_receive(dlq) for _ in range(2)]
    assert sorted(m.data() for m in letters) == [b"b1", b"b2"]
    for letter in letters:
        index = int(letter.properties()["i"])
        assert letter.properties()[ORIGIN_MESSAGE_ID] == java_message_id(ids[index])
    with pytest.raises(pulsar.Timeout):
        dlq.receive(500)  # b0 was acknowledged: not a dead letter
    await consumer.close()
    await _nothing_left(mclient, topic, "work")


async def test_over_the_limit_on_arrival_goes_straight_to_the_dlq(
    mclient: Client, client: pulsar.Client
) -> None:
    """A consumer without the policy failed the message too often; the next one, with
    it, never hands the message to the application."""
    topic = _topic("dlq-arrival")
    dlq = _dlq_reader(client, f"{topic}-work-DLQ")
    careless = await mclient.subscribe(topic, "work", subscription_type="shared",
                                       negative_ack_redelivery_delay=0.05)
    producer = await mclient.create_producer(topic)
    await producer.send(b"poison")
    for expected in range(3):
        msg = await careless.receive(10)
        assert msg.redelivery_count == expected
        careless.negative_acknowledge(msg)
    await careless.close()
    careful = await mclient.subscribe(
        topic, "work", subscription_type="shared",
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    letter = await _official_receive(dlq)
    assert letter.data() == b"poison"
    with pytest.raises(TimeoutError):
        await careful.receive(1.0)
    await careful.close()
    await _nothing_left(mclient, topic, "work")


async def test_ack_timeouts_count_toward_the_dlq(
    mclient: Client, client: pulsar.Client
) -> None:
    topic = _topic("dlq-timeout")
    dlq = _dlq_reader(client, f"{topic}-work-DLQ")
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", ack_timeout=0.3,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=2),
    )
    producer = await mclient.create_producer(topic)
    await producer.send(b"forgotten")
    counts = []
    while True:
        try:
            counts.append((await consumer.receive(3.0)).redelivery_count)  # never acked
        except TimeoutError:
            break
    assert counts == [0, 1, 2]
    assert (await _official_receive(dlq)).data() == b"forgotten"
    await consumer.close()


async def test_initial_subscription_keeps_letters_for_a_late_reader(
    mclient: Client, client: pulsar.Client
) -> None:
    """Nobody reads the DLQ while letters arrive; the initial subscription was made
    first, so a reader joining it later from the *latest* position still gets them."""
    topic = _topic("dlq-initial")
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", negative_ack_redelivery_delay=0.05,
        dead_letter_policy=DeadLetterPolicy(1, initial_subscription_name="audit"),
    )
    producer = await mclient.create_producer(topic)
    for i in range(2):
        await producer.send(b"p%d" % i)
    nacks = 0
    while nacks < 4:
        consumer.negative_acknowledge(await consumer.receive(10))
        nacks += 1
    with pytest.raises(TimeoutError):
        await consumer.receive(1.0)  # meanwhile the last nacks divert both to the DLQ
    await consumer.close()  # waits for the dead letters to be receipted
    late = _dlq_reader(client, f"{topic}-work-DLQ", "audit",
                       initial_position=pulsar.InitialPosition.Latest)
    letters = sorted([(await _official_receive(late)).data() for _ in range(2)])
    assert letters == [b"p0", b"p1"]


async def test_exclusive_subscription_and_ack_timeout_off(
    mclient: Client, client: pulsar.Client
) -> None:
    topic = _topic("dlq-excl")
    dlq = _dlq_reader(client, f"{topic}-solo-DLQ")
    consumer = await mclient.subscribe(
        topic, "solo", negative_ack_redelivery_delay=0.05, ack_timeout=0,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    assert not consumer.conf.ack_timeout
    producer = await mclient.create_producer(topic)
    await producer.send(b"poison")
    await producer.send(b"next")
    first = await consumer.receive(10)
    assert (first.value, first.redelivery_count) == (b"poison", 0)
    consumer.negative_acknowledge(first)
    seen = []
    while True:
        try:
            msg = await consumer.receive(3.0)
        except TimeoutError:
            break
        seen.append((msg.value, msg.redelivery_count))
        if msg.value == b"poison":
            consumer.negative_acknowledge(msg)
        else:
            await consumer.acknowledge(msg)
    assert (b"poison", 1) in seen and (b"poison", 2) not in seen
    assert (await _official_receive(dlq)).data() == b"poison"
    await consumer.close()


async def test_partitioned_topic_has_a_dlq_per_partition(
    broker: EmbeddedBroker, mclient: Client, client: pulsar.Client
) -> None:
    """As the Java client: a partition's consumer names its DLQ after the partition;
    REAL_TOPIC names the partitioned topic."""
    topic = _topic("dlq-parts")
    broker.create_partitioned_topic(topic, 2)
    dlq = _dlq_reader(client, [f"{topic}-partition-{i}-work-DLQ" for i in range(2)])
    consumer = await mclient.subscribe(
        topic, "work", subscription_type="shared", negative_ack_redelivery_delay=0.05,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    producer = await mclient.create_producer(topic)
    await producer.send(b"poison", key="k")
    for _ in range(2):
        consumer.negative_acknowledge(await consumer.receive(10))
    letter = await _official_receive(dlq)
    assert letter.data() == b"poison"
    assert "-partition-" in letter.topic_name() and letter.topic_name().endswith("-work-DLQ")
    assert letter.properties()[REAL_TOPIC] == topic
    await consumer.close()
