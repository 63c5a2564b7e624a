"""Topic compaction against a real broker, driven by the official ``pulsar`` client:
readers and consumers with ``is_read_compacted=True`` get the latest message of each
key (tombstones and keyless messages gone, batches compacted per message) under the
original message ids and then the live tail, other subscriptions get everything; the
compacted view survives a restart and retention, the ``compactionThreshold`` policy
starts a compaction by itself, and a compaction of a large topic leaves the broker
serving other clients meanwhile."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.client import EARLIEST, Client
from magnetar.client.errors import NotAllowed
from magnetar.testing import EmbeddedBroker

Mid = tuple[int, int, int]


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path_factory.mktemp("compaction")) as b:
        yield b


@pytest.fixture
def cclient(cbroker: EmbeddedBroker,
            client_factory: Callable[..., pulsar.Client]) -> pulsar.Client:
    return client_factory(cbroker.service_url)


def admin(broker: EmbeddedBroker, method: str, path: str,
          body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"{broker.admin_url}{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.reason


def rest(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def status(broker: EmbeddedBroker, topic: str) -> str:
    code, body = admin(broker, "GET", rest(topic) + "/compaction")
    assert code == 200, body
    return str(body["status"])


def wait_done(broker: EmbeddedBroker, topic: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while (state := status(broker, topic)) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    return state


def compact(broker: EmbeddedBroker, topic: str) -> None:
    code, body = admin(broker, "PUT", rest(topic) + "/compaction")
    assert code == 204, body
    assert wait_done(broker, topic) == "SUCCESS"


def mid(message_id: pulsar.MessageId) -> Mid:
    return (message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())


def read_all(reader: pulsar.Reader, idle_ms: int = 1500) -> list[pulsar.Message]:
    out = []
    while True:
        try:
            out.append(reader.read_next(idle_ms))
        except pulsar.Timeout:
            return out


def receive_all(consumer: pulsar.Consumer, idle_ms: int = 1500) -> list[pulsar.Message]:
    out = []
    while True:
        try:
            msg = consumer.receive(idle_ms)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(msg)
        out.append(msg)


def view(messages: list[pulsar.Message]) -> list[tuple[str, bytes, Mid]]:
    return [(m.partition_key(), m.data(), mid(m.message_id())) for m in messages]


def new_topic() -> str:
    return f"persistent://public/default/compact-{uuid.uuid4().hex[:10]}"


def compacted_reader(client: pulsar.Client, topic: str) -> pulsar.Reader:
    return client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)


# ------------------------------------------------------------ the compacted view


def test_compacted_reader_gets_latest_per_key_then_the_live_tail(
    cbroker: EmbeddedBroker, cclient: pulsar.Client
) -> None:
    topic = new_topic()
    producer = cclient.create_producer(topic)
    sent: dict[str, Mid] = {}
    for key, value in [("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("c", b"c1"), ("b", b"b2")]:
        sent[value.decode()] = mid(producer.send(value, partition_key=key))
    producer.send(b"no key")  # leaves the compacted view, as Pulsar drops keyless ones
    producer.send(None, partition_key="c")  # the official client's tombstone
    producer.send(b"", partition_key="d")  # an empty value deletes too (Pulsar: size 0)
    compact(cbroker, topic)
    live = [mid(producer.send(b"a3", partition_key="a")),
            mid(producer.send(b"c2", partition_key="c"))]

    got = view(read_all(compacted_reader(cclient, topic)))
    assert got == [
        ("a", b"a2", sent["a2"]),  # the original ids, in log order
        ("b", b"b2", sent["b2"]),
        ("a", b"a3", live[0]),  # the live tail after the horizon: everything
        ("c", b"c2", live[1]),
    ]


def test_other_subscriptions_get_everything(
    cbroker: EmbeddedBroker, cclient: pulsar.Client
) -> None:
    topic = new_topic()
    producer = cclient.create_producer(topic)
    for i in range(6):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
    producer.send(None, partition_key="k0")
    compact(cbroker, topic)

    plain = cclient.subscribe(topic, "plain", initial_position=pulsar.InitialPosition.Earliest)
    everything = receive_all(plain)
    assert [m.data() for m in everything] == [f"v{i}".encode() for i in range(6)] + [b""]
    assert everything[-1].has_null_value()
    reader = cclient.create_reader(topic, pulsar.MessageId.earliest)
    assert len(read_all(reader)) == 7


def test_durable_compacted_consumer(cbroker: EmbeddedBroker, cclient: pulsar.Client) -> None:
    topic = new_topic()
    producer = cclient.create_producer(topic)
    for i in range(6):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
    producer.send(None, partition_key="k0")
    compact(cbroker, topic)
    consumer = cclient.subscribe(topic, "compacted", is_read_compacted=True,
                                 initial_position=pulsar.InitialPosition.Earliest)
    assert [(m.partition_key(), m.data()) for m in receive_all(consumer)] == [("k1", b"v5")]
    producer.send(b"v6", partition_key="k0")
    assert consumer.receive(10_000).data() == b"v6"


def test_batched_producer_is_compacted_per_message(
    cbroker: EmbeddedBroker, cclient: pulsar.Client
) -> None:
    topic = new_topic()
    producer = cclient.create_producer(
        topic, batching_enabled=True, batching_max_messages=7,
        batching_max_publish_delay_ms=100, compression_type=pulsar.CompressionType.LZ4,
    )
    ids: dict[bytes, Mid] = {}
    done = threading.Event()
    lock = threading.Lock()
    values = [(f"k{i % 5}", f"v{i}".encode()) for i in range(40)]
    values[33] = ("k3", b"")  # a tombstone inside a batch (k3's later v38 brings it back)
    values[39] = ("k4", b"")  # and one that stays: the last word on k4
    total = len(values)

    def sent(value: bytes) -> Callable[[Any, pulsar.MessageId], None]:
        def callback(result: Any, message_id: pulsar.MessageId) -> None:
            with lock:
                ids[value] = mid(message_id)
                if len(ids) == total:
                    done.set()

        return callback

    for key, value in values:
        producer.send_async(value or None, sent(value or key.encode()), partition_key=key)
    producer.flush()
    assert done.wait(20)
    assert any(batch_index > 0 for _, _, batch_index in ids.values())  # really batched
    compact(cbroker, topic)

    latest = {"k0": b"v35", "k1": b"v36", "k2": b"v37", "k3": b"v38"}
    expected = sorted(((key, value, ids[value]) for key, value in latest.items()),
                      key=lambda row: row[2])
    assert view(read_all(compacted_reader(cclient, topic))) == expected
    consumer = cclient.subscribe(topic, "durable", is_read_compacted=True,
                                 initial_position=pulsar.InitialPosition.Earliest)
    assert view(receive_all(consumer)) == expected


def test_read_compacted_needs_an_exclusive_or_failover_subscription(
    cbroker: EmbeddedBroker,
) -> None:
    """The official client refuses it itself; the broker refuses it too, as Pulsar's."""
    topic = new_topic()

    async def main() -> None:
        async with Client(cbroker.service_url) as client:
            with pytest.raises(NotAllowed, match="readCompacted"):
                await client.subscribe(topic, "s", subscription_type="shared",
                                       read_compacted=True)
            failover = await client.subscribe(topic, "f", subscription_type="failover",
                                              read_compacted=True)
            await failover.close()

    asyncio.run(main())


def test_has_message_available_ends_with_the_compacted_view(
    cbroker: EmbeddedBroker, cclient: pulsar.Client
) -> None:
    """The topic's last message is a tombstone, which the compacted view does not hold:
    a reader looping on has_message_available must still stop (PIP-286's last id)."""
    topic = new_topic()
    producer = cclient.create_producer(topic)
    producer.send(b"a1", partition_key="a")
    producer.send(b"b1", partition_key="b")
    producer.send(None, partition_key="b")
    compact(cbroker, topic)
    reader = compacted_reader(cclient, topic)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    assert got == [b"a1"]
    producer.send(b"c1", partition_key="c")  # past the horizon: the topic's own last id
    assert reader.has_message_available()
    assert reader.read_next(10_000).data() == b"c1"
    assert not reader.has_message_available()

    everything_gone = new_topic()
    producer = cclient.create_producer(everything_gone)
    producer.send(b"x", partition_key="x")
    producer.send(None, partition_key="x")
    compact(cbroker, everything_gone)
    assert not compacted_reader(cclient, everything_gone).has_message_available()


def test_magnetar_client_reads_the_compacted_view(cbroker: EmbeddedBroker) -> None:
    topic = new_topic()

    async def main() -> None:
        async with Client(cbroker.service_url) as client:
            producer = await client.create_producer(topic, batching=True)
            sends = [producer.send_async(f"v{i}".encode(), key=f"k{i % 3}") for i in range(9)]
            ids = [await send for send in sends]
            await producer.send(b"", key="k2")  # deleted
            await asyncio.to_thread(compact, cbroker, topic)
            reader = await client.create_reader(topic, EARLIEST, read_compacted=True)
            got = []
            while await reader.has_message_available():
                msg = await reader.read_next(timeout=10)
                got.append((msg.key, msg.value, msg.message_id))
            assert got == [("k0", b"v6", ids[6]), ("k1", b"v7", ids[7])]
            consumer = await client.subscribe(topic, "durable", read_compacted=True,
                                              initial_position="earliest")
            msg = await consumer.receive(timeout=10)
            assert (msg.key, msg.value) == ("k0", b"v6")
            await consumer.acknowledge(msg)
            assert (await consumer.receive(timeout=10)).value == b"v7"

    asyncio.run(main())


# ------------------------------------------------------------ persistence


def test_the_compacted_view_survives_a_restart(tmp_path: Path) -> None:
    topic = new_topic()
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        producer = client.create_producer(topic)
        ids = {}
        for i in range(10):
            ids[i] = mid(producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}"))
        compact(broker, topic)
        before = view(read_all(compacted_reader(client, topic)))
        assert [value for _, value, _ in before] == [b"v7", b"v8", b"v9"]
        client.close()

        broker.restart()
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        assert status(broker, topic) == "NOT_RUN"  # as Pulsar: per loaded topic
        assert view(read_all(compacted_reader(client, topic))) == before
        # A later compaction builds on the one before the restart.
        producer = client.create_producer(topic)
        after = mid(producer.send(b"v10", partition_key="k1"))
        producer.send(None, partition_key="k2")
        compact(broker, topic)
        assert view(read_all(compacted_reader(client, topic))) == [
            ("k0", b"v9", ids[9]), ("k1", b"v10", after),
        ]
        client.close()
    files = list((tmp_path / "persistent" / "public" / "default").glob("*/compacted/*"))
    assert len(files) == 1  # the replaced one is gone


def test_retention_keeps_what_compaction_has_not_read(tmp_path: Path) -> None:
    """The __compaction cursor holds the backlog; once compacted, the log may be
    trimmed and the compacted view still serves the latest values, under their ids,
    across a restart."""
    topic = new_topic()
    settings = {"segment_max_bytes": 16 * 1024, "retention_check_interval": 0.1,
                "cursor_flush_interval": 0.1}
    with EmbeddedBroker(admin=True, data_dir=tmp_path, **settings) as broker:
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        consumer = client.subscribe(topic, "everything")
        # A threshold in force creates the __compaction cursor right away (far above
        # this backlog, so no compaction starts by itself).
        code, _ = admin(broker, "POST", rest(topic) + "/compactionThreshold", b"1000000000")
        assert code == 204
        producer = client.create_producer(topic)
        ids = {}
        for i in range(200):
            ids[i] = mid(producer.send(bytes([65 + i % 26]) * 1000, partition_key=f"k{i % 4}"))
        assert len(receive_all(consumer)) == 200  # all acked by the only other subscription

        def entries() -> int:
            return int(admin(broker, "GET", rest(topic) + "/stats")[1]["entries"])

        time.sleep(1.0)  # several retention passes: nothing may go
        assert entries() == 200
        compact(broker, topic)
        deadline = time.monotonic() + 30
        while entries() >= 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert entries() < 200  # trimmed once the compaction read it

        expected = [(f"k{i % 4}", bytes([65 + i % 26]) * 1000, ids[i]) for i in range(196, 200)]
        assert view(read_all(compacted_reader(client, topic))) == expected
        client.close()
        broker.restart()
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        assert view(read_all(compacted_reader(client, topic))) == expected
        client.close()


# ------------------------------------------------------------ the threshold


def test_the_threshold_starts_a_compaction(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path,
                        broker_service_compaction_monitor_interval_in_seconds=0.2) as broker:
        client = pulsar.Client(broker.service_url,
                               logger=quiet_logger())
        by_topic, by_namespace, below = new_topic(), new_topic(), new_topic()
        for topic in (by_topic, by_namespace, below):
            client.create_producer(topic).close()  # created with nothing in them
        assert admin(broker, "POST", rest(by_topic) + "/compactionThreshold", b"2000")[0] == 204
        assert admin(broker, "POST", rest(below) + "/compactionThreshold", b"100000000")[0] == 204
        assert admin(broker, "POST", "/admin/v2/namespaces/public/default/compactionThreshold",
                     b"3000")[0] == 204
        for topic in (by_topic, by_namespace, below):
            producer = client.create_producer(topic)
            for i in range(20):
                producer.send(b"x" * 500, partition_key=f"k{i % 2}")
            producer.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            status(broker, by_topic) == "SUCCESS" and status(broker, by_namespace) == "SUCCESS"
        ):
            time.sleep(0.1)
        assert status(broker, by_topic) == "SUCCESS"
        assert status(broker, by_namespace) == "SUCCESS"
        assert status(broker, below) == "NOT_RUN"  # its own threshold beats the namespace's
        assert len(read_all(compacted_reader(client, by_topic))) == 2
        client.close()


# ------------------------------------------------------------ the loop keeps serving


def test_a_large_compaction_does_not_stall_other_clients(
    cbroker: EmbeddedBroker, cclient: pulsar.Client
) -> None:
    topic = new_topic()
    producer = cclient.create_producer(topic, max_pending_messages=5000,
                                       block_if_queue_full=True)
    total = 50_000
    for i in range(total):
        producer.send_async(b"%d" % i * 10, None, partition_key=f"k{i % 5000}")
    producer.flush()

    other = new_topic()
    bystander_consumer = cclient.subscribe(other, "s")
    bystander = cclient.create_producer(other)
    code, body = admin(cbroker, "PUT", rest(topic) + "/compaction")
    assert code == 204, body
    during = 0
    rounds = 0
    while status(cbroker, topic) == "RUNNING":
        rounds += 1
        bystander.send(b"ping-%d" % rounds)
        assert bystander_consumer.receive(20_000).data() == b"ping-%d" % rounds
        if status(cbroker, topic) == "RUNNING":
            during += 1  # a whole round trip while the compaction ran
    assert wait_done(cbroker, topic) == "SUCCESS"
    assert during >= 1
    kept = read_all(compacted_reader(cclient, topic), idle_ms=3000)
    assert len(kept) == 5000
    assert kept[0].data() == b"%d" % 45_000 * 10
