"""A reply does not wait for the disk: consumers get the request while its fsync runs,
and the requester completes on the reply when it can only be for its request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import magnetar.storage.ledger as ledger_module
from magnetar.client import Client
from magnetar.storage import fsutil
from magnetar.testing import EmbeddedBroker

SLOW_SYNC = 0.6


async def test_reply_arrives_before_the_request_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = fsutil.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(SLOW_SYNC)
        real(fd)

    # The embedded broker runs in this process, so it uses the patched function.
    monkeypatch.setattr(ledger_module, "fdatasync", slow_fdatasync)
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        async with Client(broker.service_url, operation_timeout=10.0) as client:
            consumer = await client.subscribe("slow-disk", "workers", subscription_type="shared")

            async def serve() -> None:
                async for request in consumer.requests():
                    await request.reply(request.value[::-1])

            worker = asyncio.create_task(serve())
            producer = await client.create_producer("slow-disk")
            first = await producer.request(b"abc", timeout=5.0)  # needs a send receipt first
            assert first.value == b"cba"
            started = time.monotonic()
            second_future = producer.request_async(b"xyz", timeout=5.0)
            second = await second_future
            took = time.monotonic() - started
            assert second.value == b"zyx"
            assert took < SLOW_SYNC / 2, f"the reply waited for the fsync ({took:.3f}s)"
            assert second.request_message_id.entry_id == first.request_message_id.entry_id + 1
            await producer.flush()  # the send receipt still comes, after the sync
            worker.cancel()
