"""The client: connection pool, lookups, and the factory of producers, consumers, readers."""

from __future__ import annotations

import asyncio
import itertools
import re
import ssl as _ssl
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from magnetar.client.backoff import Backoff, Clock, RedeliveryBackoff
from magnetar.client.consuming.consumer import (
    INITIAL_POSITIONS,
    SUBSCRIPTION_TYPES,
    Consumer,
    ConsumerConfig,
    MessageListener,
)
from magnetar.client.consuming.dead_letter import (
    DEFAULT_ACK_TIMEOUT_FOR_DEAD_LETTER,
    DeadLetterPolicy,
)
from magnetar.client.consuming.payload_processor import PayloadProcessor
from magnetar.client.consuming.reader import Reader
from magnetar.client.consuming.retry_topic import retry_letter_policy
from magnetar.client.errors import AlreadyClosed
from magnetar.client.producing.producer import (
    ACCESS_MODES,
    PartitionProducer,
    Producer,
    ProducerConfig,
)
from magnetar.client.producing.routing import Router, make_router
from magnetar.client.schema import SchemaInfo
from magnetar.client.transport.auth import Authentication
from magnetar.client.transport.auth import tls_context as tls_context_for
from magnetar.client.transport.lookup import LookupService
from magnetar.client.transport.pool import ConnectionPool
from magnetar.protocol.compression import compression_type
from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId
from magnetar.protocol.topic_name import (
    DEFAULT_NAMESPACE_PREFIX,
    complete_topic_name,
    partition_name,
    pattern_namespace,
)


def _choice(name: str, value: str, table: Mapping[str, int]) -> int:
    try:
        return table[value.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"{name} must be one of {sorted(table)}, not {value!r}") from None


class Client:
    """An asyncio Pulsar client.

    ``async with Client("pulsar://127.0.0.1:6650") as client: ...`` or
    ``await client.close()`` when done.  Nothing connects until the first use.
    """

    def __init__(
        self,
        service_url: str,
        *,
        operation_timeout: float = 30.0,
        connection_timeout: float = 10.0,
        auth: Authentication | None = None,
        keep_alive_interval: float = 30.0,
        initial_backoff: float = 0.1,
        max_backoff: float = 60.0,
        max_lookup_redirects: int = 20,
        listener_name: str | None = None,
        tls_context: _ssl.SSLContext | None = None,
        tls_trust_certs_file_path: str | None = None,
        tls_validate_hostname: bool = False,
        tls_allow_insecure_connection: bool = False,
    ) -> None:
        self.service_url = service_url
        self.operation_timeout = operation_timeout
        self.connection_timeout = connection_timeout
        self._auth = auth
        self._keep_alive_interval = keep_alive_interval
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        if tls_context is None and service_url.startswith("pulsar+ssl://"):
            # The official client's TLS options (an explicit tls_context wins).
            tls_context = tls_context_for(
                trust_certs_file=tls_trust_certs_file_path,
                validate_hostname=tls_validate_hostname,
                allow_insecure_connection=tls_allow_insecure_connection,
                auth=auth,
            )
        self._pool = ConnectionPool(
            auth=auth,
            connection_timeout=connection_timeout,
            operation_timeout=operation_timeout,
            keep_alive_interval=keep_alive_interval,
            ssl_context=tls_context,
        )
        self._lookup = LookupService(
            self._pool, service_url, max_redirects=max_lookup_redirects,
            listener_name=listener_name,
        )
        self._producer_ids = itertools.count()
        self._consumer_ids = itertools.count()
        self._open: set[Producer | Consumer] = set()
        self._closed = False

    # ------------------------------------------------------------------ internals

    def _next_producer_id(self) -> int:
        return next(self._producer_ids)

    def _next_consumer_id(self) -> int:
        return next(self._consumer_ids)

    def _new_backoff(self) -> Backoff:
        return Backoff(self._initial_backoff, self._max_backoff)

    def _forget(self, thing: Producer | Consumer) -> None:
        self._open.discard(thing)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("client is closed")

    # ------------------------------------------------------------------ metadata

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition topics of ``topic`` (``[topic]`` when it is not partitioned)."""
        self._check_open()
        topic = complete_topic_name(topic)
        count = await self._lookup.get_partition_count(topic)
        return [partition_name(topic, i) for i in range(count)] if count else [topic]

    async def get_schema(self, topic: str, version: bytes | None = None) -> SchemaInfo | None:
        """``topic``'s schema as the broker keeps it (the latest, or the one of
        ``version``, a message's ``schema_version``); None when it has none. A
        partitioned topic's schema is its partitions' (the broker answers for them)."""
        self._check_open()
        found = await self._lookup.get_schema(complete_topic_name(topic), version)
        return None if found is None else found[0]

    # ------------------------------------------------------------------ producers

    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        batching: bool = False,
        batching_max_messages: int = 1000,
        batching_max_bytes: int = 128 * 1024,
        batching_max_delay: float = 0.01,
        compression: str | None = None,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = True,
        send_timeout: float = 30.0,
        access_mode: str = "shared",
        message_routing: str | Router = "round_robin",
        schema: SchemaInfo | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Producer:
        """Create a producer (one per partition behind the scenes for a partitioned topic)."""
        self._check_open()
        topic = complete_topic_name(topic)
        conf = ProducerConfig(
            producer_name=producer_name,
            batching=batching,
            batching_max_messages=batching_max_messages,
            batching_max_bytes=batching_max_bytes,
            batching_max_delay=batching_max_delay,
            compression=compression_type(compression),
            max_pending_messages=max_pending_messages,
            block_if_queue_full=block_if_queue_full,
            send_timeout=send_timeout,
            access_mode=_choice("access_mode", access_mode, ACCESS_MODES),
            schema=schema,
            properties=dict(properties or {}),
        )
        router = make_router(message_routing)
        count = await self._lookup.get_partition_count(topic)
        if count:
            partitions = [
                PartitionProducer(self, partition_name(topic, i), i, conf) for i in range(count)
            ]
        else:
            partitions = [PartitionProducer(self, topic, -1, conf)]
        results = await asyncio.gather(*(p.start() for p in partitions), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in partitions), return_exceptions=True)
            raise errors[0]
        producer = Producer(self, topic, partitions, router, count > 0)
        self._open.add(producer)
        return producer

    # ------------------------------------------------------------------ consumers

    async def subscribe(
        self,
        topic: str | Sequence[str] | re.Pattern[str],
        subscription: str,
        *,
        subscription_type: str = "exclusive",
        initial_position: str = "latest",
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        priority_level: int = 0,
        ack_timeout: float | None = None,
        negative_ack_redelivery_delay: float | None = None,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        dead_letter_policy: DeadLetterPolicy | None = None,
        retry_enable: bool = False,
        durable: bool = True,
        schema: SchemaInfo | None = None,
        properties: Mapping[str, str] | None = None,
        subscription_properties: Mapping[str, str] | None = None,
        message_listener: MessageListener | None = None,
        read_compacted: bool = False,
        ack_group_time: float = 0.1,
        ack_group_max_size: int = 1000,
        pattern_auto_discovery_period: float = 60.0,
        clock: Clock | None = None,
        payload_processor: PayloadProcessor | None = None,
        batch_index_ack_enabled: bool = False,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics, or a compiled regular expression.

        A pattern matches full topic names within one namespace, e.g.
        ``re.compile("persistent://public/default/orders-.*")``.

        A nacked message comes again after ``negative_ack_redelivery_delay`` seconds
        (60 unless given) or, with a PIP-106 ``negative_ack_redelivery_backoff``, after
        the delay the backoff computes from its redelivery count; giving both is a
        ``ValueError``. An ``ack_timeout_redelivery_backoff`` holds a message whose ack
        timed out back for the delay it computes before asking for its redelivery.

        With a ``dead_letter_policy`` a message that failed more than its
        ``max_redeliver_count`` times goes to the dead-letter topic (see
        :mod:`magnetar.client.consuming.dead_letter`); the ack timeout is then 30 s unless given
        (``ack_timeout=0`` turns it off), as in the Java client. ``retry_enable``
        subscribes to the retry topic too and enables ``consumer.reconsume_later``
        (see :mod:`magnetar.client.consuming.retry_topic`).

        A PIP-96 ``payload_processor`` turns each received entry into messages (see
        :mod:`magnetar.client.consuming.payload_processor`); without one, entries are read in
        Pulsar's format.

        With ``batch_index_ack_enabled`` (as the official client's option) an ack of
        some messages of a batch is sent to the broker (grouped as other acks are)
        with the ``ack_set`` of those left (PIP-54): a broker with batch-index acks on
        keeps it, so after a reconnect or redelivery only the unacked messages come
        again. Without it the batch is acked when all of its messages are, and until
        then comes again whole.
        """
        self._check_open()
        if dead_letter_policy is not None and ack_timeout is None:
            ack_timeout = DEFAULT_ACK_TIMEOUT_FOR_DEAD_LETTER
        conf = ConsumerConfig(
            subscription=subscription,
            subscription_type=_choice("subscription_type", subscription_type,
                                      SUBSCRIPTION_TYPES),
            initial_position=_choice("initial_position", initial_position, INITIAL_POSITIONS),
            receiver_queue_size=receiver_queue_size,
            consumer_name=consumer_name,
            priority_level=priority_level,
            ack_timeout=ack_timeout,
            negative_ack_redelivery_delay=negative_ack_redelivery_delay,
            negative_ack_redelivery_backoff=negative_ack_redelivery_backoff,
            ack_timeout_redelivery_backoff=ack_timeout_redelivery_backoff,
            dead_letter_policy=dead_letter_policy,
            retry_enable=retry_enable,
            durable=durable,
            schema=schema,
            properties=dict(properties or {}),
            subscription_properties=dict(subscription_properties or {}),
            read_compacted=read_compacted,
            ack_group_time=ack_group_time,
            ack_group_max_size=ack_group_max_size,
            clock=clock,
            payload_processor=payload_processor,
            batch_index_ack_enabled=batch_index_ack_enabled,
        )
        kwargs: dict[str, Any] = {"message_listener": message_listener}
        if isinstance(topic, re.Pattern):
            source = topic.pattern
            if "://" not in source:
                topic = re.compile(DEFAULT_NAMESPACE_PREFIX + source, topic.flags)
            kwargs.update(
                pattern=topic,
                pattern_namespace=pattern_namespace(topic.pattern),
                pattern_auto_discovery_period=pattern_auto_discovery_period,
            )
            topics: list[str] = []
        elif isinstance(topic, str):
            topics = [complete_topic_name(topic)]
        else:
            topics = list(dict.fromkeys(complete_topic_name(t) for t in topic))
            if not topics:
                raise ValueError("subscribe() needs at least one topic")
        if retry_enable:
            if not topics:
                raise ValueError("retry_enable needs topic names, not a pattern")
            conf.dead_letter_policy = retry_letter_policy(topics[0], subscription,
                                                          dead_letter_policy)
            retry_topic = complete_topic_name(conf.dead_letter_policy.retry_letter_topic or "")
            if retry_topic not in topics:
                topics.append(retry_topic)
        consumer = Consumer(self, topics, conf, **kwargs)
        await consumer._start()
        self._open.add(consumer)
        return consumer

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        *,
        start_message_id_inclusive: bool = False,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        receiver_queue_size: int = 1000,
        read_compacted: bool = False,
        schema: SchemaInfo | None = None,
        payload_processor: PayloadProcessor | None = None,
    ) -> Reader:
        """A reader of ``topic`` starting at ``start_message_id`` (or EARLIEST / LATEST);
        ``payload_processor`` as for :meth:`subscribe`."""
        self._check_open()
        topic = complete_topic_name(topic)
        subscription = f"{subscription_role_prefix or 'reader'}-{uuid.uuid4().hex[:10]}"
        conf = ConsumerConfig(
            subscription=subscription,
            subscription_type=SUBSCRIPTION_TYPES["exclusive"],
            initial_position=INITIAL_POSITIONS[
                "earliest" if start_message_id == EARLIEST else "latest"
            ],
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            durable=False,
            schema=schema,
            read_compacted=read_compacted,
            start_message_id_inclusive=start_message_id_inclusive,
            payload_processor=payload_processor,
        )
        consumer = Consumer(self, [topic], conf, start_message_id=start_message_id)
        await consumer._start()
        if len(consumer._subs) > 1 and start_message_id not in (EARLIEST, LATEST):
            await consumer.close()
            raise ValueError("a reader of a partitioned topic must start at EARLIEST or LATEST")
        if start_message_id == LATEST and start_message_id_inclusive:
            # Start with the last message itself, as the official clients do.
            for sub in consumer._subs.values():
                last, _ = await sub.get_last_message_id()
                if last.entry_id >= 0:
                    await sub.seek(last)
        self._open.add(consumer)
        return Reader(consumer)

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Close every producer and consumer of this client, then its connections."""
        if self._closed:
            return
        self._closed = True
        things = list(self._open)
        await asyncio.gather(*(t.close() for t in things), return_exceptions=True)
        self._pool.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
