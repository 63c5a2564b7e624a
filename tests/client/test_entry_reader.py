"""The entry reader (client/entry_reader.py) against a real broker: it reads past the
broker's bound on an exclusive consumer's unacknowledged entries, as the official
readers do by acknowledging what they read."""

from __future__ import annotations

import asyncio
import uuid

from magnetar.client import Client
from magnetar.client.entry_reader import ACK_EVERY, EntryReader
from magnetar.protocol.message_id import EARLIEST
from magnetar.testing import EmbeddedBroker


async def test_a_reader_reads_more_entries_than_a_consumer_may_hold_unacked() -> None:
    limit = ACK_EVERY + ACK_EVERY // 2
    total = 2 * limit + 7
    topic = f"persistent://public/default/entries-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(max_unacked_per_consumer=limit) as broker:
        async with Client(broker.service_url) as client:
            producer = await client.create_producer(topic, batching=False)
            await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(total)))
            reader = await EntryReader.create(client, topic, EARLIEST,
                                              start_message_id_inclusive=True)
            got = []
            try:
                for _ in range(total):
                    entry = await reader.read_next(10)  # stalled at `limit` entries before
                    got.append(entry.payload)
                assert not await reader.has_message_available()
            finally:
                await reader.close()
    assert got == [b"%d" % i for i in range(total)]
