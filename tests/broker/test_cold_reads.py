"""A consumer far behind the entry cache is served from entries read on a worker
thread (the dispatcher waits for a read-ahead run instead of reading on the loop):
every message arrives once, in order, for an official-client consumer and a reader."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pulsar
import pytest

from magnetar.storage.segment import Segment
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


def test_delayed_entries_due_after_they_left_the_cache_are_read_off_the_loop(
    client_factory: Callable[..., pulsar.Client], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Delayed messages come due long after they were written: with the cache off and
    a tracker smaller than the backlog (so the overflow is found again in the log),
    each arrives once and not early, and no sealed segment is read on the loop thread
    (before, every due entry was a pread on the loop: 100k of them stalled it)."""
    topic = f"persistent://public/default/cold-delayed-{uuid.uuid4().hex[:10]}"
    count, delay = 2000, 3.0
    reads: list[tuple[int, int]] = []  # (thread, segment's first entry id)
    real_pread = Segment._pread

    def spying_pread(self: Segment, length: int, offset: int) -> bytes:
        reads.append((threading.get_ident(), self.first_entry_id))
        return real_pread(self, length, offset)

    with EmbeddedBroker(cache_max_bytes=0, segment_max_bytes=64 * 1024,
                        delayed_delivery_max_tracked=100) as broker:
        service = broker.service
        assert service is not None
        client = client_factory(broker.service_url)
        consumer = client.subscribe(topic, "later", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=100)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        sent_at = time.monotonic()
        for index in range(count):
            producer.send_async(b"d%05d" % index, None, deliver_after=timedelta(seconds=delay))
        producer.flush()
        idents: list[int] = []
        service.loop.call_soon_threadsafe(lambda: idents.append(threading.get_ident()))
        monkeypatch.setattr(Segment, "_pread", spying_pread)
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=30_000)
            if not got:
                first_after = time.monotonic() - sent_at
            got.append(msg.data())
            consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
        ledger = service.topics[topic].ledger
        active = ledger._segments.segments[-1].first_entry_id
    assert first_after >= delay - 0.2  # none early (the broker's clock is the wall's)
    assert sorted(got) == [b"d%05d" % index for index in range(count)]
    assert reads, "the due entries were read from disk"
    on_loop = [first for thread, first in reads if thread == idents[0] and first != active]
    assert on_loop == []
