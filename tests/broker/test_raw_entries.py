"""PIP-96 ingest on the broker: raw entries whose payload the broker never reads.

A raw entry is stored, retained and dispatched like a published one and the call returns
once it is durable. Its ``num_messages_in_batch`` need not describe a Pulsar batch:
permits, message counters, backlogs and Key_Shared routing must stay right, for
magnetar's client (with a Kafka processor) and for the official client.

The official client (pulsar-client 3.13, C++) cannot read a Kafka entry tagged as a
batch of N: it would parse the Kafka bytes as a Pulsar batch (N empty messages, or a
SIGSEGV for a non-zero base offset). The broker shields it (broker/topics/shield.py): it gets
each such entry as one message holding the raw bytes, as an entry without
``num_messages`` is anyway; test_foreign_entry_shield.py has the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from official_client import quiet_logger

from magnetar.broker.features.raw_entries import (
    EntryTooLarge,
    RawEntryRefused,
    append_raw_entry_blocking,
)
from magnetar.client import Client, KafkaPayloadProcessor
from magnetar.protocol.pb import pb
from magnetar.testing import EmbeddedBroker

from .helpers import assert_nothing_more, receive_n

KAFKA = {"entry.format": "kafka"}
Earliest = pulsar.InitialPosition.Earliest


def kafka_batch(n: int, base_offset: int = 0, codec: int = 0, key: bytes = b"k") -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=b"record-%d" % i,
                       headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def ingest(broker: EmbeddedBroker, topic: str, payload: bytes, **fields: Any) -> Any:
    assert broker.service is not None
    return append_raw_entry_blocking(broker.service, topic, payload, **fields)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def read_records(url: str, topic: str, n: int, subscription: str = "kafka",
                       **options: Any) -> list[Any]:
    """``n`` records through magnetar's Kafka processor, each acknowledged."""
    async with Client(url, operation_timeout=10) as client:
        consumer = await client.subscribe(topic, subscription, initial_position="earliest",
                                          payload_processor=KafkaPayloadProcessor(), **options)
        out = []
        for _ in range(n):
            msg = await consumer.receive(10)
            out.append(msg)
            await consumer.acknowledge(msg)
        await consumer.close()
    return out


def stats(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    assert broker.service is not None
    return broker.service.topics[topic].stats_dict()


def backlog(broker: EmbeddedBroker, topic: str, subscription: str) -> int:
    """The subscription's backlog once the acks sent have arrived (polled)."""
    for _ in range(100):
        count = int(stats(broker, topic)["subscriptions"][subscription]["msgBacklog"])
        if not count:
            return 0
        time.sleep(0.05)
    return count


# ---------------------------------------------------------------- storing, durability


def test_a_raw_entry_is_durable_when_the_call_returns_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    topic = "persistent://public/default/raw-durable"
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        assert broker.service is not None
        mid = ingest(broker, topic, kafka_batch(4), num_messages=4, properties=KAFKA,
                     key="user-1", event_time=1_700_000_000_123)
        ledger = broker.service.topics[topic].ledger
        assert ledger.last_confirmed_entry_id >= mid.entry_id  # fsynced (sync policy always)
        broker.restart()
        records = run(read_records(broker.service_url, topic, 4))
        assert [m.value for m in records] == [b"record-%d" % i for i in range(4)]
        assert {(m.message_id.ledger_id, m.message_id.entry_id) for m in records} == {
            (mid.ledger_id, mid.entry_id)}


def test_raw_entries_are_dispatched_after_their_sync_when_configured(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path, dispatch_before_sync=False) as broker:
        topic = "persistent://public/default/raw-after-sync"

        async def scenario() -> list[bytes]:
            async with Client(broker.service_url) as client:
                consumer = await client.subscribe(topic, "s",
                                                  payload_processor=KafkaPayloadProcessor())
                await asyncio.get_running_loop().run_in_executor(
                    None, lambda: ingest(broker, topic, kafka_batch(2), num_messages=2,
                                         properties=KAFKA))
                return [(await consumer.receive(10)).value for _ in range(2)]

        assert run(scenario()) == [b"record-0", b"record-1"]


def test_counters_and_backlog_count_a_raw_entry_as_its_num_messages(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "kafka", initial_position=Earliest).close()  # backlog from here
    producer = client.create_producer(topic)
    producer.send(b"plain")
    ingest(broker, topic, kafka_batch(50), num_messages=50, properties=KAFKA)
    ingest(broker, topic, b"opaque", properties={"entry.format": "custom"})
    before = stats(broker, topic)
    assert before["msgInCounter"] == 1 + 50 + 1
    assert before["subscriptions"]["kafka"]["msgBacklog"] == 3  # entries, as for batches

    async def consume() -> list[bytes]:
        async with Client(broker.service_url) as ours:
            consumer = await ours.subscribe(topic, "kafka", payload_processor=KafkaPayloadProcessor(
                formats=("kafka", "custom")), receiver_queue_size=10)
            got = []
            for _ in range(51):
                msg = await consumer.receive(10)
                got.append(msg.value)
                await consumer.acknowledge(msg)
            # The custom entry is not Kafka: it fails on its own, the rest was read.
            with pytest.raises(Exception, match="record batch"):
                await consumer.receive(10)
            await consumer.flush_acks()
            return got

    got = run(consume())
    assert got == [b"plain"] + [b"record-%d" % i for i in range(50)]
    after = stats(broker, topic)
    assert after["msgOutCounter"] - before["msgOutCounter"] == 52
    assert after["subscriptions"]["kafka"]["msgBacklog"] == 1  # the failed entry, unacked


# ---------------------------------------------------------------- permits and routing


def test_an_entry_of_more_messages_than_the_receiver_queue_does_not_stall(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    """The broker sends an entry while a consumer has any permit; a batch of 200 takes
    the consumer's permits below zero, and its FLOWs bring them back."""

    async def scenario() -> list[bytes]:
        async with Client(broker.service_url) as ours:
            consumer = await ours.subscribe(topic, "s", subscription_type="shared",
                                            receiver_queue_size=3,
                                            payload_processor=KafkaPayloadProcessor())
            producer = await ours.create_producer(topic)
            for round_ in range(3):
                await producer.send_entry(kafka_batch(200, base_offset=round_ * 200),
                                          num_messages=200, properties=KAFKA)
                await producer.send(b"plain-%d" % round_)
            got = []
            for _ in range(603):
                msg = await consumer.receive(10)
                got.append(msg.value)
                await consumer.acknowledge(msg)
            return got

    got = run(scenario())
    assert got == [v for r in range(3) for v in
                   [b"record-%d" % i for i in range(200)] + [b"plain-%d" % r]]


def test_key_shared_routes_raw_entries_by_their_key(
    broker: EmbeddedBroker, topic: str
) -> None:
    keys = [f"key-{i}" for i in range(12)]

    async def scenario() -> dict[str, set[int]]:
        async with Client(broker.service_url) as ours:
            consumers = [
                await ours.subscribe(topic, "ks", subscription_type="key_shared",
                                     consumer_name=f"c{i}", receiver_queue_size=5,
                                     payload_processor=KafkaPayloadProcessor())
                for i in range(2)
            ]
            producer = await ours.create_producer(topic)
            for _ in range(3):
                for key in keys:
                    await producer.send_entry(kafka_batch(7, key=key.encode()), num_messages=7,
                                              key=key, properties=KAFKA)
            seen: dict[str, set[int]] = {}
            total = 0

            async def drain(index: int, consumer: Any) -> None:
                nonlocal total
                while total < 3 * len(keys) * 7:
                    try:
                        msg = await consumer.receive(1)
                    except Exception:
                        continue
                    seen.setdefault(msg.key, set()).add(index)
                    total += 1
                    await consumer.acknowledge(msg)

            await asyncio.wait_for(
                asyncio.gather(*(drain(i, c) for i, c in enumerate(consumers))), 30)
            assert total == 3 * len(keys) * 7
            return seen

    seen = run(scenario())
    assert sorted(seen) == sorted(keys)
    assert all(len(owners) == 1 for owners in seen.values())  # each key on one consumer
    assert {owner for owners in seen.values() for owner in owners} == {0, 1}


# ---------------------------------------------------------------- refusals


def test_what_the_ingest_api_refuses(broker: EmbeddedBroker, topic: str) -> None:
    assert broker.service is not None
    with pytest.raises(ValueError, match="at least 1"):
        ingest(broker, topic, b"x", num_messages=0)
    with pytest.raises(EntryTooLarge):
        ingest(broker, topic, b"x" * (broker.service.config.max_message_size + 1))
    with pytest.raises(LookupError):
        ingest(broker, topic + "-absent", b"x", create=False)
    with pytest.raises(ValueError, match=r"invalid|topic"):
        ingest(broker, "persistent://no-namespace", b"x")
    partitioned = topic + "-p"
    broker.create_partitioned_topic(partitioned, 2)
    with pytest.raises(ValueError, match="partitioned"):
        ingest(broker, partitioned, b"x")
    ingest(broker, partitioned + "-partition-1", b"x")  # a partition takes it
    ingest(broker, topic, b"x")
    broker.service.terminate_topic(topic)
    with pytest.raises(RawEntryRefused) as refused:
        ingest(broker, topic, b"x")
    assert refused.value.error == pb.TopicTerminatedError


def test_non_persistent_topics_take_raw_entries(broker: EmbeddedBroker) -> None:
    topic = f"non-persistent://public/default/raw-{uuid.uuid4().hex[:8]}"

    async def scenario() -> list[bytes]:
        async with Client(broker.service_url) as ours:
            consumer = await ours.subscribe(topic, "s", payload_processor=KafkaPayloadProcessor())
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: ingest(broker, topic, kafka_batch(3), num_messages=3,
                                     properties=KAFKA))
            return [(await consumer.receive(10)).value for _ in range(3)]

    assert run(scenario()) == [b"record-0", b"record-1", b"record-2"]


# ---------------------------------------------------------------- the official client

OFFICIAL_CONSUMER = textwrap.dedent("""
    import json, sys, pulsar
    url, topic, subscription = sys.argv[1:4]
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(topic, subscription, receiver_queue_size=5,
                                initial_position=pulsar.InitialPosition.Earliest)
    while True:
        try:
            msg = consumer.receive(5000)
        except pulsar.Timeout:
            break
        mid = msg.message_id()
        print(json.dumps({"entry": mid.entry_id(), "batch_index": mid.batch_index(),
                          "data": msg.data().hex(), "properties": msg.properties()}),
              flush=True)
        consumer.acknowledge(msg)
        if msg.data() == b"after":
            break
    client.close()
""")


def official_consumer(url: str, topic: str, subscription: str) -> tuple[int, list[Any]]:
    """Run the official client in a child process (it may crash on a raw entry): its exit
    code and what it received."""
    result = subprocess.run(
        [sys.executable, "-c", OFFICIAL_CONSUMER, url, topic, subscription],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONFAULTHANDLER": ""},
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result.returncode, lines


@pytest.mark.slow
def test_the_official_client_gets_raw_entries_as_one_message_each(
    broker: EmbeddedBroker, topic: str, official: Callable[[EmbeddedBroker], Any]
) -> None:
    bystander = official(broker)  # a producer and a consumer on another topic
    records = [b"record-%d" % i for i in range(3)]
    producer_client = pulsar.Client(broker.service_url,
                                    logger=quiet_logger())
    try:
        producer = producer_client.create_producer(topic)
        producer.send(b"before")
        kafka = kafka_batch(3)  # base offset 0: the official client's batch parse survives
        single = kafka_batch(2, base_offset=77)
        ingest(broker, topic, kafka, num_messages=3, properties=KAFKA)
        ingest(broker, topic, single, properties=KAFKA)  # no num_messages: one message
        producer.send(b"after")

        code, seen = official_consumer(broker.service_url, topic, "official")
        assert code == 0
        assert [(m["batch_index"], bytes.fromhex(m["data"])) for m in seen] == [
            (-1, b"before"), (-1, kafka), (-1, single), (-1, b"after")]
        assert seen[1]["properties"] == seen[2]["properties"] == KAFKA

        # A batch it would crash on (SIGSEGV with pulsar-client 3.13, unshielded): one
        # message of its bytes.
        unparsable = topic + "-unparsable"
        big = kafka_batch(50, base_offset=123_456)
        ingest(broker, unparsable, big, num_messages=50, properties=KAFKA)
        producer_client.create_producer(unparsable).send(b"after")
        code, seen = official_consumer(broker.service_url, unparsable, "official")
        assert code == 0
        assert [bytes.fromhex(m["data"]) for m in seen] == [big, b"after"]

        # The broker and everyone else carry on: a consumer with the Kafka processor
        # reads every record, the official bystander round-trips, the official
        # consumer's subscription has no backlog left.
        values = [m.value for m in run(read_records(broker.service_url, topic, 1 + 3 + 2 + 1,
                                                    subscription="ours"))]
        assert values == [b"before", *records, *records[:2], b"after"]
        values = [m.value for m in run(read_records(broker.service_url, unparsable, 51,
                                                    subscription="ours"))]
        assert values == [b"record-%d" % i for i in range(50)] + [b"after"]
        bystander("after raw entries")
        assert backlog(broker, topic, "official") == 0
        consumer = producer_client.subscribe(topic, "official")
        producer.send(b"later")
        assert [m.data() for m in receive_n(consumer, 1)] == [b"later"]
        assert_nothing_more(consumer)
    finally:
        producer_client.close()
