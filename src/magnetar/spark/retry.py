"""Retrying the source's broker operations across a broker outage.

The official clients retry a lookup, a subscription or a request whose connection
failed until ``operationTimeoutMs`` has passed, backing off between attempts; a
pipeline that runs for days meets broker restarts, and Spark's own task retries are
few and immediate.  :func:`retrying` does the same for a whole operation of the source
(the driver's offset queries, a task's opening of its reader, a reader's next chunk):
a retriable error is retried, with the client's exponential backoff, until
``timeout`` seconds have passed since the first failure; any other error, or one past
the deadline, is raised as it is.

The clock and the sleep are inputs, so tests drive the policy without waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.client.backoff import Backoff
from magnetar.client.errors import PulsarError, is_retriable

log = logging.getLogger("magnetar.spark")
R = TypeVar("R")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


def retriable(exc: BaseException) -> bool:
    """Whether the operation may succeed if tried again: the client's retriable errors
    (connection refused or lost, timeouts, a broker not ready) and socket errors that
    escaped it."""
    if isinstance(exc, PulsarError):
        return is_retriable(exc)
    return isinstance(exc, ConnectionError)


async def retrying(
    operation: Callable[[], Awaitable[R]],
    *,
    timeout: float,
    what: str,
    on_failure: Callable[[BaseException], Awaitable[None]] | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    backoff: Backoff | None = None,
) -> R:
    """``await operation()``, again after a retriable failure until ``timeout`` seconds
    have passed since the first one.  ``on_failure(exc)`` runs after each retriable
    failure, before the wait (to drop state the failure left broken)."""
    backoff = backoff or Backoff(0.1, 5.0, clock=clock)
    deadline: float | None = None
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not retriable(exc):
                raise
            now = clock()
            if deadline is None:
                deadline = now + timeout
            delay = backoff.next()
            if now + delay > deadline:
                raise
            log.warning("%s failed (%s: %s); retrying in %.2fs", what, type(exc).__name__,
                        exc, delay)
            if on_failure is not None:
                await on_failure(exc)
            await sleep(delay)
