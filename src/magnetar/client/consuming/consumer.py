"""Consumers: one subscription over one or more topics, as the application sees it.

:class:`Consumer` owns one :class:`~magnetar.client.consuming.topic_consumer.TopicConsumer`
per topic or partition (a multi-topic, pattern or partitioned subscription has
several) and the one receiver queue they all feed; it offers ``receive``,
``batch_receive``, async iteration, listeners, acks, nacks, seeks, and the PIP-371
request-handler loop.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol, overload

from magnetar.client.consuming.acks import BatchAcker
from magnetar.client.consuming.config import INITIAL_POSITIONS, SUBSCRIPTION_TYPES, ConsumerConfig
from magnetar.client.consuming.dead_letter import LetterFactory, LetterProducers
from magnetar.client.consuming.entries import FailedEntry, RawEntry
from magnetar.client.consuming.payload_processor import PayloadProcessingError
from magnetar.client.consuming.receiver_queue import ReceiverQueue
from magnetar.client.consuming.retry_topic import reconsume_later
from magnetar.client.consuming.topic_consumer import TopicConsumer
from magnetar.client.consuming.topic_state import TopicConsumerBase, TopicConsumerClient
from magnetar.client.errors import AlreadyClosed, PulsarError, TimeoutError
from magnetar.client.message import Message
from magnetar.client.request_reply import responder
from magnetar.client.request_reply.requests import ReplyReceipt, Request
from magnetar.client.request_reply.responder import Handler
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import partition_index, partition_name, partitioned_base

__all__ = [
    "INITIAL_POSITIONS",
    "SUBSCRIPTION_TYPES",
    "Consumer",
    "ConsumerConfig",
    "MessageListener",
    "TopicConsumer",
]

log = logging.getLogger("magnetar.client.consumer")

# Java's default cap on the prefetch of all partitions of one consumer together.
MAX_TOTAL_RECEIVER_QUEUE_SIZE = 50_000

MessageListener = Callable[["Consumer", Message], Awaitable[None] | None]

# receive() lets the event loop run after this many prefetched messages in a row.
_YIELD_EVERY = 64


class ConsumerClient(TopicConsumerClient, LetterFactory, Protocol):
    """What a consumer needs of its client (:class:`~magnetar.client.Client` is one):
    its topic consumers' needs, letter producers, and to be forgotten once closed."""

    def _forget(self, thing: Consumer) -> None: ...


class Consumer:
    """A subscription to one or more topics (a list, a pattern, or a partitioned topic)."""

    def __init__(
        self,
        client: ConsumerClient,
        topics: list[str],
        conf: ConsumerConfig,
        *,
        pattern: re.Pattern[str] | None = None,
        pattern_namespace: tuple[str, str] | None = None,
        pattern_auto_discovery_period: float = 60.0,
        start_message_id: MessageId | None = None,
        message_listener: MessageListener | None = None,
    ) -> None:
        self._client = client
        self._topics = topics
        self.conf = conf
        self._pattern = pattern
        self._pattern_namespace = pattern_namespace
        self._discovery_period = pattern_auto_discovery_period
        self._start_message_id = start_message_id
        # Messages, and entries not decoded yet (decoded as they are taken).
        self._queue: ReceiverQueue[Message | RawEntry] = ReceiverQueue()
        self._subs: dict[str, TopicConsumer] = {}
        self._by_partition: dict[int, TopicConsumer] = {}
        self._partitioned_topics: dict[str, int] = {}
        self._closed = False
        self.refused_replies = 0  # PIP-371 replies the broker did not accept
        self._listener = message_listener
        self._listener_task: asyncio.Task[None] | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        self._failure: PulsarError | None = None
        self._since_yield = 0
        # PIP-106: the producers of dead and retry letters, created on first use.
        policy = conf.dead_letter_policy
        self._letters = (
            LetterProducers(client, policy.initial_subscription_name)
            if policy is not None else None
        )

    # ------------------------------------------------------------------ setup

    async def _start(self) -> None:
        try:
            if self._pattern is not None:
                await self._discover()
                self._discovery_task = asyncio.get_running_loop().create_task(
                    self._discovery_loop()
                )
            else:
                partition_counts = await asyncio.gather(
                    *(self._client._lookup.get_partition_count(t) for t in self._topics)
                )
                plan: list[tuple[str, int]] = []
                for topic, count in zip(self._topics, partition_counts, strict=True):
                    if count > 0:
                        self._partitioned_topics[topic] = count
                        plan.extend((partition_name(topic, i), i) for i in range(count))
                    else:
                        plan.append((topic, -1))
                await self._add(plan)
        except BaseException:
            await self._close_subs()
            raise
        if self._listener is not None:
            self._listener_task = asyncio.get_running_loop().create_task(self._run_listener())

    def _queue_size_for(self, count: int) -> int:
        size = self.conf.receiver_queue_size
        if count > 1:
            size = max(1, min(size, MAX_TOTAL_RECEIVER_QUEUE_SIZE // count))
        return size

    async def _add(self, plan: list[tuple[str, int]]) -> None:
        total = len(self._subs) + len(plan)
        size = self._queue_size_for(total)
        subs = [
            TopicConsumer(self._client, self, topic, partition, self.conf, size,
                          self._start_message_id)
            for topic, partition in plan
        ]
        results = await asyncio.gather(*(s.start() for s in subs), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(s.close() for s in subs), return_exceptions=True)
            raise errors[0]
        for sub in subs:
            self._subs[sub.topic] = sub
            if sub.partition >= 0:
                self._by_partition[sub.partition] = sub

    async def _discover(self) -> None:
        assert self._pattern is not None and self._pattern_namespace is not None
        domain, namespace = self._pattern_namespace
        mode = "persistent" if domain == "persistent" else "non-persistent"
        names = await self._client._lookup.get_topics_of_namespace(namespace, mode)
        wanted = {
            name for name in names
            if self._pattern.fullmatch(name) or self._pattern.fullmatch(partitioned_base(name))
        }
        added = sorted(wanted - self._subs.keys())
        removed = [t for t in self._subs if t not in wanted]
        if added:
            await self._add([(t, partition_index(t)) for t in added])
        for topic in removed:
            sub = self._subs.pop(topic)
            await sub.close()

    async def _discovery_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._discovery_period)
            try:
                await self._discover()
            except PulsarError as exc:
                log.warning("topic discovery for %s failed: %s", self._pattern, exc)

    def _sub_failed(self, sub: TopicConsumerBase, exc: PulsarError) -> None:
        log.error("consumer of %s failed: %s", sub.topic, exc)
        self._failure = exc

    # ------------------------------------------------------------------ properties

    @property
    def topic(self) -> str:
        if self._pattern is not None:
            return self._pattern.pattern
        return self._topics[0] if len(self._topics) == 1 else ",".join(self._topics)

    @property
    def topics(self) -> list[str]:
        return list(self._subs)

    @property
    def subscription_name(self) -> str:
        return self.conf.subscription

    @property
    def consumer_name(self) -> str | None:
        return self.conf.consumer_name

    @property
    def discarded_entries(self) -> int:
        """Entries acknowledged unread because they could not be decoded (a failed
        checksum, unparsable metadata, a payload that does not decompress, a batch
        that does not hold the messages its count says); each was logged once."""
        return sum(s.discarded_entries for s in self._subs.values())

    def is_connected(self) -> bool:
        return bool(self._subs) and all(s.connected for s in self._subs.values())

    def has_reached_end_of_topic(self) -> bool:
        return bool(self._subs) and all(s.reached_end_of_topic for s in self._subs.values())

    # ------------------------------------------------------------------ receiving

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"consumer {self.conf.subscription} on {self.topic} is closed")

    def _take(self, item: Message | RawEntry) -> Message | None:
        """The next message from a queue item: a raw entry is decoded here, its other
        messages go back to the head of the queue. ``None`` if it had none to give."""
        if isinstance(item, Message):  # a DecodedMessage too (receive tests Message only)
            return item
        if type(item) is FailedEntry:
            raise item.error
        assert isinstance(item, RawEntry)
        sub = item._consumer
        messages = sub.decode(item)
        if sub._dead_letters is not None and messages:
            messages = sub.screen_dead_letters(item, messages)
        if not messages:
            return None
        if len(messages) > 1:
            self._queue.push_front(messages[1:])  # type: ignore[arg-type]
        return messages[0]

    async def receive(self, timeout: float | None = None) -> Message:
        """The next message; waits up to ``timeout`` seconds (forever if ``None``)."""
        self._check_open()
        queue = self._queue
        deadline: float | None = None
        while True:
            item = queue.get_nowait()
            if item is None:
                self._since_yield = 0
                wait = timeout
                if timeout is not None:
                    now = asyncio.get_running_loop().time()
                    if deadline is None:
                        deadline = now + timeout
                    wait = max(0.0, deadline - now)
                try:
                    item = await queue.get(wait)
                except builtins.TimeoutError:
                    raise TimeoutError(f"no message within {timeout}s") from None
            else:
                # Queued items return without suspending; let the loop read the
                # socket now and then, or the broker waits on a full socket buffer.
                self._since_yield += 1
                if self._since_yield >= _YIELD_EVERY:
                    self._since_yield = 0
                    await asyncio.sleep(0)
            msg = item if type(item) is Message else self._take(item)
            if msg is not None:
                break
        msg._consumer._on_dequeued(msg)
        return msg

    def receive_nowait(self) -> Message | None:
        """A message if one is prefetched, else ``None``."""
        self._check_open()
        while True:
            item = self._queue.get_nowait()
            if item is None:
                return None
            msg = self._take(item)
            if msg is not None:
                msg._consumer._on_dequeued(msg)
                return msg

    async def batch_receive(
        self, max_messages: int = 100, timeout: float = 0.1
    ) -> list[Message]:
        """Up to ``max_messages``, returning early when that many are in, else after
        ``timeout`` seconds (possibly an empty list)."""
        self._check_open()
        out: list[Message] = []
        queue = self._queue
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(out) < max_messages:
            item = queue.get_nowait()
            if item is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await queue.get(remaining)
                except builtins.TimeoutError:
                    break
            try:
                msg = self._take(item)
            except PayloadProcessingError as exc:
                if not out:
                    raise
                # The messages taken so far go out; the next receive raises this.
                self._queue.push_front([FailedEntry(exc.entry._consumer, exc)])
                break
            if msg is None:
                continue
            msg._consumer._on_dequeued(msg)
            out.append(msg)
        return out

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosed:
            raise StopAsyncIteration from None

    async def _run_listener(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closed:
            try:
                msg = await self.receive()
            except (AlreadyClosed, asyncio.CancelledError):
                return
            except PayloadProcessingError as exc:
                # No receive() to raise it to: log it and have the entry come again later.
                log.error("%s", exc, exc_info=exc.__cause__)
                self.negative_acknowledge(exc.entry)
                continue
            try:
                result = listener(self, msg)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("message listener of %s raised", self.conf.subscription)

    # ------------------------------------------------------------------ acks

    def _sub_for(self, target: Message | MessageId) -> tuple[TopicConsumer, MessageId,
                                                              BatchAcker | None]:
        if isinstance(target, Message):
            sub = target._consumer
            if not isinstance(sub, TopicConsumer) or sub._parent is not self:
                raise ValueError("this message was not received by this consumer")
            return sub, target.message_id, target._acker
        if len(self._subs) == 1:
            return next(iter(self._subs.values())), target, None
        if target.partition >= 0 and len(self._partitioned_topics) == 1 and len(
            self._by_partition
        ) == len(self._subs):
            sub = self._by_partition.get(target.partition)
            if sub is not None:
                return sub, target, None
        raise ValueError(
            "on a multi-topic consumer pass the Message itself (a MessageId does not name "
            "its topic)"
        )

    @overload
    async def acknowledge(
        self, message: Message | MessageId, *, reply: None = None, is_error: bool = False
    ) -> None: ...

    @overload
    async def acknowledge(
        self, message: Message | MessageId, *, reply: bytes | str, is_error: bool = False
    ) -> ReplyReceipt: ...

    async def acknowledge(
        self,
        message: Message | MessageId,
        *,
        reply: bytes | str | None = None,
        is_error: bool = False,
    ) -> ReplyReceipt | None:
        """Acknowledge one message. Grouped acks return once queued (see
        :meth:`flush_acks`).

        PIP-371: with ``reply`` (``is_error`` for an error result) the ack goes out
        at once carrying the reply for the message's producer.  Replying is
        pipelined: this returns once the reply is written, with a receipt (an
        awaitable) that the broker's verdict settles: ``await`` it to learn whether
        the broker accepted the reply; a refused one raises the error for its code
        there (e.g. :class:`~magnetar.client.errors.NotAllowed`), and is logged and
        counted in :attr:`refused_replies` whether awaited or not; the message then
        stays unacknowledged, to be delivered again.  Given a :class:`Message`, the
        ack names its producer; given a :class:`MessageId`, the broker finds the
        requester from the stored request.  A reply larger than the broker's
        ``max_message_size`` raises :class:`~magnetar.client.errors.MessageTooBig` at
        once, without sending anything.
        """
        if type(message) is Message:
            sub = message._consumer  # the hot path: a message received here
            if sub is not None and sub._parent is self and not self._closed:
                if reply is None:
                    sub.acknowledge_message(message)
                    return None
                if isinstance(sub, TopicConsumer):  # a reply, sent at once when attached
                    body = reply.encode() if isinstance(reply, str) else bytes(reply)
                    receipt = sub.reply_to_message(message, body, is_error)
                    if receipt is not None:
                        return receipt
        self._check_open()
        sub, message_id, acker = self._sub_for(message)
        if reply is not None:
            body = reply.encode() if isinstance(reply, str) else bytes(reply)
            requester = message.producer_name if isinstance(message, Message) else ""
            return await sub.reply(message_id, requester, acker, body, is_error)
        sub.acknowledge(message_id, acker)
        return None

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and every earlier one of its topic (or partition)."""
        self._check_open()
        if self.conf.shared:
            raise ValueError("cumulative acks are not allowed on shared subscriptions")
        sub, message_id, acker = self._sub_for(message)
        sub.acknowledge_cumulative(message_id, acker)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message redelivered after the nack delay (or PIP-106 backoff)."""
        self._check_open()
        sub, message_id, _ = self._sub_for(message)
        count = message.redelivery_count if isinstance(message, Message) else 0
        sub.negative_acknowledge(message_id, count)

    async def reconsume_later(
        self,
        message: Message,
        delay: float,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Have ``message`` delivered again in ``delay`` seconds through the retry topic
        (``subscribe(..., retry_enable=True)``), with ``properties`` added to its own;
        past the dead-letter policy's ``max_redeliver_count`` it goes to the DLQ.

        Returns once the copy is receipted and the original acknowledged. If either
        fails, the original is redelivered at once and the error raised.
        """
        self._check_open()
        if not self.conf.retry_enable or self._letters is None:
            raise ValueError("reconsume_later() needs subscribe(..., retry_enable=True)")
        if not isinstance(message, Message):
            raise TypeError("reconsume_later() needs the Message itself (its copy carries "
                            "its payload and properties)")
        sub, message_id, _ = self._sub_for(message)
        policy = self.conf.dead_letter_policy
        assert policy is not None
        try:
            await reconsume_later(self._letters, policy, message, delay, properties,
                                  self.acknowledge)
        except Exception:
            if not self._closed:
                if sub._unacked is not None:
                    sub._unacked.remove(message_id)
                sub._redeliver([(message_id.ledger_id, message_id.entry_id)])
            raise

    async def flush_acks(self) -> None:
        """Send every queued ack now."""
        for sub in self._subs.values():
            sub.flush_to_socket()
        for conn in {s._conn for s in self._subs.values() if s._conn is not None}:
            conn._flush()

    def redeliver_unacknowledged_messages(self) -> None:
        for sub in self._subs.values():
            sub.redeliver_all()

    # ------------------------------------------------------------------ positions

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id, or to a publish time (ms since epoch)."""
        self._check_open()
        if isinstance(target, MessageId) and len(self._subs) > 1:
            if target.is_earliest or target.is_latest:
                await asyncio.gather(*(s.seek(target) for s in self._subs.values()))
                return
            sub, message_id, _ = self._sub_for(target)
            await sub.seek(message_id)
            return
        await asyncio.gather(*(s.seek(target) for s in self._subs.values()))

    async def get_last_message_id(self) -> MessageId:
        self._check_open()
        if len(self._subs) != 1:
            raise ValueError("get_last_message_id() needs a single-topic consumer")
        last, _ = await next(iter(self._subs.values())).get_last_message_id()
        return last

    async def has_message_available(self) -> bool:
        self._check_open()
        results = await asyncio.gather(*(s.has_message_available() for s in self._subs.values()))
        return any(results)

    # ------------------------------------------------------------------ PIP-371

    async def requests(
        self,
        *,
        skip_expired: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> AsyncIterator[Request]:
        """PIP-371 request handling: ``async for req in consumer.requests(): await req.reply(...)``.

        Every message comes as a :class:`~magnetar.client.request_reply.Request`
        (``req.is_request`` is False for ordinary messages).  With
        ``skip_expired``, requests whose requester has already given up are
        acknowledged without a reply and not yielded.  ``clock`` returns seconds
        since the epoch (``time.time`` by default).
        """
        while True:
            try:
                msg = await self.receive()
            except AlreadyClosed:
                return
            request = Request(self, msg, clock)
            if skip_expired and request.is_expired():
                await self.acknowledge(msg)
                continue
            yield request

    async def serve(
        self,
        handler: Handler,
        *,
        concurrency: int = 1,
        skip_expired: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """PIP-371 responder loop: run ``handler`` on each request (up to
        ``concurrency`` at once) and reply with what it returns; replies are
        pipelined.  Returns when the consumer closes.  See
        :mod:`magnetar.client.request_reply.responder`."""
        await responder.serve(self, handler, concurrency, skip_expired, clock)

    # ------------------------------------------------------------------ closing

    async def unsubscribe(self) -> None:
        self._check_open()
        await asyncio.gather(*(s.unsubscribe() for s in self._subs.values()))
        await self._finish_close()

    async def close(self) -> None:
        if self._closed:
            return
        await self._close_subs()
        await self._finish_close()

    async def _close_subs(self) -> None:
        await asyncio.gather(*(s.close() for s in self._subs.values()), return_exceptions=True)

    async def _finish_close(self) -> None:
        self._closed = True
        if self._letters is not None:
            await self._letters.close()
        self._queue.close(AlreadyClosed(f"consumer {self.conf.subscription} is closed"))
        for task in (self._listener_task, self._discovery_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        self._client._forget(self)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Consumer {self.conf.subscription!r} on {self.topic}>"
