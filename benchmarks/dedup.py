"""Publish throughput with message deduplication on and off, in the same run.

    .venv/bin/python benchmarks/dedup.py [--messages 50000] [--size 100] [--rounds 3]
        [--batching] [--sync-policy always|interval]

One broker (a subprocess, fresh data directory, deduplication off by default) serves
both: each round the official client publishes the same messages to a fresh topic as
the broker has it (off) and to a fresh topic switched on through the admin API (the
topic policy), alternating (off, on, off, on, ...) so that both see the same machine;
the median of the rounds is printed for each, with the ratio on/off. It is a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import urllib.request

import pulsar

from magnetar.testing import EmbeddedBroker


def publish(client: pulsar.Client, topic: str, messages: int, size: int, batching: bool) -> float:
    """Messages per second, from the first send to the last receipt."""
    producer = client.create_producer(
        topic,
        producer_name="bench",
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )
    payload = b"x" * size
    for _ in range(200):  # warm-up: the topic loaded, the connection busy once
        producer.send(payload)
    done = threading.Event()
    acked = [0]

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        acked[0] += 1
        if acked[0] == messages:
            done.set()

    start = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, on_sent)
    producer.flush()
    if not done.wait(300):
        raise RuntimeError(f"only {acked[0]} of {messages} receipts came")
    elapsed = time.perf_counter() - start
    producer.close()
    return messages / elapsed


def admin(admin_url: str, method: str, path: str, body: bytes) -> None:
    request = urllib.request.Request(
        f"{admin_url}/admin/v2/persistent/{path}", data=body, method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204, response.status


def switched_on_topic(admin_url: str, local: str) -> str:
    """A new topic with its deduplication policy on."""
    admin(admin_url, "PUT", f"public/default/{local}", b"")
    admin(admin_url, "POST", f"public/default/{local}/deduplicationEnabled", b"true")
    return f"persistent://public/default/{local}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--sync-policy", default="always", choices=("always", "interval"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as data, EmbeddedBroker(
        data_dir=data, mode="subprocess", admin=True, sync_policy=args.sync_policy,
        log_level="WARNING",
    ) as broker:
        admin_url = broker.admin_url
        assert admin_url is not None
        client = pulsar.Client(
            broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        )
        rates: dict[str, list[float]] = {"off": [], "on": []}
        try:
            for round_ in range(args.rounds):
                for mode in ("off", "on"):
                    local = f"bench-{mode}-{round_}"
                    topic = (
                        switched_on_topic(admin_url, local) if mode == "on"
                        else f"persistent://public/default/{local}"
                    )
                    rates[mode].append(
                        publish(client, topic, args.messages, args.size, args.batching)
                    )
        finally:
            client.close()

    off = statistics.median(rates["off"])
    on = statistics.median(rates["on"])
    print(
        f"publish {args.messages} x {args.size} B, batching {'on' if args.batching else 'off'}, "
        f"sync {args.sync_policy}, {args.rounds} rounds (median)"
    )
    print(f"{'dedup':<6} {'msg/s':>10}   rounds")
    for mode, median in (("off", off), ("on", on)):
        rounds = " ".join(f"{rate:,.0f}" for rate in rates[mode])
        print(f"{mode:<6} {median:>10,.0f}   {rounds}")
    print(f"ratio on/off: {on / off:.3f}")


if __name__ == "__main__":
    main()
