"""Request-reply on one magnetar broker: PIP-371 vs the classic two-topic pattern.

    .venv/bin/python benchmarks/rpc.py [--requests 2000] [--in-flight 64]
        [--throughput-requests 10000] [--size 100] [--sync-policy always|interval]
        [--idle-poll-us N] [--service-url URL]
        [--only pip371|pip371-serve|two-topic|one-way|nats] [--serve-concurrency 8]
        [--rounds 1]
        [--profile-broker FILE]
        [--profile-client FILE] [--profile-responder FILE]

Both patterns use magnetar's asyncio client (uvloop) on both ends, against the
same broker in the same run:

* **PIP-371**: ``producer.request(payload)``; the responder is the README's worker
  loop (``async for request in consumer.requests(skip_expired=True): await
  request.reply(...)``, replies pipelined) and the broker forwards the reply to the
  requesting producer.
* **PIP-371 serve**: the same requests, answered by ``consumer.serve(handler,
  concurrency=8)`` (``--serve-concurrency``), the README's loop for handlers that
  take time: a task only for a handler that waits, replies pipelined.
* **two-topic**: the requester publishes to a request topic with the properties
  ``correlation-id`` and ``reply-to``; the responder consumes it, publishes the
  reply to the reply topic and acks the request; the requester consumes the
  reply topic and matches correlation ids. (The responder acks the request
  without waiting for its reply's receipt, the fastest variant of the pattern.)

A third row, **one-way**, is the floor under both: the requester sends (64 sends
awaiting their receipts) and the responder consumes and acks, with no reply at all.
Every request-reply pattern does at least that work per request, so one-way's
throughput bounds what any reply path can reach on this broker and machine; the
benchmark prints it against two-topic as a ceiling for the PIP-371 ratio.

A reference row, **NATS core** request-reply (nothing persisted): a fresh
``nats-server`` on loopback, a responder process whose subscription callback answers
with ``msg.respond``, and ``nc.request`` (nats-py) on the requester's side, measured
the same way; it runs when the ``nats-server`` binary and ``nats-py`` are installed
(``apt-get install nats-server``; ``pip install -e '.[bench]'``) and is skipped with a
note otherwise. Its "broker" CPU is nats-server's.

With ``--rounds N`` every pattern is measured N times, the patterns interleaved (in
reverse order every other round) so that a busy machine's load falls on all of them
alike, and each figure is the median of its N.

Figures: sequential latency (one request at a time, after a warm-up) p50/p99,
throughput with ``--in-flight`` requests outstanding at all times, and the CPU time
each process (broker, responder, requester) spent per request in that throughput
window (from /proc on Linux), which shows where the work is.

Without ``--service-url`` one broker is started as a subprocess (fresh temporary
data dir, the durable default sync policy ``always``: fsync with group commit
before every send receipt; the default idle polling, 200 us, unless
``--idle-poll-us`` says otherwise). The responder runs in a process of its own, so the
broker, the requester and the responder do not share an interpreter.
``--profile-broker FILE`` runs that broker under cProfile (``python -m cProfile
-o FILE -m magnetar serve ...``); ``--profile-client`` / ``--profile-responder``
profile the requester / responder. Read them with ``python -m pstats FILE``.

It prints a table; it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import ctypes
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from typing import Any, TypeVar

import rpc_nats
from peer_brokers import cpu_seconds

from magnetar.client import Client, Consumer
from magnetar.client.request_reply import Request
from magnetar.testing import EmbeddedBroker
from magnetar.testing.embedded import free_port, wait_until_listening

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")
Counter = ctypes.c_longlong  # shared memory from ``ctx.Value("q", lock=False)``
CORRELATION_ID = "correlation-id"
REPLY_TO = "reply-to"


def _run(coro: Coroutine[Any, Any, T]) -> T:
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)


# ---------------------------------------------------------------- the broker


@contextlib.contextmanager
def broker_url(args: argparse.Namespace) -> Iterator[tuple[str, int | None]]:
    """The service URL to measure against (given, or a fresh subprocess broker) and
    the broker's pid when it is ours."""
    if args.service_url:
        yield args.service_url, None
        return
    if not args.profile_broker:
        settings: dict[str, Any] = {}
        if args.idle_poll_us is not None:
            settings["idle_poll_us"] = args.idle_poll_us
        with EmbeddedBroker(
            mode="subprocess", sync_policy=args.sync_policy, log_level="WARNING", **settings
        ) as broker:
            assert broker.process is not None
            yield broker.service_url, broker.process.pid
        return
    # The same broker, under cProfile (EmbeddedBroker cannot add the -m cProfile).
    data_dir = tempfile.mkdtemp(prefix="magnetar-rpc-bench-")
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "cProfile",
        "-o",
        args.profile_broker,
        "-m",
        "magnetar",
        "serve",
        "--port",
        str(port),
        "--admin-port",
        "off",
        "--data-dir",
        data_dir,
        "--sync-policy",
        args.sync_policy,
        "--log-level",
        "WARNING",
    ]
    if args.idle_poll_us is not None:
        cmd += ["--idle-poll-us", str(args.idle_poll_us)]
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        wait_until_listening(port, process, 15)
        yield f"pulsar://127.0.0.1:{port}", process.pid
    finally:
        process.send_signal(signal.SIGTERM)  # a clean exit, so cProfile writes its file
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


# ---------------------------------------------------------------- the responder process


async def _until(stop: EventType, ready: EventType, serving: Awaitable[None]) -> None:
    """Run ``serving`` until the parent sets ``stop``."""
    task: asyncio.Future[Any] = asyncio.ensure_future(serving)
    ready.set()
    stopped: asyncio.Future[Any] = asyncio.get_running_loop().run_in_executor(None, stop.wait)
    await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _subscribe(client: Client, topic: str) -> Consumer:
    return await client.subscribe(
        topic, "responder", subscription_type="shared", receiver_queue_size=1000
    )


async def _respond_pip371(
    url: str, topic: str, ready: EventType, stop: EventType, consumed: Counter
) -> None:
    async with Client(url) as client:
        consumer = await _subscribe(client, topic)

        async def serve() -> None:
            # The README's worker loop, as users write it: a reply returns once it is
            # written (pipelined), the broker's verdict comes later; a refused reply is
            # counted by the consumer and fails the run.
            async for request in consumer.requests(skip_expired=True):
                await request.reply(request.value)
                if consumer.refused_replies:
                    raise AssertionError("a reply was refused")

        await _until(stop, ready, serve())


async def _respond_pip371_serve(
    url: str, topic: str, ready: EventType, stop: EventType, consumed: Counter
) -> None:
    async with Client(url) as client:
        consumer = await _subscribe(client, topic)

        async def handle(request: Request) -> bytes:
            return request.value

        concurrency = int(os.environ.get("RPC_BENCH_SERVE_CONCURRENCY", "8"))
        await _until(stop, ready, consumer.serve(handle, concurrency=concurrency))
        if consumer.refused_replies:
            raise AssertionError("a reply was refused")


async def _respond_two_topic(
    url: str, topic: str, ready: EventType, stop: EventType, consumed: Counter
) -> None:
    async with Client(url) as client:
        consumer = await _subscribe(client, topic)
        producers: dict[str, Any] = {}

        async def serve() -> None:
            while True:
                msg = await consumer.receive()
                reply_to = msg.properties[REPLY_TO]
                producer = producers.get(reply_to)
                if producer is None:
                    producer = producers[reply_to] = await client.create_producer(
                        reply_to, max_pending_messages=10_000
                    )
                producer.send_async(
                    msg.value, properties={CORRELATION_ID: msg.properties[CORRELATION_ID]}
                )
                await consumer.acknowledge(msg)

        await _until(stop, ready, serve())


async def _respond_one_way(
    url: str, topic: str, ready: EventType, stop: EventType, consumed: Counter
) -> None:
    async with Client(url) as client:
        consumer = await _subscribe(client, topic)

        async def serve() -> None:
            while True:
                msg = await consumer.receive()
                await consumer.acknowledge(msg)
                consumed.value += 1

        await _until(stop, ready, serve())


RESPONDERS = {
    "pip371": _respond_pip371,
    "pip371-serve": _respond_pip371_serve,
    "two-topic": _respond_two_topic,
    "one-way": _respond_one_way,
    "nats": rpc_nats.respond,
}


def responder_main(
    kind: str,
    url: str,
    topic: str,
    ready: EventType,
    stop: EventType,
    consumed: Counter,
    profile: str | None,
) -> None:
    serve = RESPONDERS[kind]
    if profile:
        with cProfile.Profile() as prof:
            _run(serve(url, topic, ready, stop, consumed))
        prof.dump_stats(profile)
    else:
        _run(serve(url, topic, ready, stop, consumed))


@dataclass
class Responder:
    pid: int | None
    consumed: Counter  # messages the one-way responder has acked


@contextlib.contextmanager
def responder(kind: str, url: str, topic: str, profile: str | None) -> Iterator[Responder]:
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    consumed = ctx.Value("q", 0, lock=False)  # one writer: the responder
    process = ctx.Process(
        target=responder_main,
        args=(kind, url, topic, ready, stop, consumed, profile),
        daemon=True,
    )
    process.start()
    try:
        deadline = time.monotonic() + 30
        while not ready.wait(0.1):
            if not process.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} responder did not start")
        yield Responder(process.pid, consumed)
    finally:
        stop.set()
        process.join(30)
        if process.is_alive():
            process.terminate()
            process.join(5)


# ---------------------------------------------------------------- CPU accounting


def _syscalls(pid: int | None) -> int | None:
    """Read and write system calls the process has made (Linux's /proc/PID/io, all
    threads: socket reads and writes, file writes; not epoll or fdatasync)."""
    try:
        with open(f"/proc/{'self' if pid is None else pid}/io") as io:
            fields = dict(line.split(":", 1) for line in io)
        return int(fields["syscr"]) + int(fields["syscw"])
    except (OSError, KeyError, ValueError):
        return None


class CpuMeter:
    """CPU time and system calls per request of each process, over the throughput
    window.

    Other processes are read from the kernel's process CPU clock (Linux; user +
    system, all threads, in nanoseconds: /proc's 10 ms ticks would round a short
    window away); this one from ``time.process_time``. System calls (socket and file
    reads and writes) from /proc/PID/io: where the CPU goes besides Python.
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {role: pid for role, pid in pids.items() if pid is not None}
        self._start: dict[str, float] = {}
        self._start_calls: dict[str, int] = {}
        self.per_request_us: dict[str, float] = {}
        self.syscalls_per_request: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        times: dict[str, float] = {}
        for role, pid in self.pids.items():
            try:
                times[role] = cpu_seconds(pid)
            except OSError:
                continue
        times["requester"] = time.process_time()
        return times

    def _read_calls(self) -> dict[str, int]:
        pids: dict[str, int | None] = {**self.pids, "requester": None}
        calls = {role: _syscalls(pid) for role, pid in pids.items()}
        return {role: n for role, n in calls.items() if n is not None}

    def start(self) -> None:
        self._start = self._read()
        self._start_calls = self._read_calls()

    def stop(self, requests: int) -> None:
        end = self._read()
        end_calls = self._read_calls()
        self.per_request_us = {
            role: (end[role] - began) / requests * 1e6
            for role, began in self._start.items()
            if role in end
        }
        self.syscalls_per_request = {
            role: (end_calls[role] - began) / requests
            for role, began in self._start_calls.items()
            if role in end_calls
        }


# ---------------------------------------------------------------- the requesters

RequestFn = Callable[[bytes], Awaitable[bytes]]


@dataclass
class Figures:
    p50_ms: float
    p99_ms: float
    mean_ms: float
    rate: float  # requests per second with the window full
    cpu_us: dict[str, float]  # CPU per request in that window, by process (may be empty)
    syscalls: dict[str, float]  # read + write system calls per request, by process


async def _measure(
    request: RequestFn, payload: bytes, args: argparse.Namespace, meter: CpuMeter
) -> Figures:
    async with asyncio.timeout(600):  # a lost reply fails the run instead of hanging it
        return await _measure_unguarded(
            request,
            payload,
            args.warmup,
            args.requests,
            args.in_flight,
            args.throughput_requests,
            meter,
        )


async def _measure_unguarded(
    request: RequestFn,
    payload: bytes,
    warmup: int,
    n: int,
    in_flight: int,
    total: int,
    meter: CpuMeter,
) -> Figures:
    for _ in range(warmup):
        if await request(payload) != payload:
            raise AssertionError("wrong reply")
    latencies = []
    for _ in range(n):
        started = time.perf_counter()
        reply = await request(payload)
        latencies.append(time.perf_counter() - started)
        if reply != payload:
            raise AssertionError("wrong reply")
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    rate = await _window(request, payload, in_flight, total, meter)
    return Figures(
        p50 * 1000,
        p99 * 1000,
        statistics.fmean(latencies) * 1000,
        rate,
        meter.per_request_us,
        meter.syscalls_per_request,
    )


async def _window(
    request: RequestFn,
    payload: bytes,
    in_flight: int,
    total: int,
    meter: CpuMeter,
    drained: Callable[[], Awaitable[None]] | None = None,
) -> float:
    """Requests per second with ``in_flight`` outstanding, until ``total`` are done
    (and, if given, ``drained`` returns); the meter covers the same window."""
    remaining = [total]
    wrong = [0]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            if await request(payload) != payload:
                wrong[0] += 1

    for _ in range(2):  # a short warm-up of the window
        await asyncio.gather(*(request(payload) for _ in range(in_flight)))
    if drained is not None:
        await drained()
    meter.start()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    if drained is not None:
        await drained()
    elapsed = time.perf_counter() - started
    meter.stop(total)
    if wrong[0]:
        raise AssertionError(f"{wrong[0]} wrong replies")
    return total / elapsed


async def bench_pip371(
    url: str, topic: str, args: argparse.Namespace, meter: CpuMeter, _: Responder
) -> Figures:
    async with Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=10_000)

        async def request(payload: bytes) -> bytes:
            return (await producer.request(payload, timeout=30)).value

        return await _measure(request, b"x" * args.size, args, meter)


async def bench_two_topic(
    url: str, topic: str, args: argparse.Namespace, meter: CpuMeter, _: Responder
) -> Figures:
    reply_topic = topic + "-replies"
    async with Client(url) as client:
        replies = await client.subscribe(
            reply_topic, "requester", subscription_type="exclusive", receiver_queue_size=1000
        )
        producer = await client.create_producer(topic, max_pending_messages=10_000)
        waiting: dict[str, asyncio.Future[bytes]] = {}
        loop = asyncio.get_running_loop()
        next_id = [0]

        async def collect() -> None:
            while True:
                msg = await replies.receive()
                future = waiting.pop(msg.properties[CORRELATION_ID], None)
                if future is not None and not future.done():
                    future.set_result(msg.value)
                await replies.acknowledge(msg)

        collector = asyncio.create_task(collect())

        async def request(payload: bytes) -> bytes:
            next_id[0] += 1
            cid = str(next_id[0])
            future: asyncio.Future[bytes] = loop.create_future()
            waiting[cid] = future
            producer.send_async(payload, properties={CORRELATION_ID: cid, REPLY_TO: reply_topic})
            return await future  # (no per-request timer: the cheapest variant; see _measure)

        try:
            return await _measure(request, b"x" * args.size, args, meter)
        finally:
            collector.cancel()


async def bench_one_way(
    url: str, topic: str, args: argparse.Namespace, meter: CpuMeter, responder: Responder
) -> Figures:
    """The floor under any request-reply: each request is published (and its receipt
    awaited), dispatched and acked, and nothing comes back. The window ends when the
    responder has acked every request, so its work is all inside the window."""
    async with Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=10_000)
        sent = [0]

        async def request(payload: bytes) -> bytes:
            sent[0] += 1
            await producer.send(payload)
            return payload

        async def drained() -> None:
            while responder.consumed.value < sent[0]:
                await asyncio.sleep(0.0005)

        async with asyncio.timeout(600):
            rate = await _window(
                request, b"x" * args.size, args.in_flight, args.throughput_requests, meter, drained
            )
        nan = float("nan")
        return Figures(nan, nan, nan, rate, meter.per_request_us, meter.syscalls_per_request)


async def bench_nats(
    url: str, topic: str, args: argparse.Namespace, meter: CpuMeter, _: Responder
) -> Figures:
    async with rpc_nats.requester(url, topic) as request:
        return await _measure(request, b"x" * args.size, args, meter)


def _median(figures: list[Figures]) -> Figures:
    """Each figure's median over the rounds (by process for CPU and system calls)."""

    def med(values: list[float]) -> float:
        return statistics.median(values)

    roles = {role for fig in figures for role in fig.cpu_us}
    calls = {role for fig in figures for role in fig.syscalls}
    return Figures(
        med([f.p50_ms for f in figures]),
        med([f.p99_ms for f in figures]),
        med([f.mean_ms for f in figures]),
        med([f.rate for f in figures]),
        {r: med([f.cpu_us[r] for f in figures if r in f.cpu_us]) for r in roles},
        {r: med([f.syscalls[r] for f in figures if r in f.syscalls]) for r in calls},
    )


BenchFn = Callable[
    [str, str, argparse.Namespace, CpuMeter, Responder], Coroutine[Any, Any, Figures]
]


def run_requester(
    fn: BenchFn,
    url: str,
    topic: str,
    args: argparse.Namespace,
    meter: CpuMeter,
    responder: Responder,
    profile: cProfile.Profile | None,
) -> Figures:
    if profile is None:
        return _run(fn(url, topic, args, meter, responder))
    profile.enable()
    try:
        return _run(fn(url, topic, args, meter, responder))
    finally:
        profile.disable()


# ---------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests timed")
    parser.add_argument("--warmup", type=int, default=300, help="sequential requests not timed")
    parser.add_argument("--in-flight", type=int, default=64, help="window of the throughput run")
    parser.add_argument("--throughput-requests", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=100, help="request and reply bytes")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="measure every pattern this many times, interleaved; print the medians",
    )
    parser.add_argument("--sync-policy", default="always", choices=["always", "interval"])
    parser.add_argument(
        "--idle-poll-us", type=int, help="the started broker's idle polling (default: its own)"
    )
    parser.add_argument("--service-url", help="measure this broker instead of starting one")
    parser.add_argument(
        "--only",
        choices=["pip371", "pip371-serve", "two-topic", "one-way", "nats"],
        help="run one pattern",
    )
    parser.add_argument(
        "--serve-concurrency", type=int, default=8, help="the PIP-371 serve row's concurrency"
    )
    parser.add_argument("--profile-broker", metavar="FILE")
    parser.add_argument("--profile-client", metavar="FILE")
    parser.add_argument("--profile-responder", metavar="FILE", help="FILE.<pattern> per pattern")
    args = parser.parse_args()
    # The responder runs in a spawned process: it reads this from its environment.
    os.environ["RPC_BENCH_SERVE_CONCURRENCY"] = str(args.serve_concurrency)

    client_profile = cProfile.Profile() if args.profile_client else None
    patterns: list[tuple[str, str, BenchFn]] = [
        ("PIP-371", "pip371", bench_pip371),
        ("PIP-371 serve", "pip371-serve", bench_pip371),
        ("two-topic", "two-topic", bench_two_topic),
        ("one-way", "one-way", bench_one_way),
        ("NATS core", "nats", bench_nats),
    ]
    runs: dict[str, list[Figures]] = {}
    nats_missing = rpc_nats.missing()
    chosen = [p for p in patterns if not args.only or args.only == p[1]]
    chosen = [p for p in chosen if p[1] != "nats" or not nats_missing]
    with contextlib.ExitStack() as servers:
        magnetar: tuple[str, int | None] | None = None
        nats: tuple[str, int] | None = None
        for round_ in range(args.rounds):
            # Every pattern once a round, the order reversed every other round, so that
            # the machine's load falls on all of them alike; medians over the rounds.
            for label, kind, fn in chosen if round_ % 2 == 0 else reversed(chosen):
                if kind == "nats":
                    if nats is None:
                        nats = servers.enter_context(rpc_nats.nats_server())
                    url, broker_pid = nats
                else:
                    if magnetar is None:
                        magnetar = servers.enter_context(broker_url(args))
                    url, broker_pid = magnetar
                topic = f"persistent://public/default/rpc-bench-{kind}-{uuid.uuid4().hex[:8]}"
                profile = (
                    f"{args.profile_responder}.{kind}" if args.profile_responder else None
                )
                with responder(kind, url, topic, profile) as serving:
                    meter = CpuMeter({"broker": broker_pid, "responder": serving.pid})
                    figures = run_requester(fn, url, topic, args, meter, serving, client_profile)
                runs.setdefault(label, []).append(figures)
                print(f"  {label}: done (round {round_ + 1})", file=sys.stderr, flush=True)
    results = {label: _median(runs[label]) for label, _, _ in chosen if label in runs}
    if client_profile is not None:
        client_profile.dump_stats(args.profile_client)

    where = args.service_url or (
        f"one subprocess broker, sync policy {args.sync_policy!r}"
        + ("" if args.idle_poll_us is None else f", idle poll {args.idle_poll_us} us")
    )
    print()
    print(f"request-reply on {where}; {args.size}-byte requests and replies;")
    print(
        f"sequential: {args.requests} timed after {args.warmup} warm-up; throughput: "
        f"{args.throughput_requests} requests, {args.in_flight} in flight; "
        f"{args.rounds} interleaved round(s), medians; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    header = f"{'pattern':<14}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}"
    print(header + f"{f'{args.in_flight} in flight req/s':>24}")
    for label, fig in results.items():
        latency = "".join(
            f"{'-':>9}" if math.isnan(ms) else f"{ms:>9.3f}"
            for ms in (fig.p50_ms, fig.p99_ms, fig.mean_ms)
        )
        print(f"{label:<14}{latency}{fig.rate:>24,.0f}")
    if nats_missing and args.only in (None, "nats"):
        print(f"{'NATS core':<14}  skipped: needs {nats_missing}")
    if "PIP-371" in results and "two-topic" in results:
        ours, theirs = results["PIP-371"], results["two-topic"]
        print(
            f"{'ratio':<14}{ours.p50_ms / theirs.p50_ms:>9.2f}{ours.p99_ms / theirs.p99_ms:>9.2f}"
            f"{ours.mean_ms / theirs.mean_ms:>9.2f}{ours.rate / theirs.rate:>24.2f}"
            "   (PIP-371 / two-topic)"
        )
    if any(fig.cpu_us for fig in results.values()):
        roles = ["broker", "responder", "requester"]
        print()
        print(f"CPU per request in the {args.in_flight}-in-flight window, microseconds:")
        print(f"{'pattern':<14}" + "".join(f"{role:>11}" for role in roles) + f"{'total':>11}")
        for label, fig in results.items():
            cells = "".join(
                f"{fig.cpu_us[role]:>11.1f}" if role in fig.cpu_us else f"{'-':>11}"
                for role in roles
            )
            print(f"{label:<14}{cells}{sum(fig.cpu_us.values()):>11.1f}")
    if any(fig.syscalls for fig in results.values()):
        roles = ["broker", "responder", "requester"]
        print()
        print("socket and file reads + writes (system calls) per request, same window:")
        print(f"{'pattern':<14}" + "".join(f"{role:>11}" for role in roles) + f"{'total':>11}")
        for label, fig in results.items():
            cells = "".join(
                f"{fig.syscalls[role]:>11.2f}" if role in fig.syscalls else f"{'-':>11}"
                for role in roles
            )
            print(f"{label:<14}{cells}{sum(fig.syscalls.values()):>11.2f}")
    print()
    print("targets (issue #25: the README's worker loop, in one run):")
    for line in _targets(results, args.in_flight):
        print("  " + line)


def _targets(results: dict[str, Figures], in_flight: int) -> list[str]:
    """The goals for PIP-371 request-reply with the README's worker loop, each with
    its figure from this run, as far as the rows they need were measured."""
    ours = results.get("PIP-371")
    if ours is None:
        return ["(no PIP-371 row)"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = []
    if "two-topic" in results:
        ratio = ours.rate / results["two-topic"].rate
        lines.append(
            f"{in_flight} in flight >= 1.15x two-topic: {ratio:.2f}x {verdict(ratio >= 1.15)}"
        )
    if "NATS core" in results:
        nats = results["NATS core"]
        ratio = ours.rate / nats.rate
        lines.append(
            f"{in_flight} in flight >= 0.8x NATS core: {ratio:.2f}x {verdict(ratio >= 0.8)}"
        )
        lines.append(
            f"sequential p50 <= NATS core's: {ours.p50_ms:.3f} vs {nats.p50_ms:.3f} ms "
            f"({ours.p50_ms / nats.p50_ms:.2f}x) {verdict(ours.p50_ms <= nats.p50_ms)}"
        )
    if "one-way" in results:
        ratio = ours.rate / results["one-way"].rate
        lines.append(f"{in_flight} in flight >= 0.8x one-way: {ratio:.2f}x {verdict(ratio >= 0.8)}")
    return lines


if __name__ == "__main__":
    main()
