"""Loaded topics nobody uses are bounded: beyond ``max_unused_loaded_topics`` the
longest unused are unloaded (files closed, state dropped), a topic with a client never."""

from __future__ import annotations

import time
import uuid

import pulsar
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker


def test_the_longest_unused_topics_beyond_the_bound_are_unloaded() -> None:
    prefix = f"persistent://public/default/bound-{uuid.uuid4().hex[:8]}"
    names = [f"{prefix}-{index}" for index in range(8)]
    # The unloader looks every 5 s; nothing is idle 600 s, so only the bound acts.
    with EmbeddedBroker(max_unused_loaded_topics=3, topic_idle_unload_seconds=600) as broker:
        service = broker.service
        assert service is not None
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        try:
            keeper = client.subscribe(names[0], "keeps-it")  # a client: never unloaded
            for name in names[1:]:
                producer = client.create_producer(name)
                producer.send(name.encode())
                producer.close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                loaded = set(service.topics)
                if len(loaded & set(names[1:])) <= 3:
                    break
                time.sleep(0.2)
            loaded = set(service.topics)
            assert names[0] in loaded
            assert len(loaded & set(names[1:])) == 3
            # An unloaded topic comes back on its next use, with its message.
            gone = next(name for name in names[1:] if name not in loaded)
            reader = client.create_reader(gone, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == gone.encode()
            keeper.close()
        finally:
            client.close()
