"""Broker behaviours beyond produce/consume: keepalive, retention, termination,
non-persistent topics, topic listing and pattern subscriptions."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker


def call_in_broker(broker: EmbeddedBroker, fn: Callable[[], object]) -> object:
    assert broker._loop is not None

    async def run() -> object:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), broker._loop).result(10)


def test_broker_pings_and_drops_a_silent_peer(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, keepalive_interval=0.2) as broker:
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        sock.sendall(
            encode_command(
                BaseCommand(
                    type=BaseCommand.CONNECT,
                    connect=pb.CommandConnect(client_version="silent", protocol_version=21),
                )
            )
        )
        decoder = FrameDecoder()
        seen: list[int] = []
        started = time.monotonic()
        while True:
            data = sock.recv(4096)
            if not data:
                break
            seen.extend(f.command.type for f in decoder.feed(data))
        assert BaseCommand.CONNECTED in seen
        assert BaseCommand.PING in seen, "the broker pings an idle connection"
        assert time.monotonic() - started < 3, "a peer that never answers is dropped"


def test_broker_answers_ping_and_keeps_an_answering_client(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, keepalive_interval=0.2) as broker:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        producer = client.create_producer("alive")
        time.sleep(1.0)  # several keepalive rounds; the official client answers PINGs
        producer.send(b"still here")
        assert len(broker.service.connections) == 1  # type: ignore[union-attr]
        client.close()


def test_retention_deletes_segments_every_subscription_has_passed(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(
        data_dir=tmp_path,
        segment_max_bytes=16 * 1024,
        retention_check_interval=0.2,
        cursor_flush_interval=0.1,
    ) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe("retained", "s")
        producer = client.create_producer("retained")
        for _ in range(500):
            producer.send(b"x" * 200)
        topic = broker.service.topics["persistent://public/default/retained"]  # type: ignore[union-attr]
        before = topic.ledger.size_bytes()
        for _ in range(400):
            consumer.acknowledge(consumer.receive(5000))
        deadline = time.monotonic() + 5
        while topic.ledger.first_entry_id == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 0 < topic.ledger.first_entry_id <= 400
        assert topic.ledger.size_bytes() < before
        for _ in range(100):
            consumer.acknowledge(consumer.receive(5000))  # the rest is still there


def test_terminated_topic_refuses_producers_and_keeps_its_messages(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"1")
    producer.send(b"2")
    call_in_broker(broker, lambda: broker.service.terminate_topic(topic))  # type: ignore[union-attr]
    time.sleep(0.3)
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"3")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"1", b"2"]


def test_the_official_client_at_the_end_of_a_terminated_topic_keeps_its_connection(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    # Its C++ core (4.2) drops the connection on REACHED_END_OF_TOPIC and reconnects
    # every 100 ms, getting its unacked messages again each time; it is not told.
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"only")
    call_in_broker(broker, lambda: broker.service.terminate_topic(topic))  # type: ignore[union-attr]
    assert consumer.receive(5000).data() == b"only"
    assert broker.service is not None
    connections = set(broker.service.connections)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(600)  # no redelivery: the connection was not dropped
    assert set(broker.service.connections) == connections


def test_non_persistent_topic(client: pulsar.Client) -> None:
    name = f"non-persistent://public/default/np-{time.time_ns()}"
    consumer = client.subscribe(name, "s")
    producer = client.create_producer(name)
    producer.send(b"fleeting")
    assert consumer.receive(5000).data() == b"fleeting"


def test_pattern_subscription_sees_matching_topics(client: pulsar.Client) -> None:
    prefix = f"pat-{time.time_ns()}"
    for suffix in ("a", "b"):
        client.create_producer(f"persistent://public/default/{prefix}-{suffix}").close()
    client.create_producer(f"persistent://public/default/other-{prefix}").close()
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"),
        "pattern-sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    for suffix in ("a", "b"):
        client.create_producer(f"persistent://public/default/{prefix}-{suffix}").send(
            suffix.encode()
        )
    got = sorted(consumer.receive(5000).data() for _ in range(2))
    assert got == [b"a", b"b"]


def test_cached_entry_metadata_is_bounded_broker_wide(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    limit = 1000
    with EmbeddedBroker(data_dir=tmp_path, entry_info_cache_max_entries=limit) as broker:
        assert broker.service is not None
        client = client_factory(broker.service_url)
        names = [f"info-{i}" for i in range(4)]
        for count, name in zip((2000, 10, 10, 2000), names, strict=True):
            producer = client.create_producer(
                name, batching_enabled=False, block_if_queue_full=True
            )
            for _ in range(count):
                producer.send_async(b"x", None)
            producer.flush()
        topics = broker.service.topics.values()
        assert sum(len(t._info) for t in topics) <= limit
        consumer = client.subscribe(
            names[0], "s", initial_position=pulsar.InitialPosition.Earliest
        )
        for _ in range(2000):  # entries whose metadata was dropped are read again
            consumer.acknowledge(consumer.receive(5000))
        assert sum(len(t._info) for t in topics) <= limit


def test_draining_a_backlog_keeps_the_metadata_not_yet_dispatched(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog larger than a topic's share of the entry metadata cache: dispatch
    parses again the old entries the cache dropped, and must not evict, to make room
    for them, the entries it has not dispatched yet (it did: the cache dropped the
    first inserted, which were those, and every entry of the backlog was parsed again)."""
    import magnetar.broker.topics.topic as topic_module

    parsed: list[bytes] = []
    real = topic_module.info_from_entry

    def counting(entry: bytes) -> object:
        parsed.append(entry)
        return real(entry)

    monkeypatch.setattr(topic_module, "info_from_entry", counting)
    with EmbeddedBroker(data_dir=tmp_path, entry_info_cache_max_entries=1000) as broker:
        assert broker.service is not None
        client = client_factory(broker.service_url)
        name = "persistent://public/default/info-backlog"
        client.subscribe(name, "s").close()
        producer = client.create_producer(name, batching_enabled=False, block_if_queue_full=True)
        for i in range(3000):
            producer.send_async(str(i).encode(), None)
        producer.flush()
        (topic,) = [t for t in broker.service.topics.values() if str(t.name) == name]
        cached = len(topic._info)
        assert 0 < cached <= 1000
        consumer = client.subscribe(name, "s")
        for i in range(3000):
            msg = consumer.receive(5000)
            assert msg.data() == str(i).encode()
            consumer.acknowledge(msg)
        # The first trim keeps three quarters of the share, the highest entry ids: only
        # the entries below them are parsed again (it was every one of the 3000).
        assert len(parsed) <= 3000 - 1000 * 3 // 4


def test_cached_entry_metadata_is_out_of_the_garbage_collectors_sight(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """A full collection runs on the event loop and visits every tracked object: the
    cached EntryInfo must not be among them (they were 50,000 of them, 9-13 ms a pass)."""
    import gc

    with EmbeddedBroker(data_dir=tmp_path) as broker:
        assert broker.service is not None
        client = client_factory(broker.service_url)
        producer = client.create_producer(
            "gc-untracked", batching_enabled=False, block_if_queue_full=True
        )
        for i in range(500):
            producer.send_async(b"x", None, partition_key=f"k{i % 7}")
        producer.flush()
        (topic,) = [t for t in broker.service.topics.values() if t.name.endswith("gc-untracked")]
        gc.collect()
        assert len(topic._info) == 500
        assert not any(gc.is_tracked(fields) for fields in topic._info.values())
        info = topic.entry_info(499)
        assert (info.num_messages, info.producer_name) == (1, producer.producer_name())
        assert topic.entry_info(3).key_hash != topic.entry_info(4).key_hash


def test_topics_load_in_a_worker_thread_and_commands_wait_for_them(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    # A topic that exists on disk: its load recovers its log, the kind of load that can
    # take long (a new topic's open is a few system calls, made on the loop).
    with EmbeddedBroker(data_dir=tmp_path) as first:
        client_factory(first.service_url).create_producer("slow").send(b"stored")
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        assert broker.service is not None and broker._thread is not None
        store = broker.service.store
        real_open = store.open_ledger
        opened_on: list[str] = []
        gate = threading.Event()

        def slow_open(topic: str, only_new: bool = False):  # type: ignore[no-untyped-def]
            if topic.endswith("/slow") and not only_new:
                opened_on.append(threading.current_thread().name)
                assert gate.wait(30)  # a long recovery, off the loop
            return real_open(topic, only_new=only_new)

        monkeypatch.setattr(store, "open_ledger", slow_open)
        client = client_factory(broker.service_url)
        other = client_factory(broker.service_url)
        got: dict[str, object] = {}
        waiters = [
            threading.Thread(target=lambda: got.setdefault("p", client.create_producer("slow"))),
            threading.Thread(target=lambda: got.setdefault("c", other.subscribe("slow", "s"))),
        ]
        waiters[0].start()
        deadline = time.monotonic() + 10
        while not opened_on:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        waiters[1].start()  # the same topic while it loads: waits for the same load
        # Meanwhile the loop serves everyone else.
        other.create_producer("other-topic").send(b"served while another topic loads")
        assert not got
        gate.set()
        for waiter in waiters:
            waiter.join(30)
        got["p"].send(b"after the load")  # type: ignore[attr-defined]
        assert got["c"].receive(5000).data() == b"after the load"  # type: ignore[attr-defined]
        assert len(opened_on) == 1  # one load served both
        assert opened_on[0] not in (threading.current_thread().name, broker._thread.name)
