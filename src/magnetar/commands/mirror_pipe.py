"""Copying one source topic (or one partition of it) to the same name on the target.

A pipe holds a durable exclusive subscription on the source topic and a producer on
the target topic of the same name; it sends each message with its key, ordering
key, properties and event time, under the schema of the version it was written
with, and acknowledges it on the source only once the target has receipted it. So
a stopped or killed mirror starts again where its subscription was: what it sent
and had no time to acknowledge comes again, and is dropped as shown below.

Why a copy sent twice is stored once: the target's producer is named after the
source topic (``magnetar-mirror:persistent://t/ns/x-partition-0``), the same name at
every run, and each message's sequence id is its position on the source,
``entry_id << 20 | batch_index``. A magnetar topic's entry ids keep rising across
its ledgers (storage/ledger_ids.py), and a batch holds fewer than 2**20 messages
(an entry is at most a few MB, a batched message at least 7 bytes), so the ids
rise with the source's order. A target with deduplication on answers a producer's
connection with the last sequence id it stored under that name: a message at or
below it is already there and is acknowledged without being sent (counted
"already there"); a copy in flight when the mirror died, and sent again, the
target's deduplication drops (its receipt is -1:-1, counted the same). Without
deduplication on the target a restart can store those in-flight copies twice.
(Entry ids restart in each ledger of an Apache Pulsar topic: mirroring *from*
Apache Pulsar would need another numbering.)
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from magnetar.client.errors import ConsumerBusy, ProducerBusy
from magnetar.client.schema import SchemaInfo
from magnetar.commands.mirror_topics import MirrorError
from magnetar.commands.rest import AdminError, RestClient
from magnetar.protocol.topic_name import partitioned_base

if TYPE_CHECKING:
    from magnetar.client import Client, Consumer, Message, MessageId, Producer

INDEX_BITS = 20
PRODUCER_PREFIX = "magnetar-mirror"
_VERSION = struct.Struct(">q")  # a schema version in message metadata


def sequence_id(message_id: MessageId) -> int:
    """The target sequence id of a source message: its position, in source order."""
    index = max(message_id.batch_index, 0)
    if index >= 1 << INDEX_BITS:
        raise MirrorError(f"message {message_id}: a batch of more than {1 << INDEX_BITS} "
                          "messages cannot be numbered")
    return (message_id.entry_id << INDEX_BITS) | index


def check_order(last: MessageId | None, message_id: MessageId) -> None:
    """Refuse a source whose entry ids start again in a later ledger (Apache Pulsar's
    do; so would magnetar's after a machine crash lost entries the mirror had read):
    numbered by entry id, the target's deduplication would drop those messages. A
    redelivery goes back to an earlier ledger or entry, which is fine."""
    if (last is not None and message_id.ledger_id > last.ledger_id
            and message_id.entry_id < last.entry_id):
        raise MirrorError(
            f"message {message_id.ledger_id}:{message_id.entry_id} has a lower entry id than "
            f"{last.ledger_id}:{last.entry_id} before it: the source's entry ids start again "
            "in each ledger, and its messages cannot be numbered for deduplication")


def producer_name(source_topic: str) -> str:
    return f"{PRODUCER_PREFIX}:{source_topic}"


def is_duplicate(message_id: MessageId) -> bool:
    """A receipt for a message the target's deduplication did not store."""
    return message_id.ledger_id == -1 and message_id.entry_id == -1


def reached(message_id: MessageId, end: MessageId) -> bool:
    """Whether ``message_id`` is the last message of the entry ``end`` names, or later."""
    here = (message_id.ledger_id, message_id.entry_id)
    there = (end.ledger_id, end.entry_id)
    if here != there:
        return here > there
    index = message_id.batch_index
    if index < 0:
        return True
    if message_id.batch_size > 0:
        return index + 1 >= message_id.batch_size
    return index >= end.batch_index


class Schemas:
    """The source's schema of each version a message names, asked of its admin API
    once per version (the binary protocol's GET_SCHEMA is not in magnetar's client)."""

    def __init__(self, rest: RestClient, topic: str) -> None:
        tenant, namespace, local = partitioned_base(topic).partition("://")[2].split("/", 2)
        self._local = local
        self._path = (f"/admin/v2/schemas/{quote(tenant)}/{quote(namespace)}/"
                      f"{quote(local, safe='')}/schema/")
        self._rest = rest
        self._known: dict[int, SchemaInfo] = {}

    async def get(self, version: bytes | None) -> SchemaInfo | None:
        if not version or len(version) != 8:
            return None  # written without a schema
        number = _VERSION.unpack(version)[0]
        if number not in self._known:
            path = f"{self._path}{number}"
            try:
                doc: Any = (await asyncio.to_thread(self._rest.call, "GET", path)).json()
            except AdminError as exc:
                raise MirrorError(f"source admin API, GET {path}: {exc}") from None
            self._known[number] = SchemaInfo(
                type=str(doc.get("type", "BYTES")), schema=str(doc.get("data", "")).encode(),
                name=self._local, properties=dict(doc.get("properties") or {}),
            )
        return self._known[number]


@dataclass
class PipeCounts:
    copied: int = 0  # stored on the target by this run
    already: int = 0  # on the target before: not sent, or dropped by its deduplication


class Pipe:
    """One source topic or partition to the target topic of the same name."""

    def __init__(self, source: Client, target: Client, rest: RestClient, topic: str,
                 subscription: str, on_backlog: Callable[[int], None],
                 on_done: Callable[[int], None]) -> None:
        self.topic = topic
        self.counts = PipeCounts()
        self._source = source
        self._target = target
        self._rest = rest
        self._subscription = subscription
        self._schemas = Schemas(rest, topic)
        self._on_backlog = on_backlog
        self._on_done = on_done
        self._producer: Producer | None = None
        self._version: bytes | None = None
        # Sent messages in source order, each with its receipt (None: not sent).
        self._inflight: asyncio.Queue[tuple[asyncio.Future[MessageId] | None, Message] | None]
        self._inflight = asyncio.Queue(maxsize=2000)
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self._last: MessageId | None = None  # the last message read

    def stop(self) -> None:
        """Stop reading; what was sent is still receipted and acknowledged."""
        self._stopping = True
        if self._reader is not None:
            self._reader.cancel()

    async def run(self, follow: bool) -> None:
        """Copy the subscription's backlog, then, when ``follow``, what comes until
        :meth:`stop`."""
        try:
            consumer = await self._source.subscribe(
                self.topic, self._subscription, subscription_type="exclusive",
                initial_position="earliest", consumer_name=PRODUCER_PREFIX,
            )
        except ConsumerBusy:
            raise MirrorError(f"{self.topic}: subscription {self._subscription!r} is held by "
                              "another consumer (is another mirror running?)") from None
        try:
            backlog = await self._backlog()
            self._on_backlog(backlog)
            if follow:
                await self._copy(consumer, None)
            elif backlog:  # to the source's last message as the run began
                await self._copy(consumer, await consumer.get_last_message_id())
        finally:
            if self._producer is not None:
                await self._producer.close()
            await consumer.flush_acks()
            await consumer.close()

    async def _backlog(self) -> int:
        """Entries this subscription has yet to copy (from the source's stats)."""
        tenant, namespace, local = self.topic.partition("://")[2].split("/", 2)
        path = (f"/admin/v2/persistent/{quote(tenant)}/{quote(namespace)}/"
                f"{quote(local, safe='')}/stats")
        try:
            doc: Any = (await asyncio.to_thread(self._rest.call, "GET", path)).json()
        except AdminError as exc:
            raise MirrorError(f"source admin API, GET {path}: {exc}") from None
        subscription = (doc.get("subscriptions") or {}).get(self._subscription) or {}
        return int(subscription.get("msgBacklog", 0))

    async def _copy(self, consumer: Consumer, end: MessageId | None) -> None:
        if self._stopping:
            return
        reader = self._reader = asyncio.create_task(self._read(consumer, end))
        acker = asyncio.create_task(self._acknowledge(consumer))
        done, _ = await asyncio.wait({reader, acker}, return_when=asyncio.FIRST_COMPLETED)
        if acker in done:  # it ends early only on a failed send
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            acker.result()
        if not reader.cancelled() and reader.exception() is not None:
            acker.cancel()
            await asyncio.gather(acker, return_exceptions=True)
            reader.result()
        await self._inflight.put(None)
        await acker

    async def _read(self, consumer: Consumer, end: MessageId | None) -> None:
        while True:
            message = await consumer.receive()
            await self._send(message)
            if end is not None and reached(message.message_id, end):
                return

    async def _send(self, message: Message) -> None:
        position = message.message_id
        check_order(self._last, position)
        self._last = position
        sequence = sequence_id(position)
        producer = await self._producer_for(message.schema_version)
        if sequence <= producer.last_sequence_id:
            await self._inflight.put((None, message))  # the target has it
            return
        future = producer.send_async(
            message.value, key=message.key, ordering_key=message.ordering_key,
            properties=message.properties, event_time=message.event_time,
            sequence_id=sequence,
        )
        await self._inflight.put((future, message))

    async def _producer_for(self, version: bytes | None) -> Producer:
        producer = self._producer
        if producer is not None and version == self._version:
            return producer
        schema = await self._schemas.get(version)
        if producer is not None:
            # A new schema version: the producer goes after its last receipt and comes
            # back under the same name (so the same deduplication state) with it.
            await self._inflight.join()
            await producer.close()
            self._producer = None
        try:
            self._producer = await self._target.create_producer(
                self.topic, producer_name=producer_name(self.topic), schema=schema,
                send_timeout=0,  # a slow target is waited for; the client reconnects
                max_pending_messages=1000,
            )
        except ProducerBusy:
            raise MirrorError(f"{self.topic}: the target has a producer named "
                              f"{producer_name(self.topic)!r} already (is another mirror "
                              "running?)") from None
        except ValueError as exc:  # a schema type the client cannot declare
            raise MirrorError(f"{self.topic}: {exc}") from None
        self._version = version
        return self._producer

    async def _acknowledge(self, consumer: Consumer) -> None:
        queue = self._inflight
        while True:
            item = await queue.get()
            if item is None:
                queue.task_done()
                return
            future, message = item
            if future is None or is_duplicate(await future):
                self.counts.already += 1
            else:
                self.counts.copied += 1
            await consumer.acknowledge(message)
            queue.task_done()
            self._on_done(1)
