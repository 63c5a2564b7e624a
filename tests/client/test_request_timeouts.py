"""A PIP-371 requester's timeouts: requests in flight arm no timer each (one per
timeout value), and each request still fails with RequestTimeout at its own
deadline, a shorter timeout made later before a longer one made earlier."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import Client, RequestTimeout
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(30)


def _live_timers() -> int:
    """Timers armed on this loop and not cancelled (the default asyncio loop's)."""
    scheduled = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled())


async def test_requests_in_flight_share_a_timer_per_timeout_and_time_out_in_order(
    broker: EmbeddedBroker, topic: str
) -> None:
    async with Client(broker.service_url) as client:
        # A subscription that takes the requests and never answers them.
        consumer = await client.subscribe(topic, "silent", subscription_type="shared")
        producer = await client.create_producer(topic)
        await producer.send(b"warm-up")  # the producer's own timers are armed now
        before = _live_timers()
        longer = [producer.request_async(b"long", timeout=20.0) for _ in range(50)]
        shorter = [producer.request_async(b"short", timeout=0.4) for _ in range(50)]
        await producer.flush()
        assert _live_timers() - before <= 2  # one per timeout value, not one per request
        done, _ = await asyncio.wait(shorter + longer, timeout=10,
                                     return_when=asyncio.FIRST_COMPLETED)
        assert done and done <= set(shorter)  # the later, shorter ones fail first
        for future in shorter:
            with pytest.raises(RequestTimeout):
                await asyncio.wait_for(future, 5)
        assert not any(future.done() for future in longer)
        await consumer.close()
    for future in longer:  # closing the client fails what still waits
        assert future.done() and future.exception() is not None
