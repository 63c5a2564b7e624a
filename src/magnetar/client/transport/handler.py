"""Keeping a producer or consumer attached to its topic's broker across reconnects.

:class:`ConnectionHandler` looks the topic up, takes a pooled connection and asks
the subclass to register itself there (PRODUCER / SUBSCRIBE).  When the
connection goes away it tries again with exponential backoff until it succeeds,
is closed, or meets an error that retrying cannot fix.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from typing import Protocol

from magnetar.client.backoff import Backoff
from magnetar.client.errors import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    IncompatibleSchema,
    InvalidTopicName,
    NotAllowed,
    ProducerFenced,
    PulsarError,
    TopicTerminated,
    TransactionError,
    is_retriable,
)
from magnetar.client.transport.connection import Connection
from magnetar.client.transport.lookup import LookupService
from magnetar.client.transport.pool import ConnectionPool

log = logging.getLogger("magnetar.client")

# Errors that end a producer or consumer for good when met on reconnection.
_FATAL_ON_RECONNECT = (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    IncompatibleSchema,
    InvalidTopicName,
    NotAllowed,
    ProducerFenced,
    TopicTerminated,
    TransactionError,
)


class HandlerClient(Protocol):
    """What a per-topic handle needs of its client (:class:`~magnetar.client.Client` is
    one): where its topic lives, a connection there, a reconnection backoff and the
    operation timeout. The client's internals, named as the client has them."""

    @property
    def operation_timeout(self) -> float: ...

    @property
    def _lookup(self) -> LookupService: ...

    @property
    def _pool(self) -> ConnectionPool: ...

    def _new_backoff(self) -> Backoff: ...


class ConnectionHandler:
    """Base of the per-topic producer and consumer: owns ``_conn`` and reconnection."""

    def __init__(self, client: HandlerClient, topic: str) -> None:
        self._client = client
        self.topic = topic
        self._loop = asyncio.get_running_loop()
        self._conn: Connection | None = None
        self._closed = False
        self._failed: PulsarError | None = None
        self._establishing = False
        self._reconnect_task: asyncio.Task[None] | None = None
        self._backoff = client._new_backoff()
        self._reconnects = 0
        self._attached = asyncio.Event()

    # ------------------------------------------------------------------ subclass hooks

    async def _connection_opened(self, conn: Connection) -> None:
        """Register on ``conn``; set ``self._conn`` on success, raise on failure."""
        raise NotImplementedError

    def _connection_lost(self) -> None:
        """The current connection is gone (a reconnect is scheduled next)."""

    def _fatal(self, exc: PulsarError) -> None:
        """Reconnection failed for good."""
        self._failed = exc

    def _gives_up_on(self, exc: PulsarError) -> bool:
        """Whether ``exc``, met while attaching again, ends this handle for good."""
        return isinstance(exc, _FATAL_ON_RECONNECT)

    # ------------------------------------------------------------------ machinery

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def _connect_first(self) -> None:
        """The first attachment: retriable errors are retried within the operation timeout."""
        deadline = self._loop.time() + self._client.operation_timeout
        await self._connect_loop(deadline)

    async def _connect_loop(self, deadline: float | None) -> None:
        self._establishing = True
        try:
            while True:
                if self._closed:
                    raise AlreadyClosed(f"{self.topic}: closed")
                try:
                    logical, physical = await self._client._lookup.get_broker(self.topic)
                    conn = await self._client._pool.get(logical, physical)
                    await self._connection_opened(conn)
                    self._backoff.reset()
                    self._attached.set()
                    return
                except PulsarError as exc:
                    if deadline is not None:
                        if not is_retriable(exc):
                            raise
                    elif self._gives_up_on(exc):
                        raise
                    self._attach_refused(exc)
                    delay = self._backoff.next()
                    if deadline is not None and self._loop.time() + delay > deadline:
                        raise
                    log.info("%s: cannot attach (%s: %s), retrying in %.2fs",
                             self.topic, type(exc).__name__, exc, delay)
                    await asyncio.sleep(delay)
        finally:
            self._establishing = False

    def _attach_refused(self, exc: PulsarError) -> None:
        """A reattachment was refused with a retriable ``exc``; the handler retries."""

    def _on_connection_closed(self, connection: Connection) -> None:
        if connection is not self._conn:
            return
        self._detach()
        self._connection_lost()
        self._schedule_reconnect()

    def _detach(self) -> Connection | None:
        """Forget the current connection (it closed, or the broker dropped us)."""
        conn, self._conn = self._conn, None
        self._attached.clear()
        return conn

    async def _wait_connection(self) -> Connection:
        """The current connection, waiting (up to the operation timeout) for a reconnect."""
        while True:
            if self._closed:
                raise AlreadyClosed(f"{self.topic}: closed")
            if self._failed is not None:
                raise self._failed
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            try:
                await asyncio.wait_for(self._attached.wait(), self._client.operation_timeout)
            except builtins.TimeoutError:
                raise ConnectError(
                    f"{self.topic}: not reconnected within {self._client.operation_timeout}s"
                ) from None

    def _schedule_reconnect(self) -> None:
        if self._closed or self._failed is not None or self._establishing:
            return
        if self._reconnect_task is not None and not self._reconnect_task.done():
            return
        self._reconnect_task = self._loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        self._reconnects += 1
        await asyncio.sleep(self._backoff.next())
        try:
            await self._connect_loop(None)
        except AlreadyClosed:
            pass
        except PulsarError as exc:
            log.error("%s: giving up reconnecting: %s: %s", self.topic, type(exc).__name__, exc)
            self._fatal(exc)

    def _stop_reconnecting(self) -> None:
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        self._reconnect_task = None
