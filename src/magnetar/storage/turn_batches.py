"""Calls made in one turn of the event loop, run together in a worker job.

A call handed to a worker thread on its own pays a thread hop each way (a wake-up,
a future chain, the GIL passed twice), which for a small disk call costs as much CPU
as the call. ``TurnBatches`` collects the calls made during one loop turn and starts
them at the end of it, in jobs of at most ``group_max`` calls (0: one job for the
turn), run one after another on the worker; each caller still gets its own result
or exception. How a job is started (which threads or executor) is the owner's:
``grouped_syncs.py`` (fdatasyncs) and ``synced_batch.py`` (synced-offset records).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

Call = tuple[Callable[..., Any], tuple[Any, ...]]
Outcome = tuple[Any, BaseException | None]  # what a call returned, or what it raised
StartJob = Callable[[list[Call]], "asyncio.Future[list[Outcome]]"]


def run_calls(calls: list[Call]) -> list[Outcome]:
    """Worker thread: each call in turn; what each returned or raised."""
    outcomes: list[Outcome] = []
    for fn, args in calls:
        try:
            outcomes.append((fn(*args), None))
        except Exception as exc:
            outcomes.append((None, exc))
    return outcomes


class TurnBatches:
    """The calls of one loop turn, started as jobs by ``start_job`` (loop thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, start_job: StartJob,
                 group_max: int = 0) -> None:
        self._loop = loop
        self._start_job = start_job
        self._group_max = group_max
        self._due: list[tuple[asyncio.Future[Any], Call]] = []

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` in a worker job with the others of this loop turn; the future
        gets its result or exception."""
        future: asyncio.Future[Any] = self._loop.create_future()
        if not self._due:
            self._loop.call_soon(self._start)
        self._due.append((future, (fn, args)))
        return future

    def _start(self) -> None:
        due, self._due = self._due, []
        size = self._group_max or len(due)
        for start in range(0, len(due), size):
            group = due[start : start + size]
            job = self._start_job([call for _, call in group])
            job.add_done_callback(functools.partial(_settle, [future for future, _ in group]))


def _settle(futures: list[asyncio.Future[Any]], job: asyncio.Future[list[Outcome]]) -> None:
    if job.cancelled():
        outcomes: list[Outcome] = [(None, asyncio.CancelledError())] * len(futures)
    elif job.exception() is not None:  # the job was refused (threads or executor shut down)
        outcomes = [(None, job.exception())] * len(futures)
    else:
        outcomes = job.result()
    for future, (result, error) in zip(futures, outcomes, strict=True):
        if future.done():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
