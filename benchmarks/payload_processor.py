"""Consume rate of magnetar's client without a payload processor and with PIP-96's DEFAULT.

One subprocess broker; per scenario one topic, filled once; then subscriptions that
start at the earliest message read all of it, alternating "no processor" and
"PayloadProcessor.DEFAULT" for ``--rounds`` rounds (the median of each is printed, with
the ratio default/none). Each message is received and acknowledged, as an application
would. A third row reads a topic of Kafka record batches (one per entry, built here)
through ``KafkaPayloadProcessor``, in records per second.

End-to-end rates move with whatever else the machine runs; a second table times the
client's decode step alone (a received entry to its messages, in this process, no
network), the best of 15 repeats, which is where a processor differs. Both ratios are
DEFAULT's speed over the speed without a processor.

    .venv/bin/python benchmarks/payload_processor.py [--messages 200000] [--rounds 5]

``--no-processor`` measures the first column only, so that the same command runs on a
checkout from before payload processors existed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import timeit
import uuid
from typing import Any

from magnetar.client import Client
from magnetar.testing import EmbeddedBroker

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

QUEUE = 2000


def _topic() -> str:
    return f"persistent://public/default/bench-pp-{uuid.uuid4().hex[:10]}"


async def fill(url: str, topic: str, n: int, payload: bytes, batch: int) -> None:
    async with Client(url) as client:
        producer = await client.create_producer(
            topic, batching=batch > 1, batching_max_messages=max(batch, 1),
            batching_max_delay=0.005, max_pending_messages=5000)
        await asyncio.gather(*(producer.send_async(payload) for _ in range(n)))
        await producer.close()


async def fill_kafka(url: str, topic: str, n: int, payload: bytes, batch: int) -> None:
    from magnetar.client.consuming.kafka_records import KafkaRecord, encode_record_batch

    async with Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=5000)
        futures = []
        for base in range(0, n, batch):
            records = [KafkaRecord(base + i, 1_700_000_000_000 + i, b"key", payload,
                                   (("h", b"v"),)) for i in range(min(batch, n - base))]
            futures.append(producer.send_entry_async(
                encode_record_batch(records), num_messages=len(records),
                properties={"entry.format": "kafka"}))
        await asyncio.gather(*futures)
        await producer.close()


async def consume(url: str, topic: str, n: int, processor: Any) -> float:
    """Messages per second to receive and acknowledge all ``n`` from the start."""
    async with Client(url) as client:
        options = {} if processor is None else {"payload_processor": processor}
        consumer = await client.subscribe(topic, f"bench-{uuid.uuid4().hex[:8]}",
                                          initial_position="earliest",
                                          receiver_queue_size=QUEUE, **options)
        await consumer.acknowledge(await consumer.receive(30))  # connected and flowing
        started = time.perf_counter()
        for _ in range(n - 1):
            await consumer.acknowledge(await consumer.receive(30))
        elapsed = time.perf_counter() - started
        await consumer.close()
    return (n - 1) / elapsed


def decode_cost(processor: Any) -> tuple[float, float]:
    """Microseconds to take an unbatched entry, and per message of a batch of 100, from
    the receiver queue (decode included): best of 15 repeats."""
    from magnetar.client.consuming.config import ConsumerConfig
    from magnetar.client.consuming.consumer import Consumer
    from magnetar.client.consuming.entries import RawEntry
    from magnetar.client.consuming.topic_consumer import TopicConsumer
    from magnetar.protocol.client_codec import encode_message_metadata, encode_single_metadata
    from magnetar.protocol.frames import build_entry
    from magnetar.protocol.pb import pb

    async def measure() -> tuple[float, float]:
        client = Client("pulsar://127.0.0.1:1")  # never connects
        options = {} if processor is None else {"payload_processor": processor}
        conf = ConsumerConfig(subscription="s", **options)
        topic = "persistent://public/default/t"
        parent = Consumer(client, [topic], conf)
        sub = TopicConsumer(client, parent, topic, -1, conf, 1000)
        single = build_entry(encode_message_metadata(b"p", 1, 1_700_000_000_000), b"x" * 100)
        one = encode_single_metadata(100)
        batch = build_entry(
            encode_message_metadata(b"p", 1, 1_700_000_000_000, num_messages_in_batch=100),
            (len(one).to_bytes(4, "big") + one + b"y" * 100) * 100)
        command = pb.CommandMessage(consumer_id=0)
        command.message_id.ledgerId = 1
        command.message_id.entryId = 5
        take = parent._take
        queue = parent._queue

        def unbatched() -> None:
            take(RawEntry(sub, command, single))

        def batched() -> None:
            take(RawEntry(sub, command, batch))
            queue._items.clear()  # the 99 messages put back

        a = min(timeit.repeat(unbatched, number=20_000, repeat=15)) / 20_000
        b = min(timeit.repeat(batched, number=200, repeat=15)) / 20_000
        return a * 1e6, b * 1e6

    return run(measure())  # type: ignore[no-any-return]


def run(coro: Any) -> Any:
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-processor", action="store_true",
                        help="measure only the consumer without a processor")
    args = parser.parse_args()
    n = args.messages
    payload = b"x" * args.size
    processors: dict[str, Any] = {"none": None}
    if not args.no_processor:
        from magnetar.client import KafkaPayloadProcessor, PayloadProcessor

        processors["DEFAULT"] = PayloadProcessor.DEFAULT
    scenarios = [("unbatched", 1, n // 4), ("batches of 100", 100, n)]
    rows = []
    with EmbeddedBroker(mode="subprocess", sync_policy="interval", log_level="WARNING") as broker:
        url = broker.service_url
        for label, batch, count in scenarios:
            topic = _topic()
            run(fill(url, topic, count, payload, batch))
            rates: dict[str, list[float]] = {name: [] for name in processors}
            for _ in range(args.rounds):
                for name, processor in processors.items():
                    rates[name].append(run(consume(url, topic, count, processor)))
            rows.append((f"{label} ({count:,} msgs)",
                         {name: statistics.median(r) for name, r in rates.items()}))
        if not args.no_processor:
            topic = _topic()
            run(fill_kafka(url, topic, n, payload, 100))
            kafka = [run(consume(url, topic, n, KafkaPayloadProcessor()))
                     for _ in range(args.rounds)]
    print()
    print(f"{args.size}-byte payloads, median of {args.rounds} rounds, "
          f"Python {sys.version.split()[0]}")
    header = f"{'topic':<30}{'no processor msg/s':>20}"
    if not args.no_processor:
        header += f"{'DEFAULT msg/s':>16}{'ratio':>8}"
    print(header)
    for label, medians in rows:
        line = f"{label:<30}{medians['none']:>20,.0f}"
        if not args.no_processor:
            line += f"{medians['DEFAULT']:>16,.0f}{medians['DEFAULT'] / medians['none']:>8.2f}"
        print(line)
    if not args.no_processor:
        print(f"{'Kafka batches of 100 (' + format(n, ',') + ' records)':<30}"
              f"{'':>20}{statistics.median(kafka):>16,.0f}  (KafkaPayloadProcessor)")
    print()
    print("decode step alone, best of 15 (us)")
    costs = {name: decode_cost(processor) for name, processor in processors.items()}
    print(f"{'':<30}{'no processor':>20}" + (f"{'DEFAULT':>16}{'ratio':>8}"
                                             if not args.no_processor else ""))
    for column, label in ((0, "per unbatched entry"), (1, "per message, batch of 100")):
        line = f"{label:<30}{costs['none'][column]:>20.2f}"
        if not args.no_processor:
            ratio = costs["none"][column] / costs["DEFAULT"][column]
            line += f"{costs['DEFAULT'][column]:>16.2f}{ratio:>8.2f}"
        print(line)


if __name__ == "__main__":
    main()
