"""A PIP-371 request-reply client: asks ``rpc_server.py`` to evaluate expressions.

Each expression (from the command line, or one per line from stdin) is sent as a
request with ``producer.request(...)``, which waits for the server's reply, or
fails with ``RequestTimeout`` after ``--timeout`` seconds.

    make run                                   # terminal 1: broker on 127.0.0.1:6650
    .venv/bin/python examples/rpc_server.py    # terminal 2
    .venv/bin/python examples/rpc_client.py "6 * 7" "2 ** 100" "1 / 0"
    printf '1 + 1\\n10 / 4\\n' | .venv/bin/python examples/rpc_client.py

prints ``6 * 7 = 42``, ``1 / 0 -> error: division by zero`` and so on.
Exit status: 0 when every request was answered, 1 when some answer was an error
reply, 2 when some request timed out (no server running, or too slow), 3 when
the broker cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Iterable

from magnetar.client import Client, ConnectError, RequestTimeout

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
DEFAULT_TOPIC = "rpc-calculator"


async def _lines(given: Iterable[str]) -> AsyncIterator[str]:
    """The expressions given, or stdin's lines read without blocking the event loop."""
    if given:
        for expression in given:
            yield expression
        return
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        yield line


async def ask(service_url: str, topic: str, expressions: list[str], timeout: float) -> int:
    status = 0
    async with Client(service_url) as client:
        producer = await client.create_producer(topic)
        async for expression in _lines(expressions):
            expression = expression.strip()
            if not expression:
                continue
            try:
                reply = await producer.request(expression, timeout=timeout)
            except RequestTimeout:
                print(
                    f"{expression} -> no reply within {timeout}s "
                    "(is examples/rpc_server.py running on this topic, and fast enough?)",
                    file=sys.stderr,
                )
                status = 2
                continue
            answer = reply.value.decode(errors="replace")
            if reply.is_error:
                print(f"{expression} -> error: {answer}")
                status = max(status, 1)
            else:
                print(f"{expression} = {answer}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "expressions",
        nargs="*",
        metavar="EXPRESSION",
        help="e.g. '6 * 7' (read one per line from stdin when none is given)",
    )
    parser.add_argument(
        "--service-url",
        default=DEFAULT_SERVICE_URL,
        help=f"broker to connect to (default {DEFAULT_SERVICE_URL})",
    )
    parser.add_argument(
        "--topic",
        default=DEFAULT_TOPIC,
        help=f"topic the server listens on (default {DEFAULT_TOPIC})",
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for each reply (default 5)"
    )
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    try:
        return asyncio.run(ask(args.service_url, args.topic, args.expressions, args.timeout))
    except ConnectError as exc:
        print(
            f"error: {exc}\nIs a broker running at {args.service_url}? (`make run`)",
            file=sys.stderr,
        )
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
