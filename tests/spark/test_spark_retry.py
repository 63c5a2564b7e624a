"""The source's retry policy across a broker outage (pure: a fake clock and sleep)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client.errors import AuthorizationError, ConnectError
from magnetar.spark.retry import retrying


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_refused_connection_is_retried_with_backoff_until_it_succeeds() -> None:
    fake = FakeTime()
    failures = 6
    dropped: list[BaseException] = []

    async def operation() -> str:
        nonlocal failures
        if failures:
            failures -= 1
            raise ConnectError("Connection refused")
        return "done"

    async def drop(exc: BaseException) -> None:
        dropped.append(exc)

    result = asyncio.run(retrying(operation, timeout=30, what="test", on_failure=drop,
                                  clock=fake.clock, sleep=fake.sleep))
    assert result == "done"
    assert len(fake.sleeps) == 6 and len(dropped) == 6
    assert fake.sleeps == sorted(fake.sleeps)  # backing off
    assert sum(fake.sleeps) < 30


def test_retries_stop_at_the_operation_timeout() -> None:
    fake = FakeTime()

    async def operation() -> None:
        fake.now += 1  # each attempt takes a second
        raise ConnectError("Connection refused")

    with pytest.raises(ConnectError):
        asyncio.run(retrying(operation, timeout=20, what="test", clock=fake.clock,
                             sleep=fake.sleep))
    assert 10 <= fake.now <= 22  # retried for about the timeout, not for ever


def test_an_error_retrying_cannot_fix_is_raised_at_once() -> None:
    fake = FakeTime()
    calls = 0

    async def operation() -> None:
        nonlocal calls
        calls += 1
        raise AuthorizationError("no")

    with pytest.raises(AuthorizationError):
        asyncio.run(retrying(operation, timeout=30, what="test", clock=fake.clock,
                             sleep=fake.sleep))
    assert calls == 1 and not fake.sleeps
