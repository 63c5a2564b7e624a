"""Batch-index acks (PIP-54, acknowledgmentAtBatchIndexLevelEnabled) against a real broker.

An ack of some messages of a batch is kept with the subscription; after the consumer
closes and subscribes again (or on any redelivery) only the unacked messages of the
batch come, the MESSAGE carrying their ``ack_set``. Checked with the official client
(``batch_index_ack_enabled=True``) and magnetar's, across a kill -9 of the broker, with
the setting off, on Shared subscriptions with several consumers, and for cumulative acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest

from magnetar.client import Client
from magnetar.client.consuming.acks import AckGroupingTracker
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import assert_nothing_more, drain, receive_n
from .rawclient import RawPeer

CT = pulsar.ConsumerType
R = TypeVar("R")
SIZE = 5  # messages per batch


# ---------------------------------------------------------------- helpers


def on_loop(broker: EmbeddedBroker, fn: Callable[[], R]) -> R:
    """Run ``fn`` on the broker's event loop (its state is only consistent there)."""
    assert broker.service is not None

    async def run() -> R:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), broker.service.loop).result(10)


def subscription_state(broker: EmbeddedBroker, topic: str, sub: str) -> dict[str, Any]:
    """The broker's view: partly acked entries (entry -> bits still unacked), the
    mark-delete position and the backlog the stats report."""

    def read() -> dict[str, Any]:
        assert broker.service is not None
        subscription = broker.service.topics[topic].subscriptions[sub]
        stats = broker.service.topics[topic].stats_dict()["subscriptions"]
        return {
            "partial": {e: subscription.batch_acks.get(e) for e in subscription.batch_acks},
            "mark_delete": subscription.cursor.mark_delete,
            "backlog": stats[sub]["msgBacklog"],  # type: ignore[index]
        }

    return on_loop(broker, read)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> None:
    """Wait until ``check()`` is truthy (generous: machines are slow and shared)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def wait_partial(broker: EmbeddedBroker, topic: str, sub: str,
                 expected: dict[int, int]) -> dict[str, Any]:
    """Wait until the broker holds exactly ``expected`` as partly acked entries."""
    state: dict[str, Any] = {}

    def check() -> bool:
        state.update(subscription_state(broker, topic, sub))
        return bool(state["partial"] == expected)

    wait_for(f"partial acks {expected} on {sub} (last seen {state})", check)
    return state


def publish_batches(client: pulsar.Client, topic: str, batches: int) -> list[list[bytes]]:
    """``batches`` entries of SIZE messages each, published by the official client."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=SIZE,
        batching_max_publish_delay_ms=60_000,
    )
    values = []
    for b in range(batches):
        batch = [f"b{b}-m{i}".encode() for i in range(SIZE)]
        for value in batch:
            producer.send_async(value, None)
        producer.flush()
        values.append(batch)
    producer.close()
    return values


def subscribe(client: pulsar.Client, topic: str, sub: str = "s",
              consumer_type: pulsar.ConsumerType = CT.Shared, **kwargs: Any) -> pulsar.Consumer:
    kwargs.setdefault("batch_index_ack_enabled", True)
    return client.subscribe(topic, sub, consumer_type=consumer_type,
                            initial_position=pulsar.InitialPosition.Earliest, **kwargs)


def entry_of(msg: pulsar.Message) -> int:
    return int(msg.message_id().entry_id())


def values(msgs: list[pulsar.Message]) -> list[bytes]:
    return [m.data() for m in msgs]


@pytest.fixture
def fresh_topic() -> str:
    return f"persistent://public/default/bia-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------- official client


@pytest.mark.parametrize("sub_type", [CT.Exclusive, CT.Shared, CT.Failover, CT.KeyShared],
                         ids=str)
def test_acked_messages_of_a_batch_do_not_come_again_after_a_resubscribe(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str,
    sub_type: pulsar.ConsumerType,
) -> None:
    consumer = subscribe(client, fresh_topic, consumer_type=sub_type)
    (batch,) = publish_batches(client, fresh_topic, 1)
    msgs = receive_n(consumer, SIZE, ack=False)
    assert values(msgs) == batch
    assert [m.message_id().batch_index() for m in msgs] == list(range(SIZE))
    entry = entry_of(msgs[0])
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    # Bit i set: message i still unacked (Pulsar's ack_set convention).
    state = wait_partial(broker, fresh_topic, "s", {entry: 0b11010})
    assert state["backlog"] == 1  # the entry is not consumed yet
    consumer.close()

    again = subscribe(client, fresh_topic, consumer_type=sub_type)
    redelivered = receive_n(again, 3, ack=False)
    assert values(redelivered) == [batch[1], batch[3], batch[4]]
    assert [m.message_id().batch_index() for m in redelivered] == [1, 3, 4]
    assert_nothing_more(again)
    for msg in redelivered:
        again.acknowledge(msg)
    # All acked: the entry is acked as a whole and its partial state is gone.
    wait_for("the entry acked as a whole",
             lambda: subscription_state(broker, fresh_topic, "s")
             == {"partial": {}, "mark_delete": entry, "backlog": 0})
    again.close()
    last = subscribe(client, fresh_topic, consumer_type=sub_type)
    assert_nothing_more(last, timeout_ms=1000)


def test_a_redelivery_in_the_same_session_carries_only_the_unacked(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str
) -> None:
    consumer = subscribe(client, fresh_topic, negative_ack_redelivery_delay_ms=100)
    (batch,) = publish_batches(client, fresh_topic, 1)
    msgs = receive_n(consumer, SIZE, ack=False)
    for index in (0, 2, 3, 4):
        consumer.acknowledge(msgs[index])
    wait_partial(broker, fresh_topic, "s", {entry_of(msgs[0]): 0b00010})
    consumer.negative_acknowledge(msgs[1])
    msg = consumer.receive(timeout_millis=10_000)
    assert (msg.data(), msg.redelivery_count()) == (batch[1], 1)
    assert_nothing_more(consumer)
    consumer.acknowledge(msg)
    wait_for("the entry acked",
             lambda: subscription_state(broker, fresh_topic, "s")["backlog"] == 0)


def test_cumulative_ack_inside_a_batch(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str
) -> None:
    consumer = subscribe(client, fresh_topic, consumer_type=CT.Exclusive)
    batches = publish_batches(client, fresh_topic, 3)
    msgs = receive_n(consumer, 3 * SIZE, ack=False)
    first, second = entry_of(msgs[0]), entry_of(msgs[SIZE])
    consumer.acknowledge_cumulative(msgs[SIZE + 2])  # up to message 2 of the 2nd batch
    state = wait_partial(broker, fresh_topic, "s", {second: 0b11000})
    assert state["mark_delete"] == first  # the entries before are acked
    assert state["backlog"] == 2
    consumer.close()

    again = subscribe(client, fresh_topic, consumer_type=CT.Exclusive)
    rest = receive_n(again, 2 + SIZE, ack=False)
    assert values(rest) == batches[1][3:] + batches[2]
    assert_nothing_more(again)
    again.acknowledge_cumulative(rest[-1])
    wait_for("everything acked",
             lambda: subscription_state(broker, fresh_topic, "s")
             == {"partial": {}, "mark_delete": entry_of(rest[-1]), "backlog": 0})


def test_shared_subscription_with_several_consumers(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str
) -> None:
    first = subscribe(client, fresh_topic, consumer_name="first", receiver_queue_size=10)
    second = subscribe(client, fresh_topic, consumer_name="second", receiver_queue_size=10)
    batches = publish_batches(client, fresh_topic, 4)
    got: dict[str, list[pulsar.Message]] = {"first": [], "second": []}
    deadline = time.monotonic() + 30
    while len(got["first"]) + len(got["second"]) < 4 * SIZE:
        assert time.monotonic() < deadline, {k: values(v) for k, v in got.items()}
        for name, consumer in (("first", first), ("second", second)):
            with contextlib.suppress(pulsar.Timeout):
                got[name].append(consumer.receive(timeout_millis=100))
    assert got["first"] and got["second"]  # both took entries
    # Each consumer acks the even messages of every batch it got.
    expected: dict[int, int] = {}
    for name, consumer in (("first", first), ("second", second)):
        for msg in got[name]:
            if msg.message_id().batch_index() % 2 == 0:
                consumer.acknowledge(msg)
            expected[entry_of(msg)] = 0b01010
    wait_partial(broker, fresh_topic, "s", expected)

    # The first consumer leaves: its entries go to the second, without what it acked.
    first.close()
    taken_over = receive_n(second, 2 * len({entry_of(m) for m in got["first"]}), ack=False)
    assert sorted(values(taken_over)) == sorted(
        m.data() for m in got["first"] if m.message_id().batch_index() % 2 == 1
    )
    assert_nothing_more(second)
    second.close()

    # A newcomer gets exactly the odd messages of every batch, and acks them.
    third = subscribe(client, fresh_topic)
    rest = drain(third, idle_ms=1000, ack=True)
    assert sorted(values(rest)) == sorted(v for batch in batches for v in batch[1::2])
    wait_for("every batch acked",
             lambda: subscription_state(broker, fresh_topic, "s")["backlog"] == 0)


def test_the_setting_off_keeps_whole_batch_semantics(
    client_factory: Callable[..., pulsar.Client], fresh_topic: str
) -> None:
    with EmbeddedBroker(acknowledgment_at_batch_index_level_enabled=False) as broker:
        client = client_factory(broker.service_url)
        consumer = subscribe(client, fresh_topic)
        (batch,) = publish_batches(client, fresh_topic, 1)
        msgs = receive_n(consumer, SIZE, ack=False)
        consumer.acknowledge(msgs[0])
        consumer.acknowledge(msgs[2])
        consumer.close()  # flushes the grouped acks before it returns
        assert subscription_state(broker, fresh_topic, "s")["partial"] == {}
        again = subscribe(client, fresh_topic)
        assert values(receive_n(again, SIZE)) == batch  # whole, as before
        wait_for("the entry acked",
                 lambda: subscription_state(broker, fresh_topic, "s")["backlog"] == 0)


def test_partial_acks_survive_kill_9(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client], fresh_topic: str
) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, mode="subprocess", cursor_flush_interval=0.1)
    broker.start()
    try:
        client = client_factory(broker.service_url, operation_timeout_seconds=5)
        consumer = subscribe(client, fresh_topic)
        batches = publish_batches(client, fresh_topic, 2)
        msgs = receive_n(consumer, 2 * SIZE, ack=False)
        for msg in msgs:
            if msg.data() in (batches[0][1], batches[0][4], batches[1][0]):
                consumer.acknowledge(msg)
        entries = (entry_of(msgs[0]), entry_of(msgs[SIZE]))
        wanted = [[entries[0], format(0b01101, "x")], [entries[1], format(0b11110, "x")]]
        wait_for("the partial acks in the cursor file",
                 lambda: persisted_batch_acks(tmp_path, "s") == wanted)
        broker.kill()
        # With its broker gone, the official client's close may report NotConnected.
        with contextlib.suppress(pulsar.PulsarException):
            client.close()

        broker.start()  # same port, same data directory
        again = client_factory(broker.service_url, operation_timeout_seconds=5)
        consumer = subscribe(again, fresh_topic)
        rest = receive_n(consumer, 7)
        assert values(rest) == [batches[0][i] for i in (0, 2, 3)] + batches[1][1:]
        assert_nothing_more(consumer)
    finally:
        broker.close()


def persisted_batch_acks(data_dir: Path, subscription: str) -> list[Any]:
    for path in data_dir.rglob(f"cursors/{subscription}.json"):
        try:
            return list(json.loads(path.read_text()).get("batch_acks", []))
        except (OSError, ValueError):  # mid-replace
            return []
    return []


# ---------------------------------------------------------------- the wire


@pytest.fixture
def raw_peers(broker: EmbeddedBroker) -> Iterator[list[RawPeer]]:
    peers: list[RawPeer] = []
    yield peers
    for peer in peers:
        peer.close()


def test_message_carries_the_ack_set_and_permits_count_only_the_unacked(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str, raw_peers: list[RawPeer]
) -> None:
    publish_batches(client, fresh_topic, 1)
    peer = RawPeer(broker.port)
    raw_peers.append(peer)
    peer.subscribe(fresh_topic, "raw", permits=100)
    first = peer.expect(BaseCommand.MESSAGE).command.message
    assert list(first.ack_set) == []  # nothing acked yet: the whole entry
    mid = first.message_id
    # Ack messages 1 and 2 (bits of the unacked: 0, 3, 4), as Java's BitSet words.
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual)
    ack.message_id.add(ledgerId=mid.ledgerId, entryId=mid.entryId, ack_set=[0b11001])
    peer.send(BaseCommand(type=BaseCommand.ACK, ack=ack))
    wait_partial(broker, fresh_topic, "raw", {mid.entryId: 0b11001})
    peer.close()

    again = RawPeer(broker.port)
    raw_peers.append(again)
    again.subscribe(fresh_topic, "raw", permits=100)
    message = again.expect(BaseCommand.MESSAGE).command.message
    assert (message.message_id.entryId, list(message.ack_set)) == (mid.entryId, [0b11001])

    def permits() -> int:
        assert broker.service is not None
        (consumer,) = broker.service.topics[fresh_topic].subscriptions["raw"].consumers
        return consumer.permits

    assert on_loop(broker, permits) == 100 - 3  # charged for the three it gets


# ---------------------------------------------------------------- magnetar's client


async def magnetar_batch(client: Client, topic: str) -> list[bytes]:
    producer = await client.create_producer(topic, batching=True,
                                            batching_max_messages=SIZE, batching_max_delay=5.0)
    batch = [f"m{i}".encode() for i in range(SIZE)]
    await asyncio.gather(*(producer.send(v) for v in batch))
    await producer.close()
    return batch


async def test_magnetar_client_sends_batch_index_acks(
    broker: EmbeddedBroker, fresh_topic: str
) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(fresh_topic, "s", subscription_type="shared",
                                          initial_position="earliest",
                                          batch_index_ack_enabled=True)
        batch = await magnetar_batch(client, fresh_topic)
        msgs = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(SIZE)]
        assert [m.value for m in msgs] == batch
        await consumer.acknowledge(msgs[0])
        await consumer.acknowledge(msgs[2])
        entry = msgs[0].message_id.entry_id
        await asyncio.to_thread(wait_partial, broker, fresh_topic, "s", {entry: 0b11010})
        await consumer.close()

        again = await client.subscribe(fresh_topic, "s", subscription_type="shared",
                                       batch_index_ack_enabled=True)
        rest = [await asyncio.wait_for(again.receive(), 10) for _ in range(3)]
        assert [m.value for m in rest] == [batch[1], batch[3], batch[4]]
        await again.acknowledge(rest[0])
        await asyncio.to_thread(wait_partial, broker, fresh_topic, "s", {entry: 0b11000})
        for msg in rest[1:]:
            await again.acknowledge(msg)
        await asyncio.to_thread(
            wait_for, "the entry acked as a whole",
            lambda: subscription_state(broker, fresh_topic, "s")
            == {"partial": {}, "mark_delete": entry, "backlog": 0})


async def test_magnetar_client_cumulative_ack_inside_a_batch(
    broker: EmbeddedBroker, fresh_topic: str
) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(fresh_topic, "s", initial_position="earliest",
                                          batch_index_ack_enabled=True)
        batch = await magnetar_batch(client, fresh_topic)
        msgs = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(SIZE)]
        await consumer.acknowledge_cumulative(msgs[1])
        entry = msgs[0].message_id.entry_id
        await asyncio.to_thread(wait_partial, broker, fresh_topic, "s", {entry: 0b11100})
        await consumer.close()
        again = await client.subscribe(fresh_topic, "s", batch_index_ack_enabled=True)
        rest = [await asyncio.wait_for(again.receive(), 10) for _ in range(3)]
        assert [m.value for m in rest] == batch[2:]


async def test_magnetar_client_without_the_option_completes_a_partly_acked_batch(
    broker: EmbeddedBroker, client: pulsar.Client, fresh_topic: str
) -> None:
    """Another client acked part of the batch: magnetar's client (not sending batch-
    index acks itself) gets the rest, and acking those acks the entry."""
    official = subscribe(client, fresh_topic)
    (batch,) = publish_batches(client, fresh_topic, 1)
    msgs = receive_n(official, SIZE, ack=False)
    official.acknowledge(msgs[1])
    official.acknowledge(msgs[3])
    entry = entry_of(msgs[0])
    wait_partial(broker, fresh_topic, "s", {entry: 0b10101})
    official.close()
    async with Client(broker.service_url) as magnetar:
        consumer = await magnetar.subscribe(fresh_topic, "s", subscription_type="shared",
                                            receiver_queue_size=SIZE)
        rest = [await asyncio.wait_for(consumer.receive(), 10) for _ in range(3)]
        assert [m.value for m in rest] == [batch[0], batch[2], batch[4]]
        for msg in rest:
            await consumer.acknowledge(msg)
        await asyncio.to_thread(
            wait_for, "the entry acked as a whole",
            lambda: subscription_state(broker, fresh_topic, "s")
            == {"partial": {}, "mark_delete": entry, "backlog": 0})


def test_ack_grouping_carries_the_latest_partial_ack_of_each_entry() -> None:
    tracker = AckGroupingTracker()
    assert not tracker.add_partial((1, 4), [0b11110])
    tracker.add_partial((1, 4), [0b11010])  # a later ack of the same batch replaces it
    tracker.add_partial((1, 5), [0b01])
    tracker.add_partial((1, 6), [0b10])
    tracker.add((1, 5))  # the whole entry now: its partial ack is not sent
    tracker.add_cumulative((1, 3))
    assert tracker.pending and len(tracker) == 4
    assert tracker.take() == ([(1, 5)], (1, 3))
    assert tracker.take_partial() == [((1, 4), [0b11010]), ((1, 6), [0b10])]
    assert not tracker.pending
    tracker.add_partial((1, 7), [0b1])
    tracker.add_cumulative((1, 8))  # covers it
    tracker.add_partial((1, 2), [0b1])  # covered already: dropped
    assert tracker.take_partial() == []
