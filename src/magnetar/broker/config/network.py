"""Where the broker listens and what it advertises, and the life of a connection (keepalive,
handshake and frame timeouts).

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.config.errors import setting_help as _help


@dataclass
class NetworkSettings:
    host: str = field(default="127.0.0.1", metadata=_help("address to listen on"))
    port: int = field(
        default=6650,
        metadata=_help("Pulsar protocol port, 1-65535 (0, any free port, only from Python)"),
    )
    advertised_address: str | None = field(
        default=None,
        metadata=_help("host[:port] clients are told to connect to in lookups"),
    )
    advertised_listeners: str | None = field(
        default=None,
        metadata=_help(
            "listeners clients may choose by name (Pulsar's advertisedListeners), e.g. "
            "'internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650': a "
            "lookup answers the address of the listener the client names (its "
            "listener_name), or the internal listener's; not with advertised_address"
        ),
    )
    internal_listener_name: str | None = field(
        default=None,
        metadata=_help(
            "the listener of advertised_listeners that lookups naming none get "
            "(Pulsar's internalListenerName); default: the first listed"
        ),
    )
    admin_port: int | None = field(
        default=8080,
        metadata=_help(
            "admin HTTP port, 1-65535; 'off' disables (from Python: None disables, "
            "0 is any free port)"
        ),
    )
    admin_host: str = field(default="127.0.0.1", metadata=_help("address the admin HTTP is on"))
    keepalive_interval: float = field(
        default=30.0,
        metadata=_help("seconds between pings; a peer silent for twice this is dropped"),
    )
    connection_liveness_check_timeout: float = field(
        default=5.0,
        metadata=_help(
            "seconds a connection has to answer a ping when a producer of the same name "
            "reconnects elsewhere; silent, it is dropped and the newcomer takes over"
        ),
    )
    connect_timeout: float = field(
        default=10.0,
        metadata=_help(
            "seconds a new connection has to send CONNECT; one that has not is closed; "
            "0 disables"
        ),
    )
    frame_timeout: float = field(
        default=30.0,
        metadata=_help(
            "seconds a frame has to arrive in full, counted from its first byte (a peer "
            "trickling a byte now and then gains nothing); past it the connection is "
            "closed; 0 disables"
        ),
    )
