"""Publish and dispatch throughput of a magnetar broker, driven by the official client.

    .venv/bin/python benchmarks/broker_throughput.py [--messages 50000] [--size 100]
        [--batching] [--sync-policy always|interval] [--service-url URL]

Without --service-url an embedded broker (subprocess, fresh data dir) is started,
so the client and the broker use different processes as in production. Prints a
table; it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

import pulsar

from magnetar.testing import EmbeddedBroker


def run(url: str, messages: int, size: int, batching: bool) -> dict[str, float]:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"bench-{time.time_ns()}"
    consumer = client.subscribe(
        topic, "bench", receiver_queue_size=5000, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )
    payload = b"x" * size
    done = threading.Event()
    acked = [0]

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        acked[0] += 1
        if acked[0] == messages:
            done.set()

    # warm-up, then the consumer goes away so that publishing is measured alone
    for _ in range(200):
        producer.send(payload)
    for _ in range(200):
        consumer.acknowledge(consumer.receive(10000))
    consumer.close()

    start = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, on_sent)
    producer.flush()
    done.wait(120)
    publish_s = time.perf_counter() - start

    # the backlog is dispatched from the broker's cache and disk to a fresh consumer
    consumer = client.subscribe(topic, "bench", receiver_queue_size=5000)
    start = time.perf_counter()
    for _ in range(messages):
        msg = consumer.receive(10000)
        consumer.acknowledge(msg)
    consume_s = time.perf_counter() - start

    latencies = []
    for _ in range(500):
        t = time.perf_counter()
        producer.send(payload)
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    client.close()
    return {
        "publish msg/s": messages / publish_s,
        "consume msg/s": messages / consume_s,
        "send p50 ms": latencies[len(latencies) // 2],
        "send p99 ms": latencies[int(len(latencies) * 0.99)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--sync-policy", default="always", choices=["always", "interval"])
    parser.add_argument("--service-url")
    args = parser.parse_args()
    if args.service_url:
        results = run(args.service_url, args.messages, args.size, args.batching)
    else:
        with tempfile.TemporaryDirectory() as data, EmbeddedBroker(
            data_dir=data, mode="subprocess", sync_policy=args.sync_policy, log_level="WARNING"
        ) as broker:
            results = run(broker.service_url, args.messages, args.size, args.batching)
    print(
        f"messages={args.messages} size={args.size} batching={args.batching} "
        f"sync={args.sync_policy}"
    )
    for name, value in results.items():
        print(f"  {name:>14}: {value:,.2f}")


if __name__ == "__main__":
    main()
