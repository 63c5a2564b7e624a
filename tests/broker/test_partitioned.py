"""Partitioned topics: created explicitly or automatically, routed by key or round robin."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS, assert_nothing_more, receive_n

CT = pulsar.ConsumerType
Earliest = pulsar.InitialPosition.Earliest


def partition_of(msg: pulsar.Message) -> int:
    """The partition a message came from, by the topic name the client reports."""
    name = msg.topic_name()
    assert "-partition-" in name, name
    return int(name.rsplit("-partition-", 1)[1])


@pytest.fixture
def partitioned(broker: EmbeddedBroker, topic: str) -> str:
    broker.create_partitioned_topic(topic, 4)
    return topic


def test_get_topic_partitions(client: pulsar.Client, partitioned: str) -> None:
    assert client.get_topic_partitions(partitioned) == [
        f"{partitioned}-partition-{i}" for i in range(4)
    ]


def test_non_partitioned_topic_has_itself_as_only_partition(
    client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic).send(b"x")
    assert client.get_topic_partitions(topic) == [topic]


def test_keyed_routing_and_consume_all(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(partitioned, "all", initial_position=Earliest)
    producer = client.create_producer(partitioned)
    keys = [f"key-{i}" for i in range(20)]
    n = 200
    sent_partition: dict[str, set[int]] = defaultdict(set)
    for i in range(n):
        key = keys[i % len(keys)]
        msg_id = producer.send(f"{i}".encode(), partition_key=key)
        assert 0 <= msg_id.partition() < 4
        sent_partition[key].add(msg_id.partition())
    # One key, one partition.
    assert all(len(parts) == 1 for parts in sent_partition.values())
    # Twenty keys do not all hash to one partition.
    assert len({next(iter(p)) for p in sent_partition.values()}) > 1

    msgs = receive_n(consumer, n)
    assert sorted(int(m.data()) for m in msgs) == list(range(n))
    per_key: dict[str, list[int]] = defaultdict(list)
    for m in msgs:
        p = partition_of(m)
        assert {p} == sent_partition[m.partition_key()]
        assert m.topic_name() == f"{partitioned}-partition-{p}"
        per_key[m.partition_key()].append(int(m.data()))
    # Within a key (so within a partition) order is kept.
    for values in per_key.values():
        assert values == sorted(values)
    assert_nothing_more(consumer)


def test_round_robin_spreads_over_partitions(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(partitioned, "rr", initial_position=Earliest)
    producer = client.create_producer(
        partitioned,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False,
    )
    n = 100
    sent = Counter(producer.send(f"{i}".encode()).partition() for i in range(n))
    assert set(sent) == {0, 1, 2, 3}
    assert all(count == n // 4 for count in sent.values()), sent
    msgs = receive_n(consumer, n)
    assert sorted(int(m.data()) for m in msgs) == list(range(n))
    assert Counter(partition_of(m) for m in msgs) == sent
    # Each partition's messages keep their relative order.
    by_partition: dict[int, list[int]] = defaultdict(list)
    for m in msgs:
        by_partition[partition_of(m)].append(int(m.data()))
    for values in by_partition.values():
        assert values == sorted(values)


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_received_message_ids_carry_partition(
    client: pulsar.Client, partitioned: str, batching: bool
) -> None:
    """Pulsar's broker puts the partition index in every MESSAGE's message id."""
    consumer = client.subscribe(partitioned, "ids", initial_position=Earliest)
    producer = client.create_producer(partitioned, batching_enabled=batching)
    sent = {}
    for i in range(8):
        msg_id = producer.send(f"{i}".encode(), partition_key=f"key-{i}")
        sent[f"{i}".encode()] = msg_id
    for m in receive_n(consumer, 8):
        got = m.message_id()
        assert got.partition() == partition_of(m)
        want = sent[m.data()]
        assert (got.partition(), got.ledger_id(), got.entry_id(), got.batch_index()) == (
            want.partition(),
            want.ledger_id(),
            want.entry_id(),
            want.batch_index(),
        )
    # The same holds for a consumer of one partition, and for a reader of it.
    part1 = f"{partitioned}-partition-1"
    producer1 = client.create_producer(part1)
    producer1.send(b"p1")  # (a producer of the partition itself reports partition -1)
    single = client.subscribe(part1, "ids-single", initial_position=Earliest)
    ids = [single.receive(timeout_millis=RECEIVE_MS).message_id() for _ in range(2)]
    assert {i.partition() for i in ids} == {1}
    reader = client.create_reader(part1, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=RECEIVE_MS).message_id().partition() == 1


def test_round_robin_batched(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(partitioned, "rr-batched", initial_position=Earliest)
    producer = client.create_producer(
        partitioned, batching_enabled=True, batching_max_publish_delay_ms=5
    )
    n = 400
    for i in range(n):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    msgs = receive_n(consumer, n)
    assert sorted(int(m.data()) for m in msgs) == list(range(n))
    assert_nothing_more(consumer)


def test_single_partition_routing(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(partitioned, "single", initial_position=Earliest)
    producer = client.create_producer(
        partitioned, message_routing_mode=pulsar.PartitionsRoutingMode.UseSinglePartition
    )
    parts = {producer.send(f"{i}".encode()).partition() for i in range(20)}
    assert len(parts) == 1
    msgs = receive_n(consumer, 20)
    assert [int(m.data()) for m in msgs] == list(range(20))
    assert {partition_of(m) for m in msgs} == parts


def test_produce_and_consume_one_partition_directly(
    client: pulsar.Client, partitioned: str
) -> None:
    whole = client.subscribe(partitioned, "whole", initial_position=Earliest)
    part2 = f"{partitioned}-partition-2"
    direct = client.subscribe(part2, "direct", initial_position=Earliest)
    producer = client.create_producer(part2)
    producer.send(b"to-2")
    msg = direct.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b"to-2"
    assert msg.topic_name() == part2
    msg = whole.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b"to-2"
    assert partition_of(msg) == 2
    reader = client.create_reader(part2, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=RECEIVE_MS).data() == b"to-2"


def test_shared_subscription_over_partitions(client: pulsar.Client, partitioned: str) -> None:
    consumers = [
        client.subscribe(partitioned, "shared", consumer_type=CT.Shared, receiver_queue_size=10)
        for _ in range(2)
    ]
    producer = client.create_producer(partitioned)
    n = 200
    for i in range(n):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    got: list[list[int]] = [[], []]

    def run(i: int) -> None:
        while True:
            try:
                msg = consumers[i].receive(timeout_millis=400)
            except pulsar.Timeout:
                return
            consumers[i].acknowledge(msg)
            got[i].append(int(msg.data()))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    everything = got[0] + got[1]
    assert len(everything) == len(set(everything)) == n
    assert got[0] and got[1]


def test_failover_spreads_partitions(client: pulsar.Client, partitioned: str) -> None:
    """Failover on a partitioned topic: each partition has one active consumer, and the
    partitions are spread across the consumers."""
    consumers = [
        client.subscribe(partitioned, "fo", consumer_type=CT.Failover, consumer_name=f"fo{i}")
        for i in range(2)
    ]
    producer = client.create_producer(partitioned)
    n = 80
    for i in range(n):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    partitions_of: list[set[int]] = [set(), set()]
    total = 0
    for i, c in enumerate(consumers):
        while True:
            try:
                msg = c.receive(timeout_millis=500)
            except pulsar.Timeout:
                break
            c.acknowledge(msg)
            partitions_of[i].add(partition_of(msg))
            total += 1
    assert total == n
    assert partitions_of[0] and partitions_of[1]
    assert not partitions_of[0] & partitions_of[1]
    assert partitions_of[0] | partitions_of[1] == {0, 1, 2, 3}


def test_negative_ack_on_partitioned_topic(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(
        partitioned,
        "nack",
        consumer_type=CT.Shared,
        initial_position=Earliest,
        negative_ack_redelivery_delay_ms=100,
    )
    producer = client.create_producer(partitioned)
    for i in range(8):
        producer.send(f"{i}".encode(), partition_key=f"k{i}")
    first = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(8)]
    for m in first:
        consumer.negative_acknowledge(m)
    again = receive_n(consumer, 8)
    assert sorted(m.data() for m in again) == sorted(m.data() for m in first)
    assert all(m.redelivery_count() == 1 for m in again)
    assert_nothing_more(consumer)


def test_seek_by_time_on_partitioned_topic(client: pulsar.Client, partitioned: str) -> None:
    consumer = client.subscribe(partitioned, "seek", initial_position=Earliest)
    producer = client.create_producer(partitioned)
    for i in range(8):
        producer.send(f"old{i}".encode())
    time.sleep(0.1)
    boundary = int(time.time() * 1000)
    time.sleep(0.1)
    for i in range(8):
        producer.send(f"new{i}".encode())
    receive_n(consumer, 16)
    consumer.seek(boundary)
    got = receive_n(consumer, 8)
    assert sorted(m.data() for m in got) == sorted(f"new{i}".encode() for i in range(8))
    assert_nothing_more(consumer)


def test_unsubscribe_partitioned(client: pulsar.Client, partitioned: str) -> None:
    producer = client.create_producer(partitioned)
    consumer = client.subscribe(partitioned, "unsub", initial_position=Earliest)
    for i in range(8):
        producer.send(f"old{i}".encode())
    receive_n(consumer, 8)
    consumer.unsubscribe()
    consumer.close()
    for i in range(4):
        producer.send(f"new{i}".encode())
    consumer = client.subscribe(partitioned, "unsub", initial_position=Earliest)
    got = sorted(m.data() for m in receive_n(consumer, 12))
    assert got == sorted(
        [f"old{i}".encode() for i in range(8)] + [f"new{i}".encode() for i in range(4)]
    )
    assert_nothing_more(consumer)


def test_reader_on_partitioned_topic(client: pulsar.Client, partitioned: str) -> None:
    producer = client.create_producer(partitioned)
    sent = [f"{i}".encode() for i in range(12)]
    for p in sent:
        producer.send(p)
    reader = client.create_reader(partitioned, pulsar.MessageId.earliest)
    got = []
    deadline = time.monotonic() + 10
    while reader.has_message_available():
        assert time.monotonic() < deadline
        got.append(reader.read_next(timeout_millis=RECEIVE_MS).data())
    assert sorted(got) == sorted(sent)
    latest = client.create_reader(partitioned, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    producer.send(b"fresh")
    assert latest.read_next(timeout_millis=RECEIVE_MS).data() == b"fresh"


@pytest.fixture(scope="module")
def auto_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        data_dir=tmp_path_factory.mktemp("auto-partitioned"), default_partitions=3
    ) as b:
        yield b


def test_auto_created_partitioned_topic(
    auto_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    client = client_factory(auto_broker.service_url)
    topic = f"persistent://public/default/auto-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic)
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "s", initial_position=Earliest)
    n = 60
    parts = Counter(producer.send(f"{i}".encode()).partition() for i in range(n))
    assert set(parts) == {0, 1, 2}
    msgs = receive_n(consumer, n)
    assert sorted(int(m.data()) for m in msgs) == list(range(n))
    assert Counter(partition_of(m) for m in msgs) == parts
    assert_nothing_more(consumer)


def test_auto_created_by_consumer_first(
    auto_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    client = client_factory(auto_broker.service_url)
    topic = f"persistent://public/default/auto-sub-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "s")
    assert len(client.get_topic_partitions(topic)) == 3
    producer = client.create_producer(topic)
    for i in range(9):
        producer.send(f"k{i}".encode(), partition_key=f"k{i}")
    msgs = receive_n(consumer, 9)
    assert sorted(m.data() for m in msgs) == sorted(f"k{i}".encode() for i in range(9))


def test_auto_partitioning_leaves_explicit_partition_names_alone(
    auto_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    """A topic named like a partition of a topic that was never partitioned, and
    non-persistent topics, are not themselves partitioned."""
    client = client_factory(auto_broker.service_url)
    name = f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"
    assert client.get_topic_partitions(name) == [name]
