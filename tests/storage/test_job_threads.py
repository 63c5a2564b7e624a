"""The disk-job threads: a job's result or exception reaches its loop's future, jobs
run side by side up to the pool's size, and a cancelled or orphaned job harms
nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from magnetar.storage.job_threads import JobThreads


def test_results_and_exceptions_come_back_on_the_loop() -> None:
    threads = JobThreads(max_threads=2)

    def boom() -> None:
        raise OSError(5, "Input/output error")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        worker_idents: list[int] = []

        def where(value: int) -> int:
            worker_idents.append(threading.get_ident())
            return value * 2

        assert await threads.run(loop, where, 21) == 42
        assert worker_idents and worker_idents[0] != threading.get_ident()
        with pytest.raises(OSError, match="Input/output error"):
            await threads.run(loop, boom)
        assert await asyncio.gather(*(threads.run(loop, where, n) for n in range(50))) == [
            n * 2 for n in range(50)
        ]

    asyncio.run(main())


def test_jobs_overlap_up_to_the_pool_size() -> None:
    threads = JobThreads(max_threads=3)
    started = threading.Semaphore(0)
    release = threading.Event()

    def blocking() -> int:
        started.release()
        assert release.wait(10)
        return 1

    async def main() -> None:
        loop = asyncio.get_running_loop()
        jobs = [threads.run(loop, blocking) for _ in range(4)]
        for _ in range(3):  # three run at once; the fourth waits for a thread
            assert await loop.run_in_executor(None, started.acquire, True, 10)
        assert not await loop.run_in_executor(None, started.acquire, True, 0.2)
        release.set()
        assert await asyncio.gather(*jobs) == [1, 1, 1, 1]

    asyncio.run(main())


def test_a_cancelled_job_and_a_closed_loop_are_tolerated() -> None:
    threads = JobThreads(max_threads=1)
    release = threading.Event()
    finished = threading.Event()

    def slow() -> int:
        release.wait(10)
        return 7

    def last() -> int:
        finished.set()
        return 8

    async def main() -> None:
        loop = asyncio.get_running_loop()
        job = threads.run(loop, slow)
        job.cancel()
        release.set()
        assert await threads.run(loop, lambda: 3) == 3  # the cancelled one settled quietly
        release.clear()
        threads.run(loop, slow)  # still running when this loop closes
        threads.run(loop, last)

    asyncio.run(main())
    release.set()
    assert finished.wait(10)  # the thread went on to the next job

    async def again() -> int:
        return await threads.run(asyncio.get_running_loop(), lambda: 9)

    assert asyncio.run(again()) == 9
