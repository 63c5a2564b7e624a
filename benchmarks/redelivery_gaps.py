"""Redelivery gaps under a PIP-106 backoff, as each client sees them.

    .venv/bin/python benchmarks/redelivery_gaps.py [--redeliveries 6]
        [--min-delay 1.0] [--multiplier 2] [--max-delay 8.0]
        [--service-url URL] [--only magnetar]

One message on a Shared subscription is negatively acknowledged on every delivery;
the time between delivery n and delivery n+1 is the gap. Under a backoff of
``min_delay * multiplier ** n`` capped at ``max_delay`` (default 1 s, x2, 8 s) the
expected gaps are 1, 2, 4, 8, 8, ... s.

Each client is one function ``measure_<client>(service_url, topic, policy, redeliveries)``
returning its :class:`Delivery` list (a plain function or a coroutine function);
``CLIENTS`` maps the names ``--only`` accepts to them. A client added later (the
official client with a broker-side backoff, say) is one more function and one more
entry there; the table gets a column per client.

Without ``--service-url`` a broker is started as a subprocess with default settings
(fresh temporary data directory). It prints a table; it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from magnetar.client import Client, MultiplierRedeliveryBackoff
from magnetar.testing import EmbeddedBroker


@dataclass(frozen=True)
class BackoffPolicy:
    min_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 8.0

    def expected(self, redelivery_count: int) -> float:
        """The gap after a delivery with this redelivery count."""
        return min(self.max_delay, self.min_delay * self.multiplier ** redelivery_count)


@dataclass(frozen=True)
class Delivery:
    redelivery_count: int  # the count the message came with
    at: float  # seconds on the measuring client's monotonic clock


Measure = Callable[[str, str, BackoffPolicy, int], "list[Delivery] | Awaitable[list[Delivery]]"]


async def measure_magnetar(service_url: str, topic: str, policy: BackoffPolicy,
                           redeliveries: int) -> list[Delivery]:
    """magnetar's client: the backoff runs in the client (negative_ack_redelivery_backoff)."""
    backoff = MultiplierRedeliveryBackoff(policy.min_delay, policy.max_delay, policy.multiplier)
    async with Client(service_url) as client:
        consumer = await client.subscribe(
            topic, "gaps", subscription_type="shared",
            negative_ack_redelivery_backoff=backoff,
        )
        producer = await client.create_producer(topic)
        await producer.send(b"poison")
        loop = asyncio.get_running_loop()
        deliveries = []
        timeout = policy.max_delay * 3 + 10
        for _ in range(redeliveries + 1):
            msg = await consumer.receive(timeout)
            deliveries.append(Delivery(msg.redelivery_count, loop.time()))
            consumer.negative_acknowledge(msg)
        await consumer.acknowledge(msg)
        return deliveries


CLIENTS: dict[str, Measure] = {
    "magnetar": measure_magnetar,
}


def run(measure: Measure, service_url: str, policy: BackoffPolicy,
        redeliveries: int) -> list[Delivery]:
    topic = f"persistent://public/default/redelivery-gaps-{uuid.uuid4().hex[:8]}"
    result = measure(service_url, topic, policy, redeliveries)
    if inspect.isawaitable(result):
        async def wait() -> list[Delivery]:
            return await result  # type: ignore[no-any-return]
        return asyncio.run(wait())
    return result  # type: ignore[return-value]


def table(policy: BackoffPolicy, results: dict[str, list[Delivery]]) -> str:
    names = list(results)
    header = ["gap", "after count", "expected s"] + [f"{n} s" for n in names]
    rows = [header]
    longest = max(len(d) for d in results.values()) - 1
    for i in range(longest):
        row = [f"{i + 1}", "", f"{policy.expected(i):.2f}"]
        counts = set()
        for name in names:
            d = results[name]
            if i + 1 < len(d):
                row.append(f"{d[i + 1].at - d[i].at:.3f}")
                counts.add(d[i].redelivery_count)
            else:
                row.append("-")
        row[1] = ",".join(str(c) for c in sorted(counts))
        rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
                     for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redeliveries", type=int, default=6)
    parser.add_argument("--min-delay", type=float, default=1.0)
    parser.add_argument("--multiplier", type=float, default=2.0)
    parser.add_argument("--max-delay", type=float, default=8.0)
    parser.add_argument("--service-url")
    parser.add_argument("--only", choices=sorted(CLIENTS), action="append")
    args = parser.parse_args(argv)
    policy = BackoffPolicy(args.min_delay, args.multiplier, args.max_delay)
    broker = None
    service_url = args.service_url
    if service_url is None:
        broker = EmbeddedBroker(mode="subprocess").start()
        service_url = broker.service_url
    try:
        results = {
            name: run(CLIENTS[name], service_url, policy, args.redeliveries)
            for name in (args.only or CLIENTS)
        }
    finally:
        if broker is not None:
            broker.close()
    print(f"nack redelivery gaps, backoff {policy.min_delay:g} s x{policy.multiplier:g} "
          f"up to {policy.max_delay:g} s, one message on a Shared subscription")
    print(table(policy, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
