"""The PIP-96 shield: foreign entries never reach a consumer that cannot read them as a batch.

A foreign entry (``entry.format`` naming another format than Pulsar's; raw ingest
always sets one) framed as a batch goes as it is only to consumers that declared
``magnetar.foreign-entries=read`` at subscribe (magnetar's client with a payload
processor). Every other consumer, the official client's included, gets it as one
message: its bytes and properties, one permit, one ack. Without the shield the official
client (pulsar-client 3.13) dies of SIGSEGV on ``send_entry(b"a,b,c,d",
num_messages=4, properties={"entry.format": "csv"})`` and reads a 3-record Kafka batch
as 3 empty messages; so it runs in a child process here.
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
from pathlib import Path
from typing import Any

import pulsar
from kafka.record.default_records import DefaultRecordBatchBuilder
from official_client import quiet_logger

from magnetar.broker.features.raw_entries import append_raw_entry_blocking
from magnetar.client import Client, EntryContext, KafkaPayloadProcessor, MessagePayload
from magnetar.testing import EmbeddedBroker

KAFKA = {"entry.format": "kafka"}
CSV = {"entry.format": "csv"}

OFFICIAL_CONSUMER = textwrap.dedent("""
    import json, sys, pulsar
    url, topic, subscription, leave_unacked = sys.argv[1:5]
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(topic, subscription, receiver_queue_size=5,
                                consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    print("subscribed", flush=True)
    while True:
        try:
            msg = consumer.receive(20000)
        except pulsar.Timeout:
            break
        mid = msg.message_id()
        print(json.dumps({"entry": mid.entry_id(), "batch_index": mid.batch_index(),
                          "data": msg.data().hex(), "properties": msg.properties()}),
              flush=True)
        if msg.properties().get("entry.format") != leave_unacked:
            consumer.acknowledge(msg)
        if msg.data() == b"after":
            break
    consumer.close()
    client.close()
""")


class CsvOrKafka:
    """A payload processor for the entries these tests write: CSV rows, Kafka records."""

    kafka = KafkaPayloadProcessor(formats=("kafka", "raw"))

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        if context.get_property("entry.format") != "csv":
            self.kafka.process(payload, context, schema, emit)
            return
        rows = payload.copy().split(b",")
        for index, row in enumerate(rows):
            emit(context.message_at(index, len(rows), MessagePayload(row), False, schema))


def kafka_batch(n: int, first: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k",
                       value=b"record-%d" % (first + i), headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, first)  # base offset: a non-zero one crashed it too
    return bytes(data)


def official_consumer(broker: EmbeddedBroker, topic: str, subscription: str,
                      leave_unacked: str = "-") -> subprocess.Popen[str]:
    """The official client's shared consumer in a child process: it prints each message
    as JSON, acks it (but for those whose ``entry.format`` is ``leave_unacked``) and
    stops after ``b"after"``."""
    process = subprocess.Popen(
        [sys.executable, "-c", OFFICIAL_CONSUMER, broker.service_url, topic, subscription,
         leave_unacked],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": ""},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.strip() == "subscribed", first + process.stdout.read()
    return process


def finish(process: subprocess.Popen[str]) -> tuple[int, list[dict[str, Any]]]:
    assert process.stdout is not None
    out = process.stdout.read()  # not communicate(): readline() may hold some of it
    code = process.wait(timeout=120)
    print(out)  # its log lines too, shown if the test fails
    return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def seen(lines: list[dict[str, Any]]) -> list[tuple[int, bytes, dict[str, str]]]:
    return [(m["batch_index"], bytes.fromhex(m["data"]), m["properties"]) for m in lines]


def stats(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    assert broker.service is not None
    return broker.service.topics[topic].stats_dict()


def wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_official_client_gets_each_foreign_entry_once_as_one_message(
    tmp_path: Path,
) -> None:
    topic = "persistent://public/default/shielded"
    kafka = kafka_batch(3)
    raw = kafka_batch(2, first=40)
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        assert broker.service is not None

        async def publish() -> None:
            async with Client(broker.service_url) as ours:
                producer = await ours.create_producer(topic)
                await producer.send(b"before")
                await producer.send_entry(b"a,b,c,d", num_messages=4, properties=CSV)
                await producer.send_entry(kafka, num_messages=3, properties=KAFKA)
                await producer.send(b"after")

        official = pulsar.Client(broker.service_url,
                                 logger=quiet_logger())
        official.subscribe(topic, "official").close()  # the backlog counts from here
        official.close()
        asyncio.run(publish())
        # Raw ingest without a format, framed as a batch: foreign all the same, and
        # known so after a restart (the flag comes from the stored entry).
        append_raw_entry_blocking(broker.service, topic, raw, num_messages=2)
        broker.restart()

        async def publish_last() -> None:
            async with Client(broker.service_url) as ours:
                await (await ours.create_producer(topic)).send(b"after")

        process = official_consumer(broker, topic, "official")
        asyncio.run(publish_last())
        code, lines = finish(process)
        assert code == 0
        assert seen(lines) == [
            (-1, b"before", {}),
            (-1, b"a,b,c,d", CSV),
            (-1, kafka, KAFKA),
            (-1, b"after", {}),
        ]
        # Stopped at the first "after"; a second run reads on from there, once each.
        process = official_consumer(broker, topic, "official")
        code, lines = finish(process)
        assert code == 0
        assert seen(lines) == [(-1, raw, {"entry.format": "raw"}), (-1, b"after", {})]
        wait_for(lambda: stats(broker, topic)["subscriptions"]["official"]["msgBacklog"] == 0,
                 "the acks to drain the backlog")

        # magnetar's client: without a processor it is shielded too (one message of
        # bytes); with one it gets the records.
        async def read(processor: Any, n: int) -> list[bytes]:
            async with Client(broker.service_url) as ours:
                consumer = await ours.subscribe(topic, "ours-%s" % (processor is None),
                                                initial_position="earliest",
                                                payload_processor=processor)
                values = []
                for _ in range(n):
                    msg = await consumer.receive(10)
                    values.append(msg.value)
                    await consumer.acknowledge(msg)
                return values

        assert asyncio.run(read(None, 6)) == [
            b"before", b"a,b,c,d", kafka, b"after", raw, b"after"]
        records = asyncio.run(read(CsvOrKafka(), 12))
        assert records == [b"before", b"a", b"b", b"c", b"d", b"record-0", b"record-1",
                           b"record-2", b"after", b"record-40", b"record-41", b"after"]


def test_one_subscription_shared_by_a_processor_consumer_and_an_official_one(
    broker: EmbeddedBroker, topic: str
) -> None:
    """Each gets what it can read; an entry the official consumer leaves unacked comes
    back whole to the other as records; permits, counters, acks and backlog agree."""
    assert broker.service is not None
    first, second = kafka_batch(3), kafka_batch(3, first=10)
    stats_before: dict[str, Any] = {}
    stats_after: dict[str, Any] = {}

    async def scenario() -> tuple[int, list[dict[str, Any]], list[tuple[bytes, int]]]:
        async with Client(broker.service_url) as ours:
            producer = await ours.create_producer(topic)
            # Ours takes the first entry and sits on it: with a queue of 1 and 3
            # records charged, it has no permit left for the rest.
            consumer = await ours.subscribe(topic, "mixed", subscription_type="shared",
                                            receiver_queue_size=1,
                                            payload_processor=KafkaPayloadProcessor())
            await producer.send_entry(first, num_messages=3, properties=KAFKA)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, wait_for, lambda: stats(broker, topic)[
                "subscriptions"]["mixed"]["unackedMessages"] == 1, "the first entry out")
            stats_before.update(stats(broker, topic))
            process = await loop.run_in_executor(
                None, official_consumer, broker, topic, "mixed", "kafka")
            await loop.run_in_executor(None, wait_for, lambda: len(stats(broker, topic)[
                "subscriptions"]["mixed"]["consumers"]) == 2, "both consumers")
            await producer.send_entry(second, num_messages=3, properties=KAFKA)
            await producer.send_entry(b"a,b,c,d", num_messages=4, properties=CSV)
            await producer.send(b"after")
            code, lines = await loop.run_in_executor(None, finish, process)
            got = []
            for _ in range(6):
                msg = await consumer.receive(20)
                got.append((msg.value, msg.redelivery_count))
                await consumer.acknowledge(msg)
            await consumer.flush_acks()
            await loop.run_in_executor(None, wait_for, lambda: stats(broker, topic)[
                "subscriptions"]["mixed"]["msgBacklog"] == 0, "the acks to drain the backlog")
            stats_after.update(stats(broker, topic))  # with ours still attached
            return code, lines, got

    code, lines, got = asyncio.run(scenario())
    assert code == 0
    assert seen(lines) == [(-1, second, KAFKA), (-1, b"a,b,c,d", CSV), (-1, b"after", {})]
    # The official consumer closed with the Kafka entry unacked: it came back whole.
    assert got == [(b"record-%d" % i, 0) for i in range(3)] + [
        (b"record-%d" % i, 1) for i in range(10, 13)]
    after = stats_after
    (ours,) = after["subscriptions"]["mixed"]["consumers"]
    assert after["subscriptions"]["mixed"]["unackedMessages"] == 0
    assert ours["unackedMessages"] == 0
    # Out: 3 records to ours, then 1 + 1 + 1 messages to the official consumer, then the
    # 3 records of the entry it left; a shielded entry is charged as one message.
    assert after["msgOutCounter"] - stats_before["msgOutCounter"] == 1 + 1 + 1 + 3
    assert ours["metadata"] == {"magnetar.foreign-entries": "read",
                                "magnetar.redelivery-backoff": "client"}
