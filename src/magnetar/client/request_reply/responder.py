"""PIP-371 responder loop: ``await consumer.serve(handler, concurrency=N)``.

Runs ``handler`` on each request and replies with what it returns, the way RocketMQ's
and NATS's responders run: up to ``concurrency`` handlers at once, and replies
pipelined (a reply is written and the loop moves on; the broker's verdict comes back
later, and a refused reply is logged and counted by the consumer). A handler that
raises answers the request with an error reply naming the exception; one that returns
``None`` acknowledges the request without a reply. Ordinary messages (no request
timeout property) go to the handler too and are acknowledged after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from magnetar.client.errors import MessageTooBig
from magnetar.client.request_reply.requests import Request

log = logging.getLogger("magnetar.client.responder")

Handler = Callable[[Request], Awaitable[bytes | str | None]]


class RequestSource(Protocol):
    """What the loop needs of a consumer."""

    def requests(
        self, *, skip_expired: bool = False, clock: Callable[[], float] | None = None
    ) -> AsyncIterator[Request]: ...


async def answer(request: Request, handler: Handler) -> None:
    """Run ``handler`` on one request and send what it returns."""
    try:
        value = await handler(request)
    except Exception as exc:
        log.warning("handler failed on %r: %s", request, exc)
        value, is_error = f"{type(exc).__name__}: {exc}", True
    else:
        is_error = False
    if value is None or not request.is_request:
        await request.acknowledge()
        return
    try:
        await request.reply(value, is_error=is_error)
    except MessageTooBig as exc:
        log.warning("reply to %r not sent: %s", request, exc)
        await request.reply(f"MessageTooBig: {exc}", is_error=True)


async def serve(
    consumer: RequestSource,
    handler: Handler,
    concurrency: int = 1,
    skip_expired: bool = True,
    clock: Callable[[], float] | None = None,
) -> None:
    """Answer requests until the consumer closes (or the caller cancels)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if concurrency == 1:  # no task per request: the handler runs in this loop
        async for request in consumer.requests(skip_expired=skip_expired, clock=clock):
            await answer(request, handler)
        return
    slots = asyncio.Semaphore(concurrency)
    running: set[asyncio.Task[None]] = set()

    def finished(task: asyncio.Task[None]) -> None:
        running.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.warning("answering a request failed: %s", task.exception())

    try:
        async for request in consumer.requests(skip_expired=skip_expired, clock=clock):
            await slots.acquire()
            task = asyncio.ensure_future(answer(request, handler))
            running.add(task)
            task.add_done_callback(finished)
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    finally:
        for task in running:
            task.cancel()
