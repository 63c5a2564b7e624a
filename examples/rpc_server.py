"""A PIP-371 request-reply server: a calculator that answers requests on a topic.

Each request is an arithmetic expression such as ``6 * 7`` or ``(1 + 2) ** 10``;
the reply is the result, or an *error reply* (``is_error``) for input it cannot
evaluate. The reply rides on the acknowledgement of the request, so there is no
reply topic: the broker hands it straight to the producer that asked. Requests
whose requester has already given up (their timeout is in the message) are
acknowledged and skipped. Ordinary messages on the topic are acknowledged too.

Start a broker, then the server, then ask it something with ``rpc_client.py``:

    make run                                   # terminal 1: broker on 127.0.0.1:6650
    .venv/bin/python examples/rpc_server.py    # terminal 2: Ctrl-C to stop
    .venv/bin/python examples/rpc_client.py "6 * 7" "2 ** 100" "1 / 0"   # terminal 3

Run several servers at once to share the load: they join one Shared
subscription, and the broker spreads the requests between them. Another broker
or topic: ``--service-url pulsar://host:6650 --topic my-calc``. ``--delay 2``
makes each answer take two seconds, to watch the client time out.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import operator
import signal
import sys
from collections.abc import Callable
from typing import Any, cast

from magnetar.client import Client, ConnectError, MessageTooBig, PulsarError

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
DEFAULT_TOPIC = "rpc-calculator"

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


class BadRequest(ValueError):
    """The request cannot be answered; its text goes back as an error reply."""


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression of numbers, + - * / // % ** and parentheses."""
    if len(expression) > 200:
        raise BadRequest("expression too long (200 characters at most)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise BadRequest(f"not an arithmetic expression: {expression!r}") from None

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return cast(int | float, node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (
                abs(right) > 1000
                or (abs(left) > 1 and abs(right) * int(abs(left)).bit_length() > 10_000)
            ):
                raise BadRequest("result too large")
            result = _BINARY[type(node.op)](left, right)
            if isinstance(result, complex):
                raise BadRequest(f"no real result: {expression!r}")
            return result  # type: ignore[no-any-return]
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))  # type: ignore[no-any-return]
        raise BadRequest(f"only numbers and + - * / // % ** are allowed: {expression!r}")

    try:
        return ev(tree)
    except ZeroDivisionError:
        raise BadRequest("division by zero") from None
    except OverflowError:
        raise BadRequest("result too large") from None


async def serve(service_url: str, topic: str, subscription: str, delay: float) -> None:
    async with Client(service_url) as client:
        consumer = await client.subscribe(topic, subscription, subscription_type="shared")
        print(
            f"serving requests on {topic!r} (subscription {subscription!r}) at "
            f"{service_url}; Ctrl-C to stop",
            flush=True,
        )
        # skip_expired: a request whose requester gave up is acked without an answer.
        async for request in consumer.requests(skip_expired=True):
            if not request.is_request:  # an ordinary message: nobody waits for a reply
                print(f"  (plain message {request.value!r}, acknowledged)", flush=True)
                await request.acknowledge()
                continue
            text = request.value.decode(errors="replace")
            if delay:
                await asyncio.sleep(delay)
                if request.is_expired():
                    print(f"  {text!r}: requester gave up, not answering", flush=True)
                    await request.acknowledge()
                    continue
            try:
                answer, is_error = str(evaluate(text)), False
            except BadRequest as exc:
                answer, is_error = str(exc), True
            except Exception as exc:  # never let one request stop the server
                answer, is_error = f"cannot evaluate {text!r}: {exc}", True
            print(f"  {text!r} -> {'error: ' if is_error else ''}{answer}", flush=True)
            try:
                await request.reply(answer, is_error=is_error)
            except MessageTooBig:  # nothing was sent: say so instead
                await request.reply(f"the answer to {text!r} is too large to send",
                                    is_error=True)
            except PulsarError as exc:  # the broker refused it: the request comes again
                print(f"  reply refused ({type(exc).__name__}: {exc})", flush=True)
                request.negative_acknowledge()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--service-url",
        default=DEFAULT_SERVICE_URL,
        help=f"broker to connect to (default {DEFAULT_SERVICE_URL})",
    )
    parser.add_argument(
        "--topic",
        default=DEFAULT_TOPIC,
        help=f"topic the requests arrive on (default {DEFAULT_TOPIC})",
    )
    parser.add_argument(
        "--subscription",
        default="calculator",
        help="shared subscription of the servers (default calculator)",
    )
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds to think before each answer (default 0)"
    )
    args = parser.parse_args(argv)

    loop = asyncio.new_event_loop()
    task = loop.create_task(serve(args.service_url, args.topic, args.subscription, args.delay))
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        print("stopped", flush=True)
    except ConnectError as exc:
        print(
            f"error: {exc}\nIs a broker running at {args.service_url}? (`make run`)",
            file=sys.stderr,
        )
        return 1
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
