"""Advertised listeners (Pulsar's ``advertisedListeners``, PIP-61): the addresses a
lookup answers, by the listener name the client asks for.

``advertised_listeners = "internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650"``
names each listener once per scheme (``pulsar``, ``pulsar+ssl``, ``http``, ``https``).
A lookup that names no listener gets the internal one (``internal_listener_name``, by
default the first listed); a lookup naming a listener the broker does not have fails.
Without listeners a lookup answers ``advertised_address`` (or the listening host) and
the port, and the ``tls_port`` when TLS is served.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, replace
from typing import Protocol
from urllib.parse import urlsplit

_FIELDS = {"pulsar": "broker_url", "pulsar+ssl": "broker_url_tls",
           "http": "http_url", "https": "http_url_tls"}


@dataclass(frozen=True)
class Listener:
    """One listener's addresses; empty where it has none of that kind."""

    name: str
    broker_url: str = ""
    broker_url_tls: str = ""
    http_url: str = ""
    http_url_tls: str = ""


class ListenerNotFound(LookupError):
    """The client asked for a listener the broker does not advertise."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the broker do not have {name} listener")  # Pulsar's words
        self.name = name


def parse_listeners(text: str) -> dict[str, Listener]:
    """``name:scheme://host:port,...`` in order of appearance; ValueError says why not."""
    listeners: dict[str, Listener] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        if not sep or not name.strip() or "://" not in url:
            raise ValueError(f"{item!r} is not name:scheme://host:port")
        name = name.strip()
        parts = urlsplit(url.strip())
        field = _FIELDS.get(parts.scheme)
        if field is None:
            raise ValueError(f"{item!r}: the scheme must be one of {', '.join(_FIELDS)}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or parts.path not in ("", "/"):
            raise ValueError(f"{item!r}: the address must be scheme://host:port")
        listener = listeners.get(name, Listener(name))
        if getattr(listener, field):
            raise ValueError(f"listener {name!r} has more than one {parts.scheme}:// address")
        listeners[name] = replace(listener, **{field: f"{parts.scheme}://{parts.netloc}"})
    if not listeners:
        raise ValueError("no listener in it")
    for listener in listeners.values():
        if not listener.broker_url and not listener.broker_url_tls:
            raise ValueError(
                f"listener {listener.name!r} has no pulsar:// or pulsar+ssl:// address"
            )
    return listeners


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> dict[str, Listener]:
    return parse_listeners(text)  # checked by BrokerConfig.validate() already


class ListenerSettings(Protocol):
    """What choosing a listener reads of the broker's settings (BrokerConfig has it)."""

    @property
    def advertised_listeners(self) -> str | None: ...
    @property
    def internal_listener_name(self) -> str | None: ...
    @property
    def service_url(self) -> str: ...
    @property
    def service_url_tls(self) -> str | None: ...


def select(config: ListenerSettings, name: str | None) -> Listener:
    """The addresses a lookup naming listener ``name`` (None or blank: none, as
    Pulsar reads it) gets; ListenerNotFound if the broker has no such listener."""
    if name is not None and not name.strip():
        name = None
    if not config.advertised_listeners:
        if name:
            raise ListenerNotFound(name)
        return Listener(
            "", broker_url=config.service_url, broker_url_tls=config.service_url_tls or ""
        )
    listeners = _parsed(config.advertised_listeners)
    if not name:
        name = config.internal_listener_name or next(iter(listeners))
    try:
        return listeners[name]
    except KeyError:
        raise ListenerNotFound(name) from None


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is a loopback address or ``localhost``. Names are not
    resolved (that would block the loop): a broker advertised by name is meant to be
    reached by it."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
