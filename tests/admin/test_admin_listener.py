"""The admin port is served from the start, its application loaded on first use.

``AdminListener`` listens on the admin port when the broker starts and imports the
aiohttp application when the first connection arrives: that connection, the ones that
queue while it loads, and every later one are answered; a broker that is stopped before
anyone asked closes the port; a subprocess broker that nobody asked never imports
aiohttp at all.
"""

from __future__ import annotations

import concurrent.futures
import socket
import subprocess
import sys
import urllib.request

from magnetar.admin.listener import AdminListener
from magnetar.testing import EmbeddedBroker


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.status, reply.read()


def _listener(broker: EmbeddedBroker) -> AdminListener:
    assert broker.server is not None and broker.server.admin is not None
    return broker.server.admin


def test_the_first_connections_load_the_application_and_all_are_answered() -> None:
    with EmbeddedBroker(admin=True) as broker:
        listener = _listener(broker)
        assert listener.server is None  # nobody asked yet: not loaded
        url = f"{broker.admin_url}/admin/v2/persistent/public/default"
        # Twelve at once: the first loads the application, the others queue meanwhile.
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda _: _get(url), range(12)))
        assert replies == [(200, b"[]")] * 12
        assert listener.server is not None
        status, body = _get(f"{broker.admin_url}/metrics")
        assert status == 200 and b"magnetar_event_loop_lag_seconds_max" in body


def test_a_broker_stopped_before_any_request_closes_its_admin_port() -> None:
    broker = EmbeddedBroker(admin=True).start()
    listener = _listener(broker)
    port = broker.admin_port
    assert port is not None
    socket.create_connection(("127.0.0.1", port), timeout=5).close()  # it listens
    broker.stop()
    assert listener.server is None
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        pass
    else:
        raise AssertionError("the admin port still accepts connections after stop")


_PROBE = """
import asyncio, pathlib, sys, urllib.request
from magnetar.broker.config import BrokerConfig
from magnetar.server import Server

async def main() -> None:
    server = Server(BrokerConfig(port=0, admin_port=0, data_dir=pathlib.Path(sys.argv[1])))
    await server.start()
    assert server.admin is not None
    before = "aiohttp" in sys.modules
    url = server.admin.url + "/admin/v2/persistent/public/default"
    status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).status)
    print(before, status, "aiohttp" in sys.modules)
    await server.stop()

asyncio.run(main())
"""


def test_a_broker_nobody_asked_has_not_imported_aiohttp(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "200", "True"]
