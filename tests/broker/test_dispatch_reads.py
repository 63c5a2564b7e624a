"""Dispatch reads an entry from disk once: an entry whose parsed metadata the topic no
longer holds is read for it, and that read is the one sent (it was read twice)."""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable

import pulsar
import pytest

from magnetar.storage.segment import Segment
from magnetar.testing import EmbeddedBroker


def test_an_entry_read_for_its_metadata_is_not_read_again_to_be_sent(
    client_factory: Callable[..., pulsar.Client], monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic_name = f"persistent://public/default/reads-{uuid.uuid4().hex[:10]}"
    count = 200
    reads: collections.Counter[int] = collections.Counter()  # offset -> preads on the loop
    real_pread = Segment._pread
    loop_thread: list[int] = []

    def spying_pread(self: Segment, length: int, offset: int) -> bytes:
        if threading.get_ident() in loop_thread:
            reads[offset] += 1

        return real_pread(self, length, offset)

    # No entry cache: every entry is on disk (its active segment, read in place).
    with EmbeddedBroker(cache_max_bytes=0) as broker:
        service = broker.service
        assert service is not None
        client = client_factory(broker.service_url)
        producer = client.create_producer(topic_name, batching_enabled=False)
        for index in range(count):
            producer.send(b"r%04d" % index)
        topic = service.topics[topic_name]
        done = threading.Event()

        def forget_metadata() -> None:  # as after a restart, or once trimmed
            loop_thread.append(threading.get_ident())
            topic._info.clear()
            done.set()

        service.loop.call_soon_threadsafe(forget_metadata)
        assert done.wait(10)
        monkeypatch.setattr(Segment, "_pread", spying_pread)
        consumer = client.subscribe(topic_name, "late",
                                    initial_position=pulsar.InitialPosition.Earliest)
        got = []
        for _ in range(count):
            msg = consumer.receive(timeout_millis=20_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
    assert got == [b"r%04d" % index for index in range(count)]
    assert len(reads) == count  # every entry came off the disk...
    # ...once each (it was twice each), but for the first one if a round read it before
    # the consumer's permits came and could not send it yet.
    assert sum(reads.values()) - count <= 1
