"""``consumer.serve(handler, concurrency=N)`` starts each handler at once, as an eager
task would: a handler that answers without waiting costs no task of its own, one that
waits goes on in a task (up to N at once), in a context of its own, and cancelling
serve cancels the handlers still waiting."""

from __future__ import annotations

import asyncio
import contextvars
import uuid

import pytest

from magnetar.client import Client
from magnetar.client.request_reply import Request

pytestmark = pytest.mark.timeout(30)

WAIT = 10.0
_who: contextvars.ContextVar[bytes] = contextvars.ContextVar("who", default=b"")


def _topic() -> str:
    return f"persistent://public/default/rr-serve-{uuid.uuid4().hex[:10]}"


async def test_a_handler_that_does_not_wait_runs_in_serve_itself(mclient: Client) -> None:
    topic = _topic()
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    tasks: set[asyncio.Task[object] | None] = set()

    async def handler(request: Request) -> bytes:
        tasks.add(asyncio.current_task())
        return request.value.upper()

    server = asyncio.ensure_future(consumer.serve(handler, concurrency=4))
    try:
        asked = [producer.request_async(b"q%d" % i, timeout=WAIT) for i in range(20)]
        results = await asyncio.wait_for(asyncio.gather(*asked), WAIT)
        assert sorted(r.value for r in results) == sorted(b"Q%d" % i for i in range(20))
        assert tasks == {server}  # no task per request
    finally:
        await consumer.close()
        await asyncio.wait_for(server, WAIT)


async def test_handlers_that_wait_run_concurrently_each_in_its_own_context(
    mclient: Client,
) -> None:
    topic = _topic()
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    running = most = 0
    failures: list[str] = []

    async def handler(request: Request) -> bytes:
        nonlocal running, most
        _who.set(request.value)  # before the first wait: in this handler's context
        running += 1
        most = max(most, running)
        try:
            for _ in range(3):
                await asyncio.sleep(0.01)
                await asyncio.sleep(0)  # a bare yield too
                if _who.get() != request.value:
                    failures.append(f"{request.value!r} saw {_who.get()!r}")
            if request.value == b"fail":
                raise ValueError("cannot")
            return request.value.upper()
        finally:
            running -= 1

    server = asyncio.ensure_future(consumer.serve(handler, concurrency=3))
    try:
        asked = [producer.request_async(b"q%d" % i, timeout=WAIT) for i in range(9)]
        results = await asyncio.wait_for(asyncio.gather(*asked), WAIT)
        assert sorted(r.value for r in results) == sorted(b"Q%d" % i for i in range(9))
        assert 1 < most <= 3
        assert failures == []
        assert _who.get() == b""  # nothing leaked into the caller's context
        failed = await producer.request(b"fail", timeout=WAIT)
        assert failed.is_error and failed.value == b"ValueError: cannot"
    finally:
        await consumer.close()
        await asyncio.wait_for(server, WAIT)


async def test_cancelling_serve_cancels_the_handlers_still_waiting(mclient: Client) -> None:
    topic = _topic()
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    started = asyncio.Event()
    cancelled: list[bytes] = []

    async def handler(request: Request) -> bytes:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(request.value)
            raise
        return b"never"

    server = asyncio.ensure_future(consumer.serve(handler, concurrency=2))
    try:
        producer.request_async(b"slow", timeout=WAIT).add_done_callback(
            lambda f: f.cancelled() or f.exception())
        await asyncio.wait_for(started.wait(), WAIT)
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(server, WAIT)
        for _ in range(100):
            if cancelled:
                break
            await asyncio.sleep(0.01)
        assert cancelled == [b"slow"]
    finally:
        await consumer.close()
