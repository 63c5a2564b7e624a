"""The admin API's HTTPS port (``admin_tls_port``), served by the same application
as the HTTP port with the broker's TLS context (TLS 1.2 at least; a client
certificate, when sent, is checked against ``tls_trust_certs_file``)."""

from __future__ import annotations

import socket
import ssl

from aiohttp import web


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket bound to host:port (0: any free port); OSError if not."""
    infos = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
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


async def serve_https(
    runner: web.AppRunner, sock: socket.socket, context: ssl.SSLContext
) -> None:
    site = web.SockSite(runner, sock, ssl_context=context)
    await site.start()
