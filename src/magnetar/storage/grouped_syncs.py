"""The fdatasyncs of many ledgers due in one loop turn, a few to a worker job.

With many topics publishing at once (a hundred producers, each sending a batch now
and then), nearly every loop turn has several ledgers whose sync goes to a worker
(``SyncLoad`` keeps it off the loop when others have a write due). One job each cost
a thread hop each way per ledger, and up to six threads syncing side by side fought
for the GIL and the CPU: 85-130 us of CPU per entry, against about 35 us for a sync
made on the loop. The syncs due in one turn go to the disk-job threads in groups of
at most ``GROUP_MAX``, run one after another in their job, and come back in one call;
each ledger still gets its own outcome. A group waits for its slowest member, so the
groups are kept small, groups of one turn still run side by side, and the write
pipeline groups its syncs only while they are fast (the store's moving average of an
fdatasync at most ``inline_sync_max_seconds``; on a slow disk each sync has a job of
its own, as before, and they overlap).

Measured in-process (K ledgers of one store, one 2.8 KB entry each per loop turn, CPU
of the process per entry, 3 interleaved runs, load 3.6): K=8 87/98/86 -> 49/57/54 us,
K=32 71/74/71 -> 43/56/58 us; a turn's receipts come 0.1-0.4 ms later (the p50 of a
round at K=8 0.6-0.7 -> 0.9-1.1 ms).
"""

from __future__ import annotations

import asyncio
import functools
import weakref

from magnetar.storage.job_threads import DISK_JOBS, JobThreads
from magnetar.storage.turn_batches import TurnBatches, run_calls

GROUP_MAX = 8  # syncs in one job: the last waits for up to seven fdatasyncs before it


class SyncGroups(TurnBatches):
    """The grouped sync jobs of the ledgers on one loop, on ``threads`` (loop thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: JobThreads = DISK_JOBS,
                 group_max: int = GROUP_MAX) -> None:
        super().__init__(loop, functools.partial(threads.run, loop, run_calls), group_max)


_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SyncGroups]
_groups = weakref.WeakKeyDictionary()


def sync_groups(loop: asyncio.AbstractEventLoop) -> SyncGroups:
    """The groups of the ledgers that run on ``loop`` (on the disk-job threads)."""
    groups = _groups.get(loop)
    if groups is None:
        groups = _groups[loop] = SyncGroups(loop)
    return groups
