"""An embedded broker: in this process on its own thread and event loop, or as a
subprocess (which a test can SIGKILL to check durability)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.namespaces import CLUSTER
from magnetar.broker.service import BrokerService
from magnetar.server import Server
from magnetar.storage.namespaces_store import TenantInfo


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until_listening(
    port: int, process: subprocess.Popen[Any], timeout: float, host: str = "127.0.0.1"
) -> None:
    """Return once ``process`` accepts connections on ``port``; RuntimeError if it
    exits first, TimeoutError if ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker process exited with {process.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError("broker process did not start listening in time")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.new_event_loop()


class EmbeddedBroker:
    """A magnetar broker for tests.

    ``with EmbeddedBroker() as broker: pulsar.Client(broker.service_url)``.
    ``mode="thread"`` (default) runs it in this process; ``mode="subprocess"``
    runs ``magnetar serve`` in a child process. ``data_dir=None`` uses a
    temporary directory removed on stop; pass a directory to keep data across
    :meth:`restart` or several brokers.
    """

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        port: int = 0,
        admin: bool = False,
        mode: str = "thread",
        startup_timeout: float = 15.0,
        **settings: Any,
    ) -> None:
        if mode not in ("thread", "subprocess"):
            raise ValueError("mode must be 'thread' or 'subprocess'")
        self.mode = mode
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="magnetar-"))
        self.port = port
        self.admin = admin
        self.admin_port: int | None = None
        self.settings = settings
        self.startup_timeout = startup_timeout
        self.service: BrokerService | None = None
        self.server: Server | None = None  # thread mode: the broker and its admin HTTP
        self.process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ public face

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str | None:
        return f"http://127.0.0.1:{self.admin_port}" if self.admin_port else None

    def start(self) -> EmbeddedBroker:
        if self.port == 0:
            self.port = free_port()
        if self.admin and not self.admin_port:
            self.admin_port = free_port()
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_subprocess()
        return self

    def stop(self) -> None:
        if self.mode == "thread":
            self._stop_thread()
        else:
            self._stop_subprocess(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the subprocess broker: no flush, no goodbye."""
        if self.mode != "subprocess":
            raise RuntimeError("kill() needs mode='subprocess'")
        self._stop_subprocess(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        if self.service is None or self._loop is None:
            raise RuntimeError("create_partitioned_topic needs a running thread-mode broker")

        async def create() -> None:
            assert self.service is not None
            self.service.create_partitioned_topic(topic, partitions)

        asyncio.run_coroutine_threadsafe(create(), self._loop).result(10)

    def create_namespace(self, namespace: str) -> None:
        """Create ``tenant/namespace``, and its tenant, unless they exist: as in Pulsar,
        a topic's namespace must exist before the topic is used (``public/default``
        always does). Thread mode, or subprocess mode with ``admin=True``."""
        tenant, _, local = namespace.partition("/")
        if not tenant or not local or "/" in local:
            raise ValueError(f"not a tenant/namespace name: {namespace!r}")
        if self.mode == "subprocess":
            if self.admin_url is None:
                raise RuntimeError("create_namespace on a subprocess broker needs admin=True")
            for path in (f"/admin/v2/tenants/{tenant}", f"/admin/v2/namespaces/{namespace}"):
                request = urllib.request.Request(self.admin_url + path, data=b"", method="PUT")
                try:
                    urllib.request.urlopen(request, timeout=10).close()
                except urllib.error.HTTPError as exc:
                    if exc.code != 409:  # 409: it exists already
                        raise
            return
        if self.service is None or self._loop is None:
            raise RuntimeError("create_namespace needs a running broker")

        async def create() -> None:
            assert self.service is not None
            registry = self.service.namespaces
            if tenant not in registry.tenants():
                registry.create_tenant(tenant, TenantInfo(allowed_clusters=[CLUSTER]))
            if not registry.exists(namespace):
                registry.create_namespace(namespace)

        asyncio.run_coroutine_threadsafe(create(), self._loop).result(10)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ thread mode

    def _config(self) -> BrokerConfig:
        # No idle polling: this loop shares the GIL with the host, which would feel it.
        settings: dict[str, Any] = {
            "log_format": "text",
            "keepalive_interval": 30.0,
            "idle_poll_us": 0,
        }
        settings.update(self.settings)
        return BrokerConfig(
            port=self.port,
            admin_port=self.admin_port,
            data_dir=self.data_dir,
            **settings,
        )

    def _start_thread(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = _new_loop()
        server = Server(self._config())

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(server.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(server.stop())
            loop.close()

        thread = threading.Thread(target=run, name=f"magnetar-{self.port}", daemon=True)
        thread.start()
        if not ready.wait(self.startup_timeout):
            raise TimeoutError("embedded broker did not start in time")
        if failure:
            raise RuntimeError(f"embedded broker failed to start: {failure[0]}") from failure[0]
        self.server = server
        self.service = server.service
        self._loop = loop
        self._thread = thread

    def _stop_thread(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop = None
        self._thread = None
        self.server = None
        self.service = None

    # ------------------------------------------------------------ subprocess mode

    def _start_subprocess(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "magnetar",
            "serve",
            "--port",
            str(self.port),
            "--admin-port",
            str(self.admin_port) if self.admin_port else "off",
            "--data-dir",
            str(self.data_dir),
            "--log-format",
            "text",
        ]
        env = dict(os.environ)
        for key, value in self.settings.items():
            env[f"MAGNETAR_{key.upper()}"] = str(value)
        self.process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        try:
            wait_until_listening(self.port, self.process, self.startup_timeout)
        except TimeoutError:
            self._stop_subprocess(signal.SIGKILL)
            raise

    def _stop_subprocess(self, sig: int) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
