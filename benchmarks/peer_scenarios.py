"""The scenarios ``broker_throughput.py --peer`` runs against each broker.

Owns the workloads (the official ``pulsar-client`` drives them, the same code for
either broker) and the figures each returns: latencies from the client, and the
broker's CPU per message over the scenario's window (``Broker.cpu_seconds`` before
and after). Each scenario uses fresh topics; message counts scale with ``scale``.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pulsar
from peer_brokers import Broker

Figures = dict[str, float]
SEND_TIMEOUT_S = 120


@dataclass
class Context:
    broker: Broker
    client: pulsar.Client
    scale: float

    def n(self, count: int) -> int:
        return max(100, int(count * self.scale))

    def topic(self, kind: str) -> str:
        return f"persistent://public/default/peer-{kind}-{uuid.uuid4().hex[:10]}"


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def _producer(ctx: Context, topic: str, batching: bool) -> pulsar.Producer:
    return ctx.client.create_producer(
        topic,
        batching_enabled=batching,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=5000,
        block_if_queue_full=True,
    )


def _publish(producer: pulsar.Producer, payload: bytes, count: int) -> None:
    """``count`` send_async calls, returning once every receipt is in."""
    done = threading.Event()
    acked = [0]
    failed: list[pulsar.Result] = []

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            failed.append(result)
        acked[0] += 1
        if acked[0] == count:
            done.set()

    for _ in range(count):
        producer.send_async(payload, on_sent)
    producer.flush()
    if not done.wait(SEND_TIMEOUT_S) or failed:
        raise RuntimeError(f"publish: {acked[0]}/{count} receipts, failures {failed[:3]}")


def _drain(consumer: pulsar.Consumer, count: int) -> None:
    for _ in range(count):
        consumer.acknowledge(consumer.receive(30_000))


def publish_sync(ctx: Context) -> Figures:
    """One unbatched 100-byte send at a time, each awaiting its receipt."""
    n = ctx.n(3000)
    producer = _producer(ctx, ctx.topic("sync"), batching=False)
    payload = b"x" * 100
    for _ in range(200):
        producer.send(payload)
    latencies = []
    cpu = ctx.broker.cpu_seconds()
    for _ in range(n):
        started = time.perf_counter()
        producer.send(payload)
        latencies.append((time.perf_counter() - started) * 1000)
    cpu = ctx.broker.cpu_seconds() - cpu
    producer.close()
    latencies.sort()
    return {
        "sync p50": _quantile(latencies, 0.5),
        "sync p99": _quantile(latencies, 0.99),
        "sync p999": _quantile(latencies, 0.999),
        "cpu publish sync": cpu / n * 1e6,
    }


def e2e_fixed_rate(ctx: Context, rate: int = 1000) -> Figures:
    """Unbatched 100-byte messages sent at ``rate``/s (send_async on a schedule), from
    the send call to the consumer's receive, on one topic with one consumer."""
    n = ctx.n(3 * rate)
    topic = ctx.topic("e2e")
    consumer = ctx.client.subscribe(topic, "e2e", receiver_queue_size=1000)
    producer = _producer(ctx, topic, batching=False)
    for _ in range(100):
        producer.send(b"w" * 100)
    _drain(consumer, 100)
    latencies: list[float] = []

    def receive() -> None:
        for _ in range(n):
            msg = consumer.receive(30_000)
            now = time.perf_counter_ns()
            latencies.append((now - struct.unpack_from("<q", msg.data())[0]) / 1e6)
            consumer.acknowledge(msg)

    receiver = threading.Thread(target=receive)
    receiver.start()
    start = time.perf_counter()
    pad = b"x" * 92
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(struct.pack("<q", time.perf_counter_ns()) + pad, _ignore)
    producer.flush()
    receiver.join(60)
    if len(latencies) != n:
        raise RuntimeError(f"e2e: {len(latencies)}/{n} received")
    producer.close()
    consumer.close()
    latencies.sort()
    return {
        "e2e p50": _quantile(latencies, 0.5),
        "e2e p99": _quantile(latencies, 0.99),
        "e2e max": latencies[-1],
    }


def _ignore(_result: pulsar.Result, _mid: pulsar.MessageId) -> None:
    pass


def _backlog(ctx: Context, kind: str, count: int, batching: bool, subs: int) -> str:
    """A topic holding ``count`` 100-byte messages for ``subs`` subscriptions made
    before the first send (closed again, so nothing is dispatched while publishing)."""
    topic = ctx.topic(kind)
    for i in range(subs):
        ctx.client.subscribe(topic, f"sub-{i}").close()
    producer = _producer(ctx, topic, batching)
    _publish(producer, b"x" * 100, count)
    producer.close()
    return topic


def _consume_window(ctx: Context, topic: str, subs: int, count: int) -> tuple[float, float]:
    """Each of ``subs`` subscriptions reads and acks ``count`` messages from its own
    thread; (seconds until the last receive, broker CPU seconds including the
    consumers' closes, which flush the last grouped acks)."""
    cpu = ctx.broker.cpu_seconds()
    started = time.perf_counter()
    # subscribed one after another: pulsar-lite 0.2 sometimes never dispatches to one
    # of several subscriptions attached at the same moment
    consumers = [
        ctx.client.subscribe(topic, f"sub-{i}", receiver_queue_size=5000) for i in range(subs)
    ]
    errors: list[BaseException] = []

    def read(consumer: pulsar.Consumer) -> None:
        try:
            _drain(consumer, count)
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(consumer,)) for consumer in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for consumer in consumers:
        consumer.close()
    if errors:
        raise RuntimeError(f"consume: {errors[0]!r}")
    return elapsed, ctx.broker.cpu_seconds() - cpu


def consume_unbatched(ctx: Context) -> Figures:
    n = ctx.n(30_000)
    topic = _backlog(ctx, "consume", n, batching=False, subs=1)
    elapsed, cpu = _consume_window(ctx, topic, 1, n)
    return {"consume msg/s": n / elapsed, "cpu consume unbatched": cpu / n * 1e6}


def consume_batched(ctx: Context) -> Figures:
    n = ctx.n(100_000)
    topic = _backlog(ctx, "consume-batched", n, batching=True, subs=1)
    _elapsed, cpu = _consume_window(ctx, topic, 1, n)
    return {"cpu consume batched": cpu / n * 1e6}


def fan_out(ctx: Context, subs: int = 4) -> Figures:
    """A batched backlog read by ``subs`` subscriptions at once; CPU per message
    delivered (published x subs)."""
    n = ctx.n(50_000)
    topic = _backlog(ctx, "fanout", n, batching=True, subs=subs)
    _elapsed, cpu = _consume_window(ctx, topic, subs, n)
    return {"cpu fan-out": cpu / (n * subs) * 1e6}


def publish_batched(ctx: Context) -> Figures:
    figures = {}
    cases = ((100, 100_000, "cpu batched 100 B"), (1024, 50_000, "cpu batched 1 KB"))
    for size, count, key in cases:
        n = ctx.n(count)
        producer = _producer(ctx, ctx.topic("batched"), batching=True)
        _publish(producer, b"x" * size, 1000)  # warm-up
        cpu = ctx.broker.cpu_seconds()
        _publish(producer, b"x" * size, n)
        figures[key] = (ctx.broker.cpu_seconds() - cpu) / n * 1e6
        producer.close()
    return figures


def _create_producers(ctx: Context, count: int, batching: bool) -> list[pulsar.Producer]:
    return [_producer(ctx, ctx.topic(f"many-{i}"), batching) for i in range(count)]


def create_producers(ctx: Context, count: int = 100) -> Figures:
    """Wall time to create ``count`` producers one after another, each on a topic of
    its own that does not exist yet."""
    started = time.perf_counter()
    producers = _create_producers(ctx, count, batching=False)
    elapsed = time.perf_counter() - started
    for producer in producers:
        producer.close()
    return {"create producers": elapsed}


def hundred_topics(ctx: Context, topics: int = 100) -> Figures:
    """Batched 100-byte messages sent round-robin over ``topics`` producers."""
    per_topic = ctx.n(500)
    producers = _create_producers(ctx, topics, batching=True)
    payload = b"x" * 100
    done = threading.Event()
    total = per_topic * topics
    acked = [0]
    lock = threading.Lock()

    def on_sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        with lock:
            acked[0] += 1
            if acked[0] == total:
                done.set()

    cpu = ctx.broker.cpu_seconds()
    for _ in range(per_topic):
        for producer in producers:
            producer.send_async(payload, on_sent)
    for producer in producers:
        producer.flush()
    if not done.wait(SEND_TIMEOUT_S):
        raise RuntimeError(f"100 topics: {acked[0]}/{total} receipts")
    cpu = ctx.broker.cpu_seconds() - cpu
    for producer in producers:
        producer.close()
    return {"cpu 100 topics": cpu / total * 1e6}


SCENARIOS: list[Callable[[Context], Figures]] = [
    publish_sync,
    e2e_fixed_rate,
    consume_unbatched,
    consume_batched,
    fan_out,
    publish_batched,
    hundred_topics,
    create_producers,
]


def run_round(
    broker: Broker,
    scale: float,
    log: Callable[[str], None],
    only: list[str] | None = None,
) -> Figures:
    """Every scenario (or those named in ``only``, in their usual order) once against
    ``broker`` (one client), then its peak RSS. A scenario run alone finds a fresh
    broker, not one the scenarios before it have warmed (caches, loaded topics)."""
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    ctx = Context(broker, client, scale)
    figures: Figures = {}
    try:
        for scenario in SCENARIOS:
            if only is not None and scenario.__name__ not in only:
                continue
            log(f"{broker.name}: {scenario.__name__}")
            figures.update(scenario(ctx))
    finally:
        client.close()
    figures["peak rss"] = broker.peak_rss_mb()
    return figures
