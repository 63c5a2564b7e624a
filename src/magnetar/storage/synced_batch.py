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
import weakref
from collections.abc import Callable
from concurrent.futures import Executor

from magnetar.storage.turn_batches import Call, Outcome, TurnBatches, run_calls

Write = Callable[[], None]


def _write_all(writes: list[Write]) -> list[BaseException | None]:
    """Worker thread: each write in turn; what each raised."""
    return [error for _, error in run_calls([(write, ()) for write in writes])]


def _write_job(calls: list[Call]) -> list[Outcome]:
    return [(None, error) for error in _write_all([write for write, _ in calls])]


class RecordBatch(TurnBatches):
    """The record writes of the ledgers on one loop and executor (loop thread): one
    job a turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor | None) -> None:
        super().__init__(loop, self._start_write_job)
        self._executor = executor

    def _start_write_job(self, calls: list[Call]) -> asyncio.Future[list[Outcome]]:
        return self._loop.run_in_executor(self._executor, _write_job, calls)

    def submit(self, write: Write) -> asyncio.Future[None]:
        """Run ``write`` on a worker with the others of this loop turn; the future is
        done when it is."""
        return self.run(write)


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
