"""Options shared by the commands that use magnetar's client, and running them.

The client is imported when a command runs, not when ``magnetar``'s parser is built:
``magnetar serve`` should not pay for it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from magnetar.commands.connection import (
    DEFAULT_SERVICE_URL,
    Settings,
    add_connection_options,
    topic_path,
)

if TYPE_CHECKING:
    from magnetar.client import Client

__all__ = ["DEFAULT_SERVICE_URL", "add_client_options", "make_client", "run_client_command"]


def add_client_options(parser: argparse.ArgumentParser, *, short: bool = False) -> None:
    """--service-url/--url, --token, --auth-plugin, --auth-params, --conf (see
    connection.py); ``short`` adds pulsar-perf's -u and -cf."""
    add_connection_options(parser, service=True, short=short)


def make_client(args: argparse.Namespace) -> Client:
    from magnetar.client import Client

    settings = Settings.of(args)
    url = getattr(args, "resolved_service_url", None) or settings.service_url()
    return Client(url, auth=settings.credentials().client_auth(), operation_timeout=30.0)


def resolve(args: argparse.Namespace) -> None:
    """Check the topic name and the connection settings before connecting; an
    ``http://`` service URL becomes the broker's ``pulsar://`` one (HTTP lookup)."""
    topic = getattr(args, "topic", None)
    if isinstance(topic, str):
        topic_path(topic)
    settings = Settings.of(args)
    settings.credentials()
    args.resolved_service_url = settings.binary_url(topic) if isinstance(topic, str) else None


def properties(pairs: list[str] | None) -> dict[str, str]:
    """``-p k=v`` options as a dict (argparse calls ``parse_property`` on each); a value
    ``k1=v1,k2=v2`` is two properties, as pulsar-client reads it, when every part is
    ``key=value`` (``-p a=x,y`` stays one)."""
    found: dict[str, str] = {}
    for pair in pairs or []:
        parts = pair.split(",")
        for part in parts if all("=" in p for p in parts) else [pair]:
            key, value = part.split("=", 1)
            found[key] = value
    return found


def parse_property(text: str) -> str:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"property {text!r} is not key=value")
    return text


@contextlib.contextmanager
def interrupts(stop: asyncio.Event) -> Iterator[None]:
    """Ctrl-C (and SIGTERM) set ``stop`` while inside, so a run can end with its summary."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_client_command(name: str, coro: Coroutine[Any, Any, int],
                       args: argparse.Namespace | None = None) -> int:
    """Run ``coro``: a client error is exit code 1 with its message on stderr, bad
    settings 2, Ctrl-C 130 (where the command does not end with a summary itself)."""
    from magnetar.client.errors import PulsarError

    try:
        if args is not None:
            resolve(args)
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130
    except (PulsarError, OSError, TimeoutError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise  # stdout closed: commands/__init__.py ends quietly
        print(f"magnetar {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a setting the client refuses
        print(f"magnetar {name}: {exc}", file=sys.stderr)
        return 2
    finally:
        coro.close()  # never awaited when resolve() refused
