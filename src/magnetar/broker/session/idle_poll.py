"""Idle polling: keep the event loop awake for a moment after activity.

On virtual machines whose guest does not poll before halting an idle CPU, waking a
sleeping broker costs tens of microseconds per message hop; for request-reply that
is a large part of a round trip. After each burst of input the loop therefore keeps
polling its sockets (zero-timeout rounds) for ``window`` seconds before it lets
itself sleep, the way Seastar's reactors poll before they idle. Each polling round
yields the CPU (``sched_yield``) so that other runnable work on it goes first.

The cost is CPU while traffic trickles in (at most ``window`` per gap between
messages); an idle broker, or one that is busy anyway, pays nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)


class IdlePoller:
    """Call ``activity()`` on input; the loop then stays awake for ``window`` seconds."""

    __slots__ = ("_clock", "_last", "_loop", "_polling", "_window", "rounds")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        window: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._loop = loop
        self._window = window
        self._clock = clock
        self._last = 0.0
        self._polling = False
        self.rounds = 0  # polling rounds run, for tests and curiosity

    @property
    def polling(self) -> bool:
        return self._polling

    def activity(self) -> None:
        self._last = self._clock()
        if not self._polling and self._window > 0:
            self._polling = True
            self._loop.call_soon(self._round)

    def _round(self) -> None:
        # A pending callback makes the loop poll with a zero timeout instead of
        # sleeping; rescheduling this one keeps that up until the window closes.
        if self._clock() - self._last < self._window:
            self.rounds += 1
            _yield()
            self._loop.call_soon(self._round)
        else:
            self._polling = False
