"""The stall tracer logs where the event loop is when it has not ticked for a while:
driven by a fake clock through ``check``, and once for real against a broker whose
loop is held by a blocking call."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from magnetar.broker.observability.stall_tracer import StallTracer
from magnetar.testing import EmbeddedBroker


def _held_here(seconds: float) -> None:
    time.sleep(seconds)


def test_check_reports_a_stall_once_and_nothing_while_the_loop_ticks() -> None:
    now = [100.0]
    tracer = StallTracer(0.05, clock=lambda: now[0])
    tracer.beat()
    now[0] += 0.01
    assert tracer.check() is None  # ticking
    now[0] += 0.1
    stack = tracer.check()
    assert stack is not None and "test_check_reports" in stack  # this thread is the "loop"
    now[0] += 0.1
    assert tracer.check() is None  # the same stall is reported once
    tracer.beat()
    now[0] += 0.2
    assert tracer.check() is not None  # a new stall
    assert tracer.traces == 2


def test_disabled_by_default_and_with_the_probe_off() -> None:
    assert not StallTracer(0.0).enabled


def test_a_broker_logs_the_stack_of_a_blocking_callback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="magnetar.broker.stall")
    with EmbeddedBroker(loop_stall_trace_seconds=0.2) as broker:
        loop, service = broker._loop, broker.service
        assert loop is not None and service is not None
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.1), loop).result(timeout=30)
        loop.call_soon_threadsafe(_held_here, 1.5)  # the loop runs nothing else meanwhile
        deadline = time.monotonic() + 30
        while service.stall_tracer.traces == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert service.stall_tracer.traces >= 1
    stalls = [r.getMessage() for r in caplog.records if r.name == "magnetar.broker.stall"]
    assert stalls and "_held_here" in stalls[0]
