"""How long the cyclic garbage collector stops the process, by generation.

CPython's collector is not incremental: a collection of generation 2 visits every
object the collector tracks and holds the GIL while it does, so it is a stall of the
event loop as long as the live heap is big (about 72 tracked objects per loaded topic).
``GcPauseRecorder`` hangs on ``gc.callbacks`` and keeps, per generation, the number of
collections, their total time and the longest one, as plain numbers; ``/metrics``
builds the Prometheus families from them at scrape time, so an operator can tell a
stall the collector caused (``magnetar_gc_pause_seconds_max``) from one a callback did
(``magnetar_event_loop_lag_seconds_max``). The cost is two clock reads per collection.

The clock is a parameter and ``on_gc`` can be called directly, so tests need no
collection of a given length.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

GENERATIONS = 3


class GcPauseRecorder:
    """``install()`` ... ``uninstall()``; counts every collection in the process."""

    __slots__ = ("_clock", "_started", "collections", "max_seconds", "total_seconds")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started = 0.0
        self.collections = [0] * GENERATIONS
        self.total_seconds = [0.0] * GENERATIONS
        self.max_seconds = [0.0] * GENERATIONS

    def install(self) -> None:
        if self.on_gc not in gc.callbacks:
            gc.callbacks.append(self.on_gc)

    def uninstall(self) -> None:
        while self.on_gc in gc.callbacks:
            gc.callbacks.remove(self.on_gc)

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        took = self._clock() - self._started
        generation = info.get("generation", GENERATIONS - 1)
        self.collections[generation] += 1
        self.total_seconds[generation] += took
        if took > self.max_seconds[generation]:
            self.max_seconds[generation] = took

    def families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        worst = GaugeMetricFamily(
            "magnetar_gc_pause_seconds_max",
            "Longest cyclic garbage collection since start, by generation (the whole "
            "process, the event loop included, waits for it)",
            labels=["generation"],
        )
        spent = CounterMetricFamily(
            "magnetar_gc_pause_seconds",
            "Time spent in cyclic garbage collections, by generation",
            labels=["generation"],
        )
        count = CounterMetricFamily(
            "magnetar_gc_collections",
            "Cyclic garbage collections, by generation",
            labels=["generation"],
        )
        for generation in range(GENERATIONS):
            label = [str(generation)]
            worst.add_metric(label, self.max_seconds[generation])
            spent.add_metric(label, self.total_seconds[generation])
            count.add_metric(label, self.collections[generation])
        return [worst, spent, count]
