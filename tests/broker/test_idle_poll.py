"""The idle poller keeps the loop polling for its window after activity, then stops."""

from __future__ import annotations

import asyncio

from magnetar.broker.session.idle_poll import IdlePoller


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_polls_for_the_window_after_activity_then_sleeps() -> None:
    clock = FakeClock()
    poller = IdlePoller(asyncio.get_running_loop(), 0.0002, clock)
    poller.activity()
    assert poller.polling
    for _ in range(5):
        await asyncio.sleep(0)
    assert poller.polling and poller.rounds >= 4  # the window is still open
    clock.now += 0.0001
    poller.activity()  # new input moves the window
    clock.now += 0.00015
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert poller.polling
    clock.now += 0.0001  # 0.25 ms after the last input: past the window
    rounds = poller.rounds
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not poller.polling
    await asyncio.sleep(0)
    assert poller.rounds == rounds  # nothing is rescheduled once it stopped


async def test_a_zero_window_never_polls() -> None:
    poller = IdlePoller(asyncio.get_running_loop(), 0.0, FakeClock())
    poller.activity()
    await asyncio.sleep(0)
    assert not poller.polling and poller.rounds == 0
