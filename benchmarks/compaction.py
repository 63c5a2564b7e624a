"""How long a topic compaction takes, and what another client feels meanwhile.

    .venv/bin/python benchmarks/compaction.py [--messages 50000] [--keys 5000] [--batching]

One broker (a subprocess, fresh data directory). The official client fills a topic with
``--messages`` keyed messages, then measures publish-and-receive round trips on another
topic: first with nothing else going on, then while the admin API's compaction of the
filled topic runs (until its status is no longer RUNNING). Prints the compaction's wall
time (as the status polls see it) and the round trips' p50/p99/max for both. It is a
measurement, not a test: the machine's other work shows in it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from typing import Any

import pulsar

from magnetar.testing import EmbeddedBroker


def admin(broker: EmbeddedBroker, method: str, path: str) -> Any:
    request = urllib.request.Request(f"{broker.admin_url}{path}", method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3  # noqa: E731
    return (f"n={len(ordered)} p50 {pick(0.5):.2f} ms p99 {pick(0.99):.2f} ms "
            f"max {ordered[-1] * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--batching", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as data, EmbeddedBroker(
        admin=True, mode="subprocess", data_dir=data
    ) as broker:
        client = pulsar.Client(broker.service_url,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        topic = "persistent://public/default/bench-compaction"
        producer = client.create_producer(topic, batching_enabled=args.batching,
                                          max_pending_messages=5000, block_if_queue_full=True)
        for i in range(args.messages):
            producer.send_async(b"value-%d" % i, None, partition_key=f"k{i % args.keys}")
        producer.flush()

        other = "persistent://public/default/bench-bystander"
        consumer = client.subscribe(other, "s")
        bystander = client.create_producer(other)

        def round_trip() -> float:
            start = time.perf_counter()
            bystander.send(b"ping")
            consumer.acknowledge(consumer.receive(30_000))
            return time.perf_counter() - start

        idle = [round_trip() for _ in range(300)]
        path = "/admin/v2/persistent/public/default/bench-compaction/compaction"
        started = time.monotonic()
        admin(broker, "PUT", path)
        during = []
        while admin(broker, "GET", path)["status"] == "RUNNING":
            during.append(round_trip())
        took = time.monotonic() - started
        status = admin(broker, "GET", path)
        print(f"{args.messages} messages, {args.keys} keys"
              f"{', batched' if args.batching else ''}: compaction {status['status']} "
              f"in about {took:.2f} s")
        print(f"round trips idle:   {summary(idle)}")
        if during:
            print(f"round trips during: {summary(during)}")
        client.close()


if __name__ == "__main__":
    main()
