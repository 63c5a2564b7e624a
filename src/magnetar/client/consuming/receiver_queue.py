"""The consumer's receiver queue: prefetched messages waiting for ``receive()``."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ReceiverQueue(Generic[T]):
    """A FIFO whose getters wait; unlike ``asyncio.Queue`` it can drop items selectively
    (a sub-consumer that reconnects discards what it had prefetched)."""

    __slots__ = ("_closed", "_items", "_waiters")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiters: deque[asyncio.Future[T]] = deque()
        self._closed: BaseException | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        self._items.append(item)

    def get_nowait(self) -> T | None:
        if self._items:
            return self._items.popleft()
        return None

    def push_front(self, items: list[T]) -> None:
        """Put ``items`` back at the head, in their order (the rest of a decoded entry)."""
        self._items.extendleft(reversed(items))

    def peek(self) -> T | None:
        return self._items[0] if self._items else None

    async def get(self, timeout: float | None = None) -> T:
        """The next item; raises ``asyncio.TimeoutError`` after ``timeout`` seconds."""
        if self._items:
            return self._items.popleft()
        if self._closed is not None:
            raise self._closed
        if timeout is not None and timeout <= 0:
            raise builtins.TimeoutError
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()
        self._waiters.append(waiter)
        # A timer that fails the waiter costs less than asyncio.wait_for's extra
        # future and callbacks (this runs whenever a consumer drains its queue).
        timer = None if timeout is None else loop.call_later(timeout, _time_out, waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # The item arrived as we were cancelled: keep it for the next getter.
                self._items.appendleft(waiter.result())
            else:
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def remove_if(self, predicate: Callable[[T], bool]) -> int:
        """Drop queued items matching ``predicate``; returns how many."""
        before = len(self._items)
        if before:
            kept = [item for item in self._items if not predicate(item)]
            self._items.clear()
            self._items.extend(kept)
        return before - len(self._items)

    def close(self, exc: BaseException) -> None:
        self._closed = exc
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)

    @property
    def closed(self) -> bool:
        return self._closed is not None


def _time_out(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(builtins.TimeoutError())
