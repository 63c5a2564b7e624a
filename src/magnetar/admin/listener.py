"""The admin ports: taken when the broker starts, served from the first connection on.

aiohttp and the admin application (``magnetar.admin.server``) are about 9 MB of an
idle broker's RSS, and many brokers (an embedded one in a test suite, one nobody
scrapes) are never asked anything over HTTP. So ``AdminListener`` binds and listens
on the admin port (and ``admin_tls_port``) at once, and connections queue in the
kernel's backlog; when the first one arrives it imports the application in a worker
thread (the event loop keeps serving the binary protocol meanwhile) and hands the
listening sockets over to it, which then accepts that connection and every later one.
The first request waits for the import (a few hundred milliseconds).

This module imports nothing of aiohttp itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import socket
from typing import TYPE_CHECKING

from magnetar.broker.config import listen_error

if TYPE_CHECKING:
    from magnetar.admin.server import AdminServer
    from magnetar.broker.service import BrokerService

log = logging.getLogger("magnetar.admin")

# As asyncio's create_server: the kernel queues this many connections before the
# application exists to accept them.
_BACKLOG = 100


def bind_socket(host: str, port: int) -> socket.socket:
    """A non-blocking socket bound to host:port (0: any free port); OSError if not."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class AdminListener:
    """``bind`` (before the broker starts), ``serve`` (after), ``stop``."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.server: AdminServer | None = None  # once loaded
        self.port = 0
        self.tls_port = 0
        self._sock: socket.socket | None = None
        self._tls_sock: socket.socket | None = None  # admin_tls_port, with TLS on
        self._watched: list[socket.socket] = []
        self._loading: asyncio.Task[AdminServer] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.service.config.admin_host}:{self.port}"

    async def bind(self) -> None:
        """Take the admin port(s) without serving yet: whoever starts the broker learns
        that a port is taken before the broker starts (OSError for ``admin_port``,
        ConfigError for ``admin_tls_port``)."""
        config = self.service.config
        self._sock = await asyncio.get_running_loop().run_in_executor(
            None, bind_socket, config.admin_host, config.admin_port or 0
        )
        self.port = self._sock.getsockname()[1]
        if self.service.tls_context is not None and config.admin_tls_port is not None:
            try:
                self._tls_sock = bind_socket(config.admin_host, config.admin_tls_port)
            except OSError as exc:
                await self.stop()
                raise listen_error(
                    "admin_tls_port", "admin_host", config.admin_host, config.admin_tls_port, exc
                ) from None
            self.tls_port = self._tls_sock.getsockname()[1]

    async def serve(self) -> None:
        """Listen on the bound port(s); the application loads on the first connection."""
        if self._sock is None:
            await self.bind()
        loop = asyncio.get_running_loop()
        for sock in (self._sock, self._tls_sock):
            if sock is not None:
                sock.listen(_BACKLOG)
                loop.add_reader(sock.fileno(), self._first_connection)
                self._watched.append(sock)
        log.info("admin HTTP on http://%s:%d", self.service.config.admin_host, self.port)
        if self._tls_sock is not None:
            log.info("admin HTTPS on https://%s:%d", self.service.config.admin_host,
                     self.tls_port)

    def _unwatch(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._watched:
            loop.remove_reader(sock.fileno())
        self._watched.clear()

    def _first_connection(self) -> None:
        self._unwatch()
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(self._load())

    async def _load(self) -> AdminServer:
        try:
            # The import runs Python for a few hundred milliseconds: in a thread, the loop
            # gets the GIL back every switch interval instead of waiting it out.
            module = await asyncio.to_thread(importlib.import_module, "magnetar.admin.server")
            server: AdminServer = module.AdminServer(self.service, lambda: self.port)
            await server.serve_on(self._sock, self._tls_sock)
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("the admin HTTP application could not start; its ports are closed")
            self._close_sockets()
            raise
        self._sock = self._tls_sock = None  # the application's servers own them now
        self.server = server
        return server

    def _close_sockets(self) -> None:
        for sock in (self._sock, self._tls_sock):
            if sock is not None:
                sock.close()
        self._sock = self._tls_sock = None

    async def stop(self) -> None:
        if self._watched:
            self._unwatch()
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
            with contextlib.suppress(BaseException):
                await self._loading
        if self.server is not None:
            await self.server.stop()
            self.server = None
        self._close_sockets()
