"""Idle polling: keep the event loop awake for a moment after activity.

On virtual machines whose guest does not poll before halting an idle CPU, waking a
sleeping broker costs tens of microseconds per message hop; for request-reply that
is a large part of a round trip. After each burst of input the loop therefore keeps
polling its sockets (zero-timeout rounds) for ``window`` seconds before it lets
itself sleep, the way Seastar's reactors poll before they idle. Each polling round
yields the CPU (``sched_yield``) so that other runnable work on it goes first.

The cost is CPU while traffic trickles in (at most the span per gap between
messages); an idle broker, or one that is busy anyway, pays nothing. The span adapts
(``IdlePoller``): where polling stopped finding input it shrinks, so a trickle costs
an eighth of the window per gap.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)


class IdlePoller:
    """Call ``activity()`` on input; the loop then stays awake for up to ``window``
    seconds.

    The span it stays awake adapts: a polling period that ends without having found any
    input (traffic slower than the span: a trickle, or a lone request) halves the next
    span, down to an eighth of ``window``; one that found input doubles it again, up to
    ``window``. Polling then costs CPU only where it keeps finding input."""

    __slots__ = ("_clock", "_floor", "_found", "_last", "_loop", "_polling", "_span",
                 "_window", "rounds")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        window: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._loop = loop
        self._window = window
        self._floor = window / 8
        self._span = window
        self._clock = clock
        self._last = 0.0
        self._polling = False
        self._found = False  # input arrived during the current polling period
        self.rounds = 0  # polling rounds run, for tests and curiosity

    @property
    def polling(self) -> bool:
        return self._polling

    @property
    def span(self) -> float:
        """Seconds the loop now stays awake after input."""
        return self._span

    def activity(self) -> None:
        self._last = self._clock()
        if self._polling:
            self._found = True
        elif self._window > 0:
            self._polling = True
            self._found = False
            self._loop.call_soon(self._round)

    def _round(self) -> None:
        # A pending callback makes the loop poll with a zero timeout instead of
        # sleeping; rescheduling this one keeps that up until the span closes.
        if self._clock() - self._last < self._span:
            self.rounds += 1
            _yield()
            self._loop.call_soon(self._round)
            return
        self._polling = False
        if self._found:
            self._span = min(self._window, self._span * 2)
        else:
            self._span = max(self._floor, self._span / 2)
