"""PIP-371 request-reply with magnetar's client: the reply rides on the consumer's ack.

    python examples/client_request_reply.py [pulsar://127.0.0.1:6650]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from magnetar.client import Client, Consumer, RequestTimeout
from magnetar.testing import EmbeddedBroker


async def serve(consumer: Consumer) -> None:
    """A worker: answers every request that is still wanted."""
    async for request in consumer.requests(skip_expired=True):
        try:
            number = int(request.value)
        except ValueError:
            await request.reply(b"not a number", is_error=True)
            continue
        await request.reply(str(number * number).encode())


async def main(service_url: str) -> None:
    async with Client(service_url) as client:
        consumer = await client.subscribe("squares", "workers", subscription_type="shared")
        worker = asyncio.create_task(serve(consumer))
        producer = await client.create_producer("squares")
        for question in (b"7", b"12", b"seven"):
            reply = await producer.request(question, timeout=5.0)
            kind = "error" if reply.is_error else "reply"
            print(f"{question!r} -> {kind} {reply.value!r} (request {reply.request_message_id})")
        results = await asyncio.gather(*(producer.request_async(b"%d" % i, timeout=5.0)
                                         for i in range(10)))
        print("ten at once:", [r.value.decode() for r in results])
        worker.cancel()
        try:
            await producer.request(b"3", timeout=0.5)  # nobody serves it any more
        except RequestTimeout as exc:
            print("as expected:", exc)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with contextlib.ExitStack() as stack:
            broker = stack.enter_context(EmbeddedBroker())
            asyncio.run(main(broker.service_url))
