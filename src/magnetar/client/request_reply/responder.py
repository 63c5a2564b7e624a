"""PIP-371 responder loop: ``await consumer.serve(handler, concurrency=N)``.

Runs ``handler`` on each request and replies with what it returns, the way RocketMQ's
and NATS's responders run: up to ``concurrency`` handlers at once, and replies
pipelined (a reply is written and the loop moves on; the broker's verdict comes back
later, and a refused reply is logged and counted by the consumer). A handler that
raises answers the request with an error reply naming the exception; one that returns
``None`` acknowledges the request without a reply. Ordinary messages (no request
timeout property) go to the handler too and are acknowledged after it.

With ``concurrency`` above 1, each request's handler starts at once in the loop, as
an eager task would (Python 3.12's ``eager_task_factory``): a handler that answers
without waiting for anything costs no task, and only one that suspends goes on in a
task of its own (in the same context), so the loop's cost per request is the
handler's, not a task's.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Protocol

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
    loop = asyncio.get_running_loop()

    def finished(task: asyncio.Task[None]) -> None:
        running.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.warning("answering a request failed: %s", task.exception())

    try:
        async for request in consumer.requests(skip_expired=skip_expired, clock=clock):
            await slots.acquire()
            coro = answer(request, handler)
            context = contextvars.copy_context()
            try:
                waits_for = context.run(coro.send, None)  # its first step, here and now
            except StopIteration:
                slots.release()  # answered without suspending: no task
                continue
            except Exception as exc:
                slots.release()
                log.warning("answering a request failed: %s", exc)
                continue
            except BaseException:
                slots.release()
                raise
            task = loop.create_task(_go_on(coro, waits_for), context=context)
            running.add(task)
            task.add_done_callback(finished)
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    finally:
        for task in running:
            task.cancel()


async def _go_on(coro: Coroutine[Any, Any, None], waits_for: Any) -> None:
    """Run the rest of ``coro``, whose first step ran outside any task and suspended
    on ``waits_for`` (a future, or ``None`` for a bare yield), as its own task would:
    wait for that, step it again, and so on until it returns. Cancelling this task
    cancels what the coroutine waits for, which it then sees, as in a task."""
    while True:
        if waits_for is None:
            await asyncio.sleep(0)
        elif asyncio.isfuture(waits_for):
            waits_for._asyncio_future_blocking = False
            try:
                await waits_for
            except asyncio.CancelledError:
                if not waits_for.cancelled():
                    # This task was cancelled after what it waited for was done: the
                    # coroutine gets the cancellation where it stands.
                    try:
                        waits_for = coro.throw(asyncio.CancelledError())
                    except StopIteration:
                        return
                    continue
                # (Else the future was cancelled, by this task's cancel or another's:
                # the coroutine sees it as it goes on.)
            except Exception:
                pass  # the coroutine reads the future's error as it goes on
        else:
            waits_for = coro.throw(RuntimeError(
                f"a handler awaited {waits_for!r}, which is not an asyncio future"))
            continue
        try:
            waits_for = coro.send(None)
        except StopIteration:
            return
