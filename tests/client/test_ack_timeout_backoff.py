"""PIP-106 ``ack_timeout_redelivery_backoff``: a message whose ack timed out is held back
by the backoff of its redelivery count before it is asked for again (as the Java
client's UnAckedMessageRedeliveryTracker). The tracker runs on an injected clock; the
integration test checks the consumer against a real broker."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from magnetar.client import Client, MultiplierRedeliveryBackoff
from magnetar.client.consuming.ack_timeout import AckTimeoutTracker
from magnetar.protocol.message_id import MessageId

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_expired_message_waits_for_its_backoff() -> None:
    clock = FakeClock()
    backoff = MultiplierRedeliveryBackoff(1.0, 8.0, 2)
    tracker = AckTimeoutTracker(10.0, backoff=backoff, clock=clock)
    tracker.add(MessageId(1, 1), redelivery_count=0)  # timeout at 10, then 1 s
    tracker.add(MessageId(1, 2), redelivery_count=3)  # timeout at 10, then 8 s
    assert tracker.next_deadline() == 10.0
    assert tracker.pop_expired(10.0) == []  # both timed out, both held back
    assert len(tracker) == 2
    assert tracker.next_deadline() == 11.0
    assert tracker.pop_expired(10.9) == []
    assert tracker.pop_expired(11.0) == [(1, 1)]
    assert tracker.next_deadline() == 18.0
    assert tracker.pop_expired(17.9) == []
    assert tracker.pop_expired(18.0) == [(1, 2)]
    assert len(tracker) == 0
    assert tracker.next_deadline() is None


def test_ack_during_the_backoff_cancels_the_redelivery() -> None:
    clock = FakeClock()
    tracker = AckTimeoutTracker(
        1.0, backoff=MultiplierRedeliveryBackoff(5.0, 5.0, 1), clock=clock
    )
    tracker.add(MessageId(3, 7, 0, -1, 2), redelivery_count=1)
    tracker.add(MessageId(3, 7, 1, -1, 2), redelivery_count=1)
    tracker.add(MessageId(3, 8))
    assert tracker.pop_expired(1.0) == []
    tracker.remove(MessageId(3, 8))  # acked while held back
    assert tracker.pop_expired(6.0) == [(3, 7)]  # both messages of the batch, one entry
    assert len(tracker) == 0
    tracker.add(MessageId(4, 1), redelivery_count=2)
    tracker.pop_expired(1.5)
    tracker.remove_up_to(MessageId(4, 1))  # a cumulative ack reaches held messages too
    assert len(tracker) == 0 and tracker.pop_expired(100.0) == []


def test_re_adding_a_held_message_restarts_its_timeout() -> None:
    clock = FakeClock()
    tracker = AckTimeoutTracker(2.0, backoff=MultiplierRedeliveryBackoff(1.0, 8.0), clock=clock)
    tracker.add(MessageId(1, 1), redelivery_count=2)
    assert tracker.pop_expired(2.0) == []  # held until 2 + 4
    clock.now = 3.0
    tracker.add(MessageId(1, 1), redelivery_count=3)  # delivered again meanwhile
    assert tracker.next_deadline() == 5.0  # the old hold (until 6) is gone
    assert tracker.pop_expired(6.0) == []  # timed out again: held 8 s after 5
    assert tracker.next_deadline() == 13.0
    assert tracker.pop_expired(12.9) == []
    assert tracker.pop_expired(13.0) == [(1, 1)]


def test_backoff_needs_an_ack_timeout() -> None:
    from magnetar.client.consuming.config import ConsumerConfig

    with pytest.raises(ValueError, match="needs an ack_timeout"):
        ConsumerConfig("s", ack_timeout_redelivery_backoff=MultiplierRedeliveryBackoff())


async def test_ack_timeout_redeliveries_back_off(mclient: Client) -> None:
    """Never acked: each redelivery comes no sooner than the ack timeout plus the
    backoff of the count it was delivered with (lower bounds only: a loaded machine
    can only make it later)."""
    topic = f"persistent://public/default/atb-{uuid.uuid4().hex[:10]}"
    timeout = 0.3
    backoff = MultiplierRedeliveryBackoff(0.2, 0.8, 2)
    consumer = await mclient.subscribe(
        topic, "s", subscription_type="shared", ack_timeout=timeout,
        ack_timeout_redelivery_backoff=backoff,
    )
    producer = await mclient.create_producer(topic)
    await producer.send(b"slow")
    loop = asyncio.get_running_loop()
    seen: list[tuple[int, float]] = []
    for _ in range(4):
        msg = await consumer.receive(20)
        seen.append((msg.redelivery_count, loop.time()))
    assert [count for count, _ in seen] == [0, 1, 2, 3]
    for (count, at), (_, next_at) in itertools.pairwise(seen):
        assert next_at - at >= timeout + backoff.next_delay(count) - 0.05
    await consumer.close()
