"""The handshake of a client connection: CONNECT (and, with authentication on, its
credentials and AUTH_RESPONSE), then CONNECTED with what both sides agree on (protocol
version, features, the largest message).

``Handshake`` is a part of ``ServerCnx`` (a base class): it names the connection's
attributes it uses, and ServerCnx sets them."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.auth.session import ConnectionAuth
from magnetar.broker.session import outgoing
from magnetar.broker.session.client_quirks import understands_end_of_topic
from magnetar.broker.session.handlers.errors import CommandError
from magnetar.protocol.frames import Frame, FrameDecoder
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.session.context import SessionService
    from magnetar.broker.session.peer import AnyConnection

log = logging.getLogger("magnetar.broker.connection")

MAX_PROTOCOL_VERSION = 21


class Handshake:
    """CONNECT, AUTH_RESPONSE and CONNECTED; a base class of ServerCnx."""

    # Set by ServerCnx.
    id: int
    remote_address: str
    config: BrokerConfig
    service: SessionService[Any]
    alive: bool
    connected: bool
    auth: ConnectionAuth | None
    decoder: FrameDecoder
    client_version: str
    protocol_version: int
    supports_request_reply: bool
    supports_auth_refresh: bool
    understands_end_of_topic: bool
    _frame_limit: int
    _connect_timer: asyncio.TimerHandle | None

    if TYPE_CHECKING:  # ServerCnx's
        def write_command(self, command: BaseCommand) -> None: ...
        def _proven(self) -> None: ...

    @property
    def role(self) -> str | None:
        """The authenticated role (None while authentication is off)."""
        return self.auth.role if self.auth is not None else None

    def handle_connect(self, command: BaseCommand, frame: Frame) -> None:
        if self.connected or self.auth is not None:
            raise CommandError(pb.NotAllowedError, "CONNECT sent twice on one connection")
        connect = command.connect
        if self._connect_timer is not None:
            self._connect_timer.cancel()
            self._connect_timer = None
        authentication = self.service.authentication
        if authentication is not None:
            # Commands before CONNECTED are refused while the credentials are checked.
            self.supports_auth_refresh = connect.feature_flags.supports_auth_refresh
            self.auth = ConnectionAuth(
                cast("AnyConnection", self),  # ServerCnx, which is one
                authentication,
                self.config.authentication_refresh_check_seconds,
            )
            self.auth.start(connect, lambda: self._complete_connect(connect))
            return
        self._complete_connect(connect)

    def handle_auth_response(self, command: BaseCommand, frame: Frame) -> None:
        if self.auth is None:
            # As any command the broker does not expect (authentication is off).
            raise CommandError(pb.NotAllowedError, "unexpected command AUTH_RESPONSE")
        self.auth.handle_response(command.authResponse)

    def _complete_connect(self, connect: pb.CommandConnect) -> None:
        if not self.alive:
            return
        self.connected = True
        self._proven()
        self.decoder.max_frame_size = self._frame_limit
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.supports_request_reply = connect.feature_flags.supports_request_reply
        self.understands_end_of_topic = understands_end_of_topic(
            self.client_version, self.protocol_version
        )
        log.debug(
            "connection %s from %s: client %s, protocol v%d",
            self.id,
            self.remote_address,
            self.client_version,
            self.protocol_version,
        )
        self.write_command(
            outgoing.connected(self.protocol_version, self.config.max_message_size)
        )

