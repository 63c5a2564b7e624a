"""``magnetar request TOPIC MSG``: one PIP-371 request with magnetar's client; the
consumer's reply is printed on stdout. Exit code 0: a reply; 1: an error reply (on
stderr), no reply within the timeout, or a client error; 2: bad usage."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from magnetar.commands.client_args import (
    add_client_options,
    make_client,
    parse_property,
    properties,
    run_client_command,
)


def add_request_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "request", help="send one PIP-371 request and print the reply",
        description=(
            "Send one PIP-371 request with magnetar's client and print the reply a "
            "consumer attached to its acknowledgement. Exit code 0: a reply; 1: an error "
            "reply, no reply within --timeout, or a client error; 2: bad usage."
        ),
    )
    parser.add_argument("topic", help="topic name")
    parser.add_argument("message", help="the request's text")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="seconds to wait for the reply (default: 30)")
    parser.add_argument("-k", "--key", help="partition key")
    parser.add_argument("-p", "--property", action="append", type=parse_property,
                        metavar="K=V", help="a message property (repeatable)")
    add_client_options(parser)


async def request(args: argparse.Namespace) -> int:
    from magnetar.client.errors import RequestTimeout

    async with make_client(args) as client:
        producer = await client.create_producer(args.topic)
        try:
            reply = await producer.request(args.message.encode(), timeout=args.timeout,
                                           key=args.key, properties=properties(args.property))
        except RequestTimeout:
            print(f"magnetar request: no reply within {args.timeout} s", file=sys.stderr)
            return 1
        finally:
            await producer.close()
    text = reply.value.decode("utf-8", "replace")
    if reply.is_error:
        print(f"magnetar request: error reply: {text}", file=sys.stderr)
        return 1
    print(text)
    return 0


def run_request(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        print("magnetar request: --timeout must be positive", file=sys.stderr)
        return 2
    return run_client_command("request", request(args), args)
