"""The synced-offset record writes of many ledgers, one worker job per loop turn.

Each ledger records how far its segment is synced after its syncs (``synced_offset.py``),
off the commit path. With thousands of topics each publishing now and then, nearly
every sync of every topic is followed by a record write, and a write handed to a
worker thread on its own costs a thread hop each way (a wake-up, a future chain, the
GIL passed twice): as much CPU as the write itself. The writes due in one turn of the
loop go to a worker together, and come back in one call.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from concurrent.futures import Executor

Write = Callable[[], None]


def _write_all(writes: list[Write]) -> list[BaseException | None]:
    """Worker thread: each write in turn; what each raised."""
    outcomes: list[BaseException | None] = []
    for write in writes:
        try:
            write()
        except Exception as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes


class RecordBatch:
    """The record writes of the ledgers on one loop and executor (loop thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor | None) -> None:
        self._loop = loop
        self._executor = executor
        self._due: list[tuple[Write, asyncio.Future[None]]] = []

    def submit(self, write: Write) -> asyncio.Future[None]:
        """Run ``write`` on a worker with the others of this loop turn; the future is
        done when it is."""
        future: asyncio.Future[None] = self._loop.create_future()
        if not self._due:
            self._loop.call_soon(self._start)
        self._due.append((write, future))
        return future

    def _start(self) -> None:
        due, self._due = self._due, []
        job = self._loop.run_in_executor(
            self._executor, _write_all, [write for write, _ in due]
        )
        job.add_done_callback(functools.partial(_finish, [future for _, future in due]))


def _finish(futures: list[asyncio.Future[None]], job: asyncio.Future[list[BaseException | None]]
            ) -> None:
    if job.cancelled():
        outcomes: list[BaseException | None] = [asyncio.CancelledError()] * len(futures)
    elif job.exception() is not None:  # the executor refused the job (shut down)
        outcomes = [job.exception()] * len(futures)
    else:
        outcomes = job.result()
    for future, outcome in zip(futures, outcomes, strict=True):
        if future.done():
            continue
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)


_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Executor | None, RecordBatch]]
_batches = weakref.WeakKeyDictionary()


def record_batch(loop: asyncio.AbstractEventLoop, executor: Executor | None) -> RecordBatch:
    """The batch of the ledgers that run on ``loop`` and write with ``executor``."""
    per_loop = _batches.get(loop)
    if per_loop is None:
        per_loop = _batches[loop] = {}
    batch = per_loop.get(executor)
    if batch is None:
        batch = per_loop[executor] = RecordBatch(loop, executor)
    return batch
