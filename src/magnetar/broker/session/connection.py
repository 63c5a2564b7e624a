"""One client connection (Pulsar's ServerCnx): the socket, framing, keepalive and handshake;
commands go to the handlers in broker/session/handlers/.

Writes are gathered and flushed once per event-loop iteration, so a burst of
receipts or messages costs one syscall. A connection that cannot keep up
(transport paused) stops receiving dispatches until it drains.

A connection holds nothing for long on a peer's word: one that has not sent CONNECT
within ``connect_timeout`` is closed, and so is one whose partial frame is not
complete ``frame_timeout`` after its first byte (slowloris); past ``max_connections``
(or ``max_connections_per_ip``) a new connection is told so and closed. Nor much:
until CONNECT has completed (authentication included) a frame may declare at most
``max_frame_size_before_connect`` bytes, and such connections' partial frames share
one budget, ``max_unauthenticated_buffer_bytes``; past either the connection is closed.

Backpressure reaches the peer's socket: the broker stops reading a connection
(``transport.pause_reading``) while it has ``max_pending_publish_requests_per_connection``
messages without a receipt (until half are receipted), while the broker-wide
publish buffer (``max_message_publish_buffer_bytes``) is over its limit (until half
of it drains), and while its own write buffer is over the high-water mark (a peer
that does not read its receipts or messages cannot make the broker queue more).
Frames already read when reading stops are held and handled, in order, when it
resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from magnetar.broker.auth.session import ConnectionAuth
from magnetar.broker.session import outgoing
from magnetar.broker.session.handlers import acks, consumers, lookup, producers, schemas
from magnetar.broker.session.handlers.common import TopicLoading, command_error
from magnetar.broker.session.handlers.errors import CommandError, request_id_of
from magnetar.broker.session.handshake import Handshake
from magnetar.broker.session.keepalive import Keepalive
from magnetar.broker.session.notices import ClientNotices
from magnetar.broker.session.pauses import PAUSED_BUFFER, PAUSED_PENDING, PAUSED_TURN, PAUSED_WRITE
from magnetar.broker.topics.consumer import Consumer
from magnetar.broker.topics.producer import Producer
from magnetar.protocol.errors import FrameTooLarge, ProtocolError
from magnetar.protocol.frames import Frame, FrameDecoder, encode_command, max_frame_size
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.auth.authorization import AuthorizationService
    from magnetar.broker.session.context import SessionService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger("magnetar.broker.connection")

T = BaseCommand.Type
_connection_ids = itertools.count(1)

# A read can hold thousands of frames (1 MB of small SENDs); handling them all in one
# callback would stall every other connection, so a turn stops after this long and the
# rest of the frames are handled from the next one (checked every _FRAMES_PER_CLOCK).
TURN_BUDGET_SECONDS = 0.01
_FRAMES_PER_CLOCK = 32
_WRITEV_MAX_PARTS = 256  # under the kernel's IOV_MAX (1024): a longer writev writes part


Handler = Callable[["ServerCnx", BaseCommand, Frame], None]

__all__ = ["PAUSED_WRITE", "CommandError", "ServerCnx"]


class ServerCnx(Handshake, Keepalive, ClientNotices, asyncio.Protocol):
    def __init__(self, service: SessionService[ServerCnx]) -> None:
        self.service = service
        self.loop = service.loop
        self.id = next(_connection_ids)
        config = self.config = service.config
        # None: authorization off
        self.authorization: AuthorizationService | None = service.authorization
        # Until CONNECT completes, the peer is a stranger: a small frame limit, and its
        # partial frame counted in the broker's budget for strangers (_unproven bytes).
        self._frame_limit = max_frame_size(config.max_message_size)
        self.decoder = FrameDecoder(
            min(config.max_frame_size_before_connect or self._frame_limit, self._frame_limit)
        )
        self._strangers = service.unauthenticated_buffers
        self._unproven = 0
        self._activity = service.idle_poller.activity
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        self.connected = False  # CONNECT seen
        self.alive = False
        self.writable = True
        self.protocol_version = 0
        self.client_version = ""
        self.supports_request_reply = False
        self.understands_end_of_topic = False
        self.supports_auth_refresh = False
        self.auth: ConnectionAuth | None = None  # with authentication on, from CONNECT
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        # Queued bytes that are written at once rather than at the end of the loop round.
        self._flush_at = config.dispatch_max_bytes_per_round or sys.maxsize
        self._flush_scheduled = False
        self._last_seen = 0.0
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        self._liveness_waiters: list[Callable[[bool], None]] = []
        self._liveness_timer: asyncio.TimerHandle | None = None
        self._admitted = False  # counted by service.connection_limits
        self._ip = "?"
        self._connect_timer: asyncio.TimerHandle | None = None
        self._frame_timeout = config.frame_timeout
        self._frame_timer: asyncio.TimerHandle | None = None
        self._partial_since: float | None = None  # when the partial frame's first byte came
        # Backpressure: why reading is paused (PAUSED_* bits), frames read before it
        # was, and the publishes waiting for their receipts (per producer: count, bytes).
        self.read_paused = 0
        self.read_pauses = 0  # times reading was paused, since the connection opened
        self._reading_stopped = False  # transport.pause_reading() in force
        self._held: list[Frame] = []
        self._held_scheduled = False
        self._max_pending = config.max_pending_publish_requests_per_connection
        self._publish_buffer = service.publish_buffer
        self.pending_publishes = 0
        self.pending_publish_bytes = 0
        self.peak_pending_publishes = 0
        self.peak_write_buffer = 0  # the most bytes ever left in the transport's buffer

    # ------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._ip = str(peer[0]) if peer else "?"
        refusal = self.service.connection_limits.admit(self._ip)
        if refusal is not None:
            # Never alive: nothing it sends is read, and it holds no slot.
            log.warning("refusing connection %s from %s: %s", self.id, self.remote_address, refusal)
            self.write_error(0, pb.TooManyRequests, refusal)
            self._flush()
            self.transport.close()
            return
        self._admitted = True
        self.alive = True
        self._last_seen = self.loop.time()
        self.service.connection_opened(self)
        self._arm_keepalive()
        connect_timeout = self.config.connect_timeout
        if connect_timeout > 0:
            self._connect_timer = self.loop.call_later(connect_timeout, self._connect_expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if not self._admitted:
            return
        self._admitted = False
        self.service.connection_limits.release(self._ip)
        self._proven()
        if self.auth is not None:
            self.auth.stop()
        for timer in (self._keepalive, self._connect_timer, self._frame_timer):
            if timer is not None:
                timer.cancel()
        self._liveness_settled(False)
        log.debug("connection %s from %s closed", self.id, self.remote_address)
        self._release_everything()
        self._held = []
        self._publish_buffer.forget(self)
        self.service.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False
        self._pause_reading(PAUSED_WRITE)

    def resume_writing(self) -> None:
        self.writable = True
        self._last_seen = self.loop.time()  # the peer reads: it is there
        self._resume_reading(PAUSED_WRITE)
        for consumer in self.consumers.values():
            consumer.subscription.schedule_dispatch()

    # ------------------------------------------------------------ backpressure

    def _pause_reading(self, reason: int) -> None:
        if not self.read_paused:
            self.read_pauses += 1
        self.read_paused |= reason
        transport = self.transport
        if not self._reading_stopped and transport is not None and not transport.is_closing():
            transport.pause_reading()
            self._reading_stopped = True

    def _resume_reading(self, reason: int) -> None:
        if not self.read_paused & reason:
            return
        self.read_paused &= ~reason
        if self.read_paused or not self.alive:
            return
        if self._held:
            # Handled from a loop round of their own, not inside whatever callback
            # (a receipt, another connection's frame) lifted the pause.
            if not self._held_scheduled:
                self._held_scheduled = True
                self.loop.call_soon(self._handle_held)
            return
        self._restart_reading()

    def _handle_held(self) -> None:
        self._held_scheduled = False
        if self.read_paused or not self.alive:
            return
        frames, self._held = self._held, []
        self._handle_frames(frames)
        if not self.read_paused and not self._held:
            self._restart_reading()

    def _restart_reading(self) -> None:
        if not self._reading_stopped or not self.alive:
            return
        self._reading_stopped = False
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()
        if self._partial_since is not None:
            # The broker stopped reading, not the peer: its frame's clock starts over.
            self._partial_since = self.loop.time()

    def publish_buffer_drained(self) -> None:
        """The broker-wide publish buffer is down to half its limit."""
        self._resume_reading(PAUSED_BUFFER)

    def publish_started(self, producer: Producer, size: int) -> None:
        """A message of ``size`` bytes from ``producer`` waits for its receipt."""
        count = self.pending_publishes + 1
        self.pending_publishes = count
        self.pending_publish_bytes += size
        if count > self.peak_pending_publishes:
            self.peak_pending_publishes = count
        producer.pending_publishes += 1
        producer.pending_publish_bytes += size
        if self._publish_buffer.add(size):
            self._publish_buffer.hold(self)
            self._pause_reading(PAUSED_BUFFER)
        if count >= self._max_pending > 0:
            self._pause_reading(PAUSED_PENDING)

    def publish_done(self, producer: Producer, size: int) -> None:
        """Its receipt is written (or it failed)."""
        if producer.pending_publishes <= 0:
            return  # already released with its producer
        producer.pending_publishes -= 1
        producer.pending_publish_bytes -= size
        self._settle(1, size)

    def release_publishes(self, producer: Producer) -> None:
        """``producer`` is gone: its receipts may never come (its ledger failed), so
        its messages stop counting against the limits now."""
        if producer.pending_publishes > 0:
            self._settle(producer.pending_publishes, producer.pending_publish_bytes)
            producer.pending_publishes = producer.pending_publish_bytes = 0

    def _settle(self, count: int, size: int) -> None:
        self.pending_publishes -= count
        self.pending_publish_bytes -= size
        self._publish_buffer.release(size)
        if self.read_paused & PAUSED_PENDING and self.pending_publishes <= self._max_pending // 2:
            self._resume_reading(PAUSED_PENDING)

    def data_received(self, data: bytes) -> None:
        if not self.alive:
            return  # refused, or being closed: nothing more is read from it
        self._last_seen = now = self.loop.time()
        self._activity()
        decoder = self.decoder
        try:
            frames = decoder.feed(data)
        except ProtocolError as exc:
            self._framing_failure(exc)
            return
        if not self.connected and decoder.buffered != self._unproven:
            held = decoder.buffered
            over = self._strangers.change(held - self._unproven)
            self._unproven = held
            if over:
                self._drop(self._strangers.refusal(held), pb.ServiceNotReady)
                return
        if decoder.buffered:
            # A partial frame: its clock starts with its first byte, which came now
            # unless the same frame was already partial before this read.
            if frames or self._partial_since is None:
                self._partial_since = now
                if self._frame_timer is None and self._frame_timeout > 0:
                    self._frame_timer = self.loop.call_later(
                        self._frame_timeout, self._check_partial_frame
                    )
        else:
            self._partial_since = None
        self._handle_frames(frames)

    def _handle_frames(self, frames: list[Frame]) -> None:
        started = time.perf_counter()
        for i, frame in enumerate(frames):
            if not self.alive:
                return
            if (
                i % _FRAMES_PER_CLOCK == _FRAMES_PER_CLOCK - 1
                and not self.read_paused
                and time.perf_counter() - started > TURN_BUDGET_SECONDS
            ):
                self._pause_reading(PAUSED_TURN)
                self.loop.call_soon(self._resume_reading, PAUSED_TURN)
            if self.read_paused:
                self._held = frames[i:]  # handled in order once reading resumes
                return
            self._handle_frame(frame)
        failure = self.decoder.failure  # after the good frames that came before it
        if failure is not None and self.alive:
            self._framing_failure(failure)

    def _check_partial_frame(self) -> None:
        """The frame timer: close the connection if the partial frame has waited
        ``frame_timeout`` since its first byte, else wait for what is left of it.
        One timer serves every frame, so the fast path arms none."""
        self._frame_timer = None
        if not self.alive or self._partial_since is None:
            return
        if self._reading_stopped:
            # The broker is not reading, not the peer's doing: look again later
            # (the clock starts over when reading resumes).
            self._frame_timer = self.loop.call_later(
                self._frame_timeout, self._check_partial_frame
            )
            return
        waited = self.loop.time() - self._partial_since
        if waited < self._frame_timeout:
            self._frame_timer = self.loop.call_later(
                self._frame_timeout - waited, self._check_partial_frame
            )
            return
        declared = self.decoder.partial_size
        size = f"of {declared} bytes " if declared is not None else ""
        self._drop(
            f"a frame {size}was not complete {waited:.1f}s after its first byte "
            f"({self.decoder.buffered} bytes came; frame_timeout {self._frame_timeout:g}s)",
            pb.ServiceNotReady,
        )

    def _connect_expired(self) -> None:
        self._connect_timer = None
        if self.alive and not self.connected:
            self._drop(
                f"no CONNECT within {self.config.connect_timeout:g}s (connect_timeout)",
                pb.ServiceNotReady,
            )

    def _drop(self, reason: str, error: int) -> None:
        """Close a connection the broker gives up on, saying why (one warning line,
        and an ERROR to the peer). A peer that does not read cannot hold it open:
        what cannot be written at once is dropped with the connection."""
        log.warning("closing connection %s from %s: %s", self.id, self.remote_address, reason)
        self.write_error(0, error, reason)
        self._hang_up()

    def _hang_up(self) -> None:
        """Close, or abort if what is queued cannot all go out now (a peer that does
        not read would otherwise hold the connection open until it does)."""
        self.alive = False
        self._flush()
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size() > 0:
            self.abort()
        else:
            self.close()

    def _proven(self) -> None:
        """The connection leaves the strangers' budget (CONNECT completed, or it closed)."""
        if self._unproven:
            self._strangers.change(-self._unproven)
            self._unproven = 0

    def _framing_failure(self, exc: ProtocolError) -> None:
        if isinstance(exc, FrameTooLarge) and not self.connected:
            self._protocol_failure(
                f"frame too large before CONNECT completed: {exc} "
                f"(max_frame_size_before_connect)",
                pb.NotAllowedError,
            )
        elif isinstance(exc, FrameTooLarge):
            self._protocol_failure(f"frame too large: {exc}", pb.NotAllowedError)
        else:
            self._protocol_failure(f"malformed frame: {exc}", pb.UnknownError)

    def _handle_frame(self, frame: Frame, retried: bool = False) -> None:
        if frame.unknown_type is not None:
            log.warning(
                "connection %s from %s sent unsupported command type %d",
                self.id,
                self.remote_address,
                frame.unknown_type,
            )
            self.write_error(
                0, pb.NotAllowedError, f"unsupported command type {frame.unknown_type}"
            )
            return
        command = frame.command
        kind = command.type
        if not self.connected and kind != T.CONNECT:
            self._protocol_failure(
                f"command {T.Name(kind)} sent before CONNECT", pb.NotAllowedError
            )
            return
        handler = _HANDLERS.get(kind)
        if handler is None:
            log.warning(
                "connection %s from %s sent unexpected command %s",
                self.id,
                self.remote_address,
                T.Name(kind),
            )
            self.write_error(0, pb.NotAllowedError, f"unexpected command {T.Name(kind)}")
            return
        try:
            handler(self, command, frame)
        except TopicLoading as loading:
            loading.future.add_done_callback(lambda done: self._after_load(frame, done))
        except CommandError as exc:
            self.write_error(request_id_of(command), exc.error, str(exc))
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                self._internal_error(command, exc)
                return
            # Out of file descriptors: unused topics give theirs back; the client
            # tries again (ServiceNotReady is retried by Pulsar clients).
            log.warning("out of file descriptors handling %s: %s", T.Name(kind), exc.strerror)
            if retried:
                self.write_error(
                    request_id_of(command),
                    pb.ServiceNotReady,
                    f"the broker is out of file descriptors ({exc.strerror}); try again",
                )
                return
            # Unused topics give theirs back, then the command is handled once more
            # (clients do not all retry a lookup that fails).
            relief = self.service.relieve_descriptor_pressure()
            relief.add_done_callback(lambda _: self._handle_again(frame))
        except Exception as exc:
            self._internal_error(command, exc)

    def _handle_again(self, frame: Frame) -> None:
        if self.alive:
            self._handle_frame(frame, retried=True)

    def _internal_error(self, command: BaseCommand, exc: Exception) -> None:
        log.exception("error handling %s from %s", T.Name(command.type), self.remote_address)
        # An OSError's text names files; the client gets the cause without the paths.
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        self.write_error(request_id_of(command), pb.UnknownError, f"internal error: {cause}")

    def _after_load(self, frame: Frame, done: asyncio.Future[Topic]) -> None:
        """The topic a command waited for is loaded (or failed to): handle it now."""
        if not self.alive:
            return
        failure = done.exception()
        if failure is None:
            self._handle_frame(frame)
            return
        error = command_error(failure)
        command = frame.command
        if isinstance(error, CommandError):
            self.write_error(request_id_of(command), error.error, str(error))
        else:
            log.error("loading a topic for %s failed", T.Name(command.type), exc_info=failure)
            self.write_error(request_id_of(command), pb.UnknownError, "internal error")

    def _protocol_failure(self, message: str, error: int) -> None:
        log.warning("closing connection %s from %s: %s", self.id, self.remote_address, message)
        self.write_error(0, error, message)
        self.alive = False  # nothing more is read from it, or routed to it
        self.close()

    def write(self, data: bytes) -> None:
        self._out.append(data)
        queued = self._out_bytes + len(data)
        if queued >= self._flush_at:
            # A full batch goes out now, so that the transport says at once whether
            # it can take more: several dispatch rounds in one loop round (scheduled
            # ones, and dispatch on write) cannot pile up more than this unwritten.
            self._flush()
            return
        self._out_bytes = queued
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def flush_now(self) -> None:
        """Write what is queued now instead of at the end of this loop round."""
        if self._out:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._out_bytes = 0
        out = self._out
        if not out or self.transport is None or self.transport.is_closing():
            out.clear()
            return
        self._out = []
        transport = self.transport
        if len(out) == 1:
            transport.write(out[0])
        elif len(out) <= _WRITEV_MAX_PARTS:
            # uvloop hands the parts to one writev as they are: no join, which copied
            # every large entry dispatched (asyncio's own transport joins them itself).
            transport.writelines(out)
        else:  # many small frames: one buffer, rather than a writev the kernel cuts short
            transport.write(b"".join(out))
        buffered = transport.get_write_buffer_size()
        if buffered > self.peak_write_buffer:
            self.peak_write_buffer = buffered

    def write_command(self, command: BaseCommand) -> None:
        self.write(encode_command(command))

    def write_error(self, request_id: int, error: int, message: str) -> None:
        self.write_command(outgoing.error(request_id, error, message))

    def write_success(self, request_id: int) -> None:
        self.write_command(outgoing.success(request_id))

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()

    def abort(self) -> None:
        """Drop a connection whose peer is gone: what it holds is released at once (a
        graceful close would wait for a silent peer to read the write buffer)."""
        self.alive = False
        self._release_everything()
        if self.transport is not None:
            self.transport.abort()

    # ------------------------------------------------------------ teardown

    def _release_everything(self) -> None:
        producer_list = list(self.producers.values())
        consumer_list = list(self.consumers.values())
        self.producers.clear()
        self.consumers.clear()
        for producer in producer_list:
            producers.detach_producer(self, producer)
        for consumer in consumer_list:
            consumers.detach_consumer(consumer)


_HANDLERS: dict[int, Handler] = {
    T.CONNECT: ServerCnx.handle_connect,
    T.PING: ServerCnx.handle_ping,
    T.PONG: ServerCnx.handle_pong,
    T.LOOKUP: lookup.handle_lookup,
    T.PARTITIONED_METADATA: lookup.handle_partitioned_metadata,
    T.GET_TOPICS_OF_NAMESPACE: lookup.handle_get_topics,
    T.PRODUCER: producers.handle_producer,
    T.SEND: producers.handle_send,
    T.CLOSE_PRODUCER: producers.handle_close_producer,
    T.SUBSCRIBE: consumers.handle_subscribe,
    T.FLOW: consumers.handle_flow,
    T.ACK: acks.handle_ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: consumers.handle_redeliver,
    T.UNSUBSCRIBE: consumers.handle_unsubscribe,
    T.CLOSE_CONSUMER: consumers.handle_close_consumer,
    T.SEEK: consumers.handle_seek,
    T.GET_LAST_MESSAGE_ID: consumers.handle_get_last_message_id,
    T.GET_SCHEMA: schemas.handle_get_schema,
    T.GET_OR_CREATE_SCHEMA: schemas.handle_get_or_create_schema,
    T.CONSUMER_STATS: consumers.handle_consumer_stats,
    T.AUTH_RESPONSE: ServerCnx.handle_auth_response,
}
