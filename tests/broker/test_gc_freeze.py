"""GcFreezer: a full collection longer than the threshold has its survivors frozen
(gc.freeze) on the loop, once per long collection; shorter ones and young
generations change nothing. The clock is driven by the test; ``freeze`` is real."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from magnetar.broker.observability.gc_freeze import GcFreezer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is given back to the collector afterwards."""
    yield
    gc.unfreeze()


def collection(freezer: GcFreezer, clock: Clock, generation: int, took: float) -> None:
    freezer.on_gc("start", {"generation": generation})
    clock.now += took
    freezer.on_gc("stop", {"generation": generation, "collected": 0, "uncollectable": 0})


def test_a_long_full_collection_schedules_one_freeze() -> None:
    clock, scheduled = Clock(), list[Callable[[], None]]()
    freezer = GcFreezer(0.02, scheduled.append, clock=clock)
    collection(freezer, clock, 2, 0.019)
    collection(freezer, clock, 1, 0.5)  # young generations never freeze
    assert scheduled == []
    collection(freezer, clock, 2, 0.3)
    collection(freezer, clock, 2, 0.3)  # one freeze pending at a time
    assert scheduled == [freezer.freeze]


def test_freeze_moves_the_survivors_out_of_the_collector(thawed: None) -> None:
    clock, scheduled = Clock(), list[Callable[[], None]]()
    freezer = GcFreezer(0.02, scheduled.append, clock=clock)
    kept = [[index] for index in range(1000)]  # tracked objects that survive
    before = gc.get_freeze_count()
    collection(freezer, clock, 2, 0.5)
    scheduled.pop()()  # what the loop runs
    assert gc.get_freeze_count() >= before + len(kept)
    assert freezer.freezes == 1
    collection(freezer, clock, 2, 0.5)
    assert scheduled == [freezer.freeze]  # the next long one freezes again


def test_disabled_at_zero_and_installs_nothing() -> None:
    freezer = GcFreezer(0.0, lambda _: None)
    freezer.install()
    assert freezer.on_gc not in gc.callbacks
    enabled = GcFreezer(0.02, lambda _: None)
    enabled.install()
    try:
        assert enabled.on_gc in gc.callbacks
    finally:
        enabled.uninstall()
    assert enabled.on_gc not in gc.callbacks


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_cyclic_garbage_frozen_alive_is_reclaimed_after_the_interval(thawed: None) -> None:
    import weakref

    clock = Clock()
    freezer = GcFreezer(0.02, lambda _: None, clock=clock, reclaim_interval=600.0)
    node = _Node()
    gone = weakref.ref(node)
    freezer.freeze()  # frozen while alive
    del node  # now cyclic garbage, out of the collector's sight
    clock.now += 599.0
    freezer.freeze()
    gc.collect()
    assert gone() is not None  # still frozen
    clock.now += 1.0
    freezer.freeze()  # ten minutes on: given back, collected
    assert gone() is None
    assert freezer.reclaims == 1


def test_a_freeze_does_not_count_the_frozen_objects_unless_debug_logging_is_on(
    thawed: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """gc.get_freeze_count walks every frozen object (milliseconds with a loaded
    broker): it ran on the loop at each freeze, for a debug line nobody logged."""
    counted: list[int] = []
    real = gc.get_freeze_count

    def counting() -> int:
        counted.append(1)
        return real()

    monkeypatch.setattr(gc, "get_freeze_count", counting)
    freezer = GcFreezer(0.02, lambda _fn: None, clock=Clock())
    caplog.set_level("INFO", logger="magnetar.broker.gc")
    freezer.freeze()
    assert counted == [] and freezer.freezes == 1
    caplog.set_level("DEBUG", logger="magnetar.broker.gc")
    freezer.freeze()
    assert counted == [1] and "objects frozen in all" in caplog.text
