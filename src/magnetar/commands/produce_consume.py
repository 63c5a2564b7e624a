"""``magnetar produce`` and ``magnetar consume``, like ``pulsar-client produce/consume``.

Runs of a thousand messages or more show a progress bar on a terminal (rich, on
stderr); every run ends with a summary line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.commands.client_args import (
    add_client_options,
    make_client,
    parse_property,
    properties,
    run_client_command,
)

if TYPE_CHECKING:
    from rich.progress import Progress

    from magnetar.client import Message

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


def add_produce_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "produce", help="publish messages, like pulsar-client produce",
        description=(
            "Publish messages with magnetar's client. Each -m text and -f file is one "
            "message, the whole list sent -n times. Exit code 0: every message "
            "receipted; 1: an error (on stderr); 2: bad usage."
        ),
    )
    parser.add_argument("topic", help="topic name")
    parser.add_argument("-m", "--messages", action="append", default=[], metavar="MSG",
                        help="a message's text (repeatable)")
    parser.add_argument("-f", "--files", action="append", default=[], type=Path, metavar="FILE",
                        help="a file whose bytes are one message (repeatable)")
    parser.add_argument("-n", "--num-produce", type=int, default=1, metavar="N",
                        help="send the messages N times (default: 1)")
    parser.add_argument("-k", "--key", help="partition key of every message")
    parser.add_argument("-p", "--property", action="append", type=parse_property,
                        metavar="K=V", help="a message property (repeatable)")
    parser.add_argument("-r", "--rate", type=float, default=0.0, metavar="R",
                        help="messages per second (default: 0, as fast as receipts allow)")
    parser.add_argument("--batching", action="store_true", help="batch messages")
    add_client_options(parser)


def add_consume_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "consume", help="receive messages, like pulsar-client consume",
        description=(
            "Subscribe with magnetar's client, print each message received as a JSON "
            "line (id, key, properties, payload) and acknowledge it. Stops after -n "
            "messages (0: until Ctrl-C) or --timeout seconds without one; exit code 0 "
            "when -n were received, 1 on an error or a timeout, 2 on bad usage."
        ),
    )
    parser.add_argument("topic", help="topic name")
    parser.add_argument("-s", "--subscription-name", required=True, help="subscription name")
    parser.add_argument("-t", "--subscription-type", choices=SUBSCRIPTION_TYPES,
                        default="exclusive", help="subscription type (default: exclusive)")
    parser.add_argument("-n", "--num-messages", type=int, default=1, metavar="N",
                        help="messages to receive (default: 1; 0: until Ctrl-C)")
    parser.add_argument("--earliest", action="store_true",
                        help="a new subscription starts at the earliest message, not the latest")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="give up after S seconds without a message (default: wait)")
    parser.add_argument("--hide-content", action="store_true",
                        help="print no message, only the summary")
    add_client_options(parser)


def _payloads(args: argparse.Namespace) -> list[bytes]:
    payloads = [m.encode() for m in args.messages]
    payloads += [path.read_bytes() for path in args.files]
    return payloads


async def produce(args: argparse.Namespace) -> int:
    payloads = _payloads(args)
    props = properties(args.property)
    total = len(payloads) * args.num_produce
    started = time.monotonic()
    async with make_client(args) as client:
        producer = await client.create_producer(args.topic, batching=args.batching)
        pending: list[asyncio.Future[Any]] = []
        with _progress(total, "produce") as progress:
            task = progress.add_task("produce", total=total, rate="")
            for index in range(total):
                if args.rate > 0:  # pace by the schedule, not by sleeping a fixed gap
                    delay = started + index / args.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                future = producer.send_async(payloads[index % len(payloads)], key=args.key,
                                             properties=props)
                future.add_done_callback(lambda _: progress.advance(task))
                pending.append(future)
                if len(pending) >= 1000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
        await producer.close()
    elapsed = time.monotonic() - started
    print(f"{total} messages successfully produced in {elapsed:.2f} s "
          f"({total / elapsed if elapsed else 0:.0f} msg/s)")
    return 0


def _shown(message: Message) -> dict[str, Any]:
    try:
        payload: str = message.value.decode()
    except UnicodeDecodeError:
        payload = message.value.hex()
    return {
        "messageId": str(message.message_id),
        "key": message.key,
        "properties": message.properties,
        "publishTime": message.publish_time,
        "payload": payload,
    }


async def consume(args: argparse.Namespace) -> int:
    wanted = args.num_messages
    received = 0
    started = time.monotonic()
    async with make_client(args) as client:
        consumer = await client.subscribe(
            args.topic, args.subscription_name, subscription_type=args.subscription_type,
            initial_position="earliest" if args.earliest else "latest",
        )
        try:
            with _progress(wanted or None, "consume") as progress:
                task = progress.add_task("consume", total=wanted or None, rate="")
                while wanted == 0 or received < wanted:
                    try:
                        message = await consumer.receive(timeout=args.timeout)
                    except TimeoutError:
                        break
                    if not args.hide_content:
                        print(json.dumps(_shown(message)), flush=True)
                    await consumer.acknowledge(message)
                    received += 1
                    progress.advance(task)
        finally:
            await consumer.close()
    elapsed = time.monotonic() - started
    print(f"{received} messages successfully consumed in {elapsed:.2f} s", file=sys.stderr)
    if wanted and received < wanted:
        print(f"magnetar consume: no message within {args.timeout} s "
              f"({received} of {wanted} received)", file=sys.stderr)
        return 1
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
    return run_client_command("produce", produce(args))


def run_consume(args: argparse.Namespace) -> int:
    if args.num_messages < 0:
        print("magnetar consume: -n must be 0 or more", file=sys.stderr)
        return 2
    return run_client_command("consume", consume(args))
