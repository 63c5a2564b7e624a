"""Where a topic's files are opened: a new topic, while nothing else loads, on the
event loop (a few system calls, less than the hand-off to a loader thread); a topic
that exists on disk always on a loader thread, since its recovery reads its log."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from official_client import quiet_logger

import magnetar.storage.ledger as ledger_module
from magnetar.testing import EmbeddedBroker


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool, str]]]:
    """(directory name, only_new, thread) of every ledger open, the real open running."""
    calls: list[tuple[str, bool, str]] = []
    real = ledger_module.ManagedLedger.open.__func__  # type: ignore[attr-defined]

    def recording(cls: Any, directory: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append((Path(directory).name, kwargs.get("only_new", False),
                      threading.current_thread().name))
        return real(cls, directory, *args, **kwargs)

    monkeypatch.setattr(ledger_module.ManagedLedger, "open", classmethod(recording))
    yield calls


def test_a_new_topic_opens_on_the_loop_and_an_existing_one_on_a_loader_thread(
    tmp_path: Path, opens: list[tuple[str, bool, str]]
) -> None:
    name = f"t-{uuid.uuid4().hex[:10]}"
    topic = f"persistent://public/default/{name}"
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        service, loop = broker.service, broker._loop
        assert service is not None and loop is not None
        loop_thread = asyncio.run_coroutine_threadsafe(_thread_name(), loop).result(10)
        client = pulsar.Client(broker.service_url, logger=quiet_logger())
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"before the unload")
            assert [(n, new, t) for n, new, t in opens if n == name] == [
                (name, True, loop_thread)]
            producer.close()
            asyncio.run_coroutine_threadsafe(
                service.unload_topic(service.topics[topic], "test"), loop).result(30)
            opens.clear()
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"before the unload"
            # Tried as new on the loop, found on disk: recovered on a loader thread.
            mine = [(new, t) for n, new, t in opens if n == name]
            assert mine[0] == (True, loop_thread)
            assert len(mine) == 2 and not mine[1][0] and mine[1][1].startswith("magnetar-load")
        finally:
            client.close()


async def _thread_name() -> str:
    return threading.current_thread().name
