"""Broker-side redelivery backoff with an injected clock: the schedule, and a real broker
(on loopback, driven by a raw protocol peer) whose holds are judged by a clock the test
moves. Nothing here sleeps to let time pass; a held entry is released by moving the
clock and asking for a dispatch (a FLOW)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.redelivery_backoff import RedeliveryBackoffPolicy
from magnetar.broker.service import BrokerService
from magnetar.protocol.pb import BaseCommand, pb

from .rawclient import RawPeer

# --------------------------------------------------------------------- the schedule


def test_schedule_doubles_up_to_its_cap() -> None:
    policy = RedeliveryBackoffPolicy(1000, 8000, 2.0)
    assert [policy.delay_ms(count) for count in range(7)] == [
        1000, 2000, 4000, 8000, 8000, 8000, 8000,
    ]
    assert policy.delay_ms(10**9) == 8000  # any count costs the same (closed form)
    assert policy.delay_ms(-3) == 1000


def test_schedule_other_shapes() -> None:
    assert [RedeliveryBackoffPolicy(100, 1000, 1.5).delay_ms(c) for c in range(3)] == [
        100, 150, 225,
    ]
    assert RedeliveryBackoffPolicy(500, 500, 3).delay_ms(4) == 500
    assert RedeliveryBackoffPolicy(700, 60_000, 1).delay_ms(50) == 700
    off = RedeliveryBackoffPolicy(0)
    assert not off.enabled and off.delay_ms(5) == 0


def test_policy_from_json_and_back() -> None:
    doc = {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2}
    policy = RedeliveryBackoffPolicy.from_json(doc)
    assert policy == RedeliveryBackoffPolicy(1000, 8000, 2.0)
    assert policy.to_json() == {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2.0}
    assert RedeliveryBackoffPolicy.from_json({"minDelayMs": 250}) == RedeliveryBackoffPolicy(
        250, 60_000, 2.0
    )


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ([1000], "JSON object"),
        ({"maxDelayMs": 10}, "minDelayMs is missing"),
        ({"minDelayMs": -1}, "minDelayMs must be >= 0"),
        ({"minDelayMs": 1.5}, "whole number"),
        ({"minDelayMs": True}, "whole number"),
        ({"minDelayMs": 2000, "maxDelayMs": 1000}, "must be >= minDelayMs"),
        ({"minDelayMs": 10, "multiplier": 0.5}, "multiplier must be"),
        ({"minDelayMs": 10, "multiplier": "2"}, "multiplier must be a number"),
        ({"minDelayMs": 10, "minDelay": 5}, "unknown field"),
    ],
)
def test_policy_from_json_refuses(doc: Any, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        RedeliveryBackoffPolicy.from_json(doc)


# --------------------------------------------------------------------- a clocked broker


class FakeClock:
    """Wall-clock seconds that only move when the test says so."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ClockedBroker:
    def __init__(self, service: BrokerService, clock: FakeClock) -> None:
        self.service = service
        self.clock = clock

    @property
    def port(self) -> int:
        return self.service.config.port


@pytest.fixture
def clocked(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClockedBroker]:
    """A broker on its own loop thread whose clock is a FakeClock; settings by indirect
    parametrization (default: backoff 1 s / 2x / 8 s)."""
    settings: dict[str, Any] = {
        "redelivery_backoff_min_ms": 1000,
        "redelivery_backoff_max_ms": 8000,
        "redelivery_backoff_multiplier": 2.0,
    }
    settings.update(getattr(request, "param", {}))
    config = BrokerConfig(
        port=0, admin_port=None, data_dir=tmp_path, log_format="text", idle_poll_us=0,
        loop_lag_probe_interval=0, **settings,
    )
    clock = FakeClock()
    service = BrokerService(config, clock=clock)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(service.start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(service.stop())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(15)
    yield ClockedBroker(service, clock)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(15)


SUB_TYPES = {
    "shared": pb.CommandSubscribe.Shared,
    "key_shared": pb.CommandSubscribe.Key_Shared,
    "exclusive": pb.CommandSubscribe.Exclusive,
}


def subscribe(
    peer: RawPeer, topic: str, sub_type: int, consumer_id: int = 1, permits: int = 100
) -> None:
    peer.send(
        BaseCommand(
            type=BaseCommand.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=topic,
                subscription="sub",
                subType=sub_type,  # type: ignore[arg-type]
                consumer_id=consumer_id,
                request_id=100 + consumer_id,
                initialPosition=pb.CommandSubscribe.Earliest,
            ),
        )
    )
    peer.expect(BaseCommand.SUCCESS)
    flow(peer, permits, consumer_id)


def flow(peer: RawPeer, permits: int, consumer_id: int = 1) -> None:
    """Grant permits, which also makes the broker run a dispatch round."""
    peer.send(
        BaseCommand(
            type=BaseCommand.FLOW,
            flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits),
        )
    )


def redeliver(peer: RawPeer, ids: list[pb.MessageIdData] | None, consumer_id: int = 1) -> None:
    peer.send(
        BaseCommand(
            type=BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES,
            redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                consumer_id=consumer_id, message_ids=ids or []
            ),
        )
    )


def receive(peer: RawPeer) -> pb.CommandMessage:
    return peer.expect(BaseCommand.MESSAGE).command.message


def publish(peer: RawPeer, name: str, seq: int) -> None:
    peer.publish(1, name, seq, f"m{seq}".encode())


def nothing_yet(peer: RawPeer) -> bool:
    return peer.nothing_of(BaseCommand.MESSAGE, wait=0.3)


@pytest.mark.parametrize("sub_type", ["shared", "key_shared"])
def test_a_redelivered_message_is_held_for_its_backoff(
    clocked: ClockedBroker, sub_type: str
) -> None:
    topic = f"persistent://public/default/held-{sub_type}"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, SUB_TYPES[sub_type])
    first = receive(consumer)
    assert first.redelivery_count == 0
    for count, backoff_ms in enumerate([1000, 2000, 4000, 8000, 8000], start=1):
        redeliver(consumer, [first.message_id])
        assert nothing_yet(consumer)
        clocked.clock.advance((backoff_ms - 1) / 1000)
        flow(consumer, 1)
        assert nothing_yet(consumer), f"released before {backoff_ms} ms"
        clocked.clock.advance(0.001)
        flow(consumer, 1)
        again = receive(consumer)
        assert again.message_id.entryId == first.message_id.entryId
        assert again.redelivery_count == count


@pytest.mark.parametrize("sub_type", ["shared", "key_shared"])
def test_held_messages_do_not_hold_up_the_others(clocked: ClockedBroker, sub_type: str) -> None:
    topic = f"persistent://public/default/not-blocking-{sub_type}"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, SUB_TYPES[sub_type])
    held = receive(consumer)
    redeliver(consumer, [held.message_id])
    # Messages published while the first is held go out at once (no key is set, so on
    # Key_Shared they share the held one's key too).
    for seq in (1, 2):
        publish(producer, name, seq)
        assert receive(consumer).message_id.entryId == held.message_id.entryId + seq
    clocked.clock.advance(1.0)
    flow(consumer, 1)
    assert receive(consumer).message_id.entryId == held.message_id.entryId


def test_a_consumer_that_leaves_is_not_waited_for(clocked: ClockedBroker) -> None:
    topic = "persistent://public/default/crash"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    crashing = RawPeer(clocked.port)
    subscribe(crashing, topic, pb.CommandSubscribe.Shared)
    sent = receive(crashing)
    other = RawPeer(clocked.port)
    subscribe(other, topic, pb.CommandSubscribe.Shared, consumer_id=2)
    crashing.close()  # the connection drops with the message unacked
    again = receive(other)  # the clock never moves: it was not held
    assert again.message_id.entryId == sent.message_id.entryId
    assert again.redelivery_count == 1


def test_a_request_to_redeliver_everything_is_not_held(clocked: ClockedBroker) -> None:
    """Clients send it to recover (and the C++ client for a nack on Exclusive); only
    requests that name messages wait."""
    topic = "persistent://public/default/all"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, pb.CommandSubscribe.Shared)
    receive(consumer)
    redeliver(consumer, None)
    assert receive(consumer).redelivery_count == 1


def test_exclusive_holds_the_named_messages_and_replays_the_rest(clocked: ClockedBroker) -> None:
    topic = "persistent://public/default/exclusive"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    for seq in range(4):
        publish(producer, name, seq)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, pb.CommandSubscribe.Exclusive, permits=10)
    first = [receive(consumer) for _ in range(4)]
    redeliver(consumer, [first[0].message_id])
    # The prefetched ones go out again at once, uncounted; the named one waits.
    rest = [receive(consumer) for _ in range(3)]
    assert [m.message_id.entryId for m in rest] == [m.message_id.entryId for m in first[1:]]
    assert [m.redelivery_count for m in rest] == [0, 0, 0]
    assert nothing_yet(consumer)
    clocked.clock.advance(1.0)
    flow(consumer, 1)
    again = receive(consumer)
    assert (again.message_id.entryId, again.redelivery_count) == (first[0].message_id.entryId, 1)


@pytest.mark.parametrize("clocked", [{"delayed_delivery_max_tracked": 1}], indirect=True)
def test_past_the_tracker_bound_a_redelivery_goes_out_at_once(clocked: ClockedBroker) -> None:
    topic = "persistent://public/default/bound"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    publish(producer, name, 1)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, pb.CommandSubscribe.Shared)
    sent = [receive(consumer) for _ in range(2)]
    redeliver(consumer, [m.message_id for m in sent])
    # One is held (the tracker's one place); the other is not lost but sent at once.
    early = receive(consumer)
    assert early.message_id.entryId == sent[1].message_id.entryId
    assert nothing_yet(consumer)
    clocked.clock.advance(1.0)
    flow(consumer, 1)
    assert receive(consumer).message_id.entryId == sent[0].message_id.entryId


@pytest.mark.parametrize("clocked", [{"redelivery_backoff_min_ms": 0}], indirect=True)
def test_off_by_default_setting_redelivers_at_once(clocked: ClockedBroker) -> None:
    topic = "persistent://public/default/off"
    producer = RawPeer(clocked.port)
    name = producer.producer(topic)
    publish(producer, name, 0)
    consumer = RawPeer(clocked.port)
    subscribe(consumer, topic, pb.CommandSubscribe.Shared)
    first = receive(consumer)
    redeliver(consumer, [first.message_id])
    assert receive(consumer).redelivery_count == 1
    assert BrokerConfig().redelivery_backoff_min_ms == 0
