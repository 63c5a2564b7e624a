"""Consumer capabilities: what magnetar's client declares in SUBSCRIBE, and what the broker
reads of it once at subscribe (DESIGN.md, "Consumer capabilities")."""

from __future__ import annotations

import asyncio
from typing import Any

import pulsar

from magnetar.client import Client, KafkaPayloadProcessor
from magnetar.protocol.capabilities import capabilities, declared_by_client
from magnetar.protocol.pb import pb
from magnetar.testing import EmbeddedBroker

FOREIGN = "magnetar.foreign-entries"
BACKOFF = "magnetar.redelivery-backoff"


def test_each_kind_of_consumer_declares_what_it_can_do(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    assert broker.service is not None
    official = client.subscribe(topic, "s", consumer_name="official",
                                consumer_type=pulsar.ConsumerType.Shared)

    async def scenario() -> dict[str, Any]:
        async with Client(broker.service_url) as ours:
            await ours.subscribe(topic, "s", subscription_type="shared", consumer_name="reader",
                                 payload_processor=KafkaPayloadProcessor())
            await ours.subscribe(topic, "s", subscription_type="shared", consumer_name="plain")
            # A user's own property wins over what the client would declare.
            await ours.subscribe(topic, "s", subscription_type="shared", consumer_name="opted-in",
                                 properties={BACKOFF: "broker", "team": "a"})
            sub = broker.service.topics[topic].subscriptions["s"]
            flags = {c.name: (c.reads_foreign_entries, c.backs_off_itself)
                     for c in sub.consumers}
            shown = {c["consumerName"]: c["metadata"]
                     for c in broker.service.topics[topic].stats_dict()["subscriptions"]["s"][
                         "consumers"]}
            return {"flags": flags, "shown": shown}

    seen = asyncio.run(scenario())
    official.close()
    assert seen["flags"] == {
        "official": (False, False),
        "reader": (True, True),
        "plain": (False, True),
        "opted-in": (False, False),
    }
    assert seen["shown"] == {
        "official": {},
        "reader": {FOREIGN: "read", BACKOFF: "client"},
        "plain": {BACKOFF: "client"},
        "opted-in": {BACKOFF: "broker", "team": "a"},
    }


def test_only_the_exact_values_declare_a_capability() -> None:
    def kv(key: str, value: str) -> pb.KeyValue:
        return pb.KeyValue(key=key, value=value)

    assert capabilities([]) == (False, False)
    assert capabilities([kv(FOREIGN, "read"), kv(BACKOFF, "client")]) == (True, True)
    assert capabilities([kv(FOREIGN, "yes"), kv(BACKOFF, "broker")]) == (False, False)
    assert declared_by_client(False, {}) == {BACKOFF: "client"}
    assert declared_by_client(True, {FOREIGN: "no"}) == {BACKOFF: "client"}
