"""A broker and its admin HTTP server, started and stopped together.

The broker (``magnetar.broker``) knows nothing of HTTP; the admin server
(``magnetar.admin``) serves a broker. This module puts the two together for
``magnetar serve`` and ``EmbeddedBroker``: ``BrokerConfig.admin_port`` (None: no admin
server) says whether there is an admin server and where.

Start order: the admin port is taken first (not served yet), then the broker starts
(it locks the data directory and listens), then the admin server serves. So a setting
that stops either one stops both before anything is logged, and the admin server
never answers for a broker that did not start. The admin application itself (aiohttp)
is loaded when its first connection arrives (``magnetar.admin.listener``).
"""

from __future__ import annotations

from magnetar.admin.listener import AdminListener
from magnetar.broker.config import BrokerConfig, ConfigError, listen_error, os_reason
from magnetar.broker.service import BrokerService


class Server:
    """``await server.start()`` ... ``await server.stop()``, in one event loop.

    Construction raises ConfigError for a bad setting or a data directory that cannot
    be created; ``start`` raises ConfigError (a port in use) or
    ``magnetar.storage.dir_lock.DataDirInUse`` and leaves nothing running.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        try:
            self.service = BrokerService(config)
        except OSError as exc:  # it creates the data directory
            reason = f"cannot create it: {os_reason(exc)}"
            raise ConfigError("data_dir", config.data_dir, reason) from None
        self.admin: AdminListener | None = None

    @property
    def service_url(self) -> str:
        return self.service.service_url

    async def start(self) -> None:
        config = self.config
        admin = None
        if config.admin_port is not None:
            admin = AdminListener(self.service)
            try:
                await admin.bind()
            except OSError as exc:
                raise listen_error(
                    "admin_port", "admin_host", config.admin_host, config.admin_port, exc
                ) from None
        try:
            await self.service.start()
        except BaseException:
            if admin is not None:
                await admin.stop()
            raise
        if admin is not None:
            try:
                await admin.serve()
            except BaseException:
                await admin.stop()
                await self.service.stop()
                raise
            self.admin = admin

    async def stop(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
            self.admin = None
        await self.service.stop()
