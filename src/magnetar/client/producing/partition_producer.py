"""The producer of one topic or one partition: sequence ids, batching, resends.

A :class:`PartitionProducer` keeps every message without a receipt in
``_pending`` with its encoded SEND frame, so that after a reconnect it writes
them again, unchanged, with the same sequence ids.  It also applies the
pending-message limit (block or fail), the send timeout, batching (by count,
bytes and delay), compression, and PIP-68 access modes with the topic epoch.
Receipts (send receipts, send errors, PIP-371 replies) are matched in
:mod:`.receipts`; what it sends is described in :mod:`.outgoing`.
"""


from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections import deque
from typing import Any, Protocol

from magnetar.client.errors import (
    AlreadyClosed,
    MessageTooBig,
    ProducerBlockedQuotaExceeded,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarError,
    TimeoutError,
)
from magnetar.client.producing.batch_builder import BatchBuilder
from magnetar.client.producing.config import ProducerConfig
from magnetar.client.producing.outgoing import OutgoingMessage, SendOp
from magnetar.client.producing.receipts import ReceiptsMixin
from magnetar.client.request_reply.requests import PendingRequests, ReplyResult
from magnetar.client.transport.connection import Connection
from magnetar.client.transport.handler import HandlerClient
from magnetar.protocol.client_codec import (
    encode_message_metadata,
    encode_send,
    encode_single_metadata,
)
from magnetar.protocol.compression import compress
from magnetar.protocol.frames import ENTRY_HEADER_SIZE, dispatch_frame_size, max_frame_size
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.protocol.request_reply import REQUEST_TIMEOUT_PROPERTY

log = logging.getLogger("magnetar.client.producer")
T = BaseCommand.Type

class ProducerClient(HandlerClient, Protocol):
    """What a partition producer needs of its client: a handle's needs and producer ids."""

    def _next_producer_id(self) -> int: ...


class PartitionProducer(ReceiptsMixin):
    """The producer of one topic or one partition."""

    def __init__(
        self, client: ProducerClient, topic: str, partition: int, conf: ProducerConfig
    ) -> None:
        super().__init__(client, topic)
        self.partition = partition
        self.conf = conf
        self.producer_id = client._next_producer_id()
        self.producer_name: str | None = conf.producer_name
        self._user_named = conf.producer_name is not None
        self._pending: deque[SendOp] = deque()
        self._pending_messages = 0  # in ops and in the open batch
        self._blocked: deque[tuple[OutgoingMessage, asyncio.Future[MessageId]]] = deque()
        self._batch = (
            BatchBuilder(conf.batching_max_messages, conf.batching_max_bytes)
            if conf.batching
            else None
        )
        self._batch_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._next_sequence_id = 0
        self.last_sequence_id = -1
        self.topic_epoch: int | None = None
        self.schema_version: bytes | None = None
        self._name_bytes = b""
        self._max_message_size = 5 * 1024 * 1024
        self._created = False
        self._ready = False
        self._waiting_for_exclusive = False
        self._requests: PendingRequests | None = None
        self._last_receipt: tuple[int, int] | None = None  # (ledger, entry) of the newest

    # ------------------------------------------------------------------ attaching

    async def start(self) -> None:
        await self._connect_first()

    async def _connection_opened(self, conn: Connection) -> None:
        pid = self.producer_id
        conn.register_producer(pid, self)
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.PRODUCER)
        p = cmd.producer
        p.topic = self.topic
        p.producer_id = pid
        p.request_id = request_id
        if self.producer_name is not None:
            p.producer_name = self.producer_name
            p.user_provided_producer_name = self._user_named
        p.producer_access_mode = self.conf.access_mode  # type: ignore[assignment]
        p.epoch = self._reconnects
        if self.topic_epoch is not None:
            p.topic_epoch = self.topic_epoch
        for key, value in self.conf.properties.items():
            p.metadata.add(key=key, value=value)
        if self.conf.schema is not None:
            self.conf.schema.fill(p.schema)
        try:
            response = await conn.request(cmd, request_id, on_waiting=self._on_waiting)
        except BaseException as exc:
            conn.remove_producer(pid, self)
            if isinstance(exc, TimeoutError | asyncio.CancelledError) and not conn.closed:
                # The broker may have created it after all; make sure it is gone.
                self._send_close(conn)
            raise
        finally:
            self._waiting_for_exclusive = False
        success = response.producer_success
        if self._closed:
            conn.remove_producer(pid, self)
            self._send_close(conn)
            raise AlreadyClosed(f"producer on {self.topic} was closed while connecting")
        self.producer_name = success.producer_name
        self._name_bytes = success.producer_name.encode()
        if success.HasField("topic_epoch"):
            self.topic_epoch = success.topic_epoch
        if success.HasField("schema_version"):
            self.schema_version = success.schema_version
        if not self._created:
            self._created = True
            self.last_sequence_id = success.last_sequence_id
            self._next_sequence_id = max(self._next_sequence_id, success.last_sequence_id + 1)
        self._max_message_size = conn.max_message_size
        self._conn = conn
        self._ready = True
        if self._pending:
            # Resend everything unacknowledged, unchanged, in order, in one write.
            conn.write(b"".join(op.frame for op in self._pending))
            with_requests = [op for op in self._pending if op.requests is not None]
            sole = (
                with_requests[0]
                if len(with_requests) == 1
                and sum(r is not None for r in with_requests[0].requests or ()) == 1
                else None
            )
            floor = self._last_receipt or (-1, -1)
            for op in with_requests:
                op.first_copy_after = floor if op is sole else None
        log.debug("producer %s attached to %s on %r", self.producer_name, self.topic, conn)

    def _on_waiting(self, cmd: BaseCommand) -> None:
        # PIP-68 WaitForExclusive: the broker queued us; the real answer comes later.
        self._waiting_for_exclusive = True
        success = cmd.producer_success
        if success.HasField("topic_epoch"):
            self.topic_epoch = success.topic_epoch

    def _send_close(self, conn: Connection) -> None:
        cmd = BaseCommand(type=T.CLOSE_PRODUCER)
        cmd.close_producer.producer_id = self.producer_id
        cmd.close_producer.request_id = conn.new_request_id()
        conn.send_command(cmd)

    def _connection_lost(self) -> None:
        self._ready = False

    def _on_close_producer(self) -> None:
        # The broker dropped us (topic unloaded, fenced...): attach again.
        conn = self._detach()
        self._ready = False
        if conn is not None:
            conn.remove_producer(self.producer_id, self)
        self._schedule_reconnect()

    def _fatal(self, exc: PulsarError) -> None:
        super()._fatal(exc)
        self._fail_all(exc)

    def _gives_up_on(self, exc: PulsarError) -> bool:
        # PIP-68, as the Java client: an exclusive producer that finds the topic taken
        # (ProducerFenced: another exclusive or shared producer; ProducerBusy: its name
        # in use) has lost its exclusivity; it does not retry. A shared producer waits
        # out ProducerBusy (an exclusive producer may leave, a stale name is released).
        if self.conf.access_mode != pb.Shared and isinstance(exc, ProducerBusy | ProducerFenced):
            return True
        return super()._gives_up_on(exc)

    # ------------------------------------------------------------------ sending

    def send_async(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        future: asyncio.Future[MessageId] = self._loop.create_future()
        if self._closed:
            future.set_exception(AlreadyClosed(f"producer on {self.topic} is closed"))
            return future
        if self._failed is not None:
            future.set_exception(self._failed)
            return future
        limit = self.conf.max_pending_messages
        if self._blocked or (limit > 0 and self._pending_messages >= limit):
            if not self.conf.block_if_queue_full:
                future.set_exception(
                    ProducerQueueIsFull(
                        f"producer on {self.topic} has {self._pending_messages} pending "
                        f"messages (max_pending_messages={limit})"
                    )
                )
                return future
            self._blocked.append((msg, future))
            return future
        self._enqueue(msg, future)
        return future

    def _enqueue(self, msg: OutgoingMessage, future: asyncio.Future[MessageId]) -> None:
        if msg.sequence_id is not None:
            sequence_id = msg.sequence_id
            if sequence_id >= self._next_sequence_id:
                self._next_sequence_id = sequence_id + 1
        else:
            sequence_id = self._next_sequence_id
            self._next_sequence_id += 1
        request = msg.request
        if request is not None and self._requests is not None:
            self._requests.numbered(request, sequence_id)
        self._pending_messages += 1
        batch = self._batch
        if msg.raw:
            if batch is not None and len(batch):
                self._flush_batch()  # keep the order: the batch goes before this entry
            self._send_entry(msg, sequence_id, future)
            return
        if batch is not None and msg.deliver_at is None:
            size = len(msg.payload)
            if size > self._max_message_size:
                self._fail_message(future, request, MessageTooBig(
                    f"message of {size} bytes exceeds the broker's limit of "
                    f"{self._max_message_size} bytes"))
                return
            if not batch.has_room(size):
                self._flush_batch()
            single = encode_single_metadata(
                size,
                properties=msg.properties,
                partition_key=msg.key,
                event_time=msg.event_time or 0,
                ordering_key=msg.ordering_key,
                sequence_id=sequence_id,
            )
            if not len(batch):
                batch.first = msg
                self._batch_timer = self._loop.call_later(
                    self.conf.batching_max_delay, self._flush_batch
                )
            batch.add(single, msg.payload, sequence_id, (future, request))
            if batch.full:
                self._flush_batch()
            return
        if batch is not None and len(batch):
            self._flush_batch()  # keep the order: the batch goes before this message
        self._send_single(msg, sequence_id, future, request)

    def _send_single(
        self,
        msg: OutgoingMessage,
        sequence_id: int,
        future: asyncio.Future[MessageId],
        request: Any,
    ) -> None:
        payload = msg.payload
        compression = self.conf.compression
        uncompressed = len(payload)
        if compression:
            payload = compress(compression, payload)
        if len(payload) > self._max_message_size:
            self._fail_message(future, request, MessageTooBig(
                f"message of {len(payload)} bytes exceeds the broker's limit of "
                f"{self._max_message_size} bytes"))
            return
        metadata = encode_message_metadata(
            self._name_bytes,
            sequence_id,
            int(time.time() * 1000),
            properties=msg.properties,
            partition_key=msg.key,
            compression=compression,
            uncompressed_size=uncompressed,
            event_time=msg.event_time or 0,
            schema_version=self.schema_version,
            ordering_key=msg.ordering_key,
            deliver_at_time=msg.deliver_at,
        )
        too_big = self._frame_too_big(metadata, payload, 1)
        if too_big is not None:
            self._fail_message(future, request, too_big)
            return
        frame = encode_send(self.producer_id, sequence_id, 1, 0, metadata, payload)
        self._push(SendOp(sequence_id, sequence_id, frame, [future],
                       self._loop.time() + self.conf.send_timeout,
                       None if request is None else [request]))

    def _send_entry(
        self, msg: OutgoingMessage, sequence_id: int, future: asyncio.Future[MessageId]
    ) -> None:
        """PIP-96: one entry whose payload and message count the caller chose; no batch
        framing and no compression of its own (consumers read the payload as it was
        given; a caller that compressed it says how in ``msg.compression``)."""
        payload = msg.payload
        if len(payload) > self._max_message_size:
            self._fail_message(future, None, MessageTooBig(
                f"entry of {len(payload)} bytes exceeds the broker's limit of "
                f"{self._max_message_size} bytes"))
            return
        metadata = encode_message_metadata(
            self._name_bytes,
            sequence_id,
            int(time.time() * 1000),
            properties=msg.properties,
            partition_key=msg.key,
            num_messages_in_batch=msg.num_messages,
            event_time=msg.event_time or 0,
            schema_version=self.schema_version,
            ordering_key=msg.ordering_key,
            compression=msg.compression[0] if msg.compression else 0,
            uncompressed_size=msg.compression[1] if msg.compression else 0,
        )
        too_big = self._frame_too_big(metadata, payload, msg.num_messages or 1)
        if too_big is not None:
            self._fail_message(future, None, too_big)
            return
        frame = encode_send(self.producer_id, sequence_id, msg.num_messages or 1, 0, metadata,
                            payload)
        self._push(SendOp(sequence_id, sequence_id, frame, [future],
                       self._loop.time() + self.conf.send_timeout, None))

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        batch = self._batch
        if batch is None or not len(batch):
            return
        payload, sequence_ids, extras, first = batch.take()
        compression = self.conf.compression
        uncompressed = len(payload)
        if compression:
            payload = compress(compression, payload)
        futures = [extra[0] for extra in extras]
        requests = [extra[1] for extra in extras]
        if len(payload) > self._max_message_size:
            exc = MessageTooBig(f"batch of {len(payload)} bytes exceeds the broker's limit")
            for future, request in zip(futures, requests, strict=True):
                self._fail_message(future, request, exc)
            return
        n = len(futures)
        live = [r for r in requests if r is not None]
        metadata = encode_message_metadata(
            self._name_bytes,
            sequence_ids[0],
            int(time.time() * 1000),
            # PIP-371: the entry says it holds requests (the broker reads no batch)
            properties={REQUEST_TIMEOUT_PROPERTY: str(max(int(r.timeout * 1000) for r in live))}
            if live else None,
            partition_key=first.key,
            compression=compression,
            uncompressed_size=uncompressed,
            num_messages_in_batch=n,
            schema_version=self.schema_version,
            ordering_key=first.ordering_key,
            highest_sequence_id=sequence_ids[-1] if n > 1 else 0,
        )
        highest = sequence_ids[-1]
        frame = encode_send(
            self.producer_id, sequence_ids[0], n, highest if n > 1 else 0, metadata, payload
        )
        self._push(SendOp(sequence_ids[0], highest, frame, futures,
                       self._loop.time() + self.conf.send_timeout,
                       requests if live else None, batched=True))

    def _frame_too_big(
        self, metadata: bytes, payload: bytes, num_messages: int
    ) -> MessageTooBig | None:
        """The broker judges the MESSAGE frame its consumers will get, metadata
        included (a payload at the limit with kilobytes of properties is refused):
        refuse here what it would, instead of sending it."""
        entry_size = ENTRY_HEADER_SIZE + len(metadata) + len(payload)
        frame = dispatch_frame_size(entry_size, num_messages)
        limit = max_frame_size(self._max_message_size)
        if frame <= limit:
            return None
        return MessageTooBig(
            f"message of {len(payload)} bytes with {len(metadata)} bytes of metadata "
            f"exceeds the broker's limit: its frame to consumers would be up to {frame} "
            f"bytes, over {limit}"
        )

    def _push(self, op: SendOp) -> None:
        self._pending.append(op)
        if self._ready and self._conn is not None:
            self._conn.write(op.frame)
        if self._send_timer is None and self.conf.send_timeout > 0:
            self._send_timer = self._loop.call_at(op.deadline, self._check_send_timeouts)

    def _fail_message(
        self, future: asyncio.Future[MessageId], request: Any, exc: PulsarError
    ) -> None:
        if not future.done():
            future.set_exception(exc)
        if request is not None and self._requests is not None:
            if not future.cancelled():
                future.exception()  # a request's send: its request reports the error
            self._requests.fail(request, exc)
        self._release(1)

    def _release(self, count: int) -> None:
        self._pending_messages -= count
        limit = self.conf.max_pending_messages
        blocked = self._blocked
        while blocked and (limit <= 0 or self._pending_messages < limit):
            msg, future = blocked.popleft()
            if future.cancelled():
                continue
            self._enqueue(msg, future)

    def _check_send_timeouts(self) -> None:
        self._send_timer = None
        now = self._loop.time()
        pending = self._pending
        while pending and pending[0].deadline <= now:
            op = pending.popleft()
            exc = TimeoutError(
                f"message {op.sequence_id} to {self.topic} got no receipt within "
                f"{self.conf.send_timeout}s"
            )
            self._fail_op(op, exc)
        if pending:
            self._send_timer = self._loop.call_at(pending[0].deadline, self._check_send_timeouts)

    def _fail_op(self, op: SendOp, exc: PulsarError) -> None:
        for future in op.futures:
            if not future.done():
                future.set_exception(exc)
        if op.requests is not None and self._requests is not None:
            for future, request in zip(op.futures, op.requests, strict=True):
                if request is not None:
                    if not future.cancelled():
                        future.exception()  # its request reports the error
                    self._requests.fail(request, exc)
        self._release(op.num_messages)

    def _attach_refused(self, exc: PulsarError) -> None:
        # As the Java client: over a backlog quota, what waits to be sent fails now
        # (the application learns at once), and reattaching goes on.
        if isinstance(exc, ProducerBlockedQuotaExceeded):
            self._fail_all(exc)

    def _fail_all(self, exc: PulsarError) -> None:
        if self._batch is not None and len(self._batch):
            self._flush_batch()
        pending, self._pending = self._pending, deque()
        for op in pending:
            self._fail_op(op, exc)
        blocked, self._blocked = self._blocked, deque()
        for msg, future in blocked:
            if not future.done():
                future.set_exception(exc)
                if msg.request is not None:
                    future.exception()  # its request reports the error (below)
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if self._requests is not None:
            self._requests.fail_all(exc)

    def request_async(self, msg: OutgoingMessage, timeout: float) -> asyncio.Future[ReplyResult]:
        """PIP-371: send ``msg`` as a request; the future gets the reply."""
        if self._requests is None:
            self._requests = PendingRequests(self.topic, self.partition)
        requests = self._requests
        request = requests.new(timeout)
        msg.request = request
        sent = self.send_async(msg)
        # No callback on the send's future (one per request): every path that fails a
        # queued request's send fails the request too (_fail_message, _fail_op,
        # _fail_all) and marks the send's error retrieved; only a send refused at once
        # (closed, failed, queue full) is settled here.
        if sent.done():
            requests.fail(request, sent.exception() or AlreadyClosed("request not sent"))
        return request.future

    # ------------------------------------------------------------------ flush / close

    @property
    def pending_count(self) -> int:
        return self._pending_messages

    async def flush(self) -> None:
        """Send the open batch and wait until every message sent so far has its receipt."""
        self._flush_batch()
        futures: list[asyncio.Future[MessageId]] = [f for op in self._pending for f in op.futures]
        futures.extend(f for _m, f in self._blocked)
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        # Give what is in flight a chance to be receipted, unless the broker is away
        # (then the pending messages fail with AlreadyClosed at once).
        if self._failed is None and self._ready and (
            self._pending or self._blocked or (self._batch is not None and len(self._batch))
        ):
            with contextlib.suppress(builtins.TimeoutError):
                await asyncio.wait_for(self.flush(), self._client.operation_timeout)
        self._closed = True
        self._stop_reconnecting()
        if self._requests is not None and len(self._requests):
            self._requests.fail_all(AlreadyClosed(
                f"producer {self.producer_name} on {self.topic} was closed while requests "
                "were waiting for their replies"
            ))
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        conn = self._detach()
        self._ready = False
        self._fail_all(AlreadyClosed(f"producer on {self.topic} was closed"))
        if conn is not None and not conn.closed:
            request_id = conn.new_request_id()
            cmd = BaseCommand(type=T.CLOSE_PRODUCER)
            cmd.close_producer.producer_id = self.producer_id
            cmd.close_producer.request_id = request_id
            await conn.request_quietly(cmd, request_id, f"closing producer on {self.topic}")
            conn.remove_producer(self.producer_id, self)
