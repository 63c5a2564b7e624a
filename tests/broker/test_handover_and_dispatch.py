"""Failover hand-overs, redelivery on single-active subscriptions, and dispatch after a
failed storage read, with real clients against a real broker."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pulsar
import pytest

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS
from .rawclient import RawPeer

CT = pulsar.ConsumerType


def test_consumers_joining_within_one_hold_strand_nothing_and_keep_order(
    broker: EmbeddedBroker,
    client_factory: Callable[..., pulsar.Client],
    topic: str,
) -> None:
    # Ranked by name: "c1" outranks "c2" outranks "c3". c3 holds m0..m9 unacked; c2
    # and then c1 join within one hand-over hold; m10..m19 arrive meanwhile. The
    # consumer left active must get the whole stream, in order, from m0.
    producer = client_factory(broker.service_url).create_producer(topic)
    first = client_factory(broker.service_url).subscribe(
        topic, "fo", consumer_type=CT.Failover, consumer_name="c3"
    )
    for i in range(10):
        producer.send(f"m{i}".encode())
    assert first.receive(timeout_millis=RECEIVE_MS).data() == b"m0"  # m1..m9 prefetched
    client_factory(broker.service_url).subscribe(
        topic, "fo", consumer_type=CT.Failover, consumer_name="c2"
    )
    last = client_factory(broker.service_url).subscribe(
        topic, "fo", consumer_type=CT.Failover, consumer_name="c1"
    )
    for i in range(10, 20):
        producer.send(f"m{i}".encode())
    got = []
    for _ in range(20):
        msg = last.receive(timeout_millis=RECEIVE_MS)
        got.append(msg.data())
        last.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(20)]


def test_a_failed_storage_read_is_retried_not_skipped(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    assert broker.service is not None
    ledger = broker.service.topics[topic].ledger
    real_read = ledger.read
    failures = []

    def flaky_read(entry_id: int) -> bytes:
        if entry_id == 1 and not failures:
            failures.append(entry_id)
            raise OSError(errno.EIO, "injected read error")
        return real_read(entry_id)

    monkeypatch.setattr(ledger, "read", flaky_read)
    consumer = client.subscribe(
        topic, "reads", consumer_type=CT.Shared, initial_position=pulsar.InitialPosition.Earliest
    )
    got = sorted(consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(3))
    assert failures == [1]
    assert got == [b"m0", b"m1", b"m2"]


def subscribe_exclusive(peer: RawPeer, topic: str, permits: int) -> None:
    peer.send(
        BaseCommand(
            type=BaseCommand.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=topic,
                subscription="excl",
                subType=pb.CommandSubscribe.Exclusive,
                consumer_id=1,
                request_id=1,
                initialPosition=pb.CommandSubscribe.Earliest,
            ),
        )
    )
    peer.expect(BaseCommand.SUCCESS)
    peer.send(
        BaseCommand(
            type=BaseCommand.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=permits)
        )
    )


def test_single_active_redelivery_counts_only_the_named_messages(
    broker: EmbeddedBroker, topic: str
) -> None:
    producer = RawPeer(broker.port)
    name = producer.producer(topic)
    for i in range(5):
        producer.publish(1, name, i, f"m{i}".encode())
    consumer = RawPeer(broker.port)
    subscribe_exclusive(consumer, topic, permits=10)
    first = [consumer.expect(BaseCommand.MESSAGE).command.message for _ in range(5)]
    # The application saw m0 only and negatively acknowledged it; m1..m4 sat in the
    # client's prefetch queue, unseen.
    consumer.send(
        BaseCommand(
            type=BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES,
            redeliverUnacknowledgedMessages=pb.CommandRedeliverUnacknowledgedMessages(
                consumer_id=1, message_ids=[first[0].message_id]
            ),
        )
    )
    again = [consumer.expect(BaseCommand.MESSAGE).command.message for _ in range(5)]
    assert [m.message_id.entryId for m in again] == [m.message_id.entryId for m in first]
    assert [m.redelivery_count for m in again] == [1, 0, 0, 0, 0]
