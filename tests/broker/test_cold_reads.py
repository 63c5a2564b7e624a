"""A consumer far behind the entry cache is served from entries read on a worker
thread (the dispatcher waits for a read-ahead run instead of reading on the loop):
every message arrives once, in order, for an official-client consumer and a reader."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pulsar

from magnetar.testing import EmbeddedBroker


def test_a_backlog_below_the_cache_is_dispatched_through_read_ahead(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = f"persistent://public/default/cold-{uuid.uuid4().hex[:10]}"
    count = 3000
    with EmbeddedBroker(cache_max_bytes=0, segment_max_bytes=64 * 1024) as broker:
        client = client_factory(broker.service_url)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for index in range(count):
            producer.send_async(b"m%05d" % index, None)
        producer.flush()
        consumer = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=20_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        read = [reader.read_next(timeout_millis=20_000).data() for _ in range(count)]
        service = broker.service
        assert service is not None
        runs = service.topics[topic].ledger._read_ahead.runs
    assert got == [b"m%05d" % index for index in range(count)]
    assert read == got
    assert runs > 1  # the backlog came through worker-thread reads, a run at a time
