"""GET_SCHEMA on a topic that is still loading waits for the load and answers with the
schema (issue 23, item 6), as every other command does; it answered UnknownError with a
traceback in the log."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import pytest

from magnetar.broker.topic_name import TopicName
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer
from .test_schema_wire import get_or_create

SCHEMA = pb.Schema(
    name="rec", schema_data=b'{"type":"record","name":"R","fields":[]}', type=pb.Schema.Json
)


def test_get_schema_on_a_loading_topic_waits_for_the_load(tmp_path: Path) -> None:
    topic = f"persistent://public/default/loading-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        service = broker.service
        assert service is not None
        creator = RawPeer(broker.port)  # GET_OR_CREATE_SCHEMA creates no topic (as Pulsar)
        creator.producer(topic)
        peer = RawPeer(broker.port)
        version = get_or_create(peer, topic, SCHEMA, 1).schema_version
        creator.close()

        def on_loop(coro):  # type: ignore[no-untyped-def]
            return asyncio.run_coroutine_threadsafe(coro, service.loop).result(30)

        async def unload() -> None:
            await service.unload_topic(service.topics[topic], "test")

        async def start_loading() -> None:
            service.load_topic(TopicName.parse(topic), create=False)

        on_loop(unload())
        # Both topic-loading threads are busy, so the load waits behind them: the topic
        # is loading (not loaded) for as long as the test holds them.
        gate = threading.Event()
        busy = [service._loader.submit(gate.wait) for _ in range(2)]
        try:
            on_loop(start_loading())
            assert topic not in service.topics
            peer.send(
                BaseCommand(
                    type=BaseCommand.GET_SCHEMA,
                    getSchema=pb.CommandGetSchema(request_id=2, topic=topic),
                )
            )
            with pytest.raises(TimeoutError):  # no answer yet, and no error either
                peer.next_frame(timeout=0.3)
        finally:
            gate.set()
        for job in busy:
            job.result(30)
        frame = peer.next_frame(timeout=30)
        assert frame.command.type == BaseCommand.GET_SCHEMA_RESPONSE, frame.command
        response = frame.command.getSchemaResponse
        assert response.request_id == 2 and not response.HasField("error_code")
        assert response.schema.schema_data == SCHEMA.schema_data
        assert response.schema_version == version
