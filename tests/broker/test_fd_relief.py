"""Out of file descriptors, a relief unloads a bounded number of the unused topics,
oldest loaded first, and never a topic with clients; concurrent loads that meet EMFILE
share one relief."""

from __future__ import annotations

import asyncio
import uuid

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.topics import loader as loader_module
from magnetar.testing import EmbeddedBroker


def test_a_relief_unloads_the_oldest_unused_topics_up_to_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loader_module, "RELIEF_MAX_TOPICS", 5)
    prefix = f"persistent://public/default/relief-{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}-{index}" for index in range(12)]
    with EmbeddedBroker() as broker:
        service = broker.service
        assert service is not None
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        try:
            busy = client.subscribe(names[0], "keeps-it-loaded")  # the oldest has a client
            for name in names[1:]:
                client.create_producer(name).close()

            async def relieve_twice() -> tuple[int, int, bool]:
                first = service.relieve_descriptor_pressure()
                second = service.relieve_descriptor_pressure()  # shares the running one
                return await first, await second, first is second

            unloaded, again, shared = asyncio.run_coroutine_threadsafe(
                relieve_twice(), service.loop
            ).result(30)
            assert (unloaded, again, shared) == (5, 5, True)
            loaded = set(service.topics)
            assert names[0] in loaded  # has a consumer
            assert not loaded & set(names[1:6])  # the five oldest unused went
            assert set(names[6:]) <= loaded
            busy.close()
        finally:
            client.close()
