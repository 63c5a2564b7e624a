"""An unloaded topic is freed by reference counting alone, not left as cyclic garbage.

CPython's full collections run on the event loop and visit every tracked object; when
topics are unloaded by the hundred (``max_unused_loaded_topics``), their objects made up
most of what each full collection visited (the 10,000-topic memory benchmark: 14 full
collections, up to 193 ms). So nothing a topic owns may point back at it strongly.
These tests unload topics with the collector switched off and check that the topic,
its ledger and its subscriptions are gone at once.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
import weakref
from collections.abc import Iterator

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker

TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
}


@pytest.fixture(scope="module")
def teardown_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


def _unload_with_the_collector_off(broker: EmbeddedBroker, name: str) -> dict[str, bool]:
    service, loop = broker.service, broker._loop
    assert service is not None and loop is not None
    gc.collect()
    gc.disable()
    try:
        topic = service.topics[name]
        refs = {
            "topic": weakref.ref(topic),
            "ledger": weakref.ref(topic.ledger),
            **{f"subscription {s}": weakref.ref(sub) for s, sub in topic.subscriptions.items()},
        }
        asyncio.run_coroutine_threadsafe(service.unload_topic(topic, "test"), loop).result(30)
        del topic
        # Work already under way on the loop (a queued dispatch, the periodic cursor
        # flush iterating over the loaded topics while it waits for the disk) may hold
        # the topic until it finishes: let the loop run, still without the collector. A
        # reference cycle never lets go, however long this waits.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(r() is None for r in refs.values()):
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0.02), loop).result(30)
        freed = {what: ref() is None for what, ref in refs.items()}
        if not freed["topic"] and refs["topic"]() is not None:
            holders = [type(r).__name__ for r in gc.get_referrers(refs["topic"]())]
            freed[f"topic held by {holders}"] = False
        return freed
    finally:
        gc.enable()


@pytest.mark.parametrize("kind", ["producer only", *TYPES])
def test_an_unloaded_topic_is_freed_without_the_garbage_collector(
    teardown_broker: EmbeddedBroker, kind: str
) -> None:
    name = f"persistent://public/default/teardown-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(
        teardown_broker.service_url, logger=quiet_logger()
    )
    try:
        producer = client.create_producer(name, batching_enabled=False)
        if kind in TYPES:
            consumer = client.subscribe(
                name, "s", consumer_type=TYPES[kind],
                initial_position=pulsar.InitialPosition.Earliest,
            )
        for i in range(3):
            producer.send(b"m", partition_key=f"k{i}")
        if kind in TYPES:
            for _ in range(3):
                consumer.acknowledge(consumer.receive(10_000))
            consumer.close()
        producer.close()
    finally:
        client.close()
    freed = _unload_with_the_collector_off(teardown_broker, name)
    assert all(freed.values()), f"kept alive by a reference cycle: {freed}"
