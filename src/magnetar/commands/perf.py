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
        _add_mode_options(parser, mode)


def _lower(text: str) -> str:
    return text.lower()


def _add_mode_options(parser: argparse.ArgumentParser, mode: str) -> None:
    """pulsar-perf's spellings first; magnetar's older ones stay as aliases (-n is the
    message count here, not pulsar-perf's number of producers or consumers)."""
    parser.add_argument("topic", help="topic name")
    parser.add_argument("-m", "--num-messages", "-n", dest="num_messages", type=int,
                        default=0, metavar="N",
                        help="stop after N messages (default: 0, no limit)")
    parser.add_argument("-time", "--test-duration", "--time", dest="time", type=float,
                        default=0.0, metavar="S",
                        help="stop after S seconds (default: 0, no limit)")
    parser.add_argument("-i", "--stats-interval-seconds", "--stats-interval",
                        dest="stats_interval", type=float, default=5.0, metavar="S",
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
        parser.add_argument("-b", "--batch-time-window", type=float, default=None,
                            metavar="MS", help="batch messages for up to MS milliseconds "
                            "(0: no batching; without it or --batching, none)")
        parser.add_argument("-bm", "--batch-max-messages", type=int, default=1000,
                            metavar="N", help="messages in a batch at most (default: 1000)")
        parser.add_argument("-db", "--disable-batching", action="store_true",
                            help="do not batch")
    if mode in ("consume", "request"):
        parser.add_argument("-ss", "--subscriptions", "--subscription", dest="subscription",
                            default="perf", help="subscription name (default: perf)")
    if mode == "consume":
        parser.add_argument("-st", "--subscription-type", choices=SUBSCRIPTION_TYPES,
                            type=_lower, default="exclusive",
                            help="Exclusive, Shared, Failover or Key_Shared")
        parser.add_argument("-sp", "--subscription-position", choices=("latest", "earliest"),
                            type=_lower, default=None,
                            help="where a new subscription starts: Latest (default) or Earliest")
        parser.add_argument("--earliest", action="store_true", help="as -sp Earliest")
        parser.add_argument("-q", "--receiver-queue-size", type=int, default=1000,
                            help="the consumer's receiver queue size (default: 1000)")
    if mode == "request":
        parser.add_argument("--no-responder", action="store_true",
                            help="do not answer the requests here (another process does)")
        parser.add_argument("--timeout", type=float, default=30.0,
                            help="a request's timeout in seconds (default: 30)")
    add_client_options(parser, short=True)


class _Run:
    """When to stop, and the live line printer."""

    def __init__(self, args: argparse.Namespace, label: str) -> None:
        self.args = args
        self.label = label
        self.recorder = Recorder(time.monotonic())
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.failures = 0
        self.first_error: BaseException | None = None
        self.quiet_failures = False

    def failed(self, error: BaseException, quiet: bool = False) -> None:
        """A send that failed: counted, the first error kept for the last line. A failed
        publish ends the run (figures of a failing run measure nothing); a request
        without a reply (``quiet``: its own line says so) does not."""
        self.failures += 1
        if not quiet:
            self.stop.set()
        self.quiet_failures = quiet
        if self.first_error is None:
            self.first_error = error

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
    window = args.batch_time_window
    batching = (args.batching or bool(window)) and not args.disable_batching
    producer = await client.create_producer(
        args.topic, batching=batching, batching_max_messages=args.batch_max_messages,
        batching_max_delay=window / 1000 if window else 0.01)
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
            if future.cancelled():
                return
            error = future.exception()
            if error is None:
                run.recorder.record(args.size, (loop.time() - begun) * 1000)
            else:
                run.failed(error)

        future = producer.send_async(payload)
        inflight.add(future)
        future.add_done_callback(receipted)
        sent += 1
    if inflight:
        await asyncio.gather(*inflight, return_exceptions=True)
    await producer.close()


async def _consume(client: Client, run: _Run) -> None:
    args = run.args
    earliest = args.earliest or args.subscription_position == "earliest"
    consumer = await client.subscribe(
        args.topic, args.subscription, subscription_type=args.subscription_type,
        initial_position="earliest" if earliest else "latest",
        receiver_queue_size=args.receiver_queue_size,
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
        except TimeoutError as exc:
            failures += 1
            run.failed(exc, quiet=True)
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
    if run.failures:
        if not run.quiet_failures:
            error = run.first_error
            print(f"magnetar perf: {run.failures} sends failed, the first with "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def run_perf(args: argparse.Namespace) -> int:
    if args.num_messages < 0 or args.time < 0 or args.stats_interval <= 0:
        print("magnetar perf: -n and --time must be >= 0, --stats-interval > 0",
              file=sys.stderr)
        return 2
    return run_client_command("perf", perf(args), args)
