"""Subscription types as the official client sees them: Exclusive, Shared, Failover,
Key_Shared, type mismatches, concurrency, unsubscribe and initial positions."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS, assert_nothing_more, drain, receive_n

Earliest = pulsar.InitialPosition.Earliest
Latest = pulsar.InitialPosition.Latest
CT = pulsar.ConsumerType


def send_all(producer: pulsar.Producer, payloads: list[bytes], **kw: object) -> None:
    for p in payloads:
        producer.send_async(p, None, **kw)
    producer.flush()


# ---------------------------------------------------------------- Exclusive


def test_exclusive_second_consumer_is_refused_at_once(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client], topic: str
) -> None:
    client = client_factory(broker.service_url)
    first = client.subscribe(topic, "excl", consumer_type=CT.Exclusive)
    start = time.monotonic()
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "excl", consumer_type=CT.Exclusive)
    assert time.monotonic() - start < 2.0, "ConsumerBusy must be immediate, not a timeout"

    # From another client (another connection) too.
    start = time.monotonic()
    other = client_factory(broker.service_url)
    with pytest.raises(pulsar.ConsumerBusy):
        other.subscribe(topic, "excl", consumer_type=CT.Exclusive)
    assert time.monotonic() - start < 2.0

    # The first consumer is unaffected and still receives.
    producer = client.create_producer(topic)
    producer.send(b"still-works")
    msg = first.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b"still-works"
    first.acknowledge(msg)

    # Once it is closed, the subscription accepts a new exclusive consumer.
    first.close()
    second = client.subscribe(topic, "excl", consumer_type=CT.Exclusive)
    producer.send(b"after")
    assert second.receive(timeout_millis=RECEIVE_MS).data() == b"after"


def test_exclusive_released_when_client_disconnects(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client], topic: str
) -> None:
    first_client = client_factory(broker.service_url)
    first = first_client.subscribe(topic, "excl-dc", consumer_type=CT.Exclusive)
    producer = client_factory(broker.service_url).create_producer(topic)
    producer.send(b"unacked")
    assert first.receive(timeout_millis=RECEIVE_MS).data() == b"unacked"
    first_client.close()  # the connection goes away without an unsubscribe
    second = client_factory(broker.service_url).subscribe(
        topic, "excl-dc", consumer_type=CT.Exclusive
    )
    msg = second.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b"unacked"


def test_subscription_type_mismatch(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "typed", consumer_type=CT.Shared)
    for other_type in (CT.Exclusive, CT.Failover, CT.KeyShared):
        start = time.monotonic()
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "typed", consumer_type=other_type)
        assert time.monotonic() - start < 2.0
    # The same type is fine.
    client.subscribe(topic, "typed", consumer_type=CT.Shared)


def test_idle_subscription_takes_new_type(client: pulsar.Client, topic: str) -> None:
    """With no consumer connected, a subscription can be reopened with another type."""
    producer = client.create_producer(topic)
    c1 = client.subscribe(topic, "retype", consumer_type=CT.Exclusive)
    producer.send(b"one")
    assert receive_n(c1, 1)[0].data() == b"one"
    c1.close()
    producer.send(b"two")
    shared_a = client.subscribe(topic, "retype", consumer_type=CT.Shared)
    shared_b = client.subscribe(topic, "retype", consumer_type=CT.Shared)
    got = drain(shared_a, 300) + drain(shared_b, 300)
    assert [m.data() for m in got] == [b"two"]


# ---------------------------------------------------------------- Shared


def test_shared_spreads_load_each_message_once(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(
            topic, "shared", consumer_type=CT.Shared, consumer_name=f"c{i}", receiver_queue_size=50
        )
        for i in range(3)
    ]
    producer = client.create_producer(topic)
    n = 300
    send_all(producer, [str(i).encode() for i in range(n)])

    per_consumer: dict[int, list[int]] = defaultdict(list)
    threads = []

    def run(index: int, consumer: pulsar.Consumer) -> None:
        for msg in drain(consumer, 700):
            per_consumer[index].append(int(msg.data()))

    for i, c in enumerate(consumers):
        t = threading.Thread(target=run, args=(i, c))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(30)
    everything = [v for vs in per_consumer.values() for v in vs]
    assert Counter(everything).most_common(1)[0][1] == 1, "duplicate delivery"
    assert sorted(everything) == list(range(n))
    for i in range(3):
        assert len(per_consumer[i]) >= n // 10, f"consumer {i} got {len(per_consumer[i])}"
        # Each consumer sees its share in publish order.
        assert per_consumer[i] == sorted(per_consumer[i])


# ---------------------------------------------------------------- Failover


def test_failover_active_by_name_and_takeover(client: pulsar.Client, topic: str) -> None:
    # Subscribe "b" first so that the choice is not merely "first come".
    b = client.subscribe(topic, "fo", consumer_type=CT.Failover, consumer_name="b-consumer")
    a = client.subscribe(topic, "fo", consumer_type=CT.Failover, consumer_name="a-consumer")
    time.sleep(0.2)
    producer = client.create_producer(topic)
    send_all(producer, [f"m{i}".encode() for i in range(20)])

    # The active consumer is the one with the lowest name (same priority level).
    first = receive_n(a, 10, ack=False)
    assert [m.data() for m in first] == [f"m{i}".encode() for i in range(10)]
    for m in first[:5]:
        a.acknowledge(m)
    assert_nothing_more(b, 500)

    # The active consumer leaves with m5..m9 unacked and m10..m19 undelivered/queued.
    a.close()
    rest = receive_n(b, 15)
    assert sorted(m.data() for m in rest) == sorted(f"m{i}".encode() for i in range(5, 20))
    assert [m.data() for m in rest] == [f"m{i}".encode() for i in range(5, 20)]
    assert_nothing_more(b)

    # New messages go to b, the only consumer now.
    producer.send(b"later")
    assert b.receive(timeout_millis=RECEIVE_MS).data() == b"later"


def test_failover_higher_priority_name_joins_and_takes_over(
    client: pulsar.Client, topic: str
) -> None:
    """A consumer that sorts first becomes active when it joins; the previous active
    consumer's unacked messages move to it."""
    z = client.subscribe(topic, "fo2", consumer_type=CT.Failover, consumer_name="z-consumer")
    producer = client.create_producer(topic)
    send_all(producer, [f"m{i}".encode() for i in range(10)])
    got_z = receive_n(z, 10)
    assert [m.data() for m in got_z] == [f"m{i}".encode() for i in range(10)]

    a = client.subscribe(topic, "fo2", consumer_type=CT.Failover, consumer_name="a-consumer")
    time.sleep(0.3)
    send_all(producer, [f"n{i}".encode() for i in range(10)])
    got_a = receive_n(a, 10)
    assert [m.data() for m in got_a] == [f"n{i}".encode() for i in range(10)]
    assert_nothing_more(z, 300)


# ---------------------------------------------------------------- Key_Shared


def test_key_shared_sticky_keys(client: pulsar.Client, topic: str) -> None:
    consumers = [
        client.subscribe(topic, "ks", consumer_type=CT.KeyShared, consumer_name=f"ks{i}")
        for i in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    n = 400
    keys = [f"key-{i}" for i in range(40)]
    for i in range(n):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % len(keys)])
    producer.flush()

    owner: dict[str, int] = {}
    seen: list[int] = []
    per_key: dict[str, list[int]] = defaultdict(list)
    results: dict[int, list[pulsar.Message]] = {}

    def run(index: int) -> None:
        results[index] = drain(consumers[index], 700)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for index, msgs in results.items():
        for msg in msgs:
            key = msg.partition_key()
            assert owner.setdefault(key, index) == index, f"key {key} went to both consumers"
            seen.append(int(msg.data()))
            per_key[key].append(int(msg.data()))
    assert len(seen) == len(set(seen)), "duplicate delivery"
    assert sorted(seen) == list(range(n))
    assert set(owner.values()) == {0, 1}, "one consumer got every key"
    for key, values in per_key.items():
        assert values == sorted(values), f"key {key} out of order"


def test_key_shared_new_consumer_waits_for_earlier_messages(
    client: pulsar.Client, topic: str
) -> None:
    """Per-key order across a consumer joining: a key that moves to the new consumer
    is not delivered to it while the old consumer still holds unacked messages of
    that key (Pulsar's recently-joined-consumer / draining-hash rule)."""
    keys = [f"key-{i}" for i in range(20)]
    old = client.subscribe(topic, "ks-join", consumer_type=CT.KeyShared, consumer_name="old")
    producer = client.create_producer(topic)
    for i in range(100):
        producer.send_async(f"a{i}".encode(), None, partition_key=keys[i % 20])
    producer.flush()
    held = receive_n(old, 100, ack=False)  # received, not acknowledged
    assert sorted(m.data() for m in held) == sorted(f"a{i}".encode() for i in range(100))

    new = client.subscribe(topic, "ks-join", consumer_type=CT.KeyShared, consumer_name="new")
    time.sleep(0.2)
    for i in range(100):
        producer.send_async(f"b{i}".encode(), None, partition_key=keys[i % 20])
    producer.flush()
    # Every key has unacked messages on "old": nothing may go to "new" yet.
    early = drain(new, 500, ack=False)
    assert not early, f"new consumer got {[m.data() for m in early][:5]} before old acked"

    for m in held:
        old.acknowledge(m)
    got_old = drain(old, 700)
    got_new = drain(new, 700)
    b_msgs = [m.data() for m in got_old + got_new]
    assert sorted(b_msgs) == sorted(f"b{i}".encode() for i in range(100))
    owner: dict[str, str] = {}
    for name, msgs in (("old", got_old), ("new", got_new)):
        for m in msgs:
            assert owner.setdefault(m.partition_key(), name) == name


def test_key_shared_ordering_key(client: pulsar.Client, topic: str) -> None:
    """ordering_key, when present, decides the consumer instead of the partition key."""
    consumers = [
        client.subscribe(topic, "ks-ok", consumer_type=CT.KeyShared, consumer_name=f"ok{i}")
        for i in range(2)
    ]
    producer = client.create_producer(topic)
    for i in range(200):
        producer.send_async(
            str(i).encode(), None, partition_key=f"pk-{i}", ordering_key=f"ok-{i % 10}"
        )
    producer.flush()
    owner: dict[str, int] = {}
    total = 0
    for index, consumer in enumerate(consumers):
        for msg in drain(consumer, 500):
            total += 1
            assert owner.setdefault(msg.ordering_key(), index) == index
    assert total == 200


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32, written out here independently of the broker's copy."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[n:]
    k = 0
    for i, b in enumerate(tail):
        k |= b << (8 * i)
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


def test_key_shared_sticky_ranges(client: pulsar.Client, topic: str) -> None:
    """STICKY mode: each consumer owns the hash ranges it declared; the hash is
    Pulsar's (Murmur3_32 of the key, modulo 65536), so keys land where Pulsar puts them."""
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723

    def sticky(lo: int, hi: int) -> pulsar.ConsumerKeySharedPolicy:
        return pulsar.ConsumerKeySharedPolicy(
            key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(lo, hi)]
        )

    low = client.subscribe(
        topic, "sticky", consumer_type=CT.KeyShared, key_shared_policy=sticky(0, 32767)
    )
    high = client.subscribe(
        topic, "sticky", consumer_type=CT.KeyShared, key_shared_policy=sticky(32768, 65535)
    )
    start = time.monotonic()
    with pytest.raises(pulsar.ConsumerAssignError):
        client.subscribe(
            topic, "sticky", consumer_type=CT.KeyShared, key_shared_policy=sticky(100, 40000)
        )
    assert time.monotonic() - start < 2.0
    producer = client.create_producer(topic)
    keys = [f"user-{i}" for i in range(50)]
    for i, key in enumerate(keys):
        producer.send_async(str(i).encode(), None, partition_key=key)
    producer.flush()
    got_low = {m.partition_key() for m in drain(low, 500)}
    got_high = {m.partition_key() for m in drain(high, 500)}
    want_low = {k for k in keys if murmur3_32(k.encode()) % 65536 <= 32767}
    assert got_low == want_low
    assert got_high == set(keys) - want_low


# ---------------------------------------------------------------- concurrency


@pytest.mark.parametrize(
    ("sub_type", "n_consumers"),
    [(CT.Exclusive, 1), (CT.Shared, 3), (CT.Failover, 2), (CT.KeyShared, 2)],
    ids=["exclusive", "shared", "failover", "key_shared"],
)
def test_no_duplicates_while_publishing(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType, n_consumers: int
) -> None:
    consumers = [
        client.subscribe(
            topic,
            "busy",
            consumer_type=sub_type,
            consumer_name=f"busy{i}",
            receiver_queue_size=20,
        )
        for i in range(n_consumers)
    ]
    n_producers, per_producer = 3, 300
    expected = n_producers * per_producer
    batching = sub_type != CT.KeyShared
    producers = [
        client.create_producer(
            topic,
            batching_enabled=batching and i == 0,
            batching_max_publish_delay_ms=2,
        )
        for i in range(n_producers)
    ]
    received: list[list[tuple[int, int, str]]] = [[] for _ in consumers]
    stop = threading.Event()
    errors: list[BaseException] = []

    def publish(pi: int) -> None:
        try:
            for i in range(per_producer):
                producers[pi].send_async(f"{pi}:{i}".encode(), None, partition_key=f"k{i % 13}")
                if i % 50 == 0:
                    time.sleep(0.005)
            producers[pi].flush()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def consume(ci: int) -> None:
        consumer = consumers[ci]
        try:
            while not stop.is_set():
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                pi, i = (int(x) for x in msg.data().split(b":"))
                received[ci].append((pi, i, msg.partition_key()))
                consumer.acknowledge(msg)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    consumer_threads = [threading.Thread(target=consume, args=(i,)) for i in range(n_consumers)]
    producer_threads = [threading.Thread(target=publish, args=(i,)) for i in range(n_producers)]
    for t in consumer_threads + producer_threads:
        t.start()
    for t in producer_threads:
        t.join(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and sum(len(r) for r in received) < expected:
        time.sleep(0.05)
    time.sleep(0.5)  # room for any duplicate to show up
    stop.set()
    for t in consumer_threads:
        t.join(10)
    assert not errors, errors

    everything = [(pi, i) for r in received for pi, i, _ in r]
    dupes = [item for item, count in Counter(everything).items() if count > 1]
    assert not dupes, f"{len(dupes)} duplicates, e.g. {dupes[:5]}"
    assert len(set(everything)) == expected, f"got {len(set(everything))} of {expected}"
    # Per-producer order holds on each consumer.
    for r in received:
        for pi in range(n_producers):
            seq = [i for p, i, _ in r if p == pi]
            assert seq == sorted(seq)
    if sub_type == CT.KeyShared:
        owner: dict[str, int] = {}
        for ci, r in enumerate(received):
            for _, _, key in r:
                assert owner.setdefault(key, ci) == ci, f"key {key} on two consumers"
    if sub_type == CT.Failover:
        assert sum(1 for r in received if r) == 1, "two failover consumers were active"


# ---------------------------------------------------------------- positions


def test_initial_position_earliest_vs_latest(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    send_all(producer, [b"old-0", b"old-1", b"old-2"])
    earliest = client.subscribe(topic, "from-earliest", initial_position=Earliest)
    latest = client.subscribe(topic, "from-latest", initial_position=Latest)
    send_all(producer, [b"new-0", b"new-1"])
    assert [m.data() for m in receive_n(earliest, 5)] == [
        b"old-0",
        b"old-1",
        b"old-2",
        b"new-0",
        b"new-1",
    ]
    assert [m.data() for m in receive_n(latest, 2)] == [b"new-0", b"new-1"]
    assert_nothing_more(earliest)
    assert_nothing_more(latest)


def test_existing_subscription_ignores_initial_position(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    producer.send(b"before-sub")
    c = client.subscribe(topic, "kept", initial_position=Latest)
    producer.send(b"while-subscribed")
    assert receive_n(c, 1)[0].data() == b"while-subscribed"
    c.close()
    producer.send(b"while-away")
    # The subscription exists: its cursor decides, not the initial position.
    c = client.subscribe(topic, "kept", initial_position=Earliest)
    assert [m.data() for m in receive_n(c, 1)] == [b"while-away"]
    assert_nothing_more(c)


@pytest.mark.parametrize("position", [Earliest, Latest], ids=["earliest", "latest"])
def test_unsubscribe_then_resubscribe(
    client: pulsar.Client, topic: str, position: pulsar.InitialPosition
) -> None:
    producer = client.create_producer(topic)
    c = client.subscribe(topic, "gone", initial_position=Earliest)
    send_all(producer, [f"a{i}".encode() for i in range(5)])
    got = receive_n(c, 5, ack=False)
    c.acknowledge(got[0])  # the rest stays unacked: unsubscribing drops it all
    c.unsubscribe()
    c.close()
    producer.send(b"b0")
    c = client.subscribe(topic, "gone", initial_position=position)
    if position == Earliest:
        # A brand-new subscription from the start of the topic.
        expected = [f"a{i}".encode() for i in range(5)] + [b"b0"]
        got = receive_n(c, 6)
        assert [m.data() for m in got] == expected
        assert all(m.redelivery_count() == 0 for m in got)
    else:
        assert_nothing_more(c)
        producer.send(b"b1")
        assert [m.data() for m in receive_n(c, 1)] == [b"b1"]
    assert_nothing_more(c)


def test_unsubscribe_refused_with_other_consumers(client: pulsar.Client, topic: str) -> None:
    c1 = client.subscribe(topic, "two", consumer_type=CT.Shared)
    c2 = client.subscribe(topic, "two", consumer_type=CT.Shared)
    with pytest.raises(pulsar.PulsarException):
        c1.unsubscribe()
    c2.close()
    c1.unsubscribe()
