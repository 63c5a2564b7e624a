"""PIP-124: a PRODUCER with ``initial_subscription_name`` creates that durable
subscription at the earliest position, so what is published before anyone subscribes
is kept; a consumer that joins later at *latest* still gets it all."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pulsar

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer


def test_a_producer_creates_its_initial_subscription(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    topic = f"persistent://public/default/initial-sub-{uuid.uuid4().hex[:10]}"
    peer = RawPeer(broker.port)
    try:
        cmd = pb.CommandProducer(
            topic=topic, producer_id=1, request_id=1, initial_subscription_name="audit"
        )
        peer.send(BaseCommand(type=BaseCommand.PRODUCER, producer=cmd))
        name = peer.expect(BaseCommand.PRODUCER_SUCCESS).command.producer_success.producer_name
        for seq in range(3):
            peer.publish(1, name, seq, b"m%d" % seq)
    finally:
        peer.close()

    client = client_factory(broker.service_url)
    late = client.subscribe(
        topic, "audit", initial_position=pulsar.InitialPosition.Latest,
        consumer_type=pulsar.ConsumerType.Shared,
    )
    got = [late.receive(timeout_millis=10_000).data() for _ in range(3)]
    assert got == [b"m0", b"m1", b"m2"]
    # Another subscription made now at latest has nothing: the messages were kept for
    # "audit" alone, not delivered to every newcomer.
    other = client.subscribe(topic, "other", initial_position=pulsar.InitialPosition.Latest)
    try:
        other.receive(timeout_millis=500)
        raise AssertionError("a new subscription at latest got an old message")
    except pulsar.Timeout:
        pass
