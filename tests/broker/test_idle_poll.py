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


async def _period(poller: IdlePoller, clock: FakeClock, found_input: bool) -> None:
    """One polling period: input, maybe more input while polling, then silence."""
    poller.activity()
    await asyncio.sleep(0)
    if found_input:
        poller.activity()
        await asyncio.sleep(0)
    clock.now += 1.0  # far past any span
    await _until_asleep(poller)


async def _until_asleep(poller: IdlePoller) -> None:
    for _ in range(100):  # a few rounds are enough; more means it never stops
        if not poller.polling:
            return
        await asyncio.sleep(0)
    raise AssertionError("the poller is still polling")


async def test_the_span_shrinks_while_polling_finds_nothing_and_grows_when_it_does() -> None:
    clock = FakeClock()
    poller = IdlePoller(asyncio.get_running_loop(), 0.0008, clock)
    assert poller.span == 0.0008
    spans = []
    for _ in range(5):  # a trickle: each period ends without further input
        await _period(poller, clock, found_input=False)
        spans.append(poller.span)
    assert spans == [0.0004, 0.0002, 0.0001, 0.0001, 0.0001]  # an eighth at least
    spans = []
    for _ in range(4):  # traffic again: each period found input
        await _period(poller, clock, found_input=True)
        spans.append(poller.span)
    assert spans == [0.0002, 0.0004, 0.0008, 0.0008]  # the window at most


async def test_a_shrunk_span_ends_polling_sooner() -> None:
    clock = FakeClock()
    poller = IdlePoller(asyncio.get_running_loop(), 0.0008, clock)
    await _period(poller, clock, found_input=False)  # span 0.4 ms now
    poller.activity()
    await asyncio.sleep(0)
    clock.now += 0.0005  # within the window, past the span
    await _until_asleep(poller)
    assert poller.span == 0.0002
