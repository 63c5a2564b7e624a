"""Where the event loop is when it stalls: a watchdog thread that logs the loop
thread's stack once the loop has not ticked for a while.

The loop lag probe says *that* the loop stalled, and by how much, only after the
stall ended. To say *where*, ``StallTracer`` runs a daemon thread that wakes every
``threshold / 4`` seconds and compares the time of the loop's last tick (the probe's
wake-ups call ``beat``) with now; past ``threshold`` it logs, once per stall, the
loop thread's Python stack from ``sys._current_frames()`` at WARNING ("event loop
stalled"), so an operator or a benchmark can find the callback that runs long.

Off by default (``loop_stall_trace_seconds`` 0): a stack dump is for diagnosis.
The clock is a parameter, and ``check`` can be called directly, so tests need no
real stall.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

log = logging.getLogger("magnetar.broker.stall")


class StallTracer:
    __slots__ = ("_clock", "_last_beat", "_reported_beat", "_stop", "_thread", "loop_thread_id",
                 "threshold", "traces")

    def __init__(self, threshold: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self._clock = clock
        self._last_beat = clock()
        self._reported_beat = -1.0
        self.loop_thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.traces = 0

    @property
    def enabled(self) -> bool:
        return self.threshold > 0

    def beat(self) -> None:
        """The loop ticked (call from the loop thread)."""
        self._last_beat = self._clock()

    def start(self) -> None:
        """Watch the calling thread's loop (call from the loop thread)."""
        if not self.enabled or self._thread is not None:
            return
        self.loop_thread_id = threading.get_ident()
        self._last_beat = self._clock()
        self._thread = threading.Thread(target=self._watch, name="magnetar-stall-tracer",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(self.threshold / 4):
            self.check()

    def check(self) -> str | None:
        """Log and return the loop thread's stack if the loop is stalled past the
        threshold and this stall was not reported yet; else None."""
        beat = self._last_beat
        stalled_for = self._clock() - beat
        if stalled_for < self.threshold or beat == self._reported_beat:
            return None
        frame = sys._current_frames().get(self.loop_thread_id)
        if frame is None:
            return None
        self._reported_beat = beat
        self.traces += 1
        stack = "".join(traceback.format_stack(frame))
        log.warning("event loop stalled for %.0f ms so far, in:\n%s", stalled_for * 1000, stack)
        return stack
