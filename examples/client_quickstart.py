"""magnetar's asyncio client: produce, consume, acknowledge, negative-acknowledge.

Start a broker first (``magnetar serve``), or run this file as it is: it starts an
embedded broker when no service URL is given.

    python examples/client_quickstart.py [pulsar://127.0.0.1:6650]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from magnetar.client import Client, MultiplierRedeliveryBackoff
from magnetar.testing import EmbeddedBroker


async def main(service_url: str) -> None:
    async with Client(service_url) as client:
        consumer = await client.subscribe(
            "quickstart", "workers", subscription_type="shared",
            initial_position="earliest",
            negative_ack_redelivery_backoff=MultiplierRedeliveryBackoff(
                min_delay=0.2, max_delay=5.0, multiplier=2),
        )
        producer = await client.create_producer("quickstart", batching=True,
                                                compression="lz4")
        ids = await asyncio.gather(*(
            producer.send_async(f"job {i}".encode(), key=f"user-{i % 3}",
                                properties={"attempt": "1"})
            for i in range(5)
        ))
        print("sent", [str(i) for i in ids])
        handled = 0
        while handled < 5:
            msg = await consumer.receive(timeout=10)
            if msg.value == b"job 3" and msg.redelivery_count == 0:
                print("failing", msg.value, "once; it comes back after the backoff")
                consumer.negative_acknowledge(msg)
                continue
            print("got", msg.value, "key", msg.key, "redelivered", msg.redelivery_count)
            await consumer.acknowledge(msg)
            handled += 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with contextlib.ExitStack() as stack:
            broker = stack.enter_context(EmbeddedBroker())
            asyncio.run(main(broker.service_url))
