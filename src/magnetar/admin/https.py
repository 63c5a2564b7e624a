"""The admin API's HTTPS port (``admin_tls_port``), served by the same application
as the HTTP port with the broker's TLS context (TLS 1.2 at least; a client
certificate, when sent, is checked against ``tls_trust_certs_file``)."""

from __future__ import annotations

import socket
import ssl

from aiohttp import web


async def serve_https(
    runner: web.AppRunner, sock: socket.socket, context: ssl.SSLContext
) -> None:
    site = web.SockSite(runner, sock, ssl_context=context)
    await site.start()
