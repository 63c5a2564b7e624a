"""Keepalive and liveness of a client connection, as Pulsar's ServerCnx does them: a PING
when the peer has been silent for ``keepalive_interval`` (closed after twice that without
an answer), PING/PONG answered, and the liveness probe a producer's reconnect asks for.

``Keepalive`` is a part of ``ServerCnx`` (a base class): it names the connection's
attributes it uses, and ServerCnx sets them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.session import outgoing
from magnetar.broker.session.pauses import PAUSED_BUFFER, PAUSED_PENDING, PAUSED_WRITE
from magnetar.protocol.frames import Frame
from magnetar.protocol.pb import BaseCommand

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

log = logging.getLogger("magnetar.broker.connection")


class Keepalive:
    """PING, PONG and the liveness probe; a base class of ServerCnx."""

    # Set by ServerCnx.
    id: int
    remote_address: str
    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    alive: bool
    connected: bool
    read_paused: int
    _last_seen: float
    _keepalive: asyncio.TimerHandle | None
    _ping_outstanding: bool
    _liveness_waiters: list[Callable[[bool], None]]
    _liveness_timer: asyncio.TimerHandle | None

    if TYPE_CHECKING:  # ServerCnx's
        def write_command(self, command: BaseCommand) -> None: ...
        def abort(self) -> None: ...
        def _hang_up(self) -> None: ...

    def _arm_keepalive(self) -> None:
        interval = self.config.keepalive_interval
        if interval > 0:
            self._keepalive = self.loop.call_later(interval, self._check_keepalive)

    def _check_keepalive(self) -> None:
        if not self.alive:
            return
        interval = self.config.keepalive_interval
        if self.read_paused & (PAUSED_PENDING | PAUSED_BUFFER):
            # The broker holds its input back: its silence is the broker's doing.
            self._last_seen = self.loop.time()
        idle = self.loop.time() - self._last_seen
        if self._ping_outstanding and idle >= 2 * interval:
            why = (
                "it has read nothing of what the broker sent"
                if self.read_paused & PAUSED_WRITE
                else "no answer to ping"
            )
            log.warning(
                "closing connection %s from %s: %s for %.0fs",
                self.id,
                self.remote_address,
                why,
                idle,
            )
            self._hang_up()
            return
        if idle >= interval and self.connected:
            self._ping_outstanding = True
            self.write_command(outgoing.ping())
        self._arm_keepalive()

    def handle_ping(self, command: BaseCommand, frame: Frame) -> None:
        self.write_command(outgoing.pong())

    def handle_pong(self, command: BaseCommand, frame: Frame) -> None:
        self._ping_outstanding = False
        self._liveness_settled(True)

    def check_liveness(self, then: Callable[[bool], None]) -> None:
        """Ping the peer; ``then(True)`` on its PONG, ``then(False)`` if it stays silent
        for ``connection_liveness_check_timeout`` (the connection is then dropped), as
        Pulsar probes an old connection before refusing a producer's reconnect."""
        if not self.alive:
            then(False)
            return
        self._liveness_waiters.append(then)
        if self._liveness_timer is None:
            self.write_command(outgoing.ping())
            self._liveness_timer = self.loop.call_later(
                self.config.connection_liveness_check_timeout, self._liveness_expired
            )

    def _liveness_expired(self) -> None:
        self._liveness_timer = None
        if self._liveness_waiters:
            log.warning(
                "closing connection %s from %s: no answer to a liveness ping",
                self.id,
                self.remote_address,
            )
            self.abort()
            self._liveness_settled(False)

    def _liveness_settled(self, alive: bool) -> None:
        if self._liveness_timer is not None:
            self._liveness_timer.cancel()
            self._liveness_timer = None
        waiters, self._liveness_waiters = self._liveness_waiters, []
        for then in waiters:
            then(alive)

