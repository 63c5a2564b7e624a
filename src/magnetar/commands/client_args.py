"""Options shared by the commands that use magnetar's client, and running them.

The client is imported when a command runs, not when ``magnetar``'s parser is built:
``magnetar serve`` should not pay for it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.client import Client

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service-url", default=DEFAULT_SERVICE_URL,
                        help=f"the broker's service URL (default: {DEFAULT_SERVICE_URL})")
    parser.add_argument("--token", help="a token for token authentication")


def make_client(args: argparse.Namespace) -> Client:
    from magnetar.client import Client
    from magnetar.client.transport.auth import AuthenticationToken

    auth = AuthenticationToken(args.token) if args.token else None
    return Client(args.service_url, auth=auth, operation_timeout=30.0)


def properties(pairs: list[str] | None) -> dict[str, str]:
    """``-p k=v`` options as a dict (argparse calls ``parse_property`` on each)."""
    return dict(pair.split("=", 1) for pair in pairs or [])


def parse_property(text: str) -> str:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"property {text!r} is not key=value")
    return text


def run_client_command(name: str, coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro``; a client error is exit code 1 with its message on stderr, Ctrl-C 130."""
    from magnetar.client.errors import PulsarError

    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130
    except (PulsarError, OSError, TimeoutError) as exc:
        print(f"magnetar {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
