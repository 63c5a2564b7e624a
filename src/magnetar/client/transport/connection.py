"""One TCP connection to a broker: handshake, request/response matching, keepalive.

A :class:`Connection` is an ``asyncio.Protocol``: bytes from the socket go through
the sans-IO frame decoder (``ClientFrameDecoder``) and each frame is dispatched
at once — responses complete the future of their request id, the rest go to the
producer or consumer registered under the id the frame names.  Writes are
buffered and flushed once per event-loop iteration, so a burst of sends becomes
one ``transport.write`` (one syscall).
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from magnetar import __version__
from magnetar.client.errors import (
    ConnectError,
    ProtocolViolation,
    PulsarError,
    TimeoutError,
    error_for_code,
)
from magnetar.client.transport.auth import Authentication
from magnetar.protocol.client_codec import PING_FRAME, PONG_FRAME, ClientFrameDecoder
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    encode_command,
    encode_command_with_body,
    max_frame_size,
)
from magnetar.protocol.pb import BaseCommand, pb

log = logging.getLogger("magnetar.client.connection")

PROTOCOL_VERSION = 21
CLIENT_VERSION = f"magnetar-python-{__version__}"
T = BaseCommand.Type


def _type_name(kind: int) -> str:
    try:
        return T.Name(kind)
    except ValueError:
        return f"command type {kind}"


class ProducerListener(Protocol):
    """What a connection calls on a producer registered with it."""

    def _on_send_receipt(self, cmd: pb.CommandSendReceipt) -> None: ...
    def _on_send_error(self, cmd: pb.CommandSendError) -> None: ...
    def _on_close_producer(self) -> None: ...
    def _on_request_receipt(self, cmd: pb.CommandRequestReceipt, body: bytes) -> None: ...
    def _on_connection_closed(self, connection: Connection) -> None: ...


class ConsumerListener(Protocol):
    """What a connection calls on a consumer registered with it."""

    def _on_message(self, cmd: pb.CommandMessage, body: bytes) -> None: ...
    def _on_active_consumer_change(self, is_active: bool) -> None: ...
    def _on_reached_end_of_topic(self) -> None: ...
    def _on_close_consumer(self) -> None: ...
    def _on_connection_closed(self, connection: Connection) -> None: ...


# Response type -> (BaseCommand field, request id attribute)
_RESPONSES: dict[int, str] = {
    T.SUCCESS: "success",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.ACK_RESPONSE: "ackResponse",
}


# Called once with the response to a request (and None), or None and what failed it.
AnswerCallback = Callable[[BaseCommand | None, BaseException | None], None]


class _Pending:
    __slots__ = ("future", "on_waiting", "timer")

    def __init__(
        self,
        future: asyncio.Future[BaseCommand],
        timer: asyncio.TimerHandle | None,
        on_waiting: Callable[[BaseCommand], None] | None,
    ) -> None:
        self.future = future
        self.timer = timer
        self.on_waiting = on_waiting


class Connection(asyncio.Protocol):
    """A connection to one broker, shared by every producer and consumer on it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        logical_url: str,
        auth: Authentication | None = None,
        keep_alive_interval: float = 30.0,
        operation_timeout: float = 30.0,
        proxy_to_broker_url: str | None = None,
        ssl: Any = None,
        on_close: Callable[[Connection], None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.logical_url = logical_url
        self._auth = auth
        self._keep_alive_interval = keep_alive_interval
        self.operation_timeout = operation_timeout
        self._proxy_to_broker_url = proxy_to_broker_url
        self._ssl = ssl
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._decoder = ClientFrameDecoder(max_frame_size(DEFAULT_MAX_MESSAGE_SIZE))
        self._wbuf: list[bytes] = []
        self._flush_scheduled = False
        self._pending: dict[int, _Pending] = {}
        # Requests answered through a callback (send_for_answer): the callback and its
        # deadline. One timeout for all of them, so the dict's order is their deadlines'
        # and one timer, armed for the oldest, serves them all.
        self._answers: dict[int, tuple[AnswerCallback, float]] = {}
        self._answers_timer: asyncio.TimerHandle | None = None
        self._producers: dict[int, ProducerListener] = {}
        self._consumers: dict[int, ConsumerListener] = {}
        self._handshake: asyncio.Future[None] = self._loop.create_future()
        self._request_ids = itertools.count()
        self._keepalive_timer: asyncio.TimerHandle | None = None
        self._last_received = self._loop.time()
        self._waiting_for_pong = False
        self.closed = False
        self.close_reason: PulsarError | None = None
        self.server_version = ""
        self.protocol_version = 0
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.supports_request_reply = False
        self._handlers: dict[int, Callable[[BaseCommand, bytes], None]] = {
            T.CONNECTED: self._handle_connected,
            T.ERROR: self._handle_error,
            T.PING: self._handle_ping,
            T.PONG: self._handle_pong,
            T.SEND_RECEIPT: self._handle_send_receipt,
            T.SEND_ERROR: self._handle_send_error,
            T.MESSAGE: self._handle_message,
            T.CLOSE_PRODUCER: self._handle_close_producer,
            T.CLOSE_CONSUMER: self._handle_close_consumer,
            T.ACTIVE_CONSUMER_CHANGE: self._handle_active_consumer_change,
            T.REACHED_END_OF_TOPIC: self._handle_reached_end_of_topic,
            T.AUTH_CHALLENGE: self._handle_auth_challenge,
            T.REQUEST_RECEIPT: self._handle_request_receipt,
            T.TOPIC_MIGRATED: self._handle_topic_migrated,
        }
        for kind in _RESPONSES:
            self._handlers[kind] = self._handle_response

    def __repr__(self) -> str:
        return f"<Connection {self.host}:{self.port} {'closed' if self.closed else 'open'}>"

    # ------------------------------------------------------------------ opening

    async def open(self, connection_timeout: float) -> None:
        """Connect the socket and complete the CONNECT/CONNECTED handshake."""
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: self, self.host, self.port, ssl=self._ssl),
                connection_timeout,
            )
        except (OSError, builtins.TimeoutError) as exc:
            self.closed = True
            what = "timed out" if isinstance(exc, builtins.TimeoutError) else str(exc)
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {what}") from None
        try:
            await asyncio.wait_for(asyncio.shield(self._handshake), connection_timeout)
        except builtins.TimeoutError:
            self.close(ConnectError(f"no CONNECTED from {self.host}:{self.port}"))
            raise ConnectError(
                f"broker {self.host}:{self.port} did not answer CONNECT within "
                f"{connection_timeout}s"
            ) from None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not inherit from asyncio.Transport, but behave as one.
        self._transport = transport = cast(asyncio.Transport, transport)
        cmd = BaseCommand(type=T.CONNECT)
        connect = cmd.connect
        connect.client_version = CLIENT_VERSION
        connect.protocol_version = PROTOCOL_VERSION
        connect.feature_flags.supports_auth_refresh = True
        connect.feature_flags.supports_request_reply = True
        if self._auth is not None and self._auth.method_name:
            connect.auth_method_name = self._auth.method_name
            connect.auth_data = self._auth.auth_data()
        if self._proxy_to_broker_url:
            connect.proxy_to_broker_url = self._proxy_to_broker_url
        transport.write(encode_command(cmd))

    # ------------------------------------------------------------------ writing

    def write(self, data: bytes) -> bool:
        """Queue bytes for the socket; they leave with the next flush (same loop turn)."""
        if self.closed:
            return False
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return True

    def write_now(self, data: bytes) -> bool:
        """Write at once, after anything buffered (for frames that must not wait for
        the loop, like FLOW: a consumer draining its queue may not yield for a while)."""
        if self.closed or self._transport is None:
            return False
        if self._wbuf:
            self._wbuf.append(data)
            self._flush()
        else:
            self._transport.write(data)
        return True

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._wbuf or self._transport is None or self.closed:
            self._wbuf.clear()
            return
        data = self._wbuf[0] if len(self._wbuf) == 1 else b"".join(self._wbuf)
        self._wbuf.clear()
        self._transport.write(data)

    def send_command(self, cmd: BaseCommand) -> bool:
        return self.write(encode_command(cmd))

    def new_request_id(self) -> int:
        return next(self._request_ids)

    async def request_quietly(self, cmd: BaseCommand, request_id: int, what: str) -> None:
        """A closing request: the handle is gone either way, so a failure is only logged."""
        try:
            await self.request(cmd, request_id)
        except PulsarError as exc:
            log.debug("%s: %s", what, exc)

    async def request(
        self,
        cmd: BaseCommand,
        request_id: int,
        *,
        timeout: float | None = None,
        on_waiting: Callable[[BaseCommand], None] | None = None,
        body: bytes | None = None,
    ) -> BaseCommand:
        """Send a command (with ``body`` after it, if given) and wait for the response
        with the same request id.

        An ERROR response raises the matching :class:`PulsarError`.  ``on_waiting``
        receives an intermediate PRODUCER_SUCCESS with ``producer_ready=false``;
        from then on the request waits without a timeout (PIP-68 WaitForExclusive).
        """
        future = self.send_request(
            cmd, request_id, timeout=timeout, on_waiting=on_waiting, body=body
        )
        try:
            return await future
        finally:
            pending = self._pending.pop(request_id, None)
            if pending is not None and pending.timer is not None:
                pending.timer.cancel()

    def send_request(
        self,
        cmd: BaseCommand,
        request_id: int,
        *,
        timeout: float | None = None,
        on_waiting: Callable[[BaseCommand], None] | None = None,
        body: bytes | None = None,
    ) -> asyncio.Future[BaseCommand]:
        """Send a command and return the future of its response, without waiting for
        it (pipelining); the response, an ERROR, the timeout or the connection's end
        settles it."""
        if self.closed:
            raise self.close_reason or ConnectError("connection is closed")
        future: asyncio.Future[BaseCommand] = self._loop.create_future()
        timeout = self.operation_timeout if timeout is None else timeout
        timer = self._loop.call_later(timeout, self._request_timed_out, request_id, cmd.type)
        self._pending[request_id] = _Pending(future, timer, on_waiting)
        if body is None:
            self.send_command(cmd)
        else:
            self.write(encode_command_with_body(cmd, body))
        return future

    def send_for_answer(self, frame: bytes, request_id: int, on_answer: AnswerCallback) -> None:
        """Write ``frame`` (a whole frame carrying ``request_id``) and have ``on_answer``
        called with the response to it, from the read path, or with what failed it: an
        ERROR, no answer within the operation timeout, the connection's end. For
        pipelined requests on a hot path (a PIP-371 reply's ACK): no future and no
        timer per request, as :meth:`send_request` has."""
        if self.closed:
            raise self.close_reason or ConnectError("connection is closed")
        deadline = self._loop.time() + self.operation_timeout
        self._answers[request_id] = (on_answer, deadline)
        if self._answers_timer is None:
            self._answers_timer = self._loop.call_at(deadline, self._answers_timed_out)
        self.write(frame)

    def _answers_timed_out(self) -> None:
        """The oldest callback request's deadline: fail those past theirs (the first in
        the dict), and wait for the next one's."""
        self._answers_timer = None
        now = self._loop.time()
        answers = self._answers
        expired = []
        for request_id, (_, deadline) in answers.items():
            if deadline > now:
                break
            expired.append(request_id)
        for request_id in expired:
            on_answer, _ = answers.pop(request_id)
            on_answer(None, TimeoutError(
                f"request {request_id} got no answer from {self.host}:{self.port} within "
                f"{self.operation_timeout}s"
            ))
        if answers and not self.closed:
            first = answers[next(iter(answers))][1]
            self._answers_timer = self._loop.call_at(first, self._answers_timed_out)

    def _request_timed_out(self, request_id: int, kind: int) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and not pending.future.done():
            pending.future.set_exception(
                TimeoutError(
                    f"{BaseCommand.Type.Name(kind)} (request {request_id}) got no answer from "
                    f"{self.host}:{self.port} within {self.operation_timeout}s"
                )
            )

    # ------------------------------------------------------------------ registry

    def register_producer(self, producer_id: int, listener: ProducerListener) -> None:
        self._producers[producer_id] = listener

    def remove_producer(self, producer_id: int, listener: object | None = None) -> None:
        if listener is None or self._producers.get(producer_id) is listener:
            self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, listener: ConsumerListener) -> None:
        self._consumers[consumer_id] = listener

    def remove_consumer(self, consumer_id: int, listener: object | None = None) -> None:
        if listener is None or self._consumers.get(consumer_id) is listener:
            self._consumers.pop(consumer_id, None)

    # ------------------------------------------------------------------ reading

    def data_received(self, data: bytes) -> None:
        self._last_received = self._loop.time()
        self._waiting_for_pong = False
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.error("closing %r: %s", self, exc)
            self.close(ProtocolViolation(f"broker sent an invalid frame: {exc}"))
            return
        handlers = self._handlers
        for command, body in frames:
            handler = handlers.get(command.type)
            if handler is None:
                log.debug("ignoring %s from %r", _type_name(command.type), self)
                continue
            try:
                handler(command, body)
            except Exception:  # a bug in one handler must not kill the connection
                log.exception("error handling %s from %r", _type_name(command.type), self)

    def _handle_connected(self, command: BaseCommand, body: bytes) -> None:
        connected = command.connected
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            self.max_message_size = connected.max_message_size
            self._decoder.max_frame_size = max_frame_size(self.max_message_size)
        self.supports_request_reply = connected.feature_flags.supports_request_reply
        if not self._handshake.done():
            self._handshake.set_result(None)
        self._schedule_keepalive()

    def _handle_error(self, command: BaseCommand, body: bytes) -> None:
        err = command.error
        exc = error_for_code(err.error, err.message)
        if not self._handshake.done():
            # An ERROR before CONNECTED refuses the connection (e.g. authentication).
            self._handshake.set_exception(exc)
            self.close(exc)
            return
        pending = self._pending.pop(err.request_id, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer.cancel()
            if not pending.future.done():
                pending.future.set_exception(exc)
            return
        answer = self._answers.pop(err.request_id, None)
        if answer is not None:
            answer[0](None, exc)

    def _handle_response(self, command: BaseCommand, body: bytes) -> None:
        response = getattr(command, _RESPONSES[command.type])
        pending = self._pending.get(response.request_id)
        if pending is None:
            answer = self._answers.pop(response.request_id, None)
            if answer is not None:
                answer[0](command, None)
            return
        if command.type == T.PRODUCER_SUCCESS and not response.producer_ready:
            if pending.timer is not None:
                pending.timer.cancel()
                pending.timer = None
            if pending.on_waiting is not None:
                pending.on_waiting(command)
            return
        del self._pending[response.request_id]
        if pending.timer is not None:
            pending.timer.cancel()
        if not pending.future.done():
            pending.future.set_result(command)

    def _handle_ping(self, command: BaseCommand, body: bytes) -> None:
        self.write(PONG_FRAME)

    def _handle_pong(self, command: BaseCommand, body: bytes) -> None:
        pass  # data_received already noted the sign of life

    def _handle_auth_challenge(self, command: BaseCommand, body: bytes) -> None:
        cmd = BaseCommand(type=T.AUTH_RESPONSE)
        cmd.authResponse.client_version = CLIENT_VERSION
        cmd.authResponse.protocol_version = PROTOCOL_VERSION
        auth = self._auth
        cmd.authResponse.response.auth_method_name = auth.method_name if auth else ""
        cmd.authResponse.response.auth_data = auth.auth_data() if auth else b""
        self.send_command(cmd)

    def _handle_send_receipt(self, command: BaseCommand, body: bytes) -> None:
        receipt = command.send_receipt
        producer = self._producers.get(receipt.producer_id)
        if producer is not None:
            producer._on_send_receipt(receipt)

    def _handle_send_error(self, command: BaseCommand, body: bytes) -> None:
        err = command.send_error
        producer = self._producers.get(err.producer_id)
        if producer is not None:
            producer._on_send_error(err)

    def _handle_request_receipt(self, command: BaseCommand, body: bytes) -> None:
        receipt = command.requestReceipt
        producer = self._producers.get(receipt.reply_to_producer_id)
        if producer is not None:
            producer._on_request_receipt(receipt, body)

    def _handle_message(self, command: BaseCommand, body: bytes) -> None:
        message = command.message
        consumer = self._consumers.get(message.consumer_id)
        if consumer is not None:
            consumer._on_message(message, body)

    def _handle_close_producer(self, command: BaseCommand, body: bytes) -> None:
        producer = self._producers.pop(command.close_producer.producer_id, None)
        if producer is not None:
            producer._on_close_producer()

    def _handle_close_consumer(self, command: BaseCommand, body: bytes) -> None:
        consumer = self._consumers.pop(command.close_consumer.consumer_id, None)
        if consumer is not None:
            consumer._on_close_consumer()

    def _handle_topic_migrated(self, command: BaseCommand, body: bytes) -> None:
        migrated = command.topicMigrated
        if migrated.resource_type == pb.CommandTopicMigrated.Producer:
            producer = self._producers.pop(migrated.resource_id, None)
            if producer is not None:
                producer._on_close_producer()
        else:
            consumer = self._consumers.pop(migrated.resource_id, None)
            if consumer is not None:
                consumer._on_close_consumer()

    def _handle_active_consumer_change(self, command: BaseCommand, body: bytes) -> None:
        change = command.active_consumer_change
        consumer = self._consumers.get(change.consumer_id)
        if consumer is not None:
            consumer._on_active_consumer_change(change.is_active)

    def _handle_reached_end_of_topic(self, command: BaseCommand, body: bytes) -> None:
        consumer = self._consumers.get(command.reachedEndOfTopic.consumer_id)
        if consumer is not None:
            consumer._on_reached_end_of_topic()

    # ------------------------------------------------------------------ keepalive

    def _schedule_keepalive(self) -> None:
        if self._keep_alive_interval > 0 and not self.closed:
            self._keepalive_timer = self._loop.call_later(
                self._keep_alive_interval, self._keepalive
            )

    def _keepalive(self) -> None:
        if self.closed:
            return
        idle = self._loop.time() - self._last_received
        if idle >= self._keep_alive_interval:
            if self._waiting_for_pong:
                log.warning("%r: no PONG within %ss, closing", self, self._keep_alive_interval)
                self.close(ConnectError(f"broker {self.host}:{self.port} stopped answering PING"))
                return
            self._waiting_for_pong = True
            self.write(PING_FRAME)
        self._schedule_keepalive()

    # ------------------------------------------------------------------ closing

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self.close_reason or ConnectError(
            f"connection to {self.host}:{self.port} lost" + (f": {exc}" if exc else "")
        )
        self._shutdown(reason)

    def close(self, reason: PulsarError | None = None) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._flush()
            self._transport.close()
        self._shutdown(reason or ConnectError(f"connection to {self.host}:{self.port} closed"))

    def _shutdown(self, reason: PulsarError) -> None:
        if self.closed and self.close_reason is not None:
            return
        self.closed = True
        self.close_reason = reason
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
        if not self._handshake.done():
            self._handshake.set_exception(reason)
            self._handshake.exception()  # mark retrieved
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(reason)
        if self._answers_timer is not None:
            self._answers_timer.cancel()
            self._answers_timer = None
        answers, self._answers = self._answers, {}
        for on_answer, _ in answers.values():
            try:
                on_answer(None, reason)
            except Exception:  # one failing callback must not stop the teardown
                log.exception("an answer callback failed as %r closed", self)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer._on_connection_closed(self)
        for consumer in consumers.values():
            consumer._on_connection_closed(self)
        if self._on_close is not None:
            self._on_close(self)
