"""The client-side subcommands of ``magnetar``: ``admin`` (like pulsar-admin),
``produce`` and ``consume`` (like pulsar-client), ``perf`` (like pulsar-perf),
``request`` (one PIP-371 request) and ``mirror`` (copy topics to another cluster).
Each module adds its parser and runs its command; ``magnetar.cli`` registers them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(commands: Any) -> None:
    """Add the client commands to ``magnetar``'s subparsers."""
    from magnetar.commands.admin import add_admin_parser
    from magnetar.commands.mirror import add_mirror_parser
    from magnetar.commands.perf import add_perf_parser
    from magnetar.commands.produce_consume import add_consume_parser, add_produce_parser
    from magnetar.commands.request import add_request_parser

    add_admin_parser(commands)
    add_produce_parser(commands)
    add_consume_parser(commands)
    add_perf_parser(commands)
    add_request_parser(commands)
    add_mirror_parser(commands)


def run(args: argparse.Namespace) -> int:
    """Run the client command ``args.command``; its exit code. Every failure is one
    line on stderr: 1 for the broker's (or the network's), 2 for bad usage or settings,
    130 for Ctrl-C; a closed stdout (``| head -1``) ends the command quietly with 141,
    as a tool killed by SIGPIPE."""
    from magnetar.commands.connection import CliError

    try:
        code = _dispatch(args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return code
    except CliError as exc:
        print(f"magnetar {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # Python would complain on exit when it flushes stdout again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "admin":
        from magnetar.commands.admin import run_admin

        return run_admin(args)
    if args.command == "perf":
        from magnetar.commands.perf import run_perf

        return run_perf(args)
    if args.command == "mirror":
        from magnetar.commands.mirror import run_mirror

        return run_mirror(args)
    if args.command == "request":
        from magnetar.commands.request import run_request

        return run_request(args)
    from magnetar.commands.produce_consume import run_consume, run_produce

    return run_produce(args) if args.command == "produce" else run_consume(args)
