"""BrokerConfig: every setting (``Settings``) and what is derived from them (the URLs
lookups answer), with ``validate``."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.config import checks
from magnetar.broker.config.settings import Settings
from magnetar.broker.session.listeners import select


@dataclass
class BrokerConfig(Settings):
    """One broker's settings. Built by ``load_config`` (or directly, from Python)."""

    @property
    def service_url(self) -> str:
        if self.advertised_listeners:  # the internal listener's
            listener = select(self, None)
            return listener.broker_url or listener.broker_url_tls
        return f"pulsar://{self.advertised}"

    @property
    def service_url_tls(self) -> str | None:
        """The pulsar+ssl:// address lookups give when TLS is served, else None."""
        if not self.tls_cert_file or self.tls_port is None:
            return None
        host = self.advertised.rsplit(":", 1)[0]
        return f"pulsar+ssl://{host}:{self.tls_port}"

    @property
    def advertised(self) -> str:
        if self.advertised_address:
            if ":" in self.advertised_address:
                return self.advertised_address
            return f"{self.advertised_address}:{self.port}"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{host}:{self.port}"

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot be used.

        Ports may be 0 here (any free port, for brokers started from Python); the data
        directory is checked without creating anything.
        """
        checks.validate(self)
