"""The connection pool: one live connection per broker address, shared by all users."""

from __future__ import annotations

import asyncio
import ssl as _ssl
from typing import Any
from urllib.parse import urlsplit

from magnetar.client.errors import AlreadyClosed
from magnetar.client.transport.auth import Authentication
from magnetar.client.transport.connection import Connection


def parse_service_url(url: str) -> tuple[list[tuple[str, int]], bool]:
    """``pulsar://h1:6650,h2:6650`` → ([("h1", 6650), ("h2", 6650)], tls=False)."""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise ValueError(f"service url {url!r} must start with pulsar:// or pulsar+ssl://")
    tls = parts.scheme == "pulsar+ssl"
    default_port = 6651 if tls else 6650
    hosts: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [ipv6]:port
            host, _, rest = item[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else default_port
        elif item.count(":") == 1:
            host, _, port_s = item.partition(":")
            port = int(port_s)
        else:
            host, port = item, default_port
        hosts.append((host, port))
    if not hosts:
        raise ValueError(f"service url {url!r} names no host")
    return hosts, tls


class ConnectionPool:
    """Connections keyed by (logical address, physical address), as Pulsar's pool does.

    The logical address is the broker a topic lives on; the physical one is where
    the socket goes (different when a proxy is in between).
    """

    def __init__(
        self,
        *,
        auth: Authentication | None,
        connection_timeout: float,
        operation_timeout: float,
        keep_alive_interval: float,
        ssl_context: _ssl.SSLContext | None = None,
    ) -> None:
        self._auth = auth
        self._connection_timeout = connection_timeout
        self._operation_timeout = operation_timeout
        self._keep_alive_interval = keep_alive_interval
        self._ssl_context = ssl_context
        self._connections: dict[tuple[str, str], Connection] = {}
        self._connecting: dict[tuple[str, str], asyncio.Future[Connection]] = {}
        self._closed = False

    async def get(self, logical_url: str, physical_url: str | None = None) -> Connection:
        if self._closed:
            raise AlreadyClosed("client is closed")
        physical_url = physical_url or logical_url
        key = (logical_url, physical_url)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = future
        try:
            conn = await self._open(logical_url, physical_url)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            self._connecting.pop(key, None)
        if self._closed:
            conn.close(AlreadyClosed("client is closed"))
            future.set_exception(AlreadyClosed("client is closed"))
            future.exception()
            raise AlreadyClosed("client is closed")
        self._connections[key] = conn
        future.set_result(conn)
        return conn

    async def _open(self, logical_url: str, physical_url: str) -> Connection:
        hosts, tls = parse_service_url(physical_url)
        host, port = hosts[0]
        ssl: Any = None
        if tls:
            ssl = self._ssl_context or _ssl.create_default_context()
        proxy_to = logical_url if logical_url != physical_url else None
        key = (logical_url, physical_url)

        def forget(connection: Connection) -> None:
            if self._connections.get(key) is connection:
                del self._connections[key]

        conn = Connection(
            host,
            port,
            logical_url=logical_url,
            auth=self._auth,
            keep_alive_interval=self._keep_alive_interval,
            operation_timeout=self._operation_timeout,
            proxy_to_broker_url=proxy_to,
            ssl=ssl,
            on_close=forget,
        )
        await conn.open(self._connection_timeout)
        return conn

    def connections(self) -> list[Connection]:
        return list(self._connections.values())

    def close(self) -> None:
        self._closed = True
        for conn in list(self._connections.values()):
            conn.close(AlreadyClosed("client is closed"))
        self._connections.clear()
