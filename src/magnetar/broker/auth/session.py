"""One connection's authentication, as Pulsar's ServerCnx does it: CONNECT's
credentials, then, while the connection lives, a check every
``authentication_refresh_check_seconds`` that they have not expired.

Once they have, a client that announced ``supports_auth_refresh`` gets an
AUTH_CHALLENGE (Pulsar's ``PulsarAuthRefresh`` data) and must answer with an
AUTH_RESPONSE carrying fresh credentials of the same role before the next check; any
other client is disconnected. A failure is answered with ERROR AuthenticationError
and the connection closes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.auth.providers import (
    Authenticated,
    AuthenticationFailed,
    AuthenticationProvider,
    AuthenticationService,
    Credentials,
)
from magnetar.broker.session import outgoing
from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    import asyncio

    from magnetar.broker.session.peer import AnyConnection

log = logging.getLogger("magnetar.broker.auth")

REFRESH_AUTH_DATA = b"PulsarAuthRefresh"  # Pulsar's AuthData.REFRESH_AUTH_DATA_BYTES
NO_REQUEST = (1 << 64) - 1  # Pulsar answers connection-level errors on request id -1
MAX_AUTH_DATA = 64 * 1024  # credentials larger than this are refused unread


class ConnectionAuth:
    def __init__(
        self,
        cnx: AnyConnection,
        service: AuthenticationService,
        refresh_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cnx = cnx
        self.service = service
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.identity: Authenticated | None = None
        self.method = "none"
        self._provider: AuthenticationProvider | None = None
        self._challenged = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role(self) -> str | None:
        return self.identity.role if self.identity is not None else None

    def _peer_cert(self) -> dict[str, Any] | None:
        transport = self.cnx.transport
        if transport is None:
            return None
        cert = transport.get_extra_info("peercert")
        return cert if isinstance(cert, dict) and cert else None

    # ------------------------------------------------------------ CONNECT

    def start(self, connect: pb.CommandConnect, then: Callable[[], None]) -> None:
        """Authenticate CONNECT's credentials; ``then()`` once they are good."""
        if connect.HasField("auth_method_name"):
            method = connect.auth_method_name
        elif connect.HasField("auth_method"):  # legacy clients send an enum
            method = pb.AuthMethod.Name(connect.auth_method)[len("AuthMethod"):].lower()
        else:
            method = "none"
        self.method = method
        provider = self.service.provider_for(method)
        if provider is None:
            try:
                identity = self.service.anonymous(
                    f"no anonymous role, and no authentication provider for method {method!r}"
                )
            except AuthenticationFailed as exc:
                self.failed(str(exc))
                return
            self._established(identity, then)
            return
        self._provider = provider
        self._check(provider, connect.auth_data, lambda identity: self._established(identity, then))

    def _established(self, identity: Authenticated, then: Callable[[], None]) -> None:
        self.identity = identity
        log.info(
            "connection %s from %s authenticated as role %r (method %s)",
            self.cnx.id, self.cnx.remote_address, identity.role, identity.method,
        )
        if identity.expires_at is not None:
            self._arm()
        then()

    def _check(
        self, provider: AuthenticationProvider, data: bytes,
        then: Callable[[Authenticated], None],
    ) -> None:
        """Run ``provider`` on ``data`` (off the loop when it is costly) and pass its
        answer to ``then``; a failure ends the connection."""
        if len(data) > MAX_AUTH_DATA:
            self.failed(f"credentials of {len(data)} bytes (at most {MAX_AUTH_DATA})")
            return
        credentials = Credentials(data=bytes(data), peer_cert=self._peer_cert())
        if not provider.blocking:
            try:
                identity = provider.authenticate(credentials)
            except AuthenticationFailed as exc:
                self.failed(str(exc))
                return
            then(identity)
            return
        future = self.cnx.loop.run_in_executor(None, provider.authenticate, credentials)

        def done(finished: asyncio.Future[Authenticated]) -> None:
            if not self.cnx.alive:
                return
            failure = finished.exception()
            if failure is None:
                then(finished.result())
            elif isinstance(failure, AuthenticationFailed):
                self.failed(str(failure))
            else:
                log.error("authentication by %s failed", provider.method_name, exc_info=failure)
                self.failed("internal error")

        future.add_done_callback(done)

    def failed(self, why: str) -> None:
        cnx = self.cnx
        log.warning(
            "authentication of connection %s from %s failed (method %s): %s",
            cnx.id, cnx.remote_address, self.method, why,
        )
        cnx.write_error(NO_REQUEST, pb.AuthenticationError, f"Failed to authenticate: {why}")
        cnx.alive = False  # nothing more is read from it
        cnx.close()

    # ------------------------------------------------------------ refresh

    def _arm(self) -> None:
        self._timer = self.cnx.loop.call_later(self.refresh_seconds, self._refresh_check)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refresh_check(self) -> None:
        self._timer = None
        cnx = self.cnx
        identity = self.identity
        if not cnx.alive or identity is None:
            return
        if identity.expires_at is None or identity.expires_at > self.clock():
            self._arm()
            return
        if not cnx.supports_auth_refresh or self._provider is None:
            log.warning(
                "closing connection %s from %s: its credentials expired and the client "
                "does not support refreshing them", cnx.id, cnx.remote_address,
            )
            cnx.close()
            return
        if self._challenged:
            log.warning(
                "closing connection %s from %s: no fresh credentials after the auth "
                "challenge", cnx.id, cnx.remote_address,
            )
            cnx.close()
            return
        self._challenged = True
        cnx.write_command(
            outgoing.auth_challenge(cnx.protocol_version, self.method, REFRESH_AUTH_DATA)
        )
        self._arm()

    def handle_response(self, response: pb.CommandAuthResponse) -> None:
        """AUTH_RESPONSE: fresh credentials; the role may not change."""
        self._challenged = False
        provider = self._provider
        if provider is None or self.identity is None:
            self.failed("no authentication method to refresh")
            return
        if not response.HasField("response"):
            self.failed("AUTH_RESPONSE without credentials")
            return
        previous = self.identity

        def refreshed(identity: Authenticated) -> None:
            if identity.role != previous.role:
                self.failed(f"the role may not change on refresh ({previous.role!r} to "
                            f"{identity.role!r})")
                return
            self.identity = identity
            log.info("connection %s refreshed the credentials of role %r",
                     self.cnx.id, identity.role)

        self._check(provider, response.response.auth_data, refreshed)
