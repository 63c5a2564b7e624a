"""Keep full collections short: a long one freezes what survived it.

A full (generation 2) collection of CPython's cyclic collector visits every object it
tracks, on the event loop's thread: with 5,000 loaded topics and 2,000 connections
that is about half a million objects and 0.3-0.9 s during which nobody is served.
Almost all of them (topics, ledgers, connections, producers) live for minutes or
more. ``GcFreezer`` hangs on ``gc.callbacks``: when a full collection took longer
than ``threshold`` seconds, it asks the loop (thread-safe: a collection may run on
any thread) to move every object that survived into the permanent generation
(``gc.freeze``), which no later collection visits. The next full collections scan
only what came since, so each stays near ``threshold`` however many topics are loaded.

The price: an object frozen here that later becomes cyclic garbage (a connection
frozen alive that closed since) is not freed by the collector while it stays frozen
(refcounting still frees everything acyclic; unloaded topics are freed by refcounting
alone, see topic.py). So that such garbage stays bounded, a freeze at least
``reclaim_interval`` seconds (10 minutes) after the last reclaim first gives the frozen
objects back and runs one full collection over everything: one long pause (0.1-0.6 s
with 5,000 topics) that often at most, instead of a leak that grows with connection
churn.
``freezes`` and ``reclaims`` count them (``gc.get_freeze_count()`` says how much is
frozen, but walks every frozen object to say it).
Only ``magnetar serve`` installs it: an embedded broker never freezes its host's
objects.

The clock is a parameter and ``on_gc`` can be called directly, so tests need no
collection of a given length.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("magnetar.broker.gc")


class GcFreezer:
    """``install()`` ... ``uninstall()``; ``schedule`` runs a callable on the loop
    thread soon (``loop.call_soon_threadsafe``)."""

    __slots__ = ("_clock", "_last_reclaim", "_pending", "_schedule", "_started", "freezes",
                 "reclaim_interval", "reclaims", "threshold")

    def __init__(self, threshold: float, schedule: Callable[[Callable[[], None]], Any],
                 clock: Callable[[], float] = time.perf_counter,
                 reclaim_interval: float = 600.0) -> None:
        self.threshold = threshold
        self.reclaim_interval = reclaim_interval
        self.reclaims = 0
        self._last_reclaim = clock()
        self._schedule = schedule
        self._clock = clock
        self._started = 0.0
        self._pending = False
        self.freezes = 0

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    def install(self) -> None:
        if self.enabled and self.on_gc not in gc.callbacks:
            gc.callbacks.append(self.on_gc)

    def uninstall(self) -> None:
        while self.on_gc in gc.callbacks:
            gc.callbacks.remove(self.on_gc)

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = self._clock()
            return
        if self._clock() - self._started > self.threshold and not self._pending:
            # Not here: the collector is still on the stack; the loop does it next.
            self._pending = True
            self._schedule(self.freeze)

    def freeze(self) -> None:
        """Freeze every tracked object; the young generations are collected first so
        that garbage made since the full collection is not frozen with the rest."""
        self._pending = False
        self.freezes += 1
        now = self._clock()
        if now - self._last_reclaim >= self.reclaim_interval:
            self._last_reclaim = now
            gc.unfreeze()  # what became garbage while frozen is collected now
            gc.collect()
            self.reclaims += 1
        else:
            gc.collect(1)
        gc.freeze()
        if log.isEnabledFor(logging.DEBUG):
            # Not as a plain argument: get_freeze_count walks every frozen object
            # (3.5 ms for 500,000 here), on the loop, at every freeze, log or no log.
            log.debug("froze the survivors of a long full collection: %d objects frozen "
                      "in all", gc.get_freeze_count())
