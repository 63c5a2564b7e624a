"""``magnetar perf produce|consume|request``, like ``pulsar-perf``: a live line every
``--stats-interval`` seconds (rate, throughput, latency percentiles) and, at the end
(-n messages, --time seconds or Ctrl-C), the run's figures and a latency histogram.

Latency is send to receipt for ``produce``, publish time to receipt for ``consume``
(the producer's clock, millisecond resolution) and request to reply for ``request``,
which answers its own requests with an echo consumer unless ``--no-responder``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from magnetar.commands.client_args import add_client_options, make_client, run_client_command
from magnetar.commands.perf_stats import Recorder, Window
from magnetar.commands.produce_consume import SUBSCRIPTION_TYPES

if TYPE_CHECKING:
    from magnetar.client import Client


def add_perf_parser(commands: Any) -> None:
    perf = commands.add_parser(
        "perf", help="load tests, like pulsar-perf",
        description=(
            "Load tests with magnetar's client: live figures every --stats-interval "
            "seconds, a summary with a latency histogram at the end."
        ),
    )
    modes = perf.add_subparsers(dest="perf_mode", required=True, metavar="MODE")
    for mode, text in (("produce", "publish as fast as receipts allow, or at --rate"),
                       ("consume", "receive and acknowledge"),
                       ("request", "PIP-371 requests, answered by an echo consumer")):
        parser = modes.add_parser(mode, help=text, description=text[0].upper() + text[1:] + ".")
        parser.add_argument("topic", help="topic name")
        parser.add_argument("-n", "--num-messages", type=int, default=0, metavar="N",
                            help="stop after N messages (default: 0, no limit)")
        parser.add_argument("--time", type=float, default=0.0, metavar="S",
                            help="stop after S seconds (default: 0, no limit)")
        parser.add_argument("-i", "--stats-interval", type=float, default=5.0, metavar="S",
                            help="seconds between live lines (default: 5)")
        if mode in ("produce", "request"):
            parser.add_argument("-r", "--rate", type=float, default=0.0,
                                help="messages per second (default: 0, no limit)")
            parser.add_argument("-s", "--size", type=int, default=1024,
                                help="message size in bytes (default: 1024)")
            parser.add_argument("-o", "--max-outstanding", type=int,
                                default=1000 if mode == "produce" else 10,
                                help="messages in flight at most")
        if mode == "produce":
            parser.add_argument("--batching", action="store_true", help="batch messages")
        if mode in ("consume", "request"):
            parser.add_argument("-ss", "--subscription", default="perf",
                                help="subscription name (default: perf)")
        if mode == "consume":
            parser.add_argument("-st", "--subscription-type", choices=SUBSCRIPTION_TYPES,
                                default="exclusive")
            parser.add_argument("--earliest", action="store_true",
                                help="a new subscription starts at the earliest message")
        if mode == "request":
            parser.add_argument("--no-responder", action="store_true",
                                help="do not answer the requests here (another process does)")
            parser.add_argument("--timeout", type=float, default=30.0,
                                help="a request's timeout in seconds (default: 30)")
        add_client_options(parser)


class _Run:
    """When to stop, and the live line printer."""

    def __init__(self, args: argparse.Namespace, label: str) -> None:
        self.args = args
        self.label = label
        self.recorder = Recorder(time.monotonic())
        self.stop = asyncio.Event()
        self.started = time.monotonic()

    def done(self, count: int) -> bool:
        limit = self.args.num_messages
        return self.stop.is_set() or (limit > 0 and count >= limit)

    async def report(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.args.stats_interval)
            if not self.stop.is_set():
                print(self.recorder.roll(self.label, time.monotonic()), flush=True)

    async def timer(self) -> None:
        if self.args.time > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.args.time)
            self.stop.set()

    def summary(self) -> None:
        from rich.console import Console
        from rich.table import Table

        total: Window = self.recorder.total
        print(total.line(f"Aggregated {self.label}", time.monotonic()))
        print(f"{total.messages} messages in {time.monotonic() - self.started:.2f} s")
        table = Table(title=f"{self.label} latency histogram")
        table.add_column("latency")
        table.add_column("messages", justify="right")
        for label, count in total.histogram():
            table.add_row(label, str(count))
        Console(soft_wrap=True).print(table)


async def _paced(run: _Run, index: int) -> None:
    rate = run.args.rate
    if rate > 0:
        delay = run.started + index / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


async def _produce(client: Client, run: _Run) -> None:
    args = run.args
    producer = await client.create_producer(args.topic, batching=args.batching)
    payload = os.urandom(args.size)
    slots = asyncio.Semaphore(args.max_outstanding)
    sent = 0
    loop = asyncio.get_running_loop()
    inflight: set[asyncio.Future[Any]] = set()
    while not run.done(sent):
        await _paced(run, sent)
        await slots.acquire()
        begun = loop.time()

        def receipted(future: asyncio.Future[Any], begun: float = begun) -> None:
            slots.release()
            inflight.discard(future)
            if not future.cancelled() and future.exception() is None:
                run.recorder.record(args.size, (loop.time() - begun) * 1000)

        future = producer.send_async(payload)
        inflight.add(future)
        future.add_done_callback(receipted)
        sent += 1
    if inflight:
        await asyncio.gather(*inflight, return_exceptions=True)
    await producer.close()


async def _consume(client: Client, run: _Run) -> None:
    args = run.args
    consumer = await client.subscribe(
        args.topic, args.subscription, subscription_type=args.subscription_type,
        initial_position="earliest" if args.earliest else "latest",
    )
    received = 0
    while not run.done(received):
        try:
            message = await consumer.receive(timeout=0.2)  # to notice the stop
        except TimeoutError:
            continue
        run.recorder.record(len(message.value), max(time.time() * 1000 - message.publish_time, 0))
        await consumer.acknowledge(message)
        received += 1
    await consumer.close()


async def _respond(client: Client, topic: str, subscription: str,
                   ready: asyncio.Event, stop: asyncio.Event) -> None:
    consumer = await client.subscribe(topic, subscription, subscription_type="shared")
    ready.set()
    while not stop.is_set():
        try:
            message = await consumer.receive(timeout=0.2)
        except TimeoutError:
            continue
        await consumer.acknowledge(message, reply=message.value)
    await consumer.close()


async def _request(client: Client, run: _Run) -> None:
    args = run.args
    stop_responder = asyncio.Event()
    responder: asyncio.Task[None] | None = None
    if not args.no_responder:
        ready = asyncio.Event()
        responder = asyncio.create_task(
            _respond(client, args.topic, args.subscription, ready, stop_responder))
        await ready.wait()
    producer = await client.create_producer(args.topic)
    payload = os.urandom(args.size)
    loop = asyncio.get_running_loop()
    sent = 0
    failures = 0

    async def one(index: int) -> None:
        nonlocal failures
        await _paced(run, index)
        begun = loop.time()
        try:
            await producer.request(payload, timeout=args.timeout)
        except TimeoutError:
            failures += 1
            return
        run.recorder.record(args.size, (loop.time() - begun) * 1000)

    slots = asyncio.Semaphore(args.max_outstanding)
    tasks: set[asyncio.Task[None]] = set()
    while not run.done(sent):
        await slots.acquire()
        task = asyncio.create_task(one(sent))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(lambda _: slots.release())
        sent += 1
    if tasks:
        await asyncio.gather(*tasks)
    await producer.close()
    stop_responder.set()
    if responder is not None:
        await responder
    if failures:
        print(f"{failures} requests got no reply within {args.timeout} s", file=sys.stderr)


async def perf(args: argparse.Namespace) -> int:
    run = _Run(args, args.perf_mode)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):  # Ctrl-C ends the run with its summary
        loop.add_signal_handler(signal.SIGINT, run.stop.set)
    work = {"produce": _produce, "consume": _consume, "request": _request}[args.perf_mode]
    async with make_client(args) as client:
        helpers = [asyncio.create_task(run.report()), asyncio.create_task(run.timer())]
        try:
            await work(client, run)
        finally:
            run.stop.set()
            await asyncio.gather(*helpers)
    run.summary()
    return 0


def run_perf(args: argparse.Namespace) -> int:
    if args.num_messages < 0 or args.time < 0 or args.stats_interval <= 0:
        print("magnetar perf: -n and --time must be >= 0, --stats-interval > 0",
              file=sys.stderr)
        return 2
    return run_client_command("perf", perf(args))
