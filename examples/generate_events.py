"""Fill a topic with JSON events for examples/spark_pipeline.py, with a progress bar.

Each event is ``{"user": "user-3", "action": "click", "amount": 12.5, "ts": <ms>}``,
keyed by its user, with its ``ts`` as the message's event time.  The events' times
spread over the last ``--minutes`` minutes, oldest first, and ``--late`` of them come
out of order (a few minutes late), which the pipeline's watermark has to deal with.

    python examples/generate_events.py [--service-url pulsar://127.0.0.1:6650]
                                       [--topic events] [--count 20000] [--users 8]

The progress bar uses `rich` (``pip install rich``) when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from magnetar.client import Client

ACTIONS = ["view", "click", "cart", "buy"]


def make_events(count: int, users: int, minutes: float, late: float,
                seed: int = 7) -> list[dict[str, Any]]:
    """``count`` events over the last ``minutes`` minutes; a ``late`` fraction of them
    carry a time up to three minutes older than their neighbours."""
    rng = random.Random(seed)
    end = int(time.time() * 1000)
    start = end - int(minutes * 60_000)
    step = (end - start) / max(count, 1)
    events = []
    for i in range(count):
        ts = start + int(i * step)
        if rng.random() < late:
            ts -= rng.randint(30_000, 180_000)
        action = rng.choice(ACTIONS)
        amount = round(rng.uniform(1, 200), 2) if action == "buy" else 0.0
        events.append({"user": f"user-{rng.randrange(users)}", "action": action,
                       "amount": amount, "ts": ts})
    return events


async def send(service_url: str, topic: str, events: list[dict[str, Any]],
               advance: Callable[[int], None]) -> None:
    async with Client(service_url) as client:
        producer = await client.create_producer(topic, batching=True, compression="lz4")
        pending: list[asyncio.Future[Any]] = []
        for event in events:
            pending.append(producer.send_async(
                json.dumps(event).encode(), key=event["user"], event_time=event["ts"]))
            if len(pending) >= 500:
                await asyncio.gather(*pending)
                advance(len(pending))
                pending.clear()
        await asyncio.gather(*pending)
        advance(len(pending))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--late", type=float, default=0.02, help="fraction of late events")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    events = make_events(args.count, args.users, args.minutes, args.late, args.seed)
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
    except ImportError:  # plain text without rich
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            print(f"\rsent {done[0]}/{len(events)}", end="", flush=True)

        asyncio.run(send(args.service_url, args.topic, events, advance))
        print()
    else:
        columns = ("[progress.description]{task.description}", BarColumn(),
                   MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns) as progress:
            task = progress.add_task(f"sending to {args.topic}", total=len(events))
            asyncio.run(send(args.service_url, args.topic, events,
                             lambda n: progress.advance(task, n)))
    print(f"{len(events)} events from {args.users} users over {args.minutes:g} minutes "
          f"are in {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
