"""Produce and consume rates of magnetar's client vs the official pulsar-client.

Both clients talk to the same embedded magnetar broker (one per run, in a child
process so that the broker's event loop does not share this process's GIL).
Each scenario uses a fresh topic; rates are messages per second, wall clock.

    .venv/bin/python benchmarks/client_throughput.py [--messages 50000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from collections.abc import Callable

import pulsar

from magnetar.client import Client
from magnetar.testing import EmbeddedBroker

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None


def _topic() -> str:
    return f"persistent://public/default/bench-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------- magnetar's client


async def ours_produce(url: str, topic: str, n: int, payload: bytes, batching: bool) -> float:
    async with Client(url) as client:
        producer = await client.create_producer(
            topic, batching=batching, batching_max_delay=0.005, max_pending_messages=2000
        )
        await producer.send(payload)  # warm the connection up
        started = time.perf_counter()
        futures = [producer.send_async(payload) for _ in range(n)]
        await asyncio.gather(*futures)
        elapsed = time.perf_counter() - started
        await producer.close()
    return n / elapsed


async def ours_consume(url: str, topic: str, n: int) -> float:
    async with Client(url) as client:
        consumer = await client.subscribe(topic, "bench-ours", initial_position="earliest",
                                          receiver_queue_size=2000)
        msg = await consumer.receive(30)
        await consumer.acknowledge(msg)
        started = time.perf_counter()
        for _ in range(n - 1):
            msg = await consumer.receive(30)
            await consumer.acknowledge(msg)
        elapsed = time.perf_counter() - started
        await consumer.close()
    return (n - 1) / elapsed


# ---------------------------------------------------------------- the official client


def official_produce(url: str, topic: str, n: int, payload: bytes, batching: bool) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            topic, batching_enabled=batching, batching_max_publish_delay_ms=5,
            max_pending_messages=2000, block_if_queue_full=True,
        )
        producer.send(payload)
        done = threading.Event()
        remaining = [n]
        lock = threading.Lock()

        def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        started = time.perf_counter()
        for _ in range(n):
            producer.send_async(payload, callback)
        producer.flush()
        done.wait(120)
        elapsed = time.perf_counter() - started
        producer.close()
    finally:
        client.close()
    return n / elapsed


def official_consume(url: str, topic: str, n: int) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "bench-official", receiver_queue_size=2000,
                                    initial_position=pulsar.InitialPosition.Earliest)
        consumer.acknowledge(consumer.receive(30_000))
        started = time.perf_counter()
        for _ in range(n - 1):
            consumer.acknowledge(consumer.receive(30_000))
        elapsed = time.perf_counter() - started
        consumer.close()
    finally:
        client.close()
    return (n - 1) / elapsed


# ---------------------------------------------------------------- driver


def run_async(coro_factory: Callable[[], object]) -> float:
    if uvloop is not None:
        return uvloop.run(coro_factory())  # type: ignore[no-any-return, arg-type]
    return asyncio.run(coro_factory())  # type: ignore[no-any-return, arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--sync-policy", default="interval", choices=["always", "interval"],
                        help="broker fsync policy (interval measures the clients, not the disk)")
    args = parser.parse_args()
    n = args.messages
    payload = b"x" * args.size
    rows: list[tuple[str, str, float]] = []
    with EmbeddedBroker(mode="subprocess", sync_policy=args.sync_policy,
                        log_level="WARNING") as broker:
        url = broker.service_url
        for batching in (False, True):
            label = "batched" if batching else "unbatched"
            t_ours = _topic()
            rate = run_async(lambda t=t_ours, b=batching: ours_produce(url, t, n, payload, b))
            rows.append(("magnetar", f"produce {label}", rate))
            t_off = _topic()
            rows.append(("official", f"produce {label}",
                         official_produce(url, t_off, n, payload, batching)))
            # Each client consumes the topic the *other* client produced, so both
            # read the same entry layout.
            rows.append(("magnetar", f"consume {label}",
                         run_async(lambda t=t_off: ours_consume(url, t, n))))
            rows.append(("official", f"consume {label}", official_consume(url, t_ours, n)))
    print()
    print(f"{n} messages of {args.size} bytes, broker sync policy {args.sync_policy!r}, "
          f"Python {sys.version.split()[0]}")
    print(f"{'scenario':<22}{'magnetar msg/s':>16}{'official msg/s':>16}{'ratio':>8}")
    scenarios = dict.fromkeys(s for _, s, _ in rows)
    for scenario in scenarios:
        ours = next(r for c, s, r in rows if c == "magnetar" and s == scenario)
        theirs = next(r for c, s, r in rows if c == "official" and s == scenario)
        print(f"{scenario:<22}{ours:>16,.0f}{theirs:>16,.0f}{ours / theirs:>8.2f}")


if __name__ == "__main__":
    main()
