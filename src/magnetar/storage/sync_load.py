"""What fdatasync costs lately, and who else needs the loop, for the ledgers of a store.

A ledger may fdatasync a small group on the event loop itself instead of handing it
to a worker thread: cheaper while the disk is fast and the ledger is alone, but an
inline sync stalls the loop for every topic. The ledgers of one store share the disk
and the loop, so they share a ``SyncLoad``: a moving average of how long a sync
takes, and how many ledgers have a write due in the current loop round. When others
have one, syncing inline would make them wait in turn, so the sync goes to a worker,
where the syncs of several ledgers overlap. Nor does a ledger sync inline while any
disk work of the store runs on a worker thread (another ledger's sync or roll, a topic
being created, opened or its segments deleted): an fdatasync then waits for the
file system's journal behind that work, tens or hundreds of milliseconds on the loop
(with 10,000 topics created, inline syncs stalled the loop up to 175 ms).
"""

from __future__ import annotations

import asyncio
from typing import Any

_WEIGHT = 0.25  # of the newest observation in the moving average


class SyncLoad:
    __slots__ = ("disk_jobs", "mean_seconds", "writes_due")

    def __init__(self) -> None:
        self.mean_seconds = 0.0
        self.writes_due = 0  # ledgers whose write is scheduled for this loop round
        self.disk_jobs = 0  # disk work of the store running on worker threads

    def job_started(self, job: asyncio.Future[Any]) -> None:
        """Disk work ``job`` runs on a worker thread until it is done (loop thread)."""
        self.disk_jobs += 1
        job.add_done_callback(self._job_done)

    def _job_done(self, _job: asyncio.Future[Any]) -> None:
        self.disk_jobs -= 1

    def observe(self, seconds: float) -> None:
        """One fdatasync took ``seconds``."""
        self.mean_seconds += (seconds - self.mean_seconds) * _WEIGHT

    def allows_inline(self, max_seconds: float, own_write_due: bool) -> bool:
        """May a ledger sync inline now? ``own_write_due``: its own write is among
        ``writes_due`` (a flush wrote ahead of it)."""
        others = self.writes_due - (1 if own_write_due else 0)
        return others == 0 and not self.disk_jobs and self.mean_seconds <= max_seconds
