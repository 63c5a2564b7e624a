"""``magnetar produce`` and ``magnetar consume``, like ``pulsar-client produce/consume``.

Runs of a thousand messages or more show a progress bar on a terminal (rich, on
stderr); every run ends with a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.commands.client_args import (
    add_client_options,
    interrupts,
    make_client,
    parse_property,
    properties,
    run_client_command,
)

if TYPE_CHECKING:
    from rich.progress import Progress

    from magnetar.client import Consumer, Message

LONG_RUN = 1000  # messages from which a run shows a progress bar
SUBSCRIPTION_TYPES = ("exclusive", "shared", "failover", "key_shared")


def _progress(total: int | None, verb: str) -> Progress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    show = console.is_terminal and (total is None or total >= LONG_RUN)
    return Progress(
        TextColumn(f"[bold]{verb}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[rate]}"),
        console=console, disable=not show, transient=True,
    )


def _lower(text: str) -> str:
    return text.lower()


def add_produce_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "produce", help="publish messages, like pulsar-client produce",
        description=(
            "Publish messages with magnetar's client. Each -m text (split on the "
            "separator, a comma by default, as pulsar-client splits it) and each -f file "
            "is one message, the whole list sent -n times. Ctrl-C ends the run with its "
            "summary. Exit code 0: every message receipted; 1: an error (on stderr); "
            "2: bad usage; 130: interrupted."
        ),
    )
    parser.add_argument("topic", help="topic name")
    parser.add_argument("-m", "--messages", action="append", default=[], metavar="MSG",
                        help="messages' text (repeatable; split on --separator)")
    parser.add_argument("-s", "--separator", default=",",
                        help="what splits an -m text into messages (default: a comma; "
                        "'' never splits)")
    parser.add_argument("-f", "--files", action="append", default=[], metavar="FILE",
                        help="files whose bytes are one message each (repeatable, "
                        "comma-separated)")
    parser.add_argument("-n", "--num-produce", type=int, default=1, metavar="N",
                        help="send the messages N times (default: 1)")
    parser.add_argument("-k", "--key", help="partition key of every message")
    parser.add_argument("-p", "--properties", "--property", dest="property", action="append",
                        type=parse_property, metavar="K=V",
                        help="message properties, k1=v1,k2=v2 (repeatable)")
    parser.add_argument("-r", "--rate", type=float, default=0.0, metavar="R",
                        help="messages per second (default: 0, as fast as receipts allow)")
    parser.add_argument("--batching", action="store_true", help="batch messages")
    parser.add_argument("-db", "--disable-batching", action="store_true",
                        help="do not batch (the default here, unlike pulsar-client)")
    add_client_options(parser)


def add_consume_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "consume", help="receive messages, like pulsar-client consume",
        description=(
            "Subscribe with magnetar's client, print each message received as a JSON "
            "line (id, key, properties, payload) and acknowledge it. Stops after -n "
            "messages (0: until Ctrl-C, which prints the summary) or --timeout seconds "
            "without one; exit code 0 when -n were received (or -n 0 was interrupted), "
            "1 on an error or a timeout, 2 on bad usage, 130 when interrupted before -n."
        ),
    )
    parser.add_argument("topic", help="topic name")
    parser.add_argument("-s", "--subscription-name", required=True, help="subscription name")
    parser.add_argument("-t", "--subscription-type", choices=SUBSCRIPTION_TYPES, type=_lower,
                        default="exclusive",
                        help="Exclusive, Shared, Failover or Key_Shared (default: Exclusive)")
    parser.add_argument("-p", "--subscription-position", choices=("latest", "earliest"),
                        type=_lower, default=None,
                        help="where a new subscription starts: Latest (default) or Earliest")
    parser.add_argument("--earliest", action="store_true", help="as -p Earliest")
    parser.add_argument("-m", "--subscription-mode", choices=("durable", "nondurable"),
                        type=_lower, default="durable",
                        help="Durable (default) or NonDurable")
    parser.add_argument("-n", "--num-messages", type=int, default=1, metavar="N",
                        help="messages to receive (default: 1; 0: until Ctrl-C)")
    parser.add_argument("-q", "--queue-size", type=int, default=1000, metavar="N",
                        help="the consumer's receiver queue size (default: 1000)")
    parser.add_argument("-r", "--rate", type=float, default=0.0, metavar="R",
                        help="messages per second at most (default: 0, no limit)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="give up after S seconds without a message (default: wait)")
    parser.add_argument("--hex", action="store_true", help="print payloads in hex")
    parser.add_argument("--hide-content", action="store_true",
                        help="print no message, only the summary")
    add_client_options(parser)


def _payloads(args: argparse.Namespace) -> list[bytes]:
    payloads: list[bytes] = []
    for text in args.messages:
        parts = text.split(args.separator) if args.separator else [text]
        payloads += [part.encode() for part in parts]
    for files in args.files:
        payloads += [Path(name).read_bytes() for name in files.split(",") if name]
    return payloads


async def produce(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    props = properties(args.property)
    total = len(payloads) * args.num_produce
    stop = asyncio.Event()
    sent = 0
    started = time.monotonic()
    async with make_client(args) as client:
        producer = await client.create_producer(
            args.topic, batching=args.batching and not args.disable_batching)
        pending: list[asyncio.Future[Any]] = []
        with interrupts(stop), _progress(total, "produce") as progress:
            task = progress.add_task("produce", total=total, rate="")
            for index in range(total):
                if args.rate > 0:  # pace by the schedule, not by sleeping a fixed gap
                    delay = started + index / args.rate - time.monotonic()
                    if delay > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
                future = producer.send_async(payloads[index % len(payloads)], key=args.key,
                                             properties=props)
                future.add_done_callback(lambda _: progress.advance(task))
                pending.append(future)
                if len(pending) >= 1000:
                    await asyncio.gather(*pending)
                    sent += len(pending)
                    pending.clear()
            await asyncio.gather(*pending)
            sent += len(pending)
        await producer.close()
    elapsed = time.monotonic() - started
    print(f"{sent} messages successfully produced in {elapsed:.2f} s "
          f"({sent / elapsed if elapsed else 0:.0f} msg/s)")
    return 130 if stop.is_set() else 0


def _shown(message: Message, hex_payload: bool) -> dict[str, Any]:
    payload: str
    if hex_payload:
        payload = message.value.hex()
    else:
        try:
            payload = message.value.decode()
        except UnicodeDecodeError:
            payload = message.value.hex()
    return {
        "messageId": str(message.message_id),
        "key": message.key,
        "properties": message.properties,
        "publishTime": message.publish_time,
        "payload": payload,
    }


async def _next(consumer: Consumer, timeout: float | None, stop: asyncio.Event) -> Message | None:
    """The next message, or None when ``stop`` was set first (Ctrl-C)."""
    receiving = asyncio.ensure_future(consumer.receive(timeout=timeout))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if receiving.done():
        return receiving.result()
    receiving.cancel()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await receiving
    return None


async def consume(args: argparse.Namespace) -> int:
    wanted = args.num_messages
    received = 0
    timed_out = False
    stop = asyncio.Event()
    started = time.monotonic()
    earliest = args.earliest or args.subscription_position == "earliest"
    async with make_client(args) as client:
        consumer = await client.subscribe(
            args.topic, args.subscription_name, subscription_type=args.subscription_type,
            initial_position="earliest" if earliest else "latest",
            durable=args.subscription_mode == "durable", receiver_queue_size=args.queue_size,
        )
        try:
            with interrupts(stop), _progress(wanted or None, "consume") as progress:
                task = progress.add_task("consume", total=wanted or None, rate="")
                while wanted == 0 or received < wanted:
                    try:
                        message = await _next(consumer, args.timeout, stop)
                    except TimeoutError:
                        timed_out = True
                        break
                    if message is None:
                        break
                    if not args.hide_content:
                        print(json.dumps(_shown(message, args.hex)), flush=True)
                    await consumer.acknowledge(message)
                    received += 1
                    progress.advance(task)
                    if args.rate > 0:
                        delay = started + received / args.rate - time.monotonic()
                        if delay > 0:
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(stop.wait(), delay)
        finally:
            await consumer.close()
    elapsed = time.monotonic() - started
    print(f"{received} messages successfully consumed in {elapsed:.2f} s", file=sys.stderr)
    if timed_out:
        print(f"magnetar consume: no message within {args.timeout} s "
              f"({received} of {wanted} received)", file=sys.stderr)
        return 1
    if wanted and received < wanted:
        return 130  # interrupted before -n
    return 0


def run_produce(args: argparse.Namespace) -> int:
    if not args.messages and not args.files:
        print("magnetar produce: give at least one -m MSG or -f FILE", file=sys.stderr)
        return 2
    if args.num_produce < 1:
        print("magnetar produce: -n must be at least 1", file=sys.stderr)
        return 2
    try:
        _payloads(args)
    except OSError as exc:
        print(f"magnetar produce: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    return run_client_command("produce", produce(args), args)


def run_consume(args: argparse.Namespace) -> int:
    if args.num_messages < 0:
        print("magnetar consume: -n must be 0 or more", file=sys.stderr)
        return 2
    return run_client_command("consume", consume(args), args)
