"""PIP-68 producer access modes and the topic epoch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.client import Client, ProducerBusy, ProducerFenced
from magnetar.testing import EmbeddedBroker


async def test_exclusive_refuses_a_second_producer(mclient: Client, topic: str) -> None:
    first = await mclient.create_producer(topic, access_mode="exclusive")
    assert first.topic_epoch is not None
    with pytest.raises(ProducerBusy):
        await mclient.create_producer(topic, access_mode="exclusive")
    with pytest.raises(ProducerBusy):
        await mclient.create_producer(topic)  # shared while an exclusive one exists
    await first.send(b"ok")


async def test_exclusive_with_fencing_fences_the_old_producer(mclient: Client,
                                                              topic: str) -> None:
    old = await mclient.create_producer(topic, access_mode="exclusive")
    new = await mclient.create_producer(topic, access_mode="exclusive_with_fencing")
    assert new.topic_epoch is not None and old.topic_epoch is not None
    assert new.topic_epoch > old.topic_epoch
    await new.send(b"from new")
    with pytest.raises(ProducerFenced):
        await asyncio.wait_for(old.send(b"from old"), 5)


async def test_wait_for_exclusive_gets_in_when_the_holder_leaves(mclient: Client,
                                                                 topic: str) -> None:
    holder = await mclient.create_producer(topic, access_mode="exclusive")
    waiting = asyncio.ensure_future(
        mclient.create_producer(topic, access_mode="wait_for_exclusive")
    )
    await asyncio.sleep(0.3)
    assert not waiting.done()  # PRODUCER_SUCCESS(producer_ready=false) keeps it waiting
    await holder.close()
    successor = await asyncio.wait_for(waiting, 5)
    assert successor.topic_epoch is not None and holder.topic_epoch is not None
    assert successor.topic_epoch > holder.topic_epoch
    await successor.send(b"mine now")


async def test_topic_epoch_is_kept_across_reconnect(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path / "d").start()
    client = Client(broker.service_url, max_backoff=0.3)
    try:
        producer = await client.create_producer("epoch", access_mode="exclusive")
        epoch = producer.topic_epoch
        await producer.send(b"1")
        await asyncio.to_thread(broker.restart)
        await asyncio.wait_for(producer.send(b"2"), 15)
        assert producer.topic_epoch == epoch  # reattached as the same exclusive producer
        with pytest.raises(ProducerBusy):
            await client.create_producer("epoch", access_mode="exclusive")
    finally:
        await client.close()
        broker.close()
