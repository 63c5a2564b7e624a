"""Worker threads for the write pipeline's disk jobs (fdatasync, segment rolls), each
job's outcome handed back to its event loop as an asyncio future.

``loop.run_in_executor`` costs about 26 us of CPU per job here: a concurrent future
with its condition, the executor's work item and idle semaphore, and the chaining of
the two futures. A broker pays it once per group commit, so on every batched publish
and on every sync publish whose fsync goes to a worker. These threads take a job from
a queue and settle the loop's future with one ``call_soon_threadsafe``: about 8 us.

One pool serves the process (threads start as jobs wait for one, up to
``MAX_THREADS``, and then stay, idle on the queue), so that several ledgers' syncs
still overlap as they did in the loop's default executor. A second, smaller pool takes
new ledgers' first syncs, which settle their directory fsyncs first (write_pipeline.py):
5,000 new topics first written at once, each with a handful of journal commits, held
the other topics' plain syncs in the queue behind them (an official-client bystander's
send + receive at 2,500 msg/s: p99 77-283 ms, longest 1.0-1.9 s; with two settle
threads 42 ms, longest 72-81 ms). Two, not more: with four, the threads' hand-offs of
the GIL made the event loop stall more often than the queue had.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_THREADS = 6  # the default executor's size on a 2-core machine (min(32, cpus + 4))


class JobThreads:
    """``run(loop, fn, *args)``: ``fn(*args)`` on a worker thread; a future of ``loop``
    gets its result or exception."""

    def __init__(self, max_threads: int = MAX_THREADS, name: str = "magnetar-disk") -> None:
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._max_threads = max_threads
        self._name = name
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting on the queue

    def run(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1  # that thread takes this job
                start = False
            else:  # a new thread, unless there are enough: then the job waits its turn
                start = self._threads < self._max_threads
                self._threads += start
        self._queue.put((loop, future, fn, args))
        if start:
            threading.Thread(
                target=self._work, name=f"{self._name}-{self._threads}", daemon=True
            ).start()
        return future

    def _work(self) -> None:
        jobs = self._queue
        while True:
            loop, future, fn, args = jobs.get()
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # handed to the loop, as an executor would
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                loop.call_soon_threadsafe(_settle, future, result, error)
            del loop, future, fn, args, result, error  # hold nothing while idle
            with self._lock:
                self._idle += 1


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


# The process's pool: threads are started on demand and shared by every ledger.
DISK_JOBS = JobThreads()
# New ledgers' first syncs, which settle their directory fsyncs first (write_pipeline.py).
SETTLE_JOBS = JobThreads(max_threads=2, name="magnetar-settle")
