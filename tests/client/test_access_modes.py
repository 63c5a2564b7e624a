"""PIP-68 producer access modes and the topic epoch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.client import Client, ProducerBusy, ProducerFenced
from magnetar.testing import EmbeddedBroker


async def test_exclusive_refuses_a_second_producer(mclient: Client, topic: str) -> None:
    # The codes and words of Apache Pulsar's AbstractTopic (pulsar.ProducerFenced and
    # pulsar.ProducerBusy in the official client).
    first = await mclient.create_producer(topic, access_mode="exclusive")
    assert first.topic_epoch is not None
    with pytest.raises(ProducerFenced, match="Topic has an existing exclusive producer: "
                       + first.producer_name):
        await mclient.create_producer(topic, access_mode="exclusive")
    with pytest.raises(ProducerBusy, match="Topic has an existing exclusive producer"):
        await mclient.create_producer(topic)  # shared while an exclusive one exists
    await first.send(b"ok")


async def test_exclusive_refused_by_shared_producers(mclient: Client, topic: str) -> None:
    shared = await mclient.create_producer(topic)
    with pytest.raises(ProducerFenced, match="Topic has existing shared producers"):
        await mclient.create_producer(topic, access_mode="exclusive")
    await shared.send(b"still fine")


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
        with pytest.raises(ProducerFenced):
            await client.create_producer("epoch", access_mode="exclusive")
    finally:
        await client.close()
        broker.close()


def _holds(broker: EmbeddedBroker, topic: str, name: str) -> bool:
    """Whether the broker has a producer called ``name`` on ``topic``."""
    assert broker.service is not None
    found = broker.service.topics.get(topic)
    return found is not None and name in found.producers


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


# The reconnecting client waits this long before it attaches again, so the test can
# take the topic in between (loopback operations take milliseconds).
SLOW_RECONNECT = {"initial_backoff": 1.0, "max_backoff": 1.0}


@pytest.mark.parametrize(
    ("squatter", "error"),
    [({"producer_name": "leader"}, ProducerBusy),
     ({"access_mode": "exclusive"}, ProducerFenced)],
    ids=["name-taken-busy", "exclusive-fenced"],
)
async def test_an_exclusive_producer_does_not_retry_when_the_topic_is_taken(
    broker: EmbeddedBroker, topic: str, squatter: dict[str, Any], error: type[Exception]
) -> None:
    async with (Client(broker.service_url, **SLOW_RECONNECT) as owner_client,
                Client(broker.service_url) as other):
        owner = await owner_client.create_producer(topic, producer_name="leader",
                                                   access_mode="exclusive")
        owner._partitions[0]._conn.close()  # type: ignore[union-attr]
        await _until(lambda: not _holds(broker, topic, "leader"))
        await other.create_producer(topic, **squatter)
        # Before: ProducerBusy was retried forever, and the send waited with it.
        with pytest.raises(error):
            await asyncio.wait_for(owner.send(b"am I still the leader?"), 10)
        with pytest.raises(error):
            await owner.send(b"later sends fail the same way")


async def test_a_shared_producer_retries_while_an_exclusive_one_holds_the_topic(
    broker: EmbeddedBroker, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="magnetar.client")
    async with (Client(broker.service_url, **SLOW_RECONNECT) as shared_client,
                Client(broker.service_url) as other):
        shared = await shared_client.create_producer(topic, producer_name="worker")
        shared._partitions[0]._conn.close()  # type: ignore[union-attr]
        await _until(lambda: not _holds(broker, topic, "worker"))
        holder = await other.create_producer(topic, access_mode="exclusive")
        pending = shared.send_async(b"after the exclusive producer")
        await _until(lambda: any("cannot attach (ProducerBusy" in r.getMessage()
                                 for r in caplog.records))
        await holder.close()
        await asyncio.wait_for(pending, 10)
