"""GcPauseRecorder: the cyclic collector's pauses, per generation, on /metrics."""

from __future__ import annotations

import gc
import urllib.request

from magnetar.broker.observability.gc_pauses import GcPauseRecorder
from magnetar.testing import EmbeddedBroker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counts_each_collection_and_keeps_the_longest_per_generation() -> None:
    clock = Clock()
    recorder = GcPauseRecorder(clock)
    for generation, took in ((0, 0.001), (2, 0.040), (2, 0.015), (1, 0.003)):
        recorder.on_gc("start", {"generation": generation})
        clock.now += took
        recorder.on_gc("stop", {"generation": generation, "collected": 0})
    assert recorder.collections == [1, 1, 2]
    assert [round(x, 9) for x in recorder.max_seconds] == [0.001, 0.003, 0.040]
    assert abs(recorder.total_seconds[2] - 0.055) < 1e-9
    names = [family.name for family in recorder.families()]
    assert names == ["magnetar_gc_pause_seconds_max", "magnetar_gc_pause_seconds",
                     "magnetar_gc_collections"]


def test_install_hooks_the_real_collector_and_uninstall_unhooks_it() -> None:
    recorder = GcPauseRecorder()
    recorder.install()
    recorder.install()  # once only
    try:
        assert gc.callbacks.count(recorder.on_gc) == 1
        gc.collect()
        assert recorder.collections[2] >= 1 and recorder.max_seconds[2] > 0
    finally:
        recorder.uninstall()
    assert recorder.on_gc not in gc.callbacks
    before = list(recorder.collections)
    gc.collect()
    assert recorder.collections == before


def test_a_brokers_metrics_page_shows_its_collections() -> None:
    with EmbeddedBroker(admin=True) as broker:
        gc.collect()
        with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
            text = response.read().decode()
    values = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert float(values['magnetar_gc_collections_total{generation="2"}']) >= 1
    assert float(values['magnetar_gc_pause_seconds_max{generation="2"}']) > 0
